"""How close a StarPO update and an SFT step come to this machine's matmul peak, and what memory they need.

Two workloads, each run in several arms (one fresh process per arm, so each peak RSS is its own):

- **StarPO update**: the rollout benchmark's workload (``benchmarks/rollout.py``): 16 Sokoban trajectories (4 tasks x
  4 rollouts) of 5 turns of up to 40 tokens, SmolLM2-135M-Instruct with a LoRA adapter (r 8 on the attention
  projections), one optimizer step. The trajectories are played once, by the trainer's own rollout (timed), and
  every arm updates on that same batch.
- **SFT step**: the ALFWorld warm start (``recipes/configs/alfworld_sft.yaml``): TRL's ``SFTTrainer``, LoRA r 16 on
  every projection, 4 expert episodes a step (the same episodes in every arm); the second step is timed.

Arms: ``today`` is the path before this benchmark existed (TRL's fused LM head projecting every completion position,
fp32, gradient checkpointing); ``scored`` projects only the positions the loss reads; then without gradient
checkpointing and under bf16 autocast; ``starpo-s`` is the last with the preset of ``make train`` (a reference
forward for its KL term, the outlier clip; its thinking critic needs thinking turns, which these have). A last child
compares the log-probs of the batch under bf16 autocast and in fp32. For each arm: the time split (scoring forwards, loss forward, backward,
optimizer), tokens/s, peak RSS, and the FLOPs the step must do against the matmul peak measured in the same run.

FLOPs (counted, not measured): a forward over a sequence of L tokens of which S are scored costs
``2 N L + 2 n d L^2 + 2 V d S`` for N parameters in the decoder's linear layers (LoRA's included), n layers of
attention width d (the causal attention's QK^T and PV) and vocabulary V (the LM head at the scored positions only).
The backward of a LoRA step needs the activation gradients only: the same again, plus ``2 n d L^2`` for attention's
extra products. That
forward and backward is the work the step *must* do; everything else (the LM head at unscored positions, the forward
that gradient checkpointing repeats, reference and old-policy forwards, padding) is counted as extra and not credited.

Usage: ``python benchmarks/update.py`` (about 15 minutes on 2 CPU cores, the ALFWorld games built) or ``--quick``.
Figures are printed, appended to ``RESULTS.md`` and kept as JSON under ``update_runs/``.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import pickle
import resource
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from peaks import matmul_peak  # noqa: E402
from provenance import cpus, describe, provenance  # noqa: E402

from trl_starpo.trajectory import MODEL_SEGMENTS  # noqa: E402

HERE = Path(__file__).parent
RESULTS = HERE / "RESULTS.md"
RUNS = HERE / "update_runs"

UPDATE_ARMS = {  # name: (score only the trained positions, gradient checkpointing, micro-batch, bf16, preset)
    "today": (False, True, 2, False, None),
    "scored": (True, True, 2, False, None),
    "scored, no checkpointing": (True, False, 2, False, None),
    "scored, bf16, no checkpointing, micro-batch 1": (True, False, 1, True, None),
    "starpo-s, scored, bf16, no checkpointing, micro-batch 1": (True, False, 1, True, "starpo-s"),
}
SFT_ARMS = {
    "today": (False, True, 4, False),
    "scored": (True, True, 4, False),
    "scored, bf16": (True, True, 4, True),
    "scored, bf16, no checkpointing, micro-batch 1": (True, False, 1, True),
}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="4 trajectories of 2 turns, 2 SFT episodes: a smoke run.")
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="torch threads (default: every core).")
    parser.add_argument("--no-record", action="store_true", help="Print only; append nothing to RESULTS.md.")
    parser.add_argument("--skip-sft", action="store_true", help="Only the StarPO update.")
    parser.add_argument("--arms", nargs="+", choices=list(UPDATE_ARMS), default=list(UPDATE_ARMS), metavar="ARM",
                        help=f"The update arms to run (default: all of {', '.join(map(repr, UPDATE_ARMS))}).")
    parser.add_argument("--child", nargs=2, metavar=("JOB", "ARGS"), help=argparse.SUPPRESS)
    return parser.parse_args(argv)


# --- counting -----------------------------------------------------------------------------------------------------


def linear_parameters(model) -> int:
    """Parameters of the decoder's linear layers (attention and MLP projections, LoRA's included), not the LM head."""
    head = model.get_output_embeddings().weight
    return sum(
        module.weight.numel()
        for module in model.modules()
        if isinstance(module, torch.nn.Linear) and module.weight is not head
    )


def model_counts(model) -> tuple[int, int, int, int]:
    """``(linear parameters, layers, attention width, vocabulary)`` of a decoder."""
    config = model.config.get_text_config()
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return linear_parameters(model), config.num_hidden_layers, config.num_attention_heads * head_dim, config.vocab_size


def forward_flops(n_linear: int, layers: int, width: int, vocab: int, length: int, scored: int) -> float:
    return 2.0 * n_linear * length + 2.0 * layers * width * length**2 + 2.0 * vocab * width * scored


def necessary_flops(n_linear, layers, width, vocab, rows: list[tuple[int, int]]) -> float:
    """Forward and activation backward over each ``(length, scored)`` row."""
    return sum(
        2 * forward_flops(n_linear, layers, width, vocab, length, scored) + 2.0 * layers * width * length**2
        for length, scored in rows
    )


def trained(trajectory) -> int:
    return sum(1 for label in trajectory.completion_segments if label in MODEL_SEGMENTS)


# --- children -----------------------------------------------------------------------------------------------------


class PhaseTimer:
    """Seconds spent inside wrapped methods, by phase."""

    def __init__(self):
        self.seconds: dict[str, float] = {}

    def wrap(self, owner, name: str, phase: str) -> None:
        method = getattr(owner, name)

        @functools.wraps(method)
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self.seconds[phase] = self.seconds.get(phase, 0.0) + time.perf_counter() - start

        setattr(owner, name, timed)


def optimizer_timer(timer: PhaseTimer):
    from transformers import TrainerCallback

    class OptimizerTimer(TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, **kwargs):
            self.start = time.perf_counter()

        def on_optimizer_step(self, args, state, control, **kwargs):
            timer.seconds["optimizer"] = timer.seconds.get("optimizer", 0.0) + time.perf_counter() - self.start

    return OptimizerTimer()


def score_every_position(trainer_class) -> None:
    """The path before scored log-probs: TRL's head projects every completion position."""
    trainer_class._scoring = lambda self, positions: nullcontext()


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # kilobytes on Linux


