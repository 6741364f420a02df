"""Sokoban as a text environment for StarPO, with RAGEN's symbols and rewards.

The agent pushes every box onto a target in a small walled room. Rooms come from a generator in the style of
gym-sokoban (a random-walk room topology, then reverse play from the solved state), so every room is solvable and
its optimal solution length is known exactly. The shipped task splits live in ``data/`` and are rebuilt with
``python -m starpo_sokoban``.
"""

from __future__ import annotations

import argparse
from collections import deque
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from trl_starpo.envs import TextEnvironment, load_task_dataset, parse_task_split_args, write_task_splits

__all__ = [
    "Room",
    "SokobanEnv",
    "generate_room",
    "generate_tasks",
    "load_environment",
    "load_tasks",
    "main",
    "solve",
]

WALL, FLOOR, TARGET, BOX, BOX_ON_TARGET, PLAYER, PLAYER_ON_TARGET = "#", "_", "O", "X", "√", "P", "S"
LEGEND = "Legend: # wall, _ floor, O target, X box, √ box on target, P player, S player on target"
ACTIONS = ("Up", "Down", "Left", "Right")

STEP_PENALTY = -0.1
BOX_ON_TARGET_REWARD = 1.0
BOX_OFF_TARGET_PENALTY = -1.0
SOLVED_REWARD = 10.0

DATA_DIR = Path(__file__).parent / "data"
SPLIT_SIZES = {"train": 500, "validation": 100, "test": 100}
SPLIT_FIRST_SEEDS = {"train": 0, "validation": 100_000, "test": 200_000}

SYSTEM_PROMPT = (
    "You are playing Sokoban, a box-pushing puzzle on a grid.\n"
    "Goal: push every box onto a target. Each action moves you one cell. Walking into a box pushes it one cell "
    "further if that cell is floor or a target; you cannot pull boxes, push two boxes at once or walk through walls. "
    "A box pushed into a corner can never be moved out again.\n"
    f"{LEGEND}\n"
    f"Actions: {', '.join(ACTIONS)}."
)

# Floor stamps of the random-walk room carver, as in gym-sokoban.
_MASKS = np.array(
    [
        [[0, 0, 0], [1, 1, 1], [0, 0, 0]],
        [[0, 1, 0], [0, 1, 0], [0, 1, 0]],
        [[0, 0, 0], [1, 1, 0], [0, 1, 0]],
        [[0, 0, 0], [1, 1, 0], [1, 1, 0]],
        [[0, 0, 0], [0, 1, 1], [0, 1, 0]],
    ],
    dtype=bool,
)
_DIRECTIONS = np.array([(1, 0), (0, 1), (-1, 0), (0, -1)])

State = tuple[int, frozenset[int]]


@dataclass(frozen=True)
class Room:
    """A Sokoban position: the static board (walls, targets) and the player and boxes, as flat cell indices."""

    height: int
    width: int
    walls: frozenset[int]
    targets: frozenset[int]
    player: int
    boxes: frozenset[int]

    @classmethod
    def parse(cls, rows: Sequence[str]) -> Room:
        """Read a room from its rows of symbols; the outer ring must be walls."""
        height, width = len(rows), len(rows[0])
        if any(len(row) != width for row in rows):
            raise ValueError("Room rows must all have the same length.")
        cells = "".join(rows)
        unknown = set(cells) - {WALL, FLOOR, TARGET, BOX, BOX_ON_TARGET, PLAYER, PLAYER_ON_TARGET}
        if unknown:
            raise ValueError(f"Unknown room symbols: {sorted(unknown)}.")
        border = rows[0] + rows[-1] + "".join(row[0] + row[-1] for row in rows)
        if set(border) != {WALL}:
            raise ValueError("The outer ring of a room must be walls.")

        def where(*symbols: str) -> frozenset[int]:
            return frozenset(i for i, symbol in enumerate(cells) if symbol in symbols)

        players = where(PLAYER, PLAYER_ON_TARGET)
        targets = where(TARGET, BOX_ON_TARGET, PLAYER_ON_TARGET)
        boxes = where(BOX, BOX_ON_TARGET)
        if len(players) != 1 or not boxes or len(boxes) != len(targets):
            raise ValueError("A room needs one player and as many boxes as targets (at least one).")
        return cls(height, width, where(WALL), targets, next(iter(players)), boxes)

    def render(self) -> list[str]:
        """The rows of symbols showing this position."""
        cells = [
            WALL if i in self.walls else TARGET if i in self.targets else FLOOR for i in range(self.height * self.width)
        ]
        for box in self.boxes:
            cells[box] = BOX_ON_TARGET if box in self.targets else BOX
        cells[self.player] = PLAYER_ON_TARGET if self.player in self.targets else PLAYER
        return ["".join(cells[r * self.width : (r + 1) * self.width]) for r in range(self.height)]

    @property
    def moves(self) -> dict[str, int]:
        """The flat index offset of each action, keyed by its lower-case name."""
        return {"up": -self.width, "down": self.width, "left": -1, "right": 1}

    @property
    def boxes_on_target(self) -> int:
        return len(self.boxes & self.targets)

    @property
    def solved(self) -> bool:
        return self.boxes == self.targets

    def move(self, offset: int) -> Room | None:
        """The position after stepping by ``offset`` (pushing a box if one is in the way), or ``None`` if blocked."""
        state = _step(self.walls, self.player, self.boxes, offset)
        if state is None:
            return None
        return Room(self.height, self.width, self.walls, self.targets, *state)


