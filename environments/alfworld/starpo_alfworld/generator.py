"""An offline generator of ALFWorld games, following ALFRED's scenes and sampling rules.

A game is drawn deterministically from ``(seed, scene, task_type)``:

1. The scene is one of ALFRED's 120 floor plans with its real receptacles and ids (``world.load_scene``); receptacle
   classes the floor plan lists without an id (stove burners, toilets, coffee machines, ...) get ALFRED-style ids.
   A class with more than ``MAX_PER_RECEPTACLE_CLASS`` instances (some kitchens have 28 cabinets and 27 drawers)
   keeps a random subset of that many: the engine's planner slows down steeply with the number of receptacles
   (about a minute per plan with 50), and so would every step with the expert attached.
2. The goal follows ALFRED's rules: the task type must be valid in the room type (``world.TASK_ROOMS``); the target
   object class is present in the floor plan and, for cleaning / heating / cooling, cleanable / heatable / coolable
   with a sink basin / microwave / fridge in the room; the parent receptacle class can hold it
   (``constants.VAL_RECEPTACLE_OBJECTS``); look-at tasks need a desk lamp.
3. Objects: the target (1-3 instances, 2-4 for pick-two), a desk lamp for look-at tasks, and distractors: each
   other object class of the floor plan with probability ``DISTRACTOR_PROBABILITY``, 1-3 instances. Each instance
   goes into a receptacle that can hold it (receptacle class first, then instance, uniformly); no target starts in
   a receptacle of the parent class, so no game is won at the start. Openable receptacles start closed, the agent
   in the middle of the room.

``generate_split`` draws games for a split and keeps only those the engine's planner expert wins; the splits are
described in ``SPLIT_RULES``.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import queue
import random
import tempfile
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

from .pddl import GameSpec, PlacedObject, game_data, problem_text, task_description, traj_data, write_game
from .world import (
    CLEANABLE,
    COOLABLE,
    HEATABLE,
    LAMP,
    TASK_ROOMS,
    TASK_TYPES,
    Receptacle,
    coordinate,
    can_contain,
    held_out_scenes,
    load_scene,
    room_type,
    scene_numbers,
    synthesized_receptacles,
)

__all__ = [
    "GENERATOR_VERSION",
    "NoGameError",
    "SPLIT_RULES",
    "build_game",
    "generate_split",
    "pddl_sha256",
    "split_scenes",
    "task_row",
]

GENERATOR_VERSION = 1
"""Bumped whenever ``build_game`` would draw a different game from the same arguments."""

DISTRACTOR_PROBABILITY = 0.5
MAX_PER_RECEPTACLE_CLASS = 6
SOLVE_TIMEOUT = 60.0
"""Seconds the planner gets to solve a generated game before the game is dropped."""
_DISTRACTOR_COUNTS = (1, 1, 1, 2, 2, 3)

SPLIT_RULES = {
    "train": "ALFRED's training floor plans (7-30, 207-230, 307-330, 407-430); seeds from 0",
    "valid_seen": "the same training floor plans, new games: seeds from 1,000,000, no game identical to a train game",
    "valid_unseen": "ALFRED's held-out test floor plans (1-6, 201-206, 301-306, 401-406), never used by the other "
    "splits, so every scene, receptacle layout and object arrangement is new; seeds from 2,000,000",
}
SPLIT_FIRST_SEEDS = {"train": 0, "valid_seen": 1_000_000, "valid_unseen": 2_000_000}

_APPLIANCE = {
    "pick_clean_then_place_in_recep": "SinkBasin",
    "pick_heat_then_place_in_recep": "Microwave",
    "pick_cool_then_place_in_recep": "Fridge",
}
_ACTION_OBJECTS = {
    "pick_clean_then_place_in_recep": CLEANABLE,
    "pick_heat_then_place_in_recep": HEATABLE,
    "pick_cool_then_place_in_recep": COOLABLE,
}


class NoGameError(ValueError):
    """The scene cannot host the task type (e.g. no microwave for heating, no desk lamp for looking)."""


def _goal(task_type: str, scene_objects: Sequence[str], receptacle_types: Collection[str], rng: random.Random):
    """Draw ``(object_target, parent_target, toggle_target)`` under ALFRED's rules, or raise ``NoGameError``."""
    appliance = _APPLIANCE.get(task_type)
    if appliance is not None and appliance not in receptacle_types:
        raise NoGameError(f"{task_type} needs a {appliance}.")
    if task_type == "look_at_obj_in_light":
        if LAMP not in scene_objects or not any(can_contain(r, LAMP) for r in receptacle_types):
            raise NoGameError("look_at_obj_in_light needs a desk lamp.")
        targets = [o for o in scene_objects if o != LAMP and any(can_contain(r, o) for r in receptacle_types)]
        if not targets:
            raise NoGameError("nothing to look at")
        return rng.choice(targets), "", LAMP
    allowed = _ACTION_OBJECTS.get(task_type)
    options = {}
    for obj in scene_objects:
        if obj == LAMP or (allowed is not None and obj not in allowed):
            continue
        homes = [r for r in receptacle_types if can_contain(r, obj)]
        parents = [r for r in homes if r != appliance]
        # The target must be able to start somewhere other than a receptacle of the parent class.
        options[obj] = [p for p in parents if any(h != p for h in homes)]
    options = {obj: parents for obj, parents in options.items() if parents}
    if not options:
        raise NoGameError(f"no object and receptacle for {task_type}")
    obj = rng.choice(sorted(options))
    return obj, rng.choice(sorted(options[obj])), ""


