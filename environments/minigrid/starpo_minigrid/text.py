"""The text interface: BabyAI-Text descriptions of the agent's view, and actions as words.

The descriptions follow BabyAI-Text (Carta et al., 2023, "Grounding Large Language Models in Interactive Environments
with Online Reinforcement Learning"): one sentence per wall the agent faces straight ahead, to its left or to its
right, one per object in its partial view, placed relative to the agent ("You see a red key 2 steps left and 1 step
forward"), and what it carries.
"""

from __future__ import annotations

from minigrid.core.actions import Actions
from minigrid.core.world_object import WorldObj
from minigrid.minigrid_env import MiniGridEnv

__all__ = ["ACTIONS", "describe", "object_name", "parse_action", "relative_position"]

ACTIONS = ("turn left", "turn right", "go forward", "pick up", "drop", "toggle")
"""The word actions, in the order of minigrid's ``Actions`` (0-5); its ``done`` action is a no-op and not offered."""

_ACTION_IDS = {"".join(word.split()): Actions(index) for index, word in enumerate(ACTIONS)}

# Straight lines from the agent along which a wall is reported, as (name, lateral step, forward step) in the
# agent's view grid, where forward is towards row 0.
_WALL_LINES = (("forward", 0, -1), ("left", -1, 0), ("right", 1, 0))


def parse_action(text: str) -> Actions | None:
    """The minigrid action a word action names, ignoring case and whitespace (``" Pick  UP"``, ``"pickup"``)."""
    return _ACTION_IDS.get("".join(text.split()).lower())


def _steps(count: int) -> str:
    return f"{count} step{'' if count == 1 else 's'}"


def relative_position(right: int, forward: int) -> str:
    """Where a cell lies from the agent: ``"2 steps left and 1 step forward"``, ``"3 steps forward"``."""
    parts = []
    if right:
        parts.append(f"{_steps(abs(right))} {'right' if right > 0 else 'left'}")
    if forward or not parts:
        parts.append(f"{_steps(forward)} forward")
    return " and ".join(parts)


def object_name(obj: WorldObj) -> str:
    """An object with its article and color (``"a red key"``); doors with their state, lava without a color."""
    if obj.type == "door":
        state = "open" if obj.is_open else "locked" if obj.is_locked else "closed"
        return f"{'an' if state == 'open' else 'a'} {state} {obj.color} door"
    if obj.type == "lava":
        return "lava"
    return f"a {obj.color} {obj.type}"


def describe(env: MiniGridEnv) -> list[str]:
    """The BabyAI-Text sentences for what the agent of ``env`` carries and sees in its partial view.

    Sentences come in this order: what the agent carries; the nearest wall straight ahead, to the left and to the
    right, each only when no object stands between it and the agent; then every visible object, nearest first (city
    block distance, then left to right, then near to far). Cells hidden behind walls or closed doors are not seen.
    """
    grid, visible = env.gen_obs_grid()
    size = env.agent_view_size
    agent_x, agent_y = size // 2, size - 1

    sentences = []
    if env.carrying is not None:
        sentences.append(f"You carry {object_name(env.carrying)}")

    for direction, step_x, step_y in _WALL_LINES:
        x, y, distance = agent_x + step_x, agent_y + step_y, 1
        while 0 <= x < size and 0 <= y < size and visible[x, y]:
            cell = grid.get(x, y)
            if cell is not None:
                if cell.type == "wall":
                    sentences.append(f"You see a wall {_steps(distance)} {direction}")
                break
            x, y, distance = x + step_x, y + step_y, distance + 1

    seen = []
    for x in range(size):
        for y in range(size):
            cell = grid.get(x, y)
            if not visible[x, y] or cell is None or cell.type == "wall" or (x, y) == (agent_x, agent_y):
                continue
            right, forward = x - agent_x, agent_y - y
            seen.append((abs(right) + forward, right, forward, cell))
    for _, right, forward, cell in sorted(seen, key=lambda item: item[:3]):
        sentences.append(f"You see {object_name(cell)} {relative_position(right, forward)}")

    return sentences or ["You see no walls and no objects"]
