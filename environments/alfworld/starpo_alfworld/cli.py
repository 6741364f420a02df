"""``python -m starpo_alfworld``: regenerate the shipped task splits, or export games as ALFWorld folders."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from .generator import SPLIT_FIRST_SEEDS, SPLIT_RULES, generate_split

DATA_DIR = Path(__file__).parent / "data"
SPLIT_SIZES = {"train": 300, "valid_seen": 60, "valid_unseen": 60}


def write_jsonl(path: Path, rows: Sequence[dict]) -> None:
    """Write rows as JSON lines."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")


def _generate(args: argparse.Namespace) -> None:
    # Games of the splits not regenerated stay excluded, so the splits never share a game.
    seen = {json.loads(line)["pddl_sha256"]
            for split in SPLIT_SIZES if split not in args.splits and (args.out_dir / f"{split}.jsonl").is_file()
            for line in (args.out_dir / f"{split}.jsonl").read_text().splitlines() if line.strip()}
    for split in args.splits:
        size = getattr(args, f"{split}_size")
        start = time.time()

        def progress(done: int, total: int, split: str = split) -> None:
            print(f"\r{split}: {done}/{total} games ({time.time() - start:.0f} s)", end="", file=sys.stderr)

        rows = generate_split(split, size, SPLIT_FIRST_SEEDS[split], exclude=seen, progress=progress)
        print(file=sys.stderr)
        seen.update(row["pddl_sha256"] for row in rows)
        write_jsonl(args.out_dir / f"{split}.jsonl", rows)
        print(f"wrote {len(rows)} {split} tasks to {args.out_dir / f'{split}.jsonl'}")


def _export(args: argparse.Namespace) -> None:
    from . import load_tasks
    from .games import game_file

    tasks = load_tasks(args.split)
    count = len(tasks) if args.limit is None else min(args.limit, len(tasks))
    split = tasks[0]["split"] if count else args.split
    root = args.out_dir / "json_2.1.1" / split
    for task in tasks.select(range(count)):
        source = game_file(task).parent
        target = root / source.parent.name / source.name
        target.mkdir(parents=True, exist_ok=True)
        for name in ("initial_state.pddl", "traj_data.json", "game.tw-pddl"):
            (target / name).write_bytes((source / name).read_bytes())
    print(f"exported {count} {split} games to {root} (ALFWORLD_DATA={args.out_dir} reads them as official games)")


def main(argv: Sequence[str] | None = None) -> None:
    """Regenerate the task splits or export games (``python -m starpo_alfworld --help``)."""
    parser = argparse.ArgumentParser(prog="python -m starpo_alfworld", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    generate = commands.add_parser(
        "generate",
        help="draw games, keep those the planner expert wins, write <split>.jsonl task rows",
        description="Splits: " + "; ".join(f"{split}: {rule}" for split, rule in SPLIT_RULES.items()) + ".",
    )
    generate.add_argument("--out-dir", type=Path, default=DATA_DIR, help="output folder (default: %(default)s)")
    generate.add_argument("--splits", nargs="+", choices=list(SPLIT_SIZES), default=list(SPLIT_SIZES))
    for split, size in SPLIT_SIZES.items():
        generate.add_argument(f"--{split.replace('_', '-')}-size", dest=f"{split}_size", type=int, default=size)
    generate.set_defaults(func=_generate)

    export = commands.add_parser("export", help="write games of a split as ALFWorld folders (json_2.1.1/<split>/...)")
    export.add_argument("--split", default="valid_unseen")
    export.add_argument("--out-dir", type=Path, required=True)
    export.add_argument("--limit", type=int, default=None, help="only the first N games")
    export.set_defaults(func=_export)

    args = parser.parse_args(argv)
    args.func(args)

