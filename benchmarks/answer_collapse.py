"""Did a recipe run's rollouts converge on one answer? Figures for a run record, from the run's output_dir.

Reads what a recipe leaves in its ``output_dir`` (``validation_results.json`` and the trajectory store
``trajectories/``) and writes, as JSON: the validation before and after training, and for every optimizer step
the rollouts' most common answer (a turn's actions, else its whole response, as ``trl_starpo.monitor.diagnostics`` reads it)
with the fraction of turns giving it, the fraction of actions the environment took as valid, the format error rate,
the mean return, the fraction of task groups whose returns are all equal, and the steps at which
``AnswerCollapse`` (the echo-trap detector of a constant answer with no in-group spread) would have fired on them.

    python benchmarks/answer_collapse.py OUTPUT_DIR [--meta key=value ...] [--out FILE]

``--meta`` adds fields to the record (the command, the commit, what else was running, ...).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

from trl_starpo.monitor.detectors import AnswerCollapse
from trl_starpo.monitor.diagnostics import top_answer, trajectory_diagnostics
from trl_starpo.store import TrajectoryStore


def step_figures(trajectories) -> dict:
    """The figures of one step's trajectories."""
    turns = [turn for trajectory in trajectories for turn in trajectory.turns]
    actions = sum(len(turn.actions) for turn in turns)
    groups = defaultdict(list)
    for trajectory in trajectories:
        groups[trajectory.group].append(trajectory.episode_return)
    answer, fraction = top_answer(trajectories)
    return {
        "rollouts": len(trajectories),
        "top_answer": answer,
        "top_answer_fraction": round(fraction, 4),
        "valid_action_fraction": round(sum(t.num_valid_actions for t in turns) / actions, 4) if actions else None,
        "format_error_rate": round(sum(not t.format_ok for t in turns) / len(turns), 4),
        "success": round(sum(t.success for t in trajectories) / len(trajectories), 4),
        "mean_return": round(sum(t.episode_return for t in trajectories) / len(trajectories), 4),
        "frac_groups_zero_std": round(sum(len(set(r)) == 1 for r in groups.values()) / len(groups), 4),
    }


def figures(output_dir: Path) -> dict:
    store = TrajectoryStore.load(output_dir / "trajectories")
    by_step = defaultdict(list)
    for step, trajectory in zip(store.to_dataset()["step"], store.trajectories()):
        by_step[step].append(trajectory)
    detector, previous, steps, fired = AnswerCollapse(), None, [], []
    for step in sorted(by_step):
        batch = by_step[step]
        row = {"step": step, **step_figures(batch)}
        logs = {**trajectory_diagnostics(batch), "monitor/top_answer_unchanged": float(row["top_answer"] == previous),
                "rollout/success": row["success"]}
        previous = row["top_answer"]
        if detector.observe(logs) is not None:
            fired.append(step)
        steps.append(row)
    validation = json.loads((output_dir / "validation_results.json").read_text())
    keep = ("success", "return", "actions", "action_validity", "format_error_rate")
    return {
        "validation": {when: {k: round(stats[k], 4) for k in keep} for when, stats in validation.items()
                       if when in ("before", "after")},
        "steps": steps,
        "answer_collapse_fired_at": fired,
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("output_dir", type=Path)
    parser.add_argument("--meta", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--out", type=Path, help="write the record here (default: stdout)")
    args = parser.parse_args(argv)
    meta = dict(item.split("=", 1) for item in args.meta)
    record = json.dumps({**meta, **figures(args.output_dir)}, indent=1, ensure_ascii=False)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(record + "\n", encoding="utf-8")
    else:
        sys.stdout.write(record + "\n")


if __name__ == "__main__":
    main()
