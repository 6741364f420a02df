"""Baselines of every shipped environment, measured with `trl-starpo eval`: the scripted expert, the random agent and
the untrained default model (SmolLM2-135M-Instruct), under the same episode limits, with Wilson 95% intervals.

    python benchmarks/baselines.py --env sokoban   # run the eval commands of one environment, one at a time
    python benchmarks/baselines.py                 # every environment
    python benchmarks/baselines.py --table         # the environment cards' Markdown tables, from the records

The limits of an environment let its expert finish every task (the recipes' CPU-sized limits are shorter); the
expert and the random agent play the whole split, the model its first `MODEL_EPISODES` tasks. Each environment's
rows are recorded in `benchmarks/baselines/<env>.json`: the commands and the JSON they printed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

RECORDS = Path(__file__).with_name("baselines")
MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"

LIMITS = {
    "alfworld": "--max_turns 10 --max_actions_per_turn 1 --max_actions_per_trajectory 10",
    "bandit": "",
    "countdown": "",
    "frozenlake": "--max_turns 10 --max_actions_per_turn 2 --max_actions_per_trajectory 20",
    "hotpotqa": "--max_turns 7 --max_actions_per_turn 1 --max_actions_per_trajectory 7",
    "minigrid": "--max_turns 10 --max_actions_per_turn 3 --max_actions_per_trajectory 30",
    "sokoban": "--max_turns 10 --max_actions_per_turn 2 --max_actions_per_trajectory 20",
    "webshop": "--max_turns 15 --max_actions_per_turn 1 --max_actions_per_trajectory 15",
}
"""Episode limits a baseline plays under (empty: StarPOConfig's defaults, enough for one-turn environments)."""

ENV_KWARGS = {"frozenlake": '{"max_steps": 20}'}
"""FrozenLake truncates where the action budget ends, so that its expert plans for the same horizon."""

SPLITS = {"alfworld": ["valid_seen", "valid_unseen"]}
MODEL_EPISODES = 8


def commands(environment: str) -> list[list[str]]:
    """The `trl-starpo eval` command lines of one environment: baselines and model, for each split, with flags in
    the documented spelling (underscores, as in docs/cli.md)."""
    flags = LIMITS[environment].split()
    if environment in ENV_KWARGS:
        flags += ["--env_kwargs", ENV_KWARGS[environment]]
    lines = []
    for split in SPLITS.get(environment, ["validation"]):
        base = ["trl-starpo", "eval", "--env", environment, "--split", split, *flags, "--json", "--no_progress"]
        lines.append([*base, "--policy", "expert,random"])
        lines.append([*base, "--model", MODEL, "--episodes", str(MODEL_EPISODES)])
    return lines


def measure(environment: str) -> Path:
    """Run the environment's commands one after the other and record their JSON rows."""
    script = str(Path(sys.executable).with_name("trl-starpo"))
    runs = []
    for line in commands(environment):
        done = subprocess.run([script, *line[1:]], capture_output=True, text=True, check=True,
                              env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"})
        rows = json.loads(done.stdout)
        runs.append({"command": " ".join(_quoted(part) for part in line),
                     "rows": rows if isinstance(rows, list) else [rows]})
    record = {"environment": environment, "date": datetime.date.today().isoformat(), "runs": runs}
    RECORDS.mkdir(exist_ok=True)
    path = RECORDS / f"{environment}.json"
    path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return path


VALIDITY_LEAVES_OUT_SILENT_EPISODES = "2026-12-05"
"""Evaluations since this date leave episodes that sent no action out of valid actions; earlier ones counted them as
all valid, which overstates the untrained model's figure."""


def table(environment: str) -> str:
    """The Markdown baseline table of one environment's record, followed by the commands that measured it."""
    record = json.loads((RECORDS / f"{environment}.json").read_text(encoding="utf-8"))
    lines = [
        "| agent | split | episodes | success | Wilson 95% | return | turns | valid actions | format errors |",
        "|---|---|---:|---:|---|---:|---:|---:|---:|",
    ]
    names = {"expert": "scripted expert (`expert_action()`)", "random": "random (`admissible_actions()`)",
             "model": "untrained SmolLM2-135M-Instruct"}
    for run in record["runs"]:
        for row in run["rows"]:
            interval = f"[{row['success_low']:.3f}, {row['success_high']:.3f}]"
            overstated = row["policy"] == "model" and record["date"] < VALIDITY_LEAVES_OUT_SILENT_EPISODES
            validity = None if overstated or not row["actions"] else row["action_validity"]
            lines.append(
                f"| {names[row['policy']]} | `{row['split']}` | {row['episodes']} | {row['success']:.3f} | "
                f"{interval} | {row['return']:.3f} | {row['turns']:.2f} | {_figure(validity)} | "
                f"{row['format_error_rate']:.3f} |"
            )
    if record["date"] < VALIDITY_LEAVES_OUT_SILENT_EPISODES:
        lines += ["", "Valid actions are not given for the model here: this record counted an episode that sent no "
                  "command as all valid."]
    lines += ["", f"Measured on {record['date']} with:", "", "```bash"]
    lines += [run["command"] for run in record["runs"]]
    lines += ["```"]
    return "\n".join(lines)


def _figure(value: float | None) -> str:
    """Three decimals, or "-" for a figure the episodes did not define or the record overstates."""
    return "-" if value is None or value != value else f"{value:.3f}"


def _quoted(part: str) -> str:
    return f"'{part}'" if any(c in part for c in ' {}"') else part


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", action="append", choices=sorted(LIMITS), help="environment (default: all)")
    parser.add_argument("--table", action="store_true", help="print the cards' tables from the records")
    args = parser.parse_args(argv)
    for environment in args.env or sorted(LIMITS):
        print(table(environment) if args.table else measure(environment), end="\n\n" if args.table else "\n")


if __name__ == "__main__":
    main()
