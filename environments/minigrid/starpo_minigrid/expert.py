"""Scripted experts that read the engine's state: minigrid's BabyAI bot, and a planner for goal-square levels.

``expert_for(env)`` picks one for a freshly reset engine. Both answer ``action()`` (the next minigrid action, or
``None`` when they have no plan) and are told every action the agent actually took with ``observe(action)``, so that
they advise whatever the agent does (as an oracle for DAgger would), not only on their own trajectories.
"""

from __future__ import annotations

from collections import deque
from typing import Protocol

from minigrid.core.actions import Actions
from minigrid.core.constants import DIR_TO_VEC
from minigrid.core.world_object import WorldObj
from minigrid.minigrid_env import MiniGridEnv
from minigrid.utils.baby_ai_bot import BabyAIBot, DisappearedBoxError

__all__ = ["BabyAIExpert", "Expert", "GoalExpert", "expert_for", "plan_to_goal"]

# The bot signals "I cannot help from here" with these: an assertion in a subgoal (e.g. asked to pick up an object
# while the agent already carries another) or a box the agent opened.
_BOT_GIVES_UP = (AssertionError, DisappearedBoxError)

# A planner state: agent column, row and direction, the carried object as (type, color), and the cells made passable
# since the plan started (keys picked up, doors opened).
_State = tuple[int, int, int, tuple[str, str] | None, frozenset[tuple[int, int]]]


class Expert(Protocol):
    def action(self) -> Actions | None:
        """The next action from the current state, ``None`` when there is no plan."""

    def observe(self, action: Actions) -> None:
        """Take note of the action the agent took (after the engine stepped, while the episode goes on)."""


def plan_to_goal(env: MiniGridEnv) -> Actions | None:
    """The first action of a shortest plan that walks the agent of ``env`` onto a goal square, or ``None``.

    Breadth-first search over the agent's position and direction, the key it carries and the doors it opened: the
    agent may pick up keys, open closed doors, unlock locked doors with a key of their color, and walk on empty
    cells, goals and open doors; never on lava. Dropping is never needed in the levels this is used for.
    """
    grid = env.grid
    carrying = (env.carrying.type, env.carrying.color) if env.carrying is not None else None
    start: _State = (int(env.agent_pos[0]), int(env.agent_pos[1]), int(env.agent_dir), carrying, frozenset())
    first_action: dict[_State, Actions | None] = {start: None}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        x, y, direction, carried, cleared = state
        dx, dy = DIR_TO_VEC[direction]
        front = (x + int(dx), y + int(dy))
        cell = grid.get(*front) if 0 <= front[0] < grid.width and 0 <= front[1] < grid.height else None
        if front in cleared:
            cell = None

        successors: list[tuple[Actions, _State]] = [
            (Actions.left, (x, y, (direction - 1) % 4, carried, cleared)),
            (Actions.right, (x, y, (direction + 1) % 4, carried, cleared)),
        ]
        first = first_action[state]
        if cell is not None and cell.type == "goal":
            return Actions.forward if first is None else first
        if cell is None or cell.type == "floor" or (cell.type == "door" and cell.is_open):
            successors.append((Actions.forward, (*front, direction, carried, cleared)))
        elif cell.type == "key" and carried is None:
            successors.append((Actions.pickup, (x, y, direction, ("key", cell.color), cleared | {front})))
        elif cell.type == "door" and (not cell.is_locked or carried == ("key", cell.color)):
            successors.append((Actions.toggle, (x, y, direction, carried, cleared | {front})))

        for action, successor in successors:
            if successor not in first_action:
                first_action[successor] = action if first is None else first
                queue.append(successor)
    return None


class GoalExpert:
    """Replans with ``plan_to_goal`` from the current state at every call; it keeps no memory."""

    def __init__(self, env: MiniGridEnv):
        self.env = env

    def action(self) -> Actions | None:
        return plan_to_goal(self.env)

    def observe(self, action: Actions) -> None:
        """Nothing to update: every plan starts from the current grid."""


class BabyAIExpert:
    """minigrid's ``BabyAIBot`` in advising mode, told of every action the agent takes.

    The bot starts on the first ``action()`` call and from then on replans after each step. It handles the agent's
    detours but not a load it did not plan for, so a fresh bot starts from the current state when the agent picks up
    or drops something against the advice, or when the bot gives up (e.g. after the agent opened a box). A fresh bot
    starts empty-handed: while the agent carries something, the expert first has it put that down (``drop`` when
    the cell ahead is free, else ``turn left``).
    """

    def __init__(self, env: MiniGridEnv):
        self.env = env
        self._bot: BabyAIBot | None = None
        self._next: Actions | None = None
        self._load: WorldObj | None = None

    def action(self) -> Actions | None:
        if self._bot is None:
            if self.env.carrying is not None:
                return Actions.drop if self.env.grid.get(*self.env.front_pos) is None else Actions.left
            self._bot, self._load = BabyAIBot(self.env), None
            self._replan(None)
        return None if self._next == Actions.done else self._next

    def observe(self, action: Actions) -> None:
        if self._bot is None:
            return
        if action != self._next and self.env.carrying is not self._load:
            self._bot, self._next = None, None
        else:
            self._replan(action)
        self._load = self.env.carrying

    def _replan(self, action_taken: Actions | None) -> None:
        try:
            self._next = self._bot.replan(action_taken)
        except _BOT_GIVES_UP:
            self._bot, self._next = None, None


def expert_for(env: MiniGridEnv) -> Expert | None:
    """The expert for a freshly reset engine: the BabyAI bot for BabyAI levels, the goal planner for levels with a
    goal square, ``None`` otherwise."""
    if hasattr(env, "instrs"):
        return BabyAIExpert(env)
    if any(cell is not None and cell.type == "goal" for cell in env.grid.grid):
        return GoalExpert(env)
    return None
