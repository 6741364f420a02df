"""What an environment step costs as episodes get longer, under the ``full`` and ``window`` context policies.

One StarPO update (4 episodes of one task, SmolLM2-135M-Instruct with a LoRA adapter, r 8 on the attention
projections, gradient checkpointing, micro-batches of one row) on a synthetic environment that never ends: a corridor
whose every observation is about 60 tokens, so each episode runs exactly ``horizon`` turns of up to
``--new-tokens`` tokens. Each (policy, horizon) runs in a fresh process, so its peak RSS is its own. Reported per
environment step: the update's wall time and its split (generation, environment, scoring forwards, loss forward,
backward, optimizer, as the trainer logs them in ``time/*``), the tokens the model was given per turn, and the peak
RSS of the whole process.

``full`` gives every turn the whole episode so far and trains each episode as one sequence; ``window`` gives the
system prompt, the task and the last ``--history-turns`` turns and trains each turn as its own sample
(``StarPOConfig.context_policy``).

Usage: ``python benchmarks/horizon.py`` (about 30 minutes on 2 CPU cores) or ``--quick`` for a smoke run. Figures
are printed, appended to ``RESULTS.md`` and kept as JSON under ``horizon_runs/``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from provenance import cpus, describe, provenance  # noqa: E402

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "RESULTS.md"
RUNS = HERE / "horizon_runs"
PHASES = ("generation", "environment", "scoring", "loss_forward", "backward", "optimizer", "other")


class Corridor:
    """An endless corridor: every step moves on, nothing ends the episode, no reward."""

    system_prompt = "You walk down a long corridor, looking for a red door."
    action_description = "forward, back, look"
    example_action = "forward"

    def reset(self, *, seed=None, options=None):
        self.position = 0
        return self._observation(), {}

    def _observation(self) -> str:
        return (f"You are at section {self.position} of the corridor. Grey doors line both walls: none of them is "
                "red. The floor is tiled in black and white, the lights hum, and the corridor goes on ahead of you "
                "and behind you as far as you can see.")

    def step(self, action):
        self.position += 1 if action.strip() != "back" else -1
        info = {"action_is_valid": True, "action_is_effective": True, "success": False}
        return self._observation(), 0.0, False, False, info

    def close(self):
        pass


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--horizons", type=int, nargs="+", default=[10, 25, 50], help="Turns per episode.")
    parser.add_argument("--policies", nargs="+", default=["full", "window"], choices=["full", "window"])
    parser.add_argument("--history-turns", type=int, default=2, help="Turns a window keeps.")
    parser.add_argument("--new-tokens", type=int, default=32, help="Tokens the model may generate per turn.")
    parser.add_argument("--episodes", type=int, default=4, help="Episodes of the update (one task group).")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's choice).")
    parser.add_argument("--quick", action="store_true", help="Horizons 2 and 4 only: a smoke run.")
    parser.add_argument("--no-record", action="store_true", help=f"Print only; do not append to {RESULTS.name}.")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.horizons = [2, 4]
    return args


def child(spec: dict) -> dict:
    """One update under ``spec``'s policy and horizon, in this process."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig

    from trl_starpo import StarPOConfig, StarPOTrainer, resolve_model_path

    if spec["threads"]:
        torch.set_num_threads(spec["threads"])
    horizon, episodes = spec["horizon"], spec["episodes"]
    with tempfile.TemporaryDirectory() as output_dir:
        args = StarPOConfig(
            output_dir=output_dir, preset="starpo", beta=0.0, num_generations=episodes,
            per_device_train_batch_size=1, gradient_accumulation_steps=episodes, max_steps=1, max_turns=horizon,
            max_actions_per_turn=1, max_actions_per_trajectory=horizon, max_tokens_per_turn=spec["new_tokens"],
            max_context_length=8192, context_policy=spec["policy"], history_turns=spec["history_turns"],
            gradient_checkpointing=True, learning_rate=1e-5, report_to="none", save_strategy="no",
            save_trajectories=False, save_agent_files=False, logging_steps=1, seed=0, disable_tqdm=True,
        )
        lora = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
        trainer = StarPOTrainer(model=resolve_model_path(), environment=Corridor, args=args, peft_config=lora,
                                train_dataset=Dataset.from_list([{"task_id": "corridor"}]))
        trainer.train()
        logged = next(entry for entry in trainer.state.log_history if "time/step" in entry)
        trajectories = trainer.last_trajectories
    steps = sum(len(t.turns) for t in trajectories)
    contexts = [len(turn.context_ids) if turn.context_ids is not None else turn.response_start
                for t in trajectories for turn in t.turns]
    return {
        "policy": spec["policy"], "horizon": horizon, "env_steps": steps,
        "truncations": sorted({t.truncation for t in trajectories if t.truncation != "max_turns"} - {None}),
        "step_s": logged["time/step"], "split_s": {phase: logged[f"time/{phase}"] for phase in PHASES},
        "generated_tokens": sum(turn.response_end - turn.response_start for t in trajectories for turn in t.turns),
        "context_tokens_mean": sum(contexts) / len(contexts), "context_tokens_max": max(contexts),
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
    }