def _step(walls: frozenset[int], player: int, boxes: frozenset[int], offset: int) -> State | None:
    ahead = player + offset
    if ahead in walls:
        return None
    if ahead in boxes:
        beyond = ahead + offset
        if beyond in walls or beyond in boxes:
            return None
        boxes = boxes - {ahead} | {beyond}
    return ahead, boxes


def solve(rows: Sequence[str]) -> list[str] | None:
    """A shortest action sequence solving the room, by breadth-first search; ``None`` if it has no solution."""
    room = Room.parse(rows)
    start = (room.player, room.boxes)
    parents: dict[State, tuple[State, str] | None] = {start: None}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        if state[1] == room.targets:
            return _actions_to(state, parents)
        for action in ACTIONS:
            successor = _step(room.walls, *state, room.moves[action.lower()])
            if successor is not None and successor not in parents:
                parents[successor] = (state, action)
                queue.append(successor)
    return None


def _actions_to(state: State, parents: dict[State, tuple[State, str] | None]) -> list[str]:
    actions = []
    while (link := parents[state]) is not None:
        state, action = link
        actions.append(action)
    return actions[::-1]


def _random_floor(rng: np.random.Generator, height: int, width: int, num_gen_steps: int) -> list[int]:
    """Carve floor cells with a random walk stamping small masks, inside a wall border (gym-sokoban's topology)."""
    floor = np.zeros((height, width), dtype=bool)
    direction = _DIRECTIONS[rng.integers(len(_DIRECTIONS))]
    position = np.array([rng.integers(1, height - 1), rng.integers(1, width - 1)])
    for _ in range(num_gen_steps):
        if rng.random() < 0.35:
            direction = _DIRECTIONS[rng.integers(len(_DIRECTIONS))]
        position = np.clip(position + direction, 1, [height - 2, width - 2])
        row, col = position
        floor[row - 1 : row + 2, col - 1 : col + 2] |= _MASKS[rng.integers(len(_MASKS))]
    floor[[0, -1], :] = floor[:, [0, -1]] = False
    return np.flatnonzero(floor).tolist()


def _moves_to_solved(
    walls: frozenset[int], floor: list[int], targets: frozenset[int], offsets: Sequence[int], max_depth: int
) -> dict[State, int]:
    """The exact number of moves to a solved position, for every state at most ``max_depth`` moves from one.

    Breadth-first search over reverse moves (walking back, optionally pulling the box behind), starting from all
    solved positions at once.
    """
    distance = {(cell, targets): 0 for cell in floor if cell not in targets}
    queue = deque(distance)
    while queue:
        state = queue.popleft()
        depth = distance[state] + 1
        if depth > max_depth:
            continue
        player, boxes = state
        for offset in offsets:
            back = player + offset
            if back in walls or back in boxes:
                continue
            predecessors = [(back, boxes)]
            if player - offset in boxes:
                predecessors.append((back, boxes - {player - offset} | {player}))
            for predecessor in predecessors:
                if predecessor not in distance:
                    distance[predecessor] = depth
                    queue.append(predecessor)
    return distance


