"""Multi-turn rollout throughput on SmolLM2-135M-Instruct, and the peak memory of one LoRA training step.

The workload is synthetic so that every path does exactly the same token work: each of ``--trajectories`` rows
starts from the same Sokoban prompt, generates exactly ``--new-tokens`` tokens a turn (the end-of-turn token is
held back with ``min_new_tokens``) and, after every turn but the last, gets exactly ``--observation-tokens`` tokens
of a rendered Sokoban grid appended. Three paths are timed, interleaved, after a warm-up:

- necessary: one ``model.generate`` call producing all turns' tokens of a row in one go, plus one forward pass over
  all the appended observation tokens, at the same batch size: the least token work a multi-turn loop can do.
- naive: ``TransformersGenerator``, which re-prefills every row's whole history each turn.
- cached: ``CachedTransformersGenerator``, which keeps the KV cache across turns.

With ``--batch-sizes`` (default 4, 16 and 64), the cached and necessary paths are also timed once at each batch
size on the same turns, for a table of generated tokens/s. What a training step costs is measured by
``benchmarks/update.py``.

The model is the one training samples from: by default SmolLM2 with a LoRA adapter of rank 16 on every projection
(the recipes' default), under bf16 autocast (``--precision``), with the frozen weights held in bf16 for the rollout
as the trainer holds them. Each figure is set against what the machine can do at best, measured in the same run: the
bf16 (or fp32) matmul peak, and the memory bandwidth, which bounds a decode step that must read every weight once.

Usage: ``python benchmarks/rollout.py`` (about 12 minutes on 2 CPU cores) or ``--quick`` for a smoke run.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import os
import statistics
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from peaks import matmul_peak, memory_bandwidth  # noqa: E402
from provenance import cpus, describe, provenance  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig  # noqa: E402

from trl_starpo import load_environment, load_tasks, resolve_model_path  # noqa: E402
from trl_starpo.rollout.generation import CachedTransformersGenerator, TransformersGenerator  # noqa: E402
from trl_starpo.rollout.precision import frozen_weights_in_autocast_dtype  # noqa: E402

RESULTS = Path(__file__).with_name("RESULTS.md")
PATHS = ("necessary", "naive", "cached")


@dataclass(frozen=True)
class Workload:
    trajectories: int
    turns: int
    new_tokens: int
    observation_tokens: int

    @property
    def env_steps(self) -> int:
        return self.trajectories * self.turns

    @property
    def generated_tokens(self) -> int:
        return self.env_steps * self.new_tokens


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trajectories", type=int, default=16)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=40, help="Tokens generated per turn.")
    parser.add_argument("--observation-tokens", type=int, default=60, help="Tokens appended after each turn.")
    parser.add_argument("--repeats", type=int, default=2, help="Timed runs of each path (the median is reported).")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice).")
    parser.add_argument("--precision", choices=("bf16", "fp32"), default="bf16",
                        help="bf16: under bf16 autocast, as training with bf16=True samples (default); fp32: no autocast.")
    parser.add_argument("--lora-r", type=int, default=16, help="LoRA rank on every projection (0: the bare model).")
    parser.add_argument("--quick", action="store_true", help="A small run (8 rows, 3 turns, 1 repeat) to smoke-test.")
    parser.add_argument("--batch-sizes", type=int, nargs="*", default=[4, 16, 64],
                        help="Batch sizes of the generated-tokens/s table (none: no table).")
    parser.add_argument("--no-record", action="store_true", help=f"Print only; do not append to {RESULTS.name}.")
    args = parser.parse_args(argv)
    if args.quick:
        args.trajectories, args.turns, args.new_tokens, args.observation_tokens, args.repeats = 8, 3, 16, 30, 1
        args.batch_sizes = [2, 8]
    return args


def sokoban_prompt_and_observation(tokenizer, observation_tokens: int) -> tuple[list[int], list[int]]:
    """The chat-template prompt of a Sokoban episode, and exactly ``observation_tokens`` tokens of grid text."""
    env = load_environment("sokoban")
    task = load_tasks("sokoban", split="train")[0]
    grid, _ = env.reset(seed=task.get("seed"), options={"task": task})
    messages = [{"role": "system", "content": env.system_prompt}, {"role": "user", "content": grid}]
    prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    grid_ids = tokenizer(grid + "\n", add_special_tokens=False)["input_ids"]
    repeats = -(-observation_tokens // len(grid_ids))
    return prompt_ids, (grid_ids * repeats)[:observation_tokens]


def run_necessary(model, prompt: list[int], observation: list[int], workload: Workload, config) -> None:
    """All turns' tokens in one ``generate`` call, plus one forward pass over all appended observation tokens."""
    input_ids = torch.tensor([prompt] * workload.trajectories)
    total = workload.turns * workload.new_tokens
    config = copy.deepcopy(config)
    config.min_new_tokens = config.max_new_tokens = total
    output = model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), generation_config=config)
    assert output.shape[1] == len(prompt) + total
    observations = torch.tensor([observation * (workload.turns - 1)] * workload.trajectories)
    with torch.no_grad():
        model(input_ids=observations, logits_to_keep=1)


