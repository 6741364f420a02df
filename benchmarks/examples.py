"""Runs the training examples of the README and the docs as a newcomer would, on the embedded SmolLM2-135M-Instruct,
and records what each one showed.

For each example: its exit status, wall time and peak memory (``/usr/bin/time -v`` semantics: the largest resident
set of any of its processes), how many updates moved the model (a finite, nonzero gradient norm), and, where the
example evaluates, validation success before and after training.

    python benchmarks/examples.py --list
    python benchmarks/examples.py sokoban-recipe cli-train      # some
    python benchmarks/examples.py                               # every example that runs offline, one at a time

Commands run from the repository root with their output folder moved to a scratch folder (``--output_dir``);
Python blocks run as written in a scratch folder. Records go to ``example_runs/<name>.json``. Time them with nothing
else running on the machine and say so with ``--other-load``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from provenance import cpus, provenance

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RUNS = HERE / "example_runs"
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRL_EXPERIMENTAL_SILENCE": "1",
           "TOKENIZERS_PARALLELISM": "false"}


@dataclass(frozen=True)
class Example:
    """One example a user can copy: a shell command (run from the repository root) or a marked Python block."""

    name: str
    page: str
    command: str = ""  # shell words; "{out}" is replaced by the scratch output folder
    block: str = ""  # "README.md#quickstart" or "docs/byo_environment.md#gymnasium" (a `<!-- example: -->` mark)
    needs: str = ""  # why it cannot run here, when it cannot

    def __post_init__(self):
        if bool(self.command) == bool(self.block):
            raise ValueError(f"example {self.name!r} needs exactly one of command and block")


EXAMPLES = (
    Example("readme-quickstart", "README.md", block="README.md#quickstart"),
    Example("sokoban-recipe", "README.md",
            command="accelerate launch recipes/sokoban.py --config recipes/configs/sokoban.yaml --preset starpo-s"),
    Example("sokoban-ddp", "README.md",
            command="accelerate launch --config_file recipes/accelerate_configs/multi_gpu.yaml --num_processes 2 "
                    "recipes/sokoban.py --config recipes/configs/sokoban.yaml"),
    Example("countdown-recipe", "docs/quickstart.md",
            command="accelerate launch recipes/countdown.py --config recipes/configs/countdown.yaml"),
    Example("countdown-12", "docs/quickstart.md",
            command="accelerate launch recipes/countdown.py --config recipes/configs/countdown.yaml --max_steps 12 "
                    "--learning_rate 1e-4"),
    Example("cli-train", "docs/cli.md",
            command="trl-starpo train --env sokoban --preset starpo-s --model HuggingFaceTB/SmolLM2-135M-Instruct "
                    "--config recipes/configs/sokoban.yaml --max_steps 8 --save_strategy steps --save_steps 4"),
    Example("dpo-recipe", "docs/algorithms.md",
            command="accelerate launch --num_processes 1 recipes/dpo.py --config recipes/configs/dpo.yaml"),
    Example("byo-gymnasium", "docs/byo_environment.md", block="docs/byo_environment.md#gymnasium"),
    Example("byo-trl", "docs/byo_environment.md", block="docs/byo_environment.md#trl"),
    # Examples this script does not run, and why.
    Example("make-train", "README.md", command="make train",
            needs="has its own records, benchmarks/alfworld_runs/make-train/"),
    Example("alfworld-sft", "docs/quickstart.md",
            command="accelerate launch recipes/alfworld_sft.py --config recipes/configs/alfworld_sft.yaml",
            needs="has its own records, benchmarks/alfworld_runs/warm-start/"),
    Example("alfworld-from-sft", "docs/quickstart.md",
            command="accelerate launch recipes/alfworld.py --config recipes/configs/alfworld.yaml "
                    "--warm_start outputs/alfworld-sft/adapter",
            needs="needs the adapter alfworld-sft writes (make-train runs the same job from the shipped one)"),
    Example("alfworld-50-sft", "docs/concepts.md",
            command="accelerate launch recipes/alfworld_sft.py --config recipes/configs/alfworld_sft.yaml "
                    "--max_turns 50 --max_actions_per_trajectory 50 --context_policy window --history_turns 2 "
                    "--output_dir outputs/sft-window",
            needs="takes hours (300 expert episodes, a training row per turn); the learning benchmark's "
                  "ablations/alfworld-50-window/ runs it"),
    Example("alfworld-50-rl", "docs/concepts.md",
            command="accelerate launch recipes/alfworld.py --config recipes/configs/alfworld.yaml --max_turns 50 "
                    "--max_actions_per_trajectory 50 --context_policy window --history_turns 2 "
                    "--warm_start outputs/sft-window/adapter",
            needs="needs the adapter alfworld-50-sft writes"),
    Example("dpo-from-store", "docs/algorithms.md",
            command="accelerate launch --num_processes 1 recipes/dpo.py --config recipes/configs/dpo.yaml "
                    "--trajectories outputs/alfworld-starpo/trajectories",
            needs="needs the trajectory store of an earlier ALFWorld run"),
    Example("offline", "docs/trajectories.md",
            command="python recipes/offline.py --trajectories outputs/sokoban-starpo/trajectories "
                    "--model_name_or_path HuggingFaceTB/SmolLM2-135M-Instruct --output_dir outputs/sokoban-offline "
                    "--num_generations 4 --per_device_train_batch_size 8 --max_steps 20",
            needs="needs the trajectory store of an earlier Sokoban run"),
    Example("frozenlake-qwen", "docs/quickstart.md",
            command="accelerate launch recipes/frozenlake.py --config recipes/configs/frozenlake.yaml "
                    "--model_name_or_path Qwen/Qwen2.5-0.5B-Instruct",
            needs="downloads Qwen2.5-0.5B-Instruct from the Hub"),
    Example("ddp-8-gpus", "docs/quickstart.md",
            command="accelerate launch --config_file recipes/accelerate_configs/multi_gpu.yaml --num_processes 8 "
                    "recipes/sokoban.py --config recipes/configs/sokoban.yaml",
            needs="needs 8 GPUs"),
    Example("deepspeed-8-gpus", "docs/quickstart.md",
            command="accelerate launch --config_file recipes/accelerate_configs/deepspeed_zero3.yaml "
                    "--num_processes 8 recipes/alfworld.py --config recipes/configs/alfworld.yaml "
                    "--model_name_or_path Qwen/Qwen2.5-7B-Instruct --warm_start ''",
            needs="needs 8 GPUs and DeepSpeed"),
    Example("byo-openenv", "docs/byo_environment.md", block="docs/byo_environment.md#openenv",
            needs="needs the OpenEnv server of the page running (tests/test_byo_docs.py starts one)"),
    Example("sft-python", "docs/quickstart.md", block="docs/quickstart.md#sft",
            needs="is the ALFWorld SFT recipe in Python, whose runs have their own records"),
    Example("monitor", "docs/monitoring.md", block="docs/monitoring.md#monitor",
            needs="is a fragment: the model and the detectors are yours"),
)
BY_NAME = {example.name: example for example in EXAMPLES}


def python_block(block: str) -> str:
    """The code of the Python block marked ``<!-- example: NAME -->`` in a page (``"PAGE#NAME"``)."""
    page, _, name = block.partition("#")
    text = (ROOT / page).read_text(encoding="utf-8")
    match = re.search(rf"<!-- example: {re.escape(name)} -->\n```python\n(.*?)```", text, re.S)
    if not match:
        raise SystemExit(f"{page} has no Python block {name!r}")
    return match.group(1)


def run_block(block: str, state_path: Path) -> None:
    """In this (child) process: run a docs block as written, then write what its trainers logged and evaluated."""
    import trl_starpo

    trainers, evaluations = [], []
    trainer_class = trl_starpo.StarPOTrainer
    train, evaluate_episodes = trainer_class.train, trainer_class.evaluate_episodes

    def recording_train(self, *args, **kwargs):
        trainers.append(self)
        return train(self, *args, **kwargs)

    def recording_evaluate(self, *args, **kwargs):
        stats = evaluate_episodes(self, *args, **kwargs)
        evaluations.append(stats)
        return stats

    trainer_class.train, trainer_class.evaluate_episodes = recording_train, recording_evaluate
    namespace = {"__name__": "__main__"}
    exec(compile(python_block(block), block, "exec"), namespace)  # the repository's own docs, not model output
    state = {"log_history": [entry for trainer in trainers for entry in trainer.state.log_history]}
    if len(evaluations) >= 2:
        state["validation"] = {"before": evaluations[0], "after": evaluations[-1]}
    state_path.write_text(json.dumps(state, default=float))


def updates_of(log_history: list[dict]) -> list[dict]:
    """The logged optimizer steps (or, for trajectory DPO, its rounds' last steps)."""
    keys = ("step", "round", "pairs", "loss", "grad_norm", "reward_std", "rollout/success", "rollout/format_error_rate")
    return [{key: entry[key] for key in keys if key in entry} for entry in log_history if "grad_norm" in entry]


def moved(update: dict) -> bool:
    norm = update.get("grad_norm")
    return isinstance(norm, (int, float)) and math.isfinite(norm) and norm > 0


def validation_of(results: dict) -> dict:
    """Success and friends before and after, from a recipe's validation_results.json (its first split)."""
    if "before" not in results:  # trajectory DPO's: {split: {"before": ..., "after": ...}}
        results = next((stats for stats in results.values() if isinstance(stats, dict)), {})
    keep = ("success", "return", "format_error_rate", "action_validity", "episodes")
    return {when: {key: results[when][key] for key in keep if key in results[when]}
            for when in ("untrained", "before", "after") if isinstance(results.get(when), dict)}


def run_example(example: Example, scratch: Path) -> dict:
    out = scratch / "out"
    env = {**os.environ, **OFFLINE}  # threads as the caller's shell sets them: accelerate launch alone gives one
    if example.command:
        argv = example.command.split() + ["--output_dir", str(out)]
        cwd = ROOT
    else:
        argv = [sys.executable, str(Path(__file__).resolve()), "--child", example.block, str(scratch / "state.json")]
        cwd = scratch
    start = time.monotonic()
    with open(scratch / "output.log", "wb") as log:
        status = subprocess.run(argv, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
    wall = time.monotonic() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    record = {
        "example": example.name, "page": example.page, "command": example.command or f"the Python block {example.block}",
        "exit_status": status, "wall_s": round(wall, 1),
        "peak_rss_gib": round(peak / 2**20, 2),  # this process runs one example: the peak is that example's
    }
    if example.command:
        state_file, rounds_file = out / "trainer_state.json", out / "rounds.json"
        if rounds_file.exists():  # trajectory DPO: one record per round; a round without pairs trained nothing
            log_history = [{"grad_norm": 0.0, **entry} for entry in json.loads(rounds_file.read_text())]
        else:
            log_history = json.loads(state_file.read_text())["log_history"] if state_file.exists() else []
        results_file = out / "validation_results.json"
        results = json.loads(results_file.read_text()) if results_file.exists() else {}
    else:
        state_file = scratch / "state.json"
        state = json.loads(state_file.read_text()) if state_file.exists() else {}
        log_history, results = state.get("log_history", []), state.get("validation", {})
    updates = updates_of(log_history)
    record.update(updates=updates, updates_that_moved=sum(map(moved, updates)), validation=validation_of(results))
    if status:
        record["output_tail"] = (scratch / "output.log").read_text(errors="replace")[-2000:]
    return record


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="Examples to run (default: every one that runs offline).")
    parser.add_argument("--list", action="store_true", help="List the examples and exit.")
    parser.add_argument("--other-load", default="nothing else ran", help="What else ran on the machine meanwhile.")
    parser.add_argument("--child", nargs=2, metavar=("BLOCK", "STATE"), help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.child:  # only a block this file lists is ever run: the argument names it, it does not supply it
        block = args.child[0]
        if block not in {example.block for example in EXAMPLES if example.block and not example.needs}:
            raise SystemExit(f"{block!r} is not a runnable example block of this file")
        run_block(block, Path(args.child[1]))
        return 0
    if args.list:
        for example in EXAMPLES:
            print(f"{example.name:18} {example.page:26} {example.needs or example.command or example.block}")
        return 0
    unknown = [name for name in args.names if name not in BY_NAME]
    if unknown:
        raise SystemExit(f"unknown example(s) {unknown}; --list shows them")
    chosen = [BY_NAME[name] for name in args.names] or [example for example in EXAMPLES if not example.needs]
    RUNS.mkdir(exist_ok=True)
    failed = 0
    for example in chosen:
        if example.needs:
            print(f"{example.name}: skipped, it {example.needs}")
            continue
        # One process per example, so that each peak is its own.
        if len(chosen) > 1:
            status = subprocess.run([sys.executable, __file__, example.name, "--other-load", args.other_load]).returncode
            failed += bool(status)
            continue
        with tempfile.TemporaryDirectory(prefix=f"example-{example.name}-") as scratch:
            record = run_example(example, Path(scratch))
        record.update(provenance(), date=datetime.datetime.now().isoformat(timespec="seconds"),
                      other_load=args.other_load, cpus=os.cpu_count(), machine=cpus(),
                      omp_num_threads=os.environ.get("OMP_NUM_THREADS"))
        (RUNS / f"{example.name}.json").write_text(json.dumps(record, indent=1) + "\n")
        verdict = "ok" if record["exit_status"] == 0 and record["updates_that_moved"] else "FAILED"
        print(f"{example.name}: {verdict}, exit {record['exit_status']}, {record['updates_that_moved']} of "
              f"{len(record['updates'])} updates moved the model, {record['wall_s'] / 60:.1f} min, "
              f"{record['peak_rss_gib']} GiB, validation {record['validation'] or '-'}")
        failed += verdict != "ok"
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
