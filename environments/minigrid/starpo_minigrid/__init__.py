"""MiniGrid and BabyAI as text environments for StarPO, running the real ``minigrid`` engine.

The agent completes a mission ("use the key to open the door and then get to the goal", "pick up the yellow key") in
a partially observed grid world. Every turn it reads the mission and a BabyAI-Text description of its egocentric
view (``starpo_minigrid.text``), and acts with words ("turn left", "go forward", "pick up", ...). Rewards and episode
ends are minigrid's own. A scripted expert (``starpo_minigrid.expert``: minigrid's BabyAI bot, or a planner for
goal-square levels) solves every shipped task; the task splits live in ``data/`` and are rebuilt with
``python -m starpo_minigrid``.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import io
import itertools
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from minigrid.minigrid_env import MiniGridEnv

from trl_starpo.envs import (
    TextEnvironment, load_task_dataset, parse_task_split_args, split_of_content, write_task_splits,
)

from .expert import Expert, expert_for
from .text import ACTIONS, describe, parse_action
from .thinking import expert_thinking

__all__ = [
    "ACTIONS",
    "ENV_IDS",
    "LONG_DATA_DIR",
    "LONG_ENV_IDS",
    "LONG_MAX_EXPERT_STEPS",
    "MiniGridTextEnv",
    "check_env_id",
    "describe",
    "expert_solution",
    "generate_tasks",
    "load_environment",
    "load_tasks",
    "main",
]

ENV_IDS = (
    "MiniGrid-Empty-Random-5x5-v0",
    "MiniGrid-Empty-Random-6x6-v0",
    "MiniGrid-DoorKey-5x5-v0",
    "MiniGrid-DoorKey-6x6-v0",
    "MiniGrid-LavaGapS6-v0",
    "BabyAI-GoToObj-v0",
    "BabyAI-GoToLocal-v0",
    "BabyAI-PickupLoc-v0",
    "BabyAI-PutNextLocal-v0",
    "BabyAI-OpenRedDoor-v0",
)
"""The levels of the shipped task splits: small, single-goal, and all solved by the scripted expert."""

LONG_ENV_IDS = (
    "BabyAI-UnlockLocal-v0",
    "BabyAI-UnlockPickup-v0",
    "BabyAI-FindObjS5-v0",
    "BabyAI-BlockedUnlockPickup-v0",
    "BabyAI-KeyCorridorS3R2-v0",
)
"""The levels of the long task set: keys, doors, boxes in the way and objects in other rooms, whose expert solutions
take up to 40 steps (``LONG_MAX_EXPERT_STEPS``), 24 on average, for 50-turn episodes under a bounded history window."""

DATA_DIR = Path(__file__).parent / "data"
LONG_DATA_DIR = DATA_DIR / "long"
LONG_MAX_EXPERT_STEPS = 40
LONG_TASKS_PER_ENV = {"train": 100, "validation": 20, "test": 20}
TASKS_PER_ENV = {"train": 50, "validation": 10, "test": 10}
SPLIT_FIRST_SEEDS = {"train": 0, "validation": 100_000, "test": 200_000}

SYSTEM_PROMPT = (
    "You are an agent in a grid world (MiniGrid / BabyAI) and must complete a mission.\n"
    "You face one direction and see only ahead of you and to your sides: up to 6 steps forward and 3 steps to the "
    "left and right. Walls and closed doors block your view, and you cannot see behind you. Positions are relative "
    'to you: "2 steps left and 1 step forward" is two cells to your left and one cell ahead. Walls are reported only '
    "straight ahead, to your left and to your right.\n"
    "Actions:\n"
    "- turn left, turn right: turn 90 degrees in place.\n"
    "- go forward: move one cell ahead, onto an empty cell, an open door or the goal.\n"
    "- pick up: take the object 1 step forward; you carry at most one object.\n"
    "- drop: put what you carry on the empty cell 1 step forward.\n"
    "- toggle: open or close the door 1 step forward; a locked door opens only while you carry a key of its color. "
    "Toggling a box opens it and the box disappears.\n"
    "To go to an object, stand next to it facing it (it is then 1 step forward). Walking into lava ends the episode. "
    "Completing the mission earns 1 - 0.9 * (steps taken / step limit): the fewer steps, the higher the reward."
)


def check_env_id(env_id: Any) -> None:
    """Raise ``ValueError`` unless ``env_id`` is a level registered with gymnasium, named without a module part.

    Task rows are data: gymnasium reads ``"module:Level-v0"`` as "import ``module``, then make the level", so an
    ``env_id`` with a colon could import any installed module. Only ids already in ``gymnasium.registry`` are made.
    """
    if not isinstance(env_id, str) or ":" in env_id or env_id not in gym.registry:
        raise ValueError(
            f"Unknown minigrid level {env_id!r}: give the id of a registered MiniGrid or BabyAI level, without a "
            "module part (e.g. 'BabyAI-GoToLocal-v0'; see minigrid's documentation for the list)."
        )


class MiniGridTextEnv(TextEnvironment):
    """MiniGrid / BabyAI levels on the ``minigrid`` engine, with BabyAI-Text observations and word actions.

    The observation is the mission line followed by one sentence per thing the agent carries or sees (see
    ``starpo_minigrid.text.describe``). An action is one of ``turn left, turn right, go forward, pick up, drop,
    toggle``, ignoring case and whitespace; anything else is invalid: reward 0, nothing changes and no step is
    counted. A valid action is effective when it changed the agent's position, direction, load or the grid.

    Rewards and episode ends are minigrid's: completing the mission earns ``1 - 0.9 * step_count / max_steps`` and
    terminates with ``info["success"] = True``; a failure the level defines (lava, or a BabyAI instruction broken)
    terminates with reward 0; the level's ``max_steps`` truncates.

    Args:
        env_ids: Levels that ``reset`` draws from when it is given no task (one id or several).
        max_steps: Step limit for every level, instead of each level's own (which also sets the reward scale).
    """

    system_prompt = SYSTEM_PROMPT
    action_description = ", ".join(ACTIONS)
    example_action = "go forward"

    def __init__(self, env_ids: str | Sequence[str] = ENV_IDS, max_steps: int | None = None):
        if isinstance(env_ids, str):
            env_ids = (env_ids,)
        if not env_ids:
            raise ValueError("env_ids must name at least one minigrid level, e.g. 'BabyAI-GoToLocal-v0'.")
        for env_id in env_ids:
            check_env_id(env_id)
        self.env_ids = tuple(env_ids)
        self.max_steps = max_steps
        self._engines: dict[str, MiniGridEnv] = {}
        self._engine: MiniGridEnv | None = None
        self._expert: Expert | None = None
        self._seeds = np.random.default_rng()
        self._done = True

    @property
    def engine(self) -> MiniGridEnv:
        """The running minigrid environment (unwrapped), for inspection and rendering."""
        if self._engine is None:
            raise RuntimeError("No episode yet; call reset() first.")
        return self._engine

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Start the level ``options["task"]["env_id"]`` laid out from the task's seed, or else a level of
        ``env_ids`` drawn from ``seed`` (random if ``None``) and laid out from ``seed``.

        minigrid's dynamics are deterministic, so the seed only draws the layout and the mission; with a task,
        ``seed`` is ignored. A task that records a ``mission`` must get it back from the engine, which catches task
        files made with a minigrid version that lays levels out differently.
        """
        task = (options or {}).get("task")
        if task is None:
            seed = int(self._seeds.integers(2**31)) if seed is None else seed
            env_id = self.env_ids[np.random.default_rng(seed).integers(len(self.env_ids))]
            task = {"env_id": env_id, "seed": seed}
        engine = self._make(task["env_id"])
        with contextlib.redirect_stdout(io.StringIO()):  # BabyAI levels print every layout they reject
            engine.reset(seed=int(task["seed"]))
        if task.get("mission") not in (None, engine.mission):
            raise ValueError(
                f"Task {task.get('task_id', task['seed'])!r} expects the mission {task['mission']!r} but "
                f"{task['env_id']} with seed {task['seed']} gives {engine.mission!r}: the tasks were made with another "
                "minigrid version. Regenerate them with `python -m starpo_minigrid`."
            )
        self._engine = engine
        self._expert = expert_for(engine)
        self._done = False
        info = {key: task[key] for key in ("task_id", "env_id", "seed") if key in task}
        info["mission"] = engine.mission
        info["state_key"] = self.state_key()
        return self._observation(), info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Apply one word action; see the class docstring for the rewards."""
        if self._done:
            raise RuntimeError("The episode is over; call reset() first.")
        choice = parse_action(action)
        if choice is None:
            info = self.step_info(valid=False, effective=False, success=False, state_key=self.state_key())
            return f"Invalid action.\n{self._observation()}", 0.0, False, False, info
        before = self._snapshot()
        _, reward, terminated, truncated, _ = self._engine.step(choice)
        terminated, truncated = bool(terminated), bool(truncated)
        self._done = terminated or truncated
        if self._expert is not None and not self._done:
            self._expert.observe(choice)
        info = self.step_info(valid=True, effective=self._snapshot() != before, success=bool(terminated and reward > 0),
                              state_key=self.state_key())
        return self._observation(), float(reward), terminated, truncated, info

    def layout_key(self) -> str:
        """The state and the mission: what makes two tasks the same task (``generate_tasks`` keeps splits apart by
        it)."""
        return f"{self.state_key()} {self._engine.mission}"

    def state_key(self) -> str:
        """A digest of the full state (agent position and direction, what it carries, every cell of the grid), equal
        across episodes of one task exactly when the states are: the text shows only the agent's view, so two states
        can read alike (GiGPO groups turns by this key, as ``info["state_key"]``)."""
        position, direction, _, grid = self._snapshot()
        carried = self._engine.carrying
        carrying = None if carried is None else carried.encode()
        return hashlib.sha256(repr((position, direction, carrying)).encode() + grid).hexdigest()

    def admissible_actions(self) -> list[str]:
        """The word actions; minigrid accepts each of them in every state."""
        return list(ACTIONS)

    def expert_action(self) -> str | None:
        """The scripted expert's next action from the current state, or ``None`` (episode over, or no plan)."""
        if self._done or self._expert is None:
            return None
        action = self._expert.action()
        return None if action is None else ACTIONS[action]

    def expert_thinking(self) -> str:
        """The thinking behind ``expert_action()`` for SFT warm starts: the expert's next target, where it lies if
        the agent sees it, and the plan to it (``starpo_minigrid.thinking``)."""
        return expert_thinking(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> MiniGridTextEnv:
        """A copy of the running episode (the look-ahead of ``expert_thinking`` and ``trl_starpo.sft.expert_plan``):
        the engines cached for the other levels are left out, as copying all of them cost most of each look-ahead."""
        clone = copy.copy(self)
        memo[id(self)] = clone
        clone._engine = copy.deepcopy(self._engine, memo)
        clone._expert = copy.deepcopy(self._expert, memo)  # it holds the engine: the memo keeps them one object
        clone._engines = {env_id: clone._engine for env_id, engine in self._engines.items() if engine is self._engine}
        clone._seeds = copy.deepcopy(self._seeds, memo)
        return clone

    def close(self) -> None:
        """Close the minigrid environments this one created (their render windows, if any)."""
        for engine in self._engines.values():
            engine.close()

    def _make(self, env_id: str) -> MiniGridEnv:
        if env_id not in self._engines:
            check_env_id(env_id)
            kwargs = {} if self.max_steps is None else {"max_steps": self.max_steps}
            engine = gym.make(env_id, **kwargs).unwrapped
            if not isinstance(engine, MiniGridEnv):
                engine.close()
                raise ValueError(f"{env_id!r} is a gymnasium environment but not a MiniGrid or BabyAI level.")
            self._engines[env_id] = engine
        return self._engines[env_id]

    def _snapshot(self) -> tuple:
        engine = self._engine
        carrying = None if engine.carrying is None else id(engine.carrying)
        return tuple(map(int, engine.agent_pos)), int(engine.agent_dir), carrying, engine.grid.encode().tobytes()

    def _observation(self) -> str:
        return "\n".join([f"Mission: {self._engine.mission}", *describe(self._engine)])


def expert_solution(env: MiniGridTextEnv, task: dict[str, Any]) -> list[str] | None:
    """The expert's actions from the start of ``task`` to success, or ``None`` when it fails or gives up."""
    env.reset(options={"task": task})
    actions = []
    while (action := env.expert_action()) is not None:
        actions.append(action)
        _, _, terminated, truncated, info = env.step(action)
        if info["success"]:
            return actions
        if terminated or truncated:
            return None
    return None


def generate_tasks(
    split: str,
    tasks_per_env: int,
    first_seed: int,
    env_ids: Sequence[str] = ENV_IDS,
    patience: int = 2000,
    max_expert_steps: int | None = None,
    task_prefix: str = "minigrid",
) -> list[dict[str, Any]]:
    """Task rows for up to ``tasks_per_env`` layouts of each level, the levels taking turns.

    A layout (the grid, the agent's pose and the mission) belongs to one split, chosen by its content
    (``trl_starpo.envs.split_of_content``), so no held-out layout is ever a training layout, whatever the seeds. Seeds
    run ``first_seed, first_seed + 1, ...``, one per row; a seed is skipped when its layout belongs to another split,
    when the expert does not solve it, or, in a held-out split, when the split already has it, so held-out layouts
    are distinct (training may repeat one). A level whose layouts of this split run out (``patience`` seeds in a row
    without a new one) gives what it found: the small levels have few layouts (LavaGapS6 has 8 in all), so their
    held-out rows are fewer. With ``max_expert_steps``, a seed whose expert solution is longer is skipped too. Each
    row records the mission, the level's step limit and the length of the expert's solution; its id is
    ``<task_prefix>-<split>-<index>``.
    """
    env = MiniGridTextEnv(env_ids)
    found: dict[str, list[dict[str, Any]]] = {env_id: [] for env_id in env_ids}
    layouts: set[str] = set()
    seed = first_seed
    for env_id in env_ids:
        misses = 0
        while len(found[env_id]) < tasks_per_env and misses < patience:
            task = {"env_id": env_id, "seed": seed}
            seed += 1
            env.reset(options={"task": task})
            layout = env.layout_key()
            if split_of_content(layout) != split or (split != "train" and layout in layouts):
                misses += 1
                continue
            solution = expert_solution(env, task)
            if solution is None or (max_expert_steps is not None and len(solution) > max_expert_steps):
                misses += 1
                continue
            misses = 0
            layouts.add(layout)
            found[env_id].append({**task, "mission": env.engine.mission, "max_steps": env.engine.max_steps,
                                  "expert_steps": len(solution)})
    rows = [row for turn in itertools.zip_longest(*found.values()) for row in turn if row is not None]
    return [{"task_id": f"{task_prefix}-{split}-{index:05d}", **row} for index, row in enumerate(rows)]


def load_environment(**kwargs: Any) -> MiniGridTextEnv:
    """Create a ``MiniGridTextEnv``; ``kwargs`` are its constructor arguments."""
    return MiniGridTextEnv(**kwargs)


def load_tasks(split: str | None = None, source: str | None = None):
    """The shipped task splits (or those of ``source``), as with ``trl_starpo.envs.load_task_dataset``."""
    return load_task_dataset(DATA_DIR, split, source)


def main(argv: Sequence[str] | None = None) -> None:
    """Regenerate the task splits (``python -m starpo_minigrid --help``; ``--long`` for the long task set)."""

    def options(parser):
        parser.add_argument("--env-ids", nargs="+", help=f"minigrid levels (default: {', '.join(ENV_IDS)})")
        parser.add_argument("--max-expert-steps", type=int, metavar="N",
                            help="skip layouts whose expert solution takes more than N steps")
        parser.add_argument("--long", action="store_true",
                            help=f"the long task set: its levels, sizes, step bound ({LONG_MAX_EXPERT_STEPS}) and folder "
                                 "wherever the other flags do not say")

    long_set = "--long" in (argv if argv is not None else sys.argv[1:])
    args = parse_task_split_args(
        "python -m starpo_minigrid", LONG_TASKS_PER_ENV if long_set else TASKS_PER_ENV,
        LONG_DATA_DIR if long_set else DATA_DIR, argv=argv, description=main.__doc__,
        size_flag="--{split}-per-env", options=options,  # tasks per level
    )
    env_ids = args.env_ids or (LONG_ENV_IDS if args.long else ENV_IDS)
    max_steps = args.max_expert_steps if args.max_expert_steps is not None else (
        LONG_MAX_EXPERT_STEPS if args.long else None)
    write_task_splits(args.out_dir, (
        (split, generate_tasks(split, count, SPLIT_FIRST_SEEDS[split], env_ids, max_expert_steps=max_steps,
                               task_prefix="minigrid-long" if args.long else "minigrid"))
        for split, count in args.split_sizes.items()
    ))
