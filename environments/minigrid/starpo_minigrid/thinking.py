"""The expert's thinking: what it goes for next, where that lies from the agent, and its plan to get there.

A demonstration turn of an SFT warm start reads, for instance::

    <think>Next: reach the green goal, 1 step right and 3 steps forward. Plan: go forward 3 times, turn right,
    go forward.</think><answer>go forward || go forward || go forward</answer>

The target is the first thing the expert's plan acts on: the object it picks up, the door it opens, the cell it
drops its load on, or the goal (or object) whose reaching completes the mission. Its position is given as the
observation gives positions, relative to the agent, when the agent sees it; a target out of view is named without
a position, so the thinking never tells what the agent cannot see. The plan is the expert's actions up to the
target, consecutive repeats counted, which makes the answer's actions a copy of the plan's first ones.
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

    The plan is played on a copy of ``env``, so ``env`` does not change. ``"Next: explore."`` stands for a target
    more than ``PLAN_LIMIT`` actions away; an expert with no action gets ``"I have no plan."``.
    """
    shadow = copy.deepcopy(env)
    actions: list[str] = []
    target: tuple[str, WorldObj, tuple[int, int]] | None = None
    while len(actions) < PLAN_LIMIT and (action := shadow.expert_action()) is not None:
        engine = shadow.engine
        front = tuple(int(v) for v in engine.front_pos)
        ahead, carried = engine.grid.get(*front), engine.carrying
        actions.append(action)
        if action in _VERBS and (ahead or carried) is not None:
            target = (_VERBS[action], ahead if action != "drop" else carried, front)
            break
        *_, info = shadow.step(action)
        if info["success"]:
            here = engine.grid.get(*engine.agent_pos)
            if here is not None and here.type == "goal":
                target = ("reach", here, tuple(int(v) for v in engine.agent_pos))
            else:
                front = tuple(int(v) for v in engine.front_pos)
                target = ("go to", engine.grid.get(*front), front)
            break
        if shadow._done:
            break
    if not actions:
        return "I have no plan."
    if target is None or target[1] is None:
        return f"Next: explore. Plan: {summarize_plan(actions)}."
    verb, obj, position = target
    where = _where(env, position)
    place = "not in view" if where is None else where
    return f"Next: {verb} {_the(obj)}, {place}. Plan: {summarize_plan(actions)}."