def generate_room(
    seed: int,
    dim_room: Sequence[int] = (6, 6),
    num_boxes: int = 1,
    num_gen_steps: int | None = None,
    search_depth: int = 30,
) -> tuple[list[str], int]:
    """Generate a solvable, unsolved room, deterministically from ``seed``.

    A random walk carves the floor, targets are placed on it, and reverse play from the solved position finds every
    start state within ``search_depth`` moves of a solution; the room starts from one of the farthest.

    Args:
        seed: Seed of the ``numpy`` generator that draws everything.
        dim_room: ``(height, width)`` of the room, walls included.
        num_boxes: Number of boxes (and targets).
        num_gen_steps: Length of the floor-carving walk; ``round(1.7 * (height + width))`` by default.
        search_depth: The most moves an optimal solution may take.

    Returns:
        The room's rows of symbols and the length of its optimal solution.
    """
    height, width = dim_room
    if (height - 2) * (width - 2) < num_boxes + 2:
        raise ValueError(f"A {height}x{width} room has no space for {num_boxes} boxes, their targets and a player.")
    num_gen_steps = round(1.7 * (height + width)) if num_gen_steps is None else num_gen_steps
    rng = np.random.default_rng(seed)
    offsets = (-width, width, -1, 1)
    while True:
        floor = _random_floor(rng, height, width, num_gen_steps)
        if len(floor) < num_boxes + 2:
            continue
        walls = frozenset(range(height * width)) - set(floor)
        targets = frozenset(int(cell) for cell in rng.choice(floor, num_boxes, replace=False))
        distance = _moves_to_solved(walls, floor, targets, offsets, search_depth)
        min_steps = max(distance.values())
        if min_steps == 0:
            continue
        farthest = [state for state, steps in distance.items() if steps == min_steps]
        player, boxes = farthest[rng.integers(len(farthest))]
        return Room(height, width, walls, targets, player, boxes).render(), min_steps


def generate_tasks(
    split: str, num_tasks: int, first_seed: int, exclude: Collection[tuple[str, ...]] = (), **room_params: Any
) -> list[dict[str, Any]]:
    """Task rows of ``num_tasks`` distinct rooms, one per seed from ``first_seed`` on.

    Seeds whose room repeats an earlier one, or one in ``exclude`` (rooms as tuples of rows), are skipped, so splits
    generated in turn share no room. ``room_params`` go to ``generate_room``.
    """
    seen = set(exclude)
    tasks = []
    seed = first_seed
    while len(tasks) < num_tasks:
        room, min_steps = generate_room(seed, **room_params)
        if tuple(room) not in seen:
            seen.add(tuple(room))
            tasks.append(
                {
                    "task_id": f"sokoban-{split}-{len(tasks):05d}",
                    "seed": seed,
                    "dim_room": list(room_params.get("dim_room", (6, 6))),
                    "num_boxes": room_params.get("num_boxes", 1),
                    "room": room,
                    "min_steps": min_steps,
                }
            )
        seed += 1
    return tasks


