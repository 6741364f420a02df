"""The expert's thinking: what it goes for next, where that lies from the agent, and its plan to get there.

A demonstration turn of an SFT warm start reads, for instance::

    <think>Next: reach the green goal, 1 step right and 3 steps forward. Plan: go forward 3 times, turn right,
    go forward.</think><answer>go forward || go forward || go forward</answer>

The target is the first thing the expert's plan acts on: the object it picks up, the door it opens, the cell it
drops its load on, or the goal (or object) whose reaching completes the mission. A target the agent sees is named
as the observation names it and placed as the observation places things, relative to the agent; one out of view is
named by its kind alone ("a key", "the goal") and not placed, and only when the mission names that kind; otherwise
the turn is "explore". So the thinking tells nothing the agent could not see or read (the choice of target and the
plan are still the expert's, which sees the whole grid). The plan is the
expert's actions up to the target, consecutive repeats counted, so a turn's actions are the plan's first ones;
where the target is closer than a turn's actions reach, the turn goes on toward the next one.
"""

from __future__ import annotations

import copy
import re
from typing import TYPE_CHECKING

import numpy as np
from minigrid.core.world_object import WorldObj

from .text import object_name, relative_position

if TYPE_CHECKING:
    from . import MiniGridTextEnv

__all__ = ["PLAN_LIMIT", "expert_thinking", "summarize_plan"]

PLAN_LIMIT = 12
"""The most actions a plan looks ahead (the rollouts of the learning benchmark allow 12 a trajectory)."""

_VERBS = {"pick up": "pick up", "toggle": "open", "drop": "drop"}


def summarize_plan(actions: list[str]) -> str:
    """Actions joined with commas, consecutive repeats counted: ``"go forward 3 times, turn right, go forward"``."""
    runs: list[list] = []
    for action in actions:
        if runs and runs[-1][0] == action:
            runs[-1][1] += 1
        else:
            runs.append([action, 1])
    return ", ".join(action if count == 1 else f"{action} {count} times" for action, count in runs)


def _the(obj: WorldObj) -> str:
    return re.sub(r"^an? ", "the ", object_name(obj))


def _kind(obj: WorldObj) -> str:
    """An object as named before it is seen: by its kind, without the color or state only a look would tell."""
    return "the goal" if obj.type == "goal" else f"a {obj.type}"


def _where(env: MiniGridTextEnv, position: tuple[int, int]) -> str | None:
    """``position`` relative to the agent as the observation words it, or ``None`` when the agent does not see it."""
    engine = env.engine
    view = engine.relative_coords(*position)
    if view is None or not engine.gen_obs_grid()[1][view]:
        return None
    offset = np.asarray(position) - engine.agent_pos
    return relative_position(int(offset @ engine.right_vec), int(offset @ engine.dir_vec))


def expert_thinking(env: MiniGridTextEnv) -> str:
    """The thinking behind ``env.expert_action()``: the next target, where it lies, and the plan to it.

    The plan is played on a copy of ``env``, so ``env`` does not change. ``"Next: explore."`` stands for a plan that
    acts on nothing within ``PLAN_LIMIT`` actions (or whose episode ends first); an expert with no action gets
    ``"I have no plan."``.
    """
    shadow = copy.deepcopy(env)
    actions: list[str] = []
    target: tuple[str, WorldObj, tuple[int, int]] | None = None
    while len(actions) < PLAN_LIMIT and (action := shadow.expert_action()) is not None:
        engine = shadow.engine
        front = tuple(int(v) for v in engine.front_pos)
        ahead, carried = engine.grid.get(*front), engine.carrying
        actions.append(action)
        acted_on = carried if action == "drop" else ahead
        if action in _VERBS and acted_on is not None:
            target = (_VERBS[action], acted_on, front)
            break
        _, _, terminated, truncated, info = shadow.step(action)
        if info["success"]:
            here = engine.grid.get(*engine.agent_pos)
            if here is not None and here.type == "goal":
                target = ("reach", here, tuple(int(v) for v in engine.agent_pos))
            else:
                front = tuple(int(v) for v in engine.front_pos)
                target = ("go to", engine.grid.get(*front), front)
            break
        if terminated or truncated:
            break
    if not actions:
        return "I have no plan."
    if target is None or target[1] is None:
        return f"Next: explore. Plan: {summarize_plan(actions)}."
    verb, obj, position = target
    where = _where(env, position)
    if where is None and verb != "drop" and not re.search(rf"\b{obj.type}\b", env.engine.mission):
        return f"Next: explore. Plan: {summarize_plan(actions)}."  # the mission does not tell of such a thing
    if verb == "drop":  # the position is the cell the load goes to, not the load's
        goal = f"drop {_the(obj)}" + ("" if where is None else f" on the cell {where}")
    else:
        goal = f"{verb} {_kind(obj)}, not in view" if where is None else f"{verb} {_the(obj)}, {where}"
    return f"Next: {goal}. Plan: {summarize_plan(actions)}."