def starpo_config(output_dir: str, quick: bool, micro_batch: int, checkpointing: bool, bf16: bool, preset=None):
    from trl_starpo import StarPOConfig

    trajectories = 4 if quick else 16
    return StarPOConfig(
        output_dir=output_dir, num_generations=4, per_device_train_batch_size=micro_batch,
        gradient_accumulation_steps=trajectories // micro_batch, max_steps=1, max_turns=2 if quick else 5,
        max_tokens_per_turn=40, report_to="none", gradient_checkpointing=checkpointing, save_strategy="no",
        bf16=bf16, seed=0, disable_tqdm=True, preset=preset,
    )


def starpo_trainer(args):
    from peft import LoraConfig

    from trl_starpo import StarPOTrainer, resolve_model_path

    lora = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    return StarPOTrainer(model=resolve_model_path(), environment="sokoban", args=args, peft_config=lora)


def child_rollout(spec: dict) -> dict:
    """Play the batch once with the trainer's own rollout; keep the trajectories for the arms."""
    with tempfile.TemporaryDirectory() as output_dir:
        trainer = starpo_trainer(starpo_config(output_dir, spec["quick"], 2, True, False))
        tasks = [dict(row) for row in trainer.train_dataset.select(range(trainer.args.generation_batch_size // 4))]
        tasks = [row for row in tasks for _ in range(4)]
        start = time.perf_counter()
        trajectories = trainer.collect_trajectories(tasks, [i // 4 for i in range(len(tasks))])
        seconds = time.perf_counter() - start
    Path(spec["batch"]).write_bytes(pickle.dumps(trajectories))
    return {"seconds": seconds, "trajectories": len(trajectories), "peak_rss_gib": peak_rss_gib(),
            "generated_tokens": sum(trained(t) for t in trajectories),
            "tokens": sum(len(t.token_ids) for t in trajectories)}


def child_update(spec: dict) -> dict:
    import copy

    from trl_starpo import StarPOTrainer

    scored, checkpointing, micro_batch, bf16, preset = UPDATE_ARMS[spec["arm"]]
    if not scored:
        score_every_position(StarPOTrainer)
    batch = pickle.loads(Path(spec["batch"]).read_bytes())
    with tempfile.TemporaryDirectory() as output_dir:
        trainer = starpo_trainer(starpo_config(output_dir, spec["quick"], micro_batch, checkpointing, bf16, preset))
        trainer.collect_trajectories = lambda tasks, groups: copy.deepcopy(batch)
        timer = PhaseTimer()
        timer.wrap(trainer, "_scoring_forwards", "scoring forwards")  # old-policy, reference, critic features
        timer.wrap(trainer, "_compute_loss", "loss forward")
        timer.wrap(trainer.accelerator, "backward", "backward")
        trainer.add_callback(optimizer_timer(timer))
        start = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - start
        counts = model_counts(trainer.accelerator.unwrap_model(trainer.model))
    rows = [(len(t.token_ids), trained(t)) for t in batch]
    return {"seconds": seconds, "split": timer.seconds, "peak_rss_gib": peak_rss_gib(),
            "flops": necessary_flops(*counts, rows), "tokens": sum(length for length, _ in rows),
            "trained_tokens": sum(s for _, s in rows)}


def sft_config(output_dir: str, micro_batch: int, checkpointing: bool, bf16: bool, episodes: int):
    from trl_starpo.sft import ExpertSFTConfig

    micro_batch = min(micro_batch, episodes)
    return ExpertSFTConfig(
        output_dir=output_dir, max_turns=10, max_actions_per_turn=1, max_actions_per_trajectory=10,
        max_tokens_per_turn=64, max_context_length=2048, environment_kwargs={"max_steps": 50},
        per_device_train_batch_size=micro_batch, gradient_accumulation_steps=episodes // micro_batch, max_steps=2,
        learning_rate=1e-3, gradient_checkpointing=checkpointing, bf16=bf16, report_to="none", save_strategy="no",
        disable_tqdm=True, seed=0, train_sampling_strategy="sequential",  # the timed step trains the second half
    )


def child_demonstrations(spec: dict) -> dict:
    """The expert's ALFWorld episodes, played once with the SFT recipe's settings (two steps' worth)."""
    from transformers import AutoTokenizer

    from trl_starpo import load_tasks, resolve_model_path
    from trl_starpo.sft import expert_demonstrations

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path())
    settings = sft_config(tempfile.mkdtemp(), 1, True, False, 1).rollout_settings
    demonstrations = expert_demonstrations("alfworld", load_tasks("alfworld", split="train"), tokenizer, settings,
                                           episodes=2 * spec["episodes"] + 4, environment_kwargs={"max_steps": 50})
    demonstrations.select(range(2 * spec["episodes"])).save_to_disk(spec["demonstrations"])
    return {"episodes": 2 * spec["episodes"]}


def child_sft(spec: dict) -> dict:
    from datasets import load_from_disk
    from peft import LoraConfig
    from transformers import TrainerCallback
    from trl import SFTTrainer

    from trl_starpo import resolve_model_path
    from trl_starpo.logprobs import project_labelled_positions_only

    scored, checkpointing, micro_batch, bf16 = SFT_ARMS[spec["arm"]]
    demonstrations = load_from_disk(spec["demonstrations"])
    lora = LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                           "up_proj", "down_proj"])
    timer = PhaseTimer()

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            self.start, timer.seconds = time.perf_counter(), {}  # keep the last step's split only

        def on_step_end(self, args, state, control, **kwargs):
            timer.seconds["step"] = time.perf_counter() - self.start

    with tempfile.TemporaryDirectory() as output_dir:
        args = sft_config(output_dir, micro_batch, checkpointing, bf16, spec["episodes"])
        trainer = SFTTrainer(model=resolve_model_path(), args=args, peft_config=lora,
                             train_dataset=demonstrations.select_columns(["input_ids", "completion_mask"]))
        timer.wrap(trainer, "compute_loss", "loss forward")
        timer.wrap(trainer.accelerator, "backward", "backward")
        trainer.add_callback(StepTimer())
        trainer.add_callback(optimizer_timer(timer))
        with project_labelled_positions_only() if scored else nullcontext():
            trainer.train()
        counts = model_counts(trainer.accelerator.unwrap_model(trainer.model))
    last = demonstrations.select(range(spec["episodes"], 2 * spec["episodes"]))  # the timed (second) step's episodes
    rows = [(len(ids), sum(mask)) for ids, mask in zip(last["input_ids"], last["completion_mask"])]
    split = dict(timer.seconds)
    return {"seconds": split.pop("step"), "split": split, "peak_rss_gib": peak_rss_gib(),
            "flops": necessary_flops(*counts, rows), "tokens": sum(length for length, _ in rows),
            "trained_tokens": sum(s for _, s in rows)}


def child_precision(spec: dict) -> dict:
    """Per-token log-probs of the batch's model tokens under bf16 autocast against fp32 (same weights, same rows)."""
    with tempfile.TemporaryDirectory() as output_dir:
        trainer = starpo_trainer(starpo_config(output_dir, spec["quick"], 2, False, False))
        inputs = trainer.score_trajectories(pickle.loads(Path(spec["batch"]).read_bytes()), 4, 0)
    input_ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    mask = (inputs["completion_mask"] * inputs["tool_mask"]).bool()
    logps = {}
    for name, autocast in (("fp32", nullcontext), ("bf16", lambda: torch.autocast("cpu", dtype=torch.bfloat16))):
        trainer.accelerator.autocast = autocast
        with torch.no_grad(), trainer._scoring(mask.long()):
            logps[name], _, _ = trainer._get_per_token_logps_and_entropies(
                trainer.model, input_ids, attention_mask, inputs["completion_ids"].size(1), batch_size=2)
    difference = (logps["bf16"] - logps["fp32"])[mask].double()
    return {"tokens": int(mask.sum()), "mean_abs": difference.abs().mean().item(),
            "median_abs": difference.abs().median().item(), "p99_abs": difference.abs().quantile(0.99).item(),
            "max_abs": difference.abs().max().item(), "mean": difference.mean().item()}


def child_peak(spec: dict) -> dict:
    return {"fp32": matmul_peak(torch.float32), "bf16": matmul_peak(torch.bfloat16)}


CHILDREN = {"rollout": child_rollout, "update": child_update, "precision": child_precision,
            "demonstrations": child_demonstrations, "sft": child_sft, "peak": child_peak}


def run_child(job: str, spec: dict, threads: int) -> dict:
    command = [sys.executable, __file__, "--threads", str(threads), "--child", job, json.dumps(spec)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{job} {spec.get('arm', '')} failed:\n{result.stderr[-4000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


# --- report -------------------------------------------------------------------------------------------------------


def arm_row(name: str, arm: dict, bf16: bool, peaks: dict) -> str:
    achieved = arm["flops"] / arm["seconds"] / 1e9
    peak = peaks["bf16" if bf16 else "fp32"]
    split = ", ".join(f"{phase} {seconds:.1f}" for phase, seconds in arm["split"].items())
    return (
        f"| {name} | {arm['seconds']:.1f} | {split} | {arm['tokens'] / arm['seconds']:.0f} | {arm['peak_rss_gib']:.2f} "
        f"| {achieved:.0f} | {achieved / peak:.0%} ({'bf16' if bf16 else 'fp32'}) | {achieved / peaks['fp32']:.0%} |"
    )


HEADER = [
    "| arm | seconds | split (s) | tokens/s | peak RSS GiB | GFLOP/s necessary | of the peak in its dtype | of the fp32 peak |",
    "|---|---:|---|---:|---:|---:|---:|---:|",
]


def machine() -> str:
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (f"{describe(provenance())}, {cpus()}, "
            f"torch {torch.__version__}, load average {load} at the end")


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.child:
        job, spec = args.child
        print(json.dumps(CHILDREN[job](json.loads(spec))))
        return

    started = datetime.datetime.now()
    record: dict = {"date": started.date().isoformat(), "quick": args.quick, "threads": args.threads}
    with tempfile.TemporaryDirectory() as scratch:
        spec = {"quick": args.quick, "batch": str(Path(scratch, "batch.pkl"))}
        record["peak_before"] = run_child("peak", {}, args.threads)
        print(f"matmul peak: {record['peak_before']}", flush=True)
        record["rollout"] = run_child("rollout", spec, args.threads)
        print(f"rollout: {record['rollout']}", flush=True)
        record["update"] = {}
        for arm in args.arms:
            record["update"][arm] = run_child("update", {**spec, "arm": arm}, args.threads)
            print(f"update [{arm}]: {record['update'][arm]}", flush=True)
        record["precision"] = run_child("precision", spec, args.threads)
        print(f"bf16 vs fp32 log-probs: {record['precision']}", flush=True)
        if not args.skip_sft:
            sft_spec = {"episodes": 2 if args.quick else 4, "demonstrations": str(Path(scratch, "demonstrations"))}
            run_child("demonstrations", sft_spec, args.threads)
            record["sft"] = {}
            for arm in SFT_ARMS:
                record["sft"][arm] = run_child("sft", {**sft_spec, "arm": arm}, args.threads)
                print(f"sft [{arm}]: {record['sft'][arm]}", flush=True)
        record["peak_after"] = run_child("peak", {}, args.threads)
    peaks = {dtype: max(record["peak_before"][dtype], record["peak_after"][dtype]) for dtype in ("fp32", "bf16")}
    record["machine"] = machine()

    rollout = record["rollout"]
    lines = [
        f"### Update at the compute floor, {record['date']}{' (--quick)' if args.quick else ''}",
        "",
        f"{record['machine']}; {args.threads} threads. Matmul peak (2048^3 GEMM, best of the "
        f"runs before and after): {peaks['fp32']:.0f} GFLOP/s fp32, {peaks['bf16']:.0f} GFLOP/s bf16.",
        "",
        f"StarPO update: {rollout['trajectories']} Sokoban trajectories, {rollout['tokens']} tokens of which "
        f"{next(iter(record['update'].values()))['trained_tokens']} trained; LoRA r 8; one optimizer step. The rollout that "
        f"played them: {rollout['seconds']:.1f} s, {rollout['generated_tokens'] / rollout['seconds']:.1f} generated "
        f"tokens/s, peak RSS {rollout['peak_rss_gib']:.2f} GiB.",
        "",
        *HEADER,
        *(arm_row(name, result, UPDATE_ARMS[name][3], peaks) for name, result in record["update"].items()),
        "",
        "Per-token log-probs of the batch's {tokens} model tokens, bf16 autocast minus fp32: mean |difference| "
        "{mean_abs:.4f}, median {median_abs:.4f}, 99th percentile {p99_abs:.3f}, largest {max_abs:.3f}; mean "
        "difference {mean:+.5f}.".format(**record["precision"]),
    ]
    if "sft" in record:
        first = next(iter(record["sft"].values()))
        lines += [
            "",
            f"SFT step (ALFWorld warm start, LoRA r 16): {first['tokens']} tokens of which {first['trained_tokens']} "
            "trained; the second of two steps.",
            "",
            *HEADER,
            *(arm_row(name, result, SFT_ARMS[name][3], peaks) for name, result in record["sft"].items()),
        ]
    text = "\n".join(lines)
    print("\n" + text)
    if not args.no_record:
        RUNS.mkdir(exist_ok=True)
        # named to the minute, as horizon_runs/: a second run the same day keeps the first one's record
        path = RUNS / f"{started:%Y-%m-%d-%H%M}{'-quick' if args.quick else ''}.json"
        path.write_text(json.dumps(record, indent=1))
        with RESULTS.open("a") as results:
            results.write("\n" + text + "\n")
        print(f"\nappended to {RESULTS}")


if __name__ == "__main__":
    main()
