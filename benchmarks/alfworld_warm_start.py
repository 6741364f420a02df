"""ALFWorld warm starts: record what an SFT run cost and what it wins, and print the table of the records.

    python benchmarks/alfworld_warm_start.py record NAME --sft outputs/alfworld-sft \
        --eval outputs/eval-valid_seen.json --episodes outputs/eval-valid_seen/alfworld-valid_seen-model \
        --command "the SFT command" --note "what else ran"
    python benchmarks/alfworld_warm_start.py record NAME --sft-from-record EARLIER --temperature 0 --eval ... \
        --episodes ...      # the same warm start, evaluated another way
    python benchmarks/alfworld_warm_start.py table

An SFT run is `recipes/alfworld_sft.py` (its folder holds trainer_state.json and starpo_agent.json); its evaluation
is `trl-starpo eval --json --save_trajectories` on a validation split, whose saved episodes give each game's outcome,
so two warm starts compare game by game (an exact sign test over the games one wins and the other loses). Records go
to benchmarks/alfworld_runs/warm-start/NAME.json.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from provenance import cpus, provenance

RECORDS = Path(__file__).parent / "alfworld_runs" / "warm-start"


def outcomes(store: str) -> dict[str, bool]:
    from trl_starpo.store import TrajectoryStore

    return {row["task_id"]: bool(row["success"]) for row in TrajectoryStore.load(store).to_dataset()}


def sft_section(args) -> tuple[dict, dict]:
    """``(sft, rollout)`` of the record: from the SFT folder, or copied from an earlier record of the same warm start."""
    if args.sft_from_record:
        earlier = json.loads((RECORDS / f"{args.sft_from_record}.json").read_text())
        return earlier["sft"], earlier["rollout"]
    sft = Path(args.sft)
    state = json.loads((sft / "trainer_state.json").read_text())
    agent = json.loads((sft / "starpo_agent.json").read_text())
    losses = [entry["loss"] for entry in state["log_history"] if "loss" in entry]
    return ({"command": args.command, "steps": state["global_step"], "demonstrations":
             agent["training"].get("sft_demonstrations"), "learning_rate": agent["training"]["learning_rate"],
             "first_loss": losses[0], "last_loss": losses[-1], "train_runtime_s":
             state["log_history"][-1].get("train_runtime"), "peak_rss_gib": args.peak_rss_gib}, agent["rollout"])


def record(args) -> Path:
    sft, rollout = sft_section(args)
    evaluation = json.loads(Path(args.eval).read_text())
    result = {
        "name": args.name,
        "sft": sft,
        "rollout": rollout,
        "evaluation": {**{key: evaluation[key] for key in ("split", "episodes", "success", "success_low",
                                                          "success_high", "return", "turns", "action_validity",
                                                          "format_error_rate")},
                       "temperature": args.temperature},
        "outcomes": outcomes(args.episodes),
        "note": args.note,
        **provenance(), "machine": cpus(),
    }
    RECORDS.mkdir(parents=True, exist_ok=True)
    path = RECORDS / f"{args.name}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    return path


def sign_test(gained: int, lost: int) -> float:
    from scipy.stats import binomtest

    return binomtest(gained, gained + lost).pvalue if gained + lost else 1.0


def table() -> str:
    records = [json.loads(path.read_text()) for path in sorted(RECORDS.glob("*.json"))]
    lines = ["| warm start | split | decoding | games | success | 95% interval | valid actions | format errors | turns |",
             "|---|---|---|---:|---:|---|---:|---:|---:|"]
    for r in records:
        e = r["evaluation"]
        wins = sum(r["outcomes"].values())
        temperature = e.get("temperature", 1.0)
        decoding = "greedy" if temperature == 0 else f"T={temperature:g}"
        lines.append(f"| {r['name']} | {e['split']} | {decoding} | {len(r['outcomes'])} | {wins} | "
                     f"[{e['success_low']:.2f}, {e['success_high']:.2f}] | {e['action_validity']:.2f} | "
                     f"{e['format_error_rate']:.2f} | {e['turns']:.1f} |")
    for i, a in enumerate(records):  # every pair, on the games both played
        for b in records[i + 1:]:
            common = sorted(set(a["outcomes"]) & set(b["outcomes"]))
            if not common:
                continue
            gained = sum(b["outcomes"][t] and not a["outcomes"][t] for t in common)
            lost = sum(a["outcomes"][t] and not b["outcomes"][t] for t in common)
            lines.append(f"\n{b['name']} against {a['name']} on the {len(common)} games both played: "
                         f"{sum(a['outcomes'][t] for t in common)} -> {sum(b['outcomes'][t] for t in common)} won, "
                         f"{gained} gained, {lost} lost (exact sign test p = {sign_test(gained, lost):.2g})")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command_name", required=True)
    make = commands.add_parser("record", help="write a record from an SFT folder and its evaluation")
    make.add_argument("name")
    source = make.add_mutually_exclusive_group(required=True)
    source.add_argument("--sft", help="the SFT run's output_dir")
    source.add_argument("--sft-from-record", help="an earlier record of the same warm start, evaluated otherwise")
    make.add_argument("--temperature", type=float, default=1.0, help="the evaluation's temperature (0: greedy)")
    make.add_argument("--eval", required=True, help="trl-starpo eval --json output")
    make.add_argument("--episodes", required=True, help="the evaluation's saved trajectory store")
    make.add_argument("--command", default="", help="the command that trained it (with --sft)")
    make.add_argument("--peak-rss-gib", type=float, default=None, help="/usr/bin/time -v's maximum resident set")
    make.add_argument("--note", default="", help="what else ran, anything a reader needs")
    commands.add_parser("table", help="print the table of the records")
    args = parser.parse_args(argv)
    print(record(args) if args.command_name == "record" else table())


if __name__ == "__main__":
    main()
