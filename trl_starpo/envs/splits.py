"""The command line that regenerates an environment package's task splits (``python -m starpo_<name>``).

Every package that generates its tasks offers the same command: ``--out-dir`` (its own ``data/`` folder by default),
one size flag per split, and flags of its own; then each split is written as ``<out-dir>/<split>.jsonl``. For
example::

    def main(argv=None):
        args = parse_task_split_args("python -m starpo_sokoban", SPLIT_SIZES, DATA_DIR, argv=argv,
                                     options=lambda parser: parser.add_argument("--num-boxes", type=int, default=1))
        write_task_splits(args.out_dir, ((split, generate_tasks(split, size, num_boxes=args.num_boxes))
                                         for split, size in args.split_sizes.items()))
"""

from __future__ import annotations

import argparse
import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .registry import write_task_split


def parse_task_split_args(
    prog: str,
    sizes: Mapping[str, int],
    data_dir: str | Path,
    *,
    description: str | None = None,
    options: Callable[[argparse.ArgumentParser], Any] | None = None,
    size_flag: str = "--{split}-size",
    argv: Sequence[str] | None = None,
) -> argparse.Namespace:
    """Parse the task-split command line: ``--out-dir`` (default ``data_dir``), one ``size_flag`` per split of
    ``sizes`` (defaulting to its size), and whatever ``options(parser)`` adds.

    Returns the arguments with ``out_dir`` (a ``Path``) and ``split_sizes`` (``{split: size}``, in the order of
    ``sizes``).
    """
    parser = argparse.ArgumentParser(prog=prog, description=description, allow_abbrev=False)
    parser.add_argument("--out-dir", type=Path, default=Path(data_dir), help="output folder (default: %(default)s)")
    destinations = {}
    for split, size in sizes.items():
        action = parser.add_argument(size_flag.format(split=split), type=int, default=size, metavar="N",
                                     help=f"{split} size (default: %(default)s)")
        destinations[split] = action.dest
    if options is not None:
        options(parser)
    args = parser.parse_args(argv)
    args.split_sizes = {split: getattr(args, dest) for split, dest in destinations.items()}
    return args


HELD_OUT_SPLITS = ("validation", "test")


def split_of_content(content: str | bytes, held_out_fraction: float = 0.15) -> str:
    """The split a task's *content* belongs to: ``"test"``, ``"validation"`` or ``"train"``, from a hash of it.

    Seeds alone keep splits apart by id, not by content: a level with few layouts deals the same layout to every
    split. Assigning each distinct content (a layout, a map, a pair of names) to one split by its hash keeps the
    held-out splits disjoint from training by construction, for any number of tasks drawn. About
    ``held_out_fraction`` of the contents go to each held-out split.
    """
    if not 0 < held_out_fraction <= 0.5:
        raise ValueError(f"held_out_fraction must be in (0, 0.5], got {held_out_fraction}.")
    data = content.encode("utf-8") if isinstance(content, str) else content
    position = int.from_bytes(hashlib.sha256(data).digest()[:8], "big") / 2**64
    if position < held_out_fraction:
        return "test"
    if position < 2 * held_out_fraction:
        return "validation"
    return "train"


def write_task_splits(out_dir: str | Path, splits: Iterable[tuple[str, list[dict[str, Any]]]]) -> list[Path]:
    """Write each ``(split, rows)`` as ``<out_dir>/<split>.jsonl`` and say so; ``splits`` is read in order, so a
    generator may keep later splits disjoint from earlier ones."""
    written = []
    for split, rows in splits:
        path = write_task_split(out_dir, split, rows)
        print(f"wrote {len(rows)} tasks to {path}")
        written.append(path)
    return written
