"""Turning task rows into game files: generated games in a cache folder, official ALFWorld games where they lie.

A generated task row carries ``seed``, ``scene``, ``task_type`` and ``generator_version``; the first ``reset`` on it
rebuilds the game with ``generator.build_game`` and writes it, in ALFWorld's layout, under the cache folder::

    <cache>/<generator_version>/<task_type>-<Object>-None-<Parent>-<scene>/trial_starpo_<seed>/game.tw-pddl

A file lock makes this safe when several processes (``accelerate launch``, data-loader workers) reach the same game
at once. The cache folder is ``$STARPO_ALFWORLD_CACHE``, else ``$XDG_CACHE_HOME/trl_starpo/alfworld``, else
``~/.cache/trl_starpo/alfworld``.

A row with a ``game_file`` (official ALFWorld games, see ``official_tasks``) is played from that file as it is.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from filelock import FileLock

from .generator import GENERATOR_VERSION, build_game, pddl_sha256
from .pddl import game_data, game_folder, problem_text, traj_data, write_game

__all__ = ["OFFICIAL_SPLITS", "GeneratorMismatchError", "cache_dir", "game_file", "official_data_dir",
           "official_tasks"]

OFFICIAL_SPLITS = ("train", "valid_seen", "valid_unseen")


class GeneratorMismatchError(RuntimeError):
    """A task row was made by another version of the generator than the one installed."""


def cache_dir() -> Path:
    """Where generated games are written (see the module docstring)."""
    if os.environ.get("STARPO_ALFWORLD_CACHE"):
        return Path(os.environ["STARPO_ALFWORLD_CACHE"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "trl_starpo" / "alfworld"


def game_file(task: Mapping[str, Any], root: str | Path | None = None) -> Path:
    """The game file of a task row, writing it first if it is a generated game not yet in the cache.

    Raises:
        GeneratorMismatchError: The row names another generator version, or the rebuilt game differs from the one
            the row was made from (its ``pddl_sha256``).
    """
    if task.get("game_file"):
        return Path(task["game_file"])
    version = int(task.get("generator_version", GENERATOR_VERSION))
    if version != GENERATOR_VERSION:
        raise GeneratorMismatchError(
            f"Task {task.get('task_id')!r} comes from generator version {version}; starpo-alfworld has version "
            f"{GENERATOR_VERSION}. Install the matching starpo-alfworld or regenerate the tasks."
        )
    scene = int(str(task["scene"]).removeprefix("FloorPlan"))
    folder = Path(root or cache_dir()) / f"v{version}" / game_folder(task["task_type"], task["pddl_params"], scene)
    folder = folder / f"trial_starpo_{int(task['seed']):08d}"
    path = folder / "game.tw-pddl"
    if path.is_file():
        return path
    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder) + ".lock"):
        if path.is_file():  # another process wrote it while we waited
            return path
        spec = build_game(int(task["seed"]), scene, task["task_type"])
        problem = problem_text(spec)
        if task.get("pddl_sha256") and pddl_sha256(problem) != task["pddl_sha256"]:
            raise GeneratorMismatchError(
                f"Rebuilding task {task.get('task_id')!r} gave another game than the one it was made from (the "
                "installed alfworld's scene data or rules differ). Regenerate the tasks with this installation."
            )
        walkthrough = task.get("expert_plan") or None
        game = game_data(problem, spec.goal, walkthrough)
        return write_game(folder, problem, traj_data(spec, GENERATOR_VERSION), game)


def official_data_dir() -> Path:
    """ALFWorld's data folder: ``$ALFWORLD_DATA``, else ``~/.cache/alfworld`` (``alfworld-download``'s default)."""
    return Path(os.environ.get("ALFWORLD_DATA") or Path.home() / ".cache" / "alfworld")


def official_tasks(split: str, data_dir: str | Path | None = None):
    """Task rows of the official ALFWorld games of ``split`` (``train``, ``valid_seen``, ``valid_unseen``).

    Walks ``<data_dir>/json_2.1.1/<split>`` as ALFWorld's ``AlfredTWEnv`` does: every ``traj_data.json`` with a
    ``game.tw-pddl`` beside it that ``alfworld-generate`` marked solvable, skipping movable-receptacle and sliced
    tasks. ``data_dir`` defaults to ``official_data_dir()``.

    Returns:
        A ``datasets.Dataset`` with columns ``task_id``, ``split``, ``task_type``, ``scene``, ``pddl_params`` and
        ``game_file``, sorted by ``task_id``.
    """
    import datasets

    if split not in OFFICIAL_SPLITS:
        raise ValueError(f"Unknown ALFWorld split {split!r}; choose one of {', '.join(OFFICIAL_SPLITS)}.")
    root = Path(data_dir or official_data_dir()) / "json_2.1.1" / split
    if not root.is_dir():
        raise FileNotFoundError(
            f"No official ALFWorld games in {root}. Download them with `alfworld-download` (needs the internet) and "
            "point ALFWORLD_DATA at the folder, or use the generated games (source=None)."
        )
    rows = []
    for traj_file in sorted(root.glob("*/*/traj_data.json")):
        folder = traj_file.parent
        game = folder / "game.tw-pddl"
        if "movable" in str(folder) or "Sliced" in str(folder) or not game.is_file():
            continue
        if not json.loads(game.read_text()).get("solvable"):
            continue
        traj = json.loads(traj_file.read_text())
        scene = traj.get("scene", {}).get("scene_num")
        rows.append({
            "task_id": f"{split}/{folder.parent.name}/{folder.name}",
            "split": split,
            "task_type": traj["task_type"],
            "scene": f"FloorPlan{scene}" if scene is not None else "",
            "pddl_params": {key: traj["pddl_params"].get(key, "") for key in
                            ("object_target", "parent_target", "toggle_target", "mrecep_target", "object_sliced")},
            "game_file": str(game),
        })
    return datasets.Dataset.from_list(rows)
