"""Writing a game in ALFWorld's own file format.

An ALFWorld game is a folder ``<task_type>-<Object>-<MovableRecep>-<Parent>-<scene>/trial_<id>/`` holding

- ``initial_state.pddl``: the ALFRED planning problem (domain ``alfred``): objects, receptacles and locations with
  ALFRED's mangled ids (``Apple|+01.00|+00.95|-00.30`` is written ``Apple_bar__plus_01_dot_00_bar_...``), the
  initial facts and the task's goal from ``alfworld.gen.goal_library``;
- ``traj_data.json``: the task type and its ``pddl_params`` (what ALFWorld's own loaders and hand-coded expert read);
- ``game.tw-pddl``: what ``alfworld-generate`` writes and TextWorld's ``PddlEnv`` loads: the packaged domain
  (``alfred.pddl``), the packaged grammar (``alfred.twl2``) with the task description substituted for
  ``UNKNOWN GOAL``, the problem, and the planner's walkthrough.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import alfworld.gen.goal_library as goal_library
from alfworld.gen import constants
from alfworld.info import ALFRED_PDDL_PATH, ALFRED_TWL2_PATH

from .world import (
    CLEANABLE,
    COOLABLE,
    HEATABLE,
    LAMP,
    MOVABLE_RECEPTACLES,
    OPENABLE,
    SLICEABLE,
    STATIC_RECEPTACLES,
    Receptacle,
    can_contain,
)

__all__ = ["GameSpec", "PlacedObject", "game_data", "game_folder", "mangle", "problem_text", "task_description",
           "traj_data", "write_game"]

_MANGLING = (("-", "_minus_"), ("|", "_bar_"), ("+", "_plus_"), (".", "_dot_"), (",", "_comma_"))


def mangle(alfred_id: str) -> str:
    """ALFRED's id escaping for PDDL (``PlannedGameState.fix_pddl_str_chars``): ``|`` -> ``_bar_``, ``+`` ->
    ``_plus_``, ``-`` -> ``_minus_``, ``.`` -> ``_dot_``, ``,`` -> ``_comma_``."""
    for char, escaped in _MANGLING:
        alfred_id = alfred_id.replace(char, escaped)
    return alfred_id


def location(pose: Sequence[int]) -> str:
    """The PDDL location of an agent pose (``loc|x|z|rotation|horizon``, mangled)."""
    return mangle("loc|" + "|".join(str(int(value)) for value in pose))


@dataclass(frozen=True)
class PlacedObject:
    """An object instance: its ALFRED id, its class and the id of the receptacle it starts in."""

    id: str
    type: str
    receptacle: str


@dataclass(frozen=True)
class GameSpec:
    """Everything that defines one generated game; ``problem_text`` turns it into ALFWorld's PDDL problem."""

    seed: int
    scene: int
    task_type: str
    pddl_params: Mapping[str, Any]
    goal: str
    receptacles: tuple[Receptacle, ...]
    objects: tuple[PlacedObject, ...]
    agent_pose: tuple[int, int, int, int]

    @property
    def trial(self) -> str:
        return f"trial_starpo_{self.seed:08d}"


def task_description(task_type: str, pddl_params: Mapping[str, Any], template: int) -> str:
    """ALFWorld's templated task description (``get_templated_task_desc``) with the ``template``-th template."""
    templates = goal_library.gdict[task_type]["templates"]
    return templates[template % len(templates)].format(
        obj=pddl_params["object_target"].lower(),
        recep=pddl_params["parent_target"].lower(),
        toggle=pddl_params["toggle_target"].lower(),
        mrecep=pddl_params["mrecep_target"].lower(),
    )


def goal_pddl(task_type: str, pddl_params: Mapping[str, Any]) -> str:
    """The ``(:goal ...)`` block of ``alfworld.gen.goal_library`` for the task (closing the problem too)."""
    goal = goal_library.gdict[task_type]["pddl"].format(
        obj=pddl_params["object_target"],
        recep=pddl_params["parent_target"],
        toggle=pddl_params["toggle_target"],
        mrecep=pddl_params["mrecep_target"],
    )
    return goal.replace("#", "-")


def _facts(name: str, *argument_lists: Iterable[str]) -> list[str]:
    return [f"        ({name} {' '.join(arguments)})" for arguments in zip(*argument_lists)]