def _object_id(kind: str, receptacle: Receptacle, rng: random.Random) -> str:
    x, y, z = (float(v) for v in receptacle.id.split("|")[1:4])
    return "|".join([kind, coordinate(x + rng.uniform(-0.3, 0.3)), coordinate(y + rng.uniform(0.02, 0.2)),
                     coordinate(z + rng.uniform(-0.3, 0.3))])


def build_game(seed: int, scene: int, task_type: str) -> GameSpec:
    """The game drawn from ``(seed, scene, task_type)``; raises ``NoGameError`` when the scene cannot host the task.

    Deterministic across processes, machines and Python versions for a given ``GENERATOR_VERSION`` and ``alfworld``
    release (everything is drawn from one string-seeded ``random.Random``, over sorted collections).
    """
    if task_type not in TASK_TYPES:
        raise ValueError(f"Unknown task type {task_type!r}; choose one of {', '.join(TASK_TYPES)}.")
    if room_type(scene) not in TASK_ROOMS[task_type]:
        raise NoGameError(f"ALFRED does not sample {task_type} in a {room_type(scene)}.")
    rng = random.Random(f"starpo-alfworld/v{GENERATOR_VERSION}/{scene}/{task_type}/{seed}")
    layout = load_scene(scene)
    receptacles = []
    for kind in sorted({r.type for r in layout.receptacles}):
        instances = [r for r in layout.receptacles if r.type == kind]
        if len(instances) > MAX_PER_RECEPTACLE_CLASS:
            instances = sorted(rng.sample(instances, MAX_PER_RECEPTACLE_CLASS), key=lambda r: r.id)
        receptacles.extend(instances)
    receptacles.extend(synthesized_receptacles(layout, rng))
    receptacle_types = sorted({r.type for r in receptacles})
    scene_objects = [o for o in layout.object_types if any(can_contain(r, o) for r in receptacle_types)]
    obj, parent, toggle = _goal(task_type, scene_objects, receptacle_types, rng)
    pddl_params = {"object_target": obj, "parent_target": parent, "toggle_target": toggle, "mrecep_target": "",
                   "object_sliced": False}

    counts = {}
    for kind in scene_objects:
        if kind == obj:
            counts[kind] = rng.randint(2, 4) if task_type == "pick_two_obj_and_place" else rng.randint(1, 3)
        elif kind == toggle:
            counts[kind] = 1
        elif rng.random() < DISTRACTOR_PROBABILITY:
            counts[kind] = rng.choice(_DISTRACTOR_COUNTS)
    objects, taken = [], set()
    for kind, count in counts.items():
        homes = [r for r in receptacles if can_contain(r.type, kind) and not (kind == obj and r.type == parent)]
        home_types = sorted({r.type for r in homes})
        for _ in range(count):
            home_type = rng.choice(home_types)
            home = rng.choice([r for r in homes if r.type == home_type])
            object_id = _object_id(kind, home, rng)
            while object_id in taken:
                object_id = _object_id(kind, home, rng)
            taken.add(object_id)
            objects.append(PlacedObject(object_id, kind, home.id))

    poses = {r.pose for r in receptacles}
    min_x, max_x, min_z, max_z = (round(v / 0.25) for v in layout.bounds)
    agent_pose = (rng.randint(min_x, max_x), rng.randint(min_z, max_z), rng.randrange(4), 30)
    while agent_pose in poses:
        agent_pose = (agent_pose[0] + 1, *agent_pose[1:])
    goal = task_description(task_type, pddl_params, rng.randrange(2))
    return GameSpec(seed, scene, task_type, pddl_params, goal, tuple(receptacles), tuple(objects), agent_pose)


