"""What StarPO's update costs over GRPOTrainer's, on identical token batches, for each preset.

One batch of Sokoban trajectories is collected once with SmolLM2-135M-Instruct. For each preset, a ``StarPOTrainer``
and a plain ``GRPOTrainer`` with the same GRPO settings (beta, clipping, entropy bonus, loss type) each run, on that
same batch, what happens between collection and the next rollout:

- GRPO: its group-relative advantages (one per trajectory), the reference log-probs when beta > 0, one
  forward, loss and backward pass, and one optimizer step.
- StarPO: ``score_trajectories`` (trajectory filter, critics' forward pass and updates, GAE, thinking-critic scaling,
  reference log-probs), the same loss (with KL measuring), backward pass and
  optimizer step.

The two alternate, after a warm-up of each, and the ratio of medians is reported. Figures are printed and appended
to ``RESULTS.md`` beside this file. Targets: at most 1.10 without a critic, 1.5 with the shared-backbone value head.

Usage: ``python benchmarks/overhead.py`` (about 10 minutes on 2 CPU cores) or ``--quick`` for a smoke run.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from provenance import cpus, describe, provenance  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from trl_starpo import StarPOConfig, StarPOTrainer, load_tasks, resolve_model_path  # noqa: E402
from trl_starpo.algorithms.advantages import group_relative_advantages  # noqa: E402
from trl_starpo.models import DEFAULT_MODEL  # noqa: E402
from trl_starpo.presets import PRESETS  # noqa: E402
from trl_starpo.trainer import episode_return  # noqa: E402

RESULTS = Path(__file__).with_name("RESULTS.md")
SHARED_FIELDS = ("beta", "epsilon", "epsilon_high", "entropy_coef", "loss_type", "scale_rewards")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=2, help="Task groups in the batch.")
    parser.add_argument("--group-size", type=int, default=4, help="Trajectories per group.")
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--tokens-per-turn", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3, help="Timed updates per trainer and preset.")
    parser.add_argument("--quick", action="store_true", help="One group of 2, 2 turns of 16 tokens, 1 repeat.")
    parser.add_argument("--no-record", action="store_true", help=f"Print only; do not append to {RESULTS.name}.")
    args = parser.parse_args(argv)
    if args.quick:
        args.groups, args.group_size, args.turns, args.tokens_per_turn, args.repeats = 1, 2, 2, 16, 1
    return args


def starpo_config(args, output_dir: str, preset: str) -> StarPOConfig:
    return StarPOConfig(
        output_dir=output_dir,
        preset=preset,
        num_generations=args.group_size,
        per_device_train_batch_size=args.groups * args.group_size,
        max_turns=args.turns,
        max_tokens_per_turn=args.tokens_per_turn,
        max_context_length=2048,
        learning_rate=1e-6,
        report_to="none",
        save_strategy="no",
        gradient_checkpointing=False,
        seed=0,
    )


def collect_batch(model_path: str, args, output_dir: str):
    trainer = StarPOTrainer(model_path, environment="sokoban", args=starpo_config(args, output_dir, "starpo"))
    tasks = load_tasks("sokoban", split="train")
    rows = [dict(tasks[g]) for g in range(args.groups) for _ in range(args.group_size)]
    groups = [g for g in range(args.groups) for _ in range(args.group_size)]
    trainer.model.eval()
    return trainer.collect_trajectories(rows, groups)


def prepare(trainer) -> None:
    trainer.model.train()
    trainer.create_optimizer()
    trainer.current_gradient_accumulation_steps = 1


def step(trainer, inputs) -> None:
    """The core of ``Trainer.training_step`` (whose input preparation would start a new rollout here) and the
    optimizer step."""
    loss = trainer.compute_loss(trainer.model, inputs)
    trainer.accelerator.backward(loss)
    trainer.optimizer.step()
    trainer.optimizer.zero_grad()


def starpo_update(trainer: StarPOTrainer, trajectories) -> None:
    step(trainer, trainer.score_trajectories(trajectories, trainer.num_generations, offset=0, mode="train"))


def grpo_update(trainer: GRPOTrainer, tensors_from: StarPOTrainer, trajectories) -> None:
    batch = tensors_from._trajectory_tensors(trajectories, trainer.accelerator.device)
    batch.pop("segments")
    returns = torch.tensor([t.episode_return for t in trajectories])
    advantages = group_relative_advantages(returns, trainer.num_generations, scale=trainer.scale_rewards)
    inputs = {**batch, "advantages": advantages}
    if trainer.beta != 0.0:
        input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
        attention_mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        with torch.no_grad():
            inputs["ref_per_token_logps"], _, _ = trainer._get_per_token_logps_and_entropies(
                trainer.ref_model, input_ids, attention_mask, batch["completion_ids"].size(1)
            )
    inputs["num_items_in_batch"] = (batch["completion_mask"] * batch["tool_mask"]).sum()
    step(trainer, inputs)


def time_preset(model_path: str, preset: str, trajectories, args, output_dir: str) -> dict:
    starpo = StarPOTrainer(model_path, environment="sokoban", args=starpo_config(args, output_dir, preset))
    shared = {name: getattr(starpo.args, name) for name in SHARED_FIELDS}
    grpo_args = GRPOConfig(
        output_dir=output_dir,
        num_generations=args.group_size,
        per_device_train_batch_size=args.groups * args.group_size,
        max_completion_length=starpo.args.max_completion_length,
        learning_rate=1e-6,
        report_to="none",
        use_cpu=starpo.args.use_cpu,
        bf16=False,
        gradient_checkpointing=False,
        **shared,
    )
    grpo = GRPOTrainer(model_path, reward_funcs=[episode_return], args=grpo_args, train_dataset=load_tasks("sokoban", split="train"))
    prepare(starpo)
    prepare(grpo)
    starpo_update(starpo, trajectories)  # warm-up: allocations, critics' first step
    grpo_update(grpo, starpo, trajectories)
    seconds = {"grpo": [], "starpo": []}
    for _ in range(args.repeats):
        start = time.perf_counter()
        grpo_update(grpo, starpo, trajectories)
        seconds["grpo"].append(time.perf_counter() - start)
        start = time.perf_counter()
        starpo_update(starpo, trajectories)
        seconds["starpo"].append(time.perf_counter() - start)
    grpo_median, starpo_median = statistics.median(seconds["grpo"]), statistics.median(seconds["starpo"])
    return {
        "preset": preset,
        "critic": "value head (GAE)" if starpo.value_critic else ("thinking" if starpo.thinking_critic else "none"),
        "grpo": grpo_median,
        "starpo": starpo_median,
        "ratio": starpo_median / grpo_median,
        "raw": seconds,
    }


def table(rows: list[dict]) -> str:
    lines = ["| preset | critic | GRPOTrainer s | StarPOTrainer s | ratio |", "|---|---|---:|---:|---:|"]
    lines += [
        f"| {r['preset']} | {r['critic']} | {r['grpo']:.2f} | {r['starpo']:.2f} | {r['ratio']:.2f} |" for r in rows
    ]
    return "\n".join(lines)


def machine() -> str:
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (f"{describe(provenance())}, {cpus()}, "
            f"torch {torch.__version__} with {torch.get_num_threads()} threads, load average {load} at the end.")


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.manual_seed(0)
    model_path = resolve_model_path(DEFAULT_MODEL)
    with tempfile.TemporaryDirectory() as output_dir:
        trajectories = collect_batch(model_path, args, output_dir)
        tokens = sum(len(t.completion_ids) for t in trajectories)
        rows = [time_preset(model_path, preset, trajectories, args, output_dir) for preset in PRESETS]
    text = (
        f"\n### Update overhead, {datetime.date.today().isoformat()}\n\n{machine()}\n"
        f"{len(trajectories)} Sokoban trajectories ({args.groups} groups x {args.group_size}) of up to {args.turns} "
        f"turns x {args.tokens_per_turn} tokens, {tokens} completion tokens in all; full fine-tuning of "
        f"SmolLM2-135M-Instruct; medians of {args.repeats} interleaved updates after one warm-up each "
        f"(raw seconds: {[{r['preset']: r['raw']} for r in rows]}).\n\n{table(rows)}\n"
    )
    print(text)
    if not args.no_record:
        with RESULTS.open("a") as results:
            results.write(text)
        print(f"appended to {RESULTS}")


if __name__ == "__main__":
    main()