def run_multi_turn(generator, prompt: list[int], observation: list[int], workload: Workload) -> None:
    """The rollout loop the collector runs, with fixed-size responses and observations."""
    generator.reset()
    contexts = {row: list(prompt) for row in range(workload.trajectories)}
    for turn in range(workload.turns):
        responses = generator.generate(contexts, workload.new_tokens)
        assert all(len(response) == workload.new_tokens for response in responses.values())
        if turn < workload.turns - 1:
            contexts = {row: contexts[row] + responses[row] + observation for row in contexts}


def path_runs(model, tokenizer, prompt: list[int], observation: list[int], workload: Workload) -> dict:
    """One zero-argument callable per path, each running ``workload`` once."""
    config = GenerationConfig(do_sample=True, temperature=1.0, min_new_tokens=workload.new_tokens)
    settings = dict(
        pad_token_id=tokenizer.pad_token_id, eos_token_ids=[tokenizer.eos_token_id], generation_config=config
    )
    return {
        "necessary": lambda: run_necessary(model, prompt, observation, workload, config),
        "naive": lambda: run_multi_turn(TransformersGenerator(model, **settings), prompt, observation, workload),
        "cached": lambda: run_multi_turn(CachedTransformersGenerator(model, **settings), prompt, observation, workload),
    }


def time_paths(
    model, tokenizer, prompt: list[int], observation: list[int], workload: Workload, repeats: int
) -> dict[str, list[float]]:
    """Seconds of each run of each path; the paths take turns so that a slow spell of the machine hits them alike."""
    # The first calls are several times slower (allocator and kernel warm-up); a small two-turn run warms every path.
    warm_up = Workload(workload.trajectories, 2, 4, workload.observation_tokens)
    for run in path_runs(model, tokenizer, prompt, observation, warm_up).values():
        run()
    runs = path_runs(model, tokenizer, prompt, observation, workload)
    seconds = {path: [] for path in PATHS}
    for repeat in range(repeats):
        for path in PATHS:
            torch.manual_seed(repeat)
            start = time.perf_counter()
            runs[path]()
            seconds[path].append(time.perf_counter() - start)
            print(f"  repeat {repeat + 1}/{repeats} {path:<9} {seconds[path][-1]:7.1f} s", flush=True)
    return seconds


@dataclass(frozen=True)
class Ceilings:
    """The machine's best, measured in this run, and what the model costs against it."""

    matmul_gflops: float  # GEMM peak in the sampling precision
    bandwidth_gbs: float  # large-copy memory bandwidth
    flop_per_token: float  # 2 x parameters: one forward of one token, attention aside
    weight_bytes: float  # every weight in the dtype its matmuls read it in, read once per decode step

    def decode_bound(self, batch: int) -> float:
        """Generated tokens/s if a decode step cost only reading every weight once at the measured bandwidth."""
        return batch * self.bandwidth_gbs * 1e9 / self.weight_bytes


def ceilings(model, precision: str) -> Ceilings:
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    parameters = sum(p.numel() for p in model.parameters())
    return Ceilings(matmul_peak(dtype), memory_bandwidth(), 2.0 * parameters, parameters * dtype.itemsize)


