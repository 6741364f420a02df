"""Turning task rows into game files: generated games in a cache folder, official ALFWorld games where they lie.

A generated task row carries ``seed``, ``scene``, ``task_type`` and ``generator_version``; the first ``reset`` on it
rebuilds the game with ``generator.build_game`` and writes it, in ALFWorld's layout, under the cache folder::

    <cache>/<generator_version>/<task_type>-<Object>-None-<Parent>-<scene>/trial_starpo_<seed>/game.tw-pddl

A file lock makes this safe when several processes (``accelerate launch``, data-loader workers) reach the same game
at once. The cache folder is ``$STARPO_ALFWORLD_CACHE``, else ``$XDG_CACHE_HOME/trl_starpo/alfworld``, else
``~/.cache/trl_starpo/alfworld``.

A row with a ``game_file`` (official ALFWorld games, see ``official_tasks``) is played from that file as it is.

Task rows are data: before a generated row names a folder, its task type, scene, seed and ``pddl_params`` are checked
against ALFWorld's vocabularies, and the folder must resolve inside the cache; a ``game_file`` must be a
``game.tw-pddl`` file.
"""

from __future__ import annotations

import json
import numbers
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from alfworld.gen import constants
from filelock import FileLock

from .generator import GENERATOR_VERSION, build_game, pddl_sha256
from .pddl import game_data, game_folder, problem_text, traj_data, write_game
from .world import TASK_TYPES, scene_numbers

__all__ = ["OFFICIAL_SPLITS", "PDDL_PARAMS", "GeneratorMismatchError", "cache_dir", "checked_generated_task",
           "game_file", "official_data_dir", "official_tasks"]

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
        path = Path(task["game_file"])
        if path.name != "game.tw-pddl":
            raise ValueError(f"Task {task.get('task_id')!r}: game_file must be a game.tw-pddl file, got {str(path)!r}.")
        return path
    version = int(task.get("generator_version", GENERATOR_VERSION))
    if version != GENERATOR_VERSION:
        raise GeneratorMismatchError(
            f"Task {task.get('task_id')!r} comes from generator version {version}; starpo-alfworld has version "
            f"{GENERATOR_VERSION}. Install the matching starpo-alfworld or regenerate the tasks."
        )
    seed, scene = checked_generated_task(task)
    root = Path(root or cache_dir())
    folder = root / f"v{version}" / game_folder(task["task_type"], task["pddl_params"], scene)
    folder = folder / f"trial_starpo_{seed:08d}"
    if not folder.resolve().is_relative_to(root.resolve()):
        raise ValueError(f"Task {task.get('task_id')!r} names a game folder outside the cache {str(root)!r}.")
    path = folder / "game.tw-pddl"
    if path.is_file():
        return path
    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder) + ".lock"):
        if path.is_file():  # another process wrote it while we waited
            return path
        spec = build_game(seed, scene, task["task_type"])
        problem = problem_text(spec)
        if task.get("pddl_sha256") and pddl_sha256(problem) != task["pddl_sha256"]:
            raise GeneratorMismatchError(
                f"Rebuilding task {task.get('task_id')!r} gave another game than the one it was made from (the "
                "installed alfworld's scene data or rules differ). Regenerate the tasks with this installation."
            )
        walkthrough = task.get("expert_plan") or None
        game = game_data(problem, spec.goal, walkthrough)
        return write_game(folder, problem, traj_data(spec, GENERATOR_VERSION), game)


PDDL_PARAMS = ("object_target", "parent_target", "toggle_target", "mrecep_target")
"""The ``pddl_params`` that name ALFRED object classes (and so the game's folder)."""


def checked_generated_task(task: Mapping[str, Any]) -> tuple[int, int]:
    """``(seed, scene number)`` of a generated task row, after checking its fields against ALFWorld's vocabularies:
    a known task type and floor plan, a non-negative integer seed, ``pddl_params`` that are ALFRED object classes.

    Raises:
        ValueError: Naming the field and what it may be.
    """
    name = f"Task {task.get('task_id')!r}"
    if task.get("task_type") not in TASK_TYPES:
        raise ValueError(f"{name}: task_type must be one of {', '.join(TASK_TYPES)}, got {task.get('task_type')!r}.")
    scene, seed = str(task.get("scene", "")).removeprefix("FloorPlan"), task.get("seed")
    if not scene.isdigit() or int(scene) not in scene_numbers():
        raise ValueError(f"{name}: scene must be an ALFWorld floor plan, e.g. 'FloorPlan1', got {task.get('scene')!r}.")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"{name}: seed must be a non-negative integer, got {seed!r}.")
    params = task.get("pddl_params")
    if not isinstance(params, Mapping):
        raise ValueError(f"{name}: pddl_params must be a mapping of {', '.join(PDDL_PARAMS)}.")
    for key in PDDL_PARAMS:
        if params.get(key) not in ("", None, *constants.OBJECTS):
            raise ValueError(f"{name}: pddl_params[{key!r}] must be an ALFRED object class or '', got {params[key]!r}.")
    return int(seed), int(scene)


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