def pddl_sha256(problem: str) -> str:
    """The fingerprint of a game: the SHA-256 of its PDDL problem."""
    return hashlib.sha256(problem.encode("utf-8")).hexdigest()


def split_scenes(split: str) -> tuple[int, ...]:
    """The floor plans a split draws from (see ``SPLIT_RULES``)."""
    if split not in SPLIT_RULES:
        raise ValueError(f"Unknown split {split!r}; choose one of {', '.join(SPLIT_RULES)}.")
    held_out = held_out_scenes()
    return tuple(s for s in scene_numbers() if (s in held_out) == (split == "valid_unseen"))


def task_row(spec: GameSpec, split: str, index: int, expert_plan: Sequence[str]) -> dict[str, Any]:
    """The task row of a generated game: what ``reset`` needs to rebuild it, and what describes it."""
    return {
        "task_id": f"alfworld-{split}-{index:05d}",
        "split": split,
        "task_type": spec.task_type,
        "scene": f"FloorPlan{spec.scene}",
        "room_type": room_type(spec.scene),
        "seed": spec.seed,
        "generator_version": GENERATOR_VERSION,
        "goal": spec.goal,
        "pddl_params": dict(spec.pddl_params),
        "num_receptacles": len(spec.receptacles),
        "num_objects": len(spec.objects),
        "expert_plan": list(expert_plan),
        "pddl_sha256": pddl_sha256(problem_text(spec)),
    }


def solve(spec: GameSpec, timeout: float = SOLVE_TIMEOUT) -> list[str] | None:
    """Write ``spec`` to a temporary folder and let the engine's planner expert play it (``engine.play_expert``) in a
    child process; the winning commands, or ``None`` if it does not win within ``timeout`` seconds."""
    problem = problem_text(spec)
    with tempfile.TemporaryDirectory(prefix="starpo-alfworld-") as folder:
        game_file = write_game(Path(folder) / spec.trial, problem, traj_data(spec, GENERATOR_VERSION),
                               game_data(problem, spec.goal, None))
        context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else None)
        results = context.Queue()
        worker = context.Process(target=_play_expert_into, args=(str(game_file), results), daemon=True)
        worker.start()
        try:
            return results.get(timeout=timeout)
        except queue.Empty:
            return None
        finally:
            worker.kill()
            worker.join()


def _play_expert_into(game_file: str, results) -> None:
    from .engine import play_expert

    try:
        results.put(play_expert(game_file))
    except Exception:  # an engine error means the game is not playable
        results.put(None)


def generate_split(
    split: str,
    size: int,
    first_seed: int | None = None,
    exclude: Collection[str] = (),
    solver: Callable[[GameSpec], list[str] | None] = solve,
    progress: Callable[[int, int], None] | None = None,
) -> list[dict[str, Any]]:
    """Task rows of ``size`` solvable games for ``split``, task types in turn (so balanced).

    Seed ``s`` (from ``first_seed`` on, ``SPLIT_FIRST_SEEDS[split]`` by default) picks a floor plan of the split that
    the next task type may use, then ``build_game(s, scene, task_type)``; a seed whose game cannot be built, repeats
    an earlier game or one whose fingerprint is in ``exclude``, or that the planner expert does not win, is skipped.
    """
    first_seed = SPLIT_FIRST_SEEDS[split] if first_seed is None else first_seed
    scenes = split_scenes(split)
    seen = set(exclude)
    rows: list[dict[str, Any]] = []
    seed = first_seed
    while len(rows) < size:
        task_type = TASK_TYPES[len(rows) % len(TASK_TYPES)]
        candidates = [s for s in scenes if room_type(s) in TASK_ROOMS[task_type]]
        scene = random.Random(f"starpo-alfworld/v{GENERATOR_VERSION}/scene/{seed}").choice(candidates)
        seed += 1
        try:
            spec = build_game(seed - 1, scene, task_type)
        except NoGameError:
            continue
        fingerprint = pddl_sha256(problem_text(spec))
        if fingerprint in seen:
            continue
        plan = solver(spec)
        if not plan:
            continue
        seen.add(fingerprint)
        rows.append(task_row(spec, split, len(rows), plan))
        if progress is not None:
            progress(len(rows), size)
    return rows