def batch_size_table(model, tokenizer, prompt, observation, workload: Workload, batch_sizes: list[int],
                     ceiling: Ceilings) -> str:
    """Generated tokens/s of the cached and the necessary path at each batch size (one timed run each), with the
    cached path's necessary GFLOP/s (every prompt, observation and generated token once) against the matmul peak and
    its generated tokens/s against the decode bound that reading every weight once per step sets."""
    lines = [
        f"Generated tokens/s by batch size ({workload.turns} turns of {workload.new_tokens} tokens, one run each):",
        "",
        "| batch | cached tokens/s | necessary tokens/s | cached / necessary (time) | cached GFLOP/s "
        "| of the matmul peak | weight-read bound tokens/s | cached, of that bound |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for size in batch_sizes:
        sized = Workload(size, workload.turns, workload.new_tokens, workload.observation_tokens)
        runs = path_runs(model, tokenizer, prompt, observation, sized)
        seconds = {}
        for path in ("necessary", "cached"):
            torch.manual_seed(0)
            start = time.perf_counter()
            runs[path]()
            seconds[path] = time.perf_counter() - start
        print(f"  batch {size}: {json.dumps({k: round(v, 1) for k, v in seconds.items()})}", flush=True)
        tokens_per_s = sized.generated_tokens / seconds["cached"]
        processed = size * (len(prompt) + sized.turns * sized.new_tokens + (sized.turns - 1) * len(observation))
        gflops = processed * ceiling.flop_per_token / seconds["cached"] / 1e9
        bound = ceiling.decode_bound(size)
        lines.append(
            f"| {size} | {tokens_per_s:.1f} | {sized.generated_tokens / seconds['necessary']:.1f} "
            f"| {seconds['cached'] / seconds['necessary']:.2f} | {gflops:.0f} | {gflops / ceiling.matmul_gflops:.1%} "
            f"| {bound:.0f} | {tokens_per_s / bound:.0%} |"
        )
    return "\n".join(lines)


def summarize(seconds: dict[str, list[float]], workload: Workload) -> list[dict]:
    necessary = statistics.median(seconds["necessary"])
    rows = []
    for path in PATHS:
        median = statistics.median(seconds[path])
        rows.append(
            {
                "path": path,
                "seconds": median,
                "tokens_per_s": workload.generated_tokens / median,
                "env_steps_per_s": workload.env_steps / median,
                "vs_necessary": median / necessary,
            }
        )
    return rows


def table(rows: list[dict]) -> str:
    lines = [
        "| path | seconds (median) | generated tokens/s | env-steps/s | / necessary |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['path']} | {row['seconds']:.1f} | {row['tokens_per_s']:.1f} | {row['env_steps_per_s']:.2f} "
            f"| {row['vs_necessary']:.2f} |"
        )
    return "\n".join(lines)


def publish(text: str, record: bool) -> None:
    """Print a benchmark's report and, with ``record``, append it to RESULTS.md."""
    print("\n" + text)
    if record:
        with RESULTS.open("a") as results:
            results.write("\n" + text + "\n")
        print(f"\nappended to {RESULTS}")


def machine() -> str:
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (f"{describe(provenance())}, {cpus()}, "
            f"torch {torch.__version__} with {torch.get_num_threads()} threads, load average {load} at the end")


def load_policy(path, lora_r: int):
    """SmolLM2 as training samples from it: with a fresh LoRA adapter on every projection unless ``lora_r`` is 0."""
    model = AutoModelForCausalLM.from_pretrained(path)
    if lora_r:
        from peft import LoraConfig, get_peft_model

        projections = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
        model = get_peft_model(model, LoraConfig(r=lora_r, lora_alpha=2 * lora_r, target_modules=projections))
    return model.eval()


@contextmanager
def sampling_precision(model, precision: str):
    """No gradients, and under ``bf16`` the trainer's autocast with its frozen weights held in bf16."""
    with torch.no_grad():
        if precision == "fp32":
            yield
            return
        with torch.autocast("cpu", dtype=torch.bfloat16), frozen_weights_in_autocast_dtype(model):
            yield


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    workload = Workload(args.trajectories, args.turns, args.new_tokens, args.observation_tokens)
    path = resolve_model_path()
    model = load_policy(path, args.lora_r)
    tokenizer = AutoTokenizer.from_pretrained(path)
    ceiling = ceilings(model, args.precision)
    print(f"ceilings: {ceiling}", flush=True)

    prompt, observation = sokoban_prompt_and_observation(tokenizer, workload.observation_tokens)
    print(f"{workload}, after a {len(prompt)}-token prompt", flush=True)
    with sampling_precision(model, args.precision):
        seconds = time_paths(model, tokenizer, prompt, observation, workload, args.repeats)
        sizes = batch_size_table(model, tokenizer, prompt, observation, workload, args.batch_sizes, ceiling) \
            if args.batch_sizes else None
    rows = summarize(seconds, workload)
    adapter = f"a LoRA adapter of rank {args.lora_r} on every projection" if args.lora_r else "no adapter"
    report = [
        f"### {datetime.date.today().isoformat()}{' (--quick)' if args.quick else ''}",
        "",
        f"{machine()}.",
        f"SmolLM2-135M-Instruct with {adapter}, sampling in {args.precision}"
        f"{' (autocast, frozen weights held in bf16)' if args.precision == 'bf16' else ''}. "
        f"Measured in the same run: matmul peak {ceiling.matmul_gflops:.0f} GFLOP/s ({args.precision}), "
        f"memory bandwidth {ceiling.bandwidth_gbs:.1f} GB/s (large copy, read + write); "
        f"{ceiling.flop_per_token / 1e9:.2f} GFLOP and {ceiling.weight_bytes / 2**20:.0f} MiB of weights a token.",
        f"{workload.trajectories} trajectories x {workload.turns} turns after a {len(prompt)}-token prompt, "
        f"{workload.new_tokens} new tokens and {workload.observation_tokens} observation tokens a turn; "
        f"medians of {args.repeats} interleaved repeats "
        f"(raw seconds: {json.dumps({k: [round(s, 1) for s in v] for k, v in seconds.items()})}).",
        "",
        table(rows),
    ]
    if sizes:
        report += ["", sizes]
    publish("\n".join(report), record=not args.no_record)


if __name__ == "__main__":
    main()