class SokobanEnv(TextEnvironment):
    """Sokoban with RAGEN's rewards.

    Every valid action costs 0.1; pushing a box onto a target earns 1, pushing one off costs 1, and solving the room
    earns 10 more and ends the episode. An action that is not one of ``Up, Down, Left, Right`` (case-insensitive) is
    invalid: reward 0, nothing changes. The episode is truncated after ``max_steps`` valid actions.

    Args:
        dim_room: ``(height, width)`` of rooms generated on ``reset`` without a task.
        num_boxes: Boxes in generated rooms.
        max_steps: Valid actions before truncation.
        num_gen_steps: See ``generate_room``.
        search_depth: See ``generate_room``.
    """

    system_prompt = SYSTEM_PROMPT
    action_description = ", ".join(ACTIONS)
    example_action = "Up"

    def __init__(
        self,
        dim_room: Sequence[int] = (6, 6),
        num_boxes: int = 1,
        max_steps: int = 100,
        num_gen_steps: int | None = None,
        search_depth: int = 30,
    ):
        self.room_params = {
            "dim_room": tuple(dim_room),
            "num_boxes": num_boxes,
            "num_gen_steps": num_gen_steps,
            "search_depth": search_depth,
        }
        self.max_steps = max_steps
        self._seeds = np.random.default_rng()
        self._room: Room | None = None
        self._steps = 0
        self._done = True
        self._plan: dict[State, str] = {}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Start the room of ``options["task"]``, or else a room generated from ``seed`` (random if ``None``)."""
        task = (options or {}).get("task")
        if task is None:
            seed = int(self._seeds.integers(2**31)) if seed is None else seed
            room, min_steps = generate_room(seed, **self.room_params)
            task = {"seed": seed, "room": room, "min_steps": min_steps}
        self._room = Room.parse(task["room"])
        self._steps = 0
        self._done = False
        self._plan = {}
        info = {key: task[key] for key in ("task_id", "seed", "min_steps") if key in task}
        return self._observation(), info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Apply one action; see the class docstring for the rewards."""
        if self._done:
            raise RuntimeError("The episode is over; call reset() first.")
        offset = self._room.moves.get(action.strip().lower())
        if offset is None:
            info = self.step_info(valid=False, effective=False, success=False)
            return f"Invalid action.\n{self._observation()}", 0.0, False, False, info
        self._steps += 1
        reward = STEP_PENALTY
        moved = self._room.move(offset)
        if moved is not None:
            change = moved.boxes_on_target - self._room.boxes_on_target
            reward += BOX_ON_TARGET_REWARD if change > 0 else BOX_OFF_TARGET_PENALTY if change < 0 else 0.0
            self._room = moved
        success = self._room.solved
        if success:
            reward += SOLVED_REWARD
        truncated = not success and self._steps >= self.max_steps
        self._done = success or truncated
        info = self.step_info(valid=True, effective=moved is not None, success=success)
        return self._observation(), reward, success, truncated, info

    def admissible_actions(self) -> list[str]:
        """The four moves; Sokoban accepts each of them in every state (a blocked move is valid, not effective)."""
        return list(ACTIONS)

    def expert_action(self) -> str | None:
        """The next move of a shortest solution from the current position (``solve``), or ``None`` when the episode
        is over or the room can no longer be solved (a box stuck in a corner)."""
        if self._done or self._room is None:
            return None
        state = (self._room.player, self._room.boxes)
        if state not in self._plan:
            self._plan = _plan_from(self._room)
        return self._plan.get(state)

    def _observation(self) -> str:
        return "\n".join([*self._room.render(), LEGEND])


def _plan_from(room: Room) -> dict[State, str]:
    """The moves of a shortest solution keyed by the state each is played in, so that an agent that keeps to the
    plan needs one search per episode; empty when the room has no solution."""
    plan: dict[State, str] = {}
    actions = solve(room.render())
    for action in actions or []:
        plan[(room.player, room.boxes)] = action
        room = room.move(room.moves[action.lower()])
    return plan


def load_environment(**kwargs: Any) -> SokobanEnv:
    """Create a ``SokobanEnv``; ``kwargs`` are its constructor arguments."""
    return SokobanEnv(**kwargs)


def load_tasks(split: str | None = None, source: str | None = None):
    """The shipped task splits (or those of ``source``), as with ``trl_starpo.envs.load_task_dataset``."""
    return load_task_dataset(DATA_DIR, split, source)


def main(argv: Sequence[str] | None = None) -> None:
    """Regenerate the task splits (``python -m starpo_sokoban --help``)."""
    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--dim-room", type=int, nargs=2, default=(6, 6), metavar=("HEIGHT", "WIDTH"))
        parser.add_argument("--num-boxes", type=int, default=1)
        parser.add_argument("--search-depth", type=int, default=30)

    args = parse_task_split_args("python -m starpo_sokoban", SPLIT_SIZES, DATA_DIR, argv=argv,
                                 description=main.__doc__, options=options)
    seen: set[tuple[str, ...]] = set()  # no room in two splits

    def split_tasks(split: str, count: int) -> list[dict[str, Any]]:
        tasks = generate_tasks(split, count, SPLIT_FIRST_SEEDS[split], exclude=seen, dim_room=tuple(args.dim_room),
                               num_boxes=args.num_boxes, search_depth=args.search_depth)
        seen.update(tuple(task["room"]) for task in tasks)
        return tasks

    write_task_splits(args.out_dir, ((split, split_tasks(split, count)) for split, count in args.split_sizes.items()))