def problem_text(spec: GameSpec) -> str:
    """The ALFRED PDDL problem of ``spec``, laid out like ALFWorld's ``initial_state.pddl``."""
    receptacles = sorted(spec.receptacles, key=lambda r: r.id)
    objects = sorted(spec.objects, key=lambda o: o.id)
    where = {r.id: r for r in receptacles}
    object_types = sorted(set(constants.OBJECTS_SET) - STATIC_RECEPTACLES)
    receptacle_types = sorted(STATIC_RECEPTACLES | {r.type for r in receptacles})
    locations = sorted({location(r.pose) for r in receptacles} | {location(spec.agent_pose)})

    def ids(items: Iterable[Any]) -> list[str]:
        return [mangle(item.id) for item in items]

    def objects_of(kinds: Iterable[str]) -> list[PlacedObject]:
        kinds = set(kinds)
        return [o for o in objects if o.type in kinds]

    containment = sorted(
        (r_type, o_type)
        for r_type in {r.type for r in receptacles}
        for o_type in {o.type for o in objects}
        if can_contain(r_type, o_type)
    )
    cool_from_start = [o for o in objects if o.type == spec.pddl_params["object_target"]
                       and where[o.receptacle].type == "Fridge"]
    lines = [
        f"(define (problem plan_{spec.trial})",
        "(:domain alfred)",
        "(:objects",
        "        agent1 - agent",
        *[f"        {t}Type - otype" for t in object_types],
        *[f"        {t}Type - rtype" for t in receptacle_types],
        *[f"        {name} - object" for name in ids(objects)],
        *[f"        {name} - receptacle" for name in ids(receptacles)],
        *[f"        {name} - location" for name in locations],
        "        )",
        "",
        "(:init",
        *_facts("receptacleType", ids(receptacles), [f"{r.type}Type" for r in receptacles]),
        *_facts("objectType", ids(objects), [f"{o.type}Type" for o in objects]),
        *_facts("canContain", [f"{r}Type" for r, _ in containment], [f"{o}Type" for _, o in containment]),
        *_facts("pickupable", ids(o for o in objects if o.type != LAMP)),
        *_facts("isReceptacleObject", ids(objects_of(MOVABLE_RECEPTACLES))),
        *_facts("openable", ids(r for r in receptacles if r.type in OPENABLE)),
        f"        (atLocation agent1 {location(spec.agent_pose)})",
        *_facts("cleanable", ids(objects_of(CLEANABLE))),
        *_facts("heatable", ids(objects_of(HEATABLE))),
        *_facts("coolable", ids(objects_of(COOLABLE))),
        *_facts("isCool", ids(cool_from_start)),
        *_facts("toggleable", ids(objects_of({LAMP}))),
        *_facts("sliceable", ids(objects_of(SLICEABLE))),
        *_facts("inReceptacle", ids(objects), [mangle(o.receptacle) for o in objects]),
        *_facts("receptacleAtLocation", ids(receptacles), [location(r.pose) for r in receptacles]),
        *_facts("objectAtLocation", ids(objects), [location(where[o.receptacle].pose) for o in objects]),
        "        )",
        "",
        goal_pddl(spec.task_type, spec.pddl_params).strip("\n"),
        "",
    ]
    return "\n".join(lines)


def traj_data(spec: GameSpec, generator_version: int) -> dict[str, Any]:
    """The ``traj_data.json`` of a generated game: the fields ALFWorld reads, and where the game came from."""
    return {
        "task_id": spec.trial,
        "task_type": spec.task_type,
        "pddl_params": dict(spec.pddl_params),
        "scene": {"floor_plan": f"FloorPlan{spec.scene}", "scene_num": spec.scene, "random_seed": spec.seed},
        "generator": {"name": "starpo-alfworld", "version": generator_version, "goal": spec.goal},
    }


@cache
def _domain() -> str:
    return Path(ALFRED_PDDL_PATH).read_text()


@cache
def _grammar() -> str:
    return Path(ALFRED_TWL2_PATH).read_text()


def game_data(problem: str, goal: str, walkthrough: Sequence[str] | None) -> dict[str, Any]:
    """The content of ``game.tw-pddl``, as ``alfworld-generate`` writes it, with the task description ``goal``."""
    return {
        "pddl_domain": _domain(),
        "grammar": _grammar().replace("UNKNOWN GOAL", goal),
        "pddl_problem": problem,
        "solvable": walkthrough is not None,
        "walkthrough": list(walkthrough) if walkthrough is not None else None,
    }


def game_folder(task_type: str, pddl_params: Mapping[str, Any], scene: int) -> str:
    """ALFRED's task folder name: ``<task_type>-<Object>-<MovableRecep>-<Parent>-<scene>``."""
    parts = [pddl_params["object_target"] or "None", pddl_params["mrecep_target"] or "None",
             pddl_params["parent_target"] or pddl_params["toggle_target"] or "None"]
    return "-".join([task_type, *parts, str(scene)])


def write_game(folder: Path, problem: str, traj: Mapping[str, Any], game: Mapping[str, Any]) -> Path:
    """Write the three files of a game into ``folder`` (``game.tw-pddl`` last); returns the game file."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in (("initial_state.pddl", problem), ("traj_data.json", json.dumps(traj, indent=2)),
                       ("game.tw-pddl", json.dumps(game))):
        partial = folder / f".{name}.partial"
        partial.write_text(text)
        partial.replace(folder / name)
    return folder / "game.tw-pddl"