def run_child(spec: dict) -> dict:
    command = [sys.executable, __file__, "--child", json.dumps(spec)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{spec['policy']} at {spec['horizon']} turns failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(results: list[dict]) -> str:
    base = {r["policy"]: r for r in results if r["horizon"] == min(x["horizon"] for x in results)}
    lines = ["| policy | turns | ms per env step | vs shortest | generation | scoring | loss fwd + bwd | "
             "tokens given per turn (mean / max) | peak RSS (GiB) |",
             "|---|---:|---:|---:|---:|---:|---:|---|---:|"]
    for r in results:
        per_step = 1000 * r["step_s"] / r["env_steps"]
        shortest = 1000 * base[r["policy"]]["step_s"] / base[r["policy"]]["env_steps"]
        split = {phase: 1000 * seconds / r["env_steps"] for phase, seconds in r["split_s"].items()}
        lines.append(
            f"| {r['policy']} | {r['horizon']} | {per_step:.0f} | {per_step / shortest:.2f}x | "
            f"{split['generation']:.0f} | {split['scoring']:.0f} | {split['loss_forward'] + split['backward']:.0f} | "
            f"{r['context_tokens_mean']:.0f} / {r['context_tokens_max']} | {r['peak_rss_gib']:.2f} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return
    results = []
    for horizon in args.horizons:
        for policy in args.policies:
            spec = {"policy": policy, "horizon": horizon, "history_turns": args.history_turns,
                    "new_tokens": args.new_tokens, "episodes": args.episodes, "threads": args.threads}
            result = run_child(spec)
            print(f"{policy} at {horizon} turns: {result['step_s']:.1f} s for {result['env_steps']} steps, "
                  f"peak {result['peak_rss_gib']:.2f} GiB", flush=True)
            results.append(result)
    results.sort(key=lambda r: (r["policy"], r["horizon"]))
    text = table(results)
    print(text)
    if args.no_record or args.quick:
        return
    now = datetime.datetime.now(datetime.timezone.utc)
    record = {"recorded": now.isoformat(timespec="seconds"), "machine": cpus(),
              "settings": {k: v for k, v in vars(args).items() if k not in ("child", "no_record", "quick")},
              **provenance(), "results": results}
    RUNS.mkdir(exist_ok=True)
    (RUNS / f"{now:%Y-%m-%d-%H%M}.json").write_text(json.dumps(record, indent=1) + "\n")
    with RESULTS.open("a") as out:
        out.write(f"\n### Horizon sweep, {now:%Y-%m-%d} ({describe(record)})\n\n{text}\n")


if __name__ == "__main__":
    main()
