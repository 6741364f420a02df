"""Countdown arithmetic puzzles, as in TinyZero and RAGEN (arXiv:2504.20073), in one turn.

The agent gets a few numbers and a target and answers with one arithmetic expression that uses every number
exactly once with ``+ - * /`` and parentheses. Answers are read by a small recursive-descent parser over exactly
that grammar (never ``eval``) and evaluated exactly with ``fractions.Fraction``.

Puzzles are generated from a seed with ``numpy.random.default_rng(seed)``: draw the numbers, then combine random
pairs with random operations (integer, positive intermediate results only) until one value is left; that value is
the target and the combination is the stored ``solution``, so every puzzle is solvable.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from fractions import Fraction
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from trl_starpo.envs import TextEnvironment, load_task_dataset, parse_task_split_args, write_task_splits

__all__ = [
    "CountdownEnv",
    "ExpressionError",
    "all_expressions",
    "evaluate_answer",
    "evaluate_expression",
    "generate_tasks",
    "load_environment",
    "load_tasks",
    "make_task",
    "solve",
    "write_tasks",
]

DATA_DIR = Path(__file__).parent / "data"
SPLIT_SIZES = {"train": 1000, "validation": 200, "test": 200}
SPLIT_SEED_BASE = {"train": 0, "validation": 1_000_000, "test": 2_000_000}

MAX_EXPRESSION_LENGTH = 200
MAX_NESTING = 20
SUCCESS_REWARD = 1.0
FORMAT_REWARD = 0.1

SYSTEM_PROMPT = (
    "You are solving a Countdown puzzle. You are given a list of numbers and a target. Write one arithmetic "
    "expression that uses every given number exactly once and evaluates to the target. Use only the numbers, "
    "+ - * / and parentheses; the expression is evaluated exactly, so division is true division. "
    "Answer with the expression only, for example (44 + 19) - 35."
)

# ---------------------------------------------------------------------------------------------------------------
# Answer parsing


class ExpressionError(ValueError):
    """The text is not an arithmetic expression this environment accepts, or it divides by zero."""


_TOKEN = re.compile(r"[0-9]+|[-+*/()]")
_TRAILING_RESULT = re.compile(r"=\s*-?[0-9]+\s*$")


def evaluate_expression(expression: str) -> tuple[Fraction, list[int]]:
    """Evaluate an arithmetic expression exactly.

    The grammar is non-negative integer literals, binary ``+ - * /`` with the usual precedence, unary minus and
    parentheses; whitespace is ignored. Anything else (other characters, ``**``, decimals, more than
    ``MAX_EXPRESSION_LENGTH`` characters, more than ``MAX_NESTING`` nested parentheses or minus signs, division by
    zero) raises ``ExpressionError``.

    Returns:
        The value and the integer literals in the order they appear.
    """
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise ExpressionError(f"longer than {MAX_EXPRESSION_LENGTH} characters")
    return _Parser(_tokenize(expression)).parse()


def evaluate_answer(answer: str) -> tuple[Fraction, list[int]]:
    """Like ``evaluate_expression``, but first strips surrounding whitespace and a trailing ``= <integer>``.

    So ``"(44 + 19) - 35 = 28"`` is read as ``"(44 + 19) - 35"``; the stated result itself is not checked.
    """
    answer = answer.strip()
    if len(answer) > MAX_EXPRESSION_LENGTH:
        raise ExpressionError(f"longer than {MAX_EXPRESSION_LENGTH} characters")
    return evaluate_expression(_TRAILING_RESULT.sub("", answer))


def _tokenize(text: str) -> list[str]:
    tokens: list[str] = []
    position = 0
    while position < len(text):
        if text[position].isspace():
            position += 1
            continue
        match = _TOKEN.match(text, position)
        if match is None:
            raise ExpressionError(f"unexpected character {text[position]!r}")
        tokens.append(match.group())
        position = match.end()
    return tokens


class _Parser:
    """Recursive descent over ``expr := term (("+"|"-") term)*``, ``term := factor (("*"|"/") factor)*``,
    ``factor := "-" factor | NUMBER | "(" expr ")"``."""

    def __init__(self, tokens: list[str]):
        self.tokens = tokens
        self.position = 0
        self.depth = 0
        self.numbers: list[int] = []

    def parse(self) -> tuple[Fraction, list[int]]:
        if not self.tokens:
            raise ExpressionError("empty expression")
        value = self._expression()
        if self.position < len(self.tokens):
            raise ExpressionError(f"unexpected {self.tokens[self.position]!r}")
        return value, self.numbers

    def _peek(self) -> str | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def _take(self) -> str:
        token = self._peek()
        if token is None:
            raise ExpressionError("unexpected end of expression")
        self.position += 1
        return token

    @contextmanager
    def _nested(self):
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise ExpressionError(f"nested deeper than {MAX_NESTING} levels")
        yield
        self.depth -= 1

    def _expression(self) -> Fraction:
        value = self._term()
        while self._peek() in ("+", "-"):
            operator = self._take()
            operand = self._term()
            value = value + operand if operator == "+" else value - operand
        return value

    def _term(self) -> Fraction:
        value = self._factor()
        while self._peek() in ("*", "/"):
            operator = self._take()
            operand = self._factor()
            if operator == "*":
                value *= operand
            elif operand == 0:
                raise ExpressionError("division by zero")
            else:
                value /= operand
        return value

    def _factor(self) -> Fraction:
        token = self._take()
        if token.isdigit():
            self.numbers.append(int(token))
            return Fraction(int(token))
        if token == "-":
            with self._nested():
                return -self._factor()
        if token == "(":
            with self._nested():
                value = self._expression()
            if self._take() != ")":
                raise ExpressionError("missing ')'")
            return value
        raise ExpressionError(f"unexpected {token!r}")


# ---------------------------------------------------------------------------------------------------------------
# Puzzle generation


class _Node(NamedTuple):
    value: int
    expression: str
    is_number: bool

    def operand(self) -> str:
        return self.expression if self.is_number else f"({self.expression})"


def make_task(
    seed: int,
    *,
    min_numbers: int = 3,
    max_numbers: int = 4,
    max_number: int = 100,
    max_target: int = 1000,
    max_attempts: int = 1000,
    task_id: str | None = None,
) -> dict[str, Any]:
    """The puzzle of ``seed``: ``numbers`` (each in ``1..max_number``), a ``target`` in ``1..max_target`` and a
    ``solution`` expression reaching it with every number exactly once.

    Numbers and operations are redrawn until the target falls in range; ``ValueError`` after ``max_attempts``.
    """
    if not 2 <= min_numbers <= max_numbers:
        raise ValueError(f"Need 2 <= min_numbers <= max_numbers, got {min_numbers} and {max_numbers}.")
    rng = np.random.default_rng(seed)
    for _ in range(max_attempts):
        count = int(rng.integers(min_numbers, max_numbers + 1))
        numbers = [int(n) for n in rng.integers(1, max_number + 1, size=count)]
        solution = _combine(numbers, rng)
        if 1 <= solution.value <= max_target:
            return {
                "task_id": task_id or f"countdown-seed-{seed}",
                "seed": seed,
                "numbers": numbers,
                "target": solution.value,
                "solution": solution.expression,
            }
    raise ValueError(f"No puzzle with a target in 1..{max_target} after {max_attempts} attempts (seed {seed}).")


def _combine(numbers: list[int], rng: np.random.Generator) -> _Node:
    """Combine random pairs with random operations until one node is left."""
    pool = [_Node(n, str(n), True) for n in numbers]
    while len(pool) > 1:
        first, second = (int(i) for i in rng.choice(len(pool), size=2, replace=False))
        left, right = pool[first], pool[second]
        pool = [node for i, node in enumerate(pool) if i not in (first, second)]
        operations = _operations(left.value, right.value)
        pool.append(operations[int(rng.integers(len(operations)))](left, right))
    return pool[0]


def _operations(a: int, b: int) -> list[Callable[[_Node, _Node], _Node]]:
    """The operations on ``a`` and ``b`` whose result is a positive integer."""
    operations = [_add, _multiply]
    if a != b:
        operations.append(_subtract)
    if max(a, b) % min(a, b) == 0:
        operations.append(_divide)
    return operations


def _add(left: _Node, right: _Node) -> _Node:
    return _Node(left.value + right.value, f"{left.operand()} + {right.operand()}", False)


def _multiply(left: _Node, right: _Node) -> _Node:
    return _Node(left.value * right.value, f"{left.operand()} * {right.operand()}", False)


def _subtract(left: _Node, right: _Node) -> _Node:
    big, small = (left, right) if left.value > right.value else (right, left)
    return _Node(big.value - small.value, f"{big.operand()} - {small.operand()}", False)


def _divide(left: _Node, right: _Node) -> _Node:
    big, small = (left, right) if left.value >= right.value else (right, left)
    return _Node(big.value // small.value, f"{big.operand()} / {small.operand()}", False)


# ---------------------------------------------------------------------------------------------------------------
# Baselines: every answer, and a solver

MAX_ENUMERATED_NUMBERS = 4
"""``all_expressions`` lists 7,680 answers for four numbers and 430,080 for five: it stops at four."""

_OPERATORS: tuple[tuple[str, Callable[[Fraction, Fraction], Fraction | None]], ...] = (
    ("+", lambda a, b: a + b),
    ("-", lambda a, b: a - b),
    ("*", lambda a, b: a * b),
    ("/", lambda a, b: a / b if b else None),
)


def _operand(expression: str, is_number: bool) -> str:
    return expression if is_number else f"({expression})"


def _splits(indices: tuple[int, ...]):
    """Every ordered split of ``indices`` into two non-empty parts."""
    first, rest = indices[0], indices[1:]
    for mask in range(1, 2 ** len(rest) + 1):
        left = (first, *(index for bit, index in enumerate(rest) if mask >> bit & 1))
        right = tuple(index for index in indices if index not in left)
        if right:
            yield left, right
            yield right, left


def all_expressions(numbers: Sequence[int]) -> list[str]:
    """Every expression that uses each of ``numbers`` exactly once with ``+ - * /`` (one per ordered binary tree and
    choice of operators, divisions by zero left out), in a fixed order: the answers that can earn a reward.

    Raises ``ValueError`` for more than ``MAX_ENUMERATED_NUMBERS`` numbers.
    """
    if len(numbers) > MAX_ENUMERATED_NUMBERS:
        raise ValueError(f"all_expressions enumerates at most {MAX_ENUMERATED_NUMBERS} numbers, got {len(numbers)}.")
    cache: dict[tuple[int, ...], list[tuple[Fraction, str, bool]]] = {}

    def build(indices: tuple[int, ...]) -> list[tuple[Fraction, str, bool]]:
        if indices not in cache:
            if len(indices) == 1:
                cache[indices] = [(Fraction(numbers[indices[0]]), str(numbers[indices[0]]), True)]
            else:
                cache[indices] = [
                    (value, f"{_operand(a, a_leaf)} {symbol} {_operand(b, b_leaf)}", False)
                    for left, right in _splits(indices)
                    for x, a, a_leaf in build(left)
                    for y, b, b_leaf in build(right)
                    for symbol, operation in _OPERATORS
                    if (value := operation(x, y)) is not None
                ]
        return cache[indices]

    return [expression for _, expression, _ in build(tuple(range(len(numbers))))] if numbers else []


def solve(numbers: Sequence[int], target: int) -> str | None:
    """An expression using each of ``numbers`` exactly once that equals ``target``, or ``None`` when there is none.

    Exhaustive search over subsets of the numbers, keeping one expression per reachable value of each subset
    (exact arithmetic with ``Fraction``, so intermediate fractions count, as the environment evaluates them).
    """
    reachable: dict[frozenset[int], dict[Fraction, tuple[str, bool]]] = {}

    def values(indices: frozenset[int]) -> dict[Fraction, tuple[str, bool]]:
        if indices not in reachable:
            if len(indices) == 1:
                (index,) = indices
                reachable[indices] = {Fraction(numbers[index]): (str(numbers[index]), True)}
            else:
                found: dict[Fraction, tuple[str, bool]] = {}
                for left, right in _splits(tuple(sorted(indices))):
                    for x, (a, a_leaf) in values(frozenset(left)).items():
                        for y, (b, b_leaf) in values(frozenset(right)).items():
                            for symbol, operation in _OPERATORS:
                                value = operation(x, y)
                                if value is not None and value not in found:
                                    found[value] = (f"{_operand(a, a_leaf)} {symbol} {_operand(b, b_leaf)}", False)
                reachable[indices] = found
        return reachable[indices]

    if not numbers:
        return None
    hit = values(frozenset(range(len(numbers)))).get(Fraction(target))
    return hit[0] if hit else None


# ---------------------------------------------------------------------------------------------------------------
# Environment


class CountdownEnv(TextEnvironment):
    """Reach the target with one expression over the given numbers, in one turn.

    Reward: ``1.0`` when the expression uses the given numbers exactly once each (as a multiset) and equals the
    target; ``0.1`` when it uses them exactly once but misses the target; ``0.0`` otherwise. An answer the parser
    rejects (see ``evaluate_answer``) is invalid (``info["action_is_valid"]`` is False) and pays 0. Every step ends
    the episode; ``info["success"]`` is ``reward == 1.0``.

    Args:
        min_numbers, max_numbers, max_number, max_target: Parameters of puzzles generated from a seed (see
            ``make_task``); the shipped task sets use the defaults.
    """

    system_prompt = SYSTEM_PROMPT
    action_description = "One arithmetic expression using each given number exactly once, e.g. (44 + 19) - 35"
    # A valid expression that (in general) uses other numbers: copying it acts, and pays 0.
    example_action = "(44 + 19) - 35"

    def __init__(self, min_numbers: int = 3, max_numbers: int = 4, max_number: int = 100, max_target: int = 1000):
        self.generator_params = {
            "min_numbers": min_numbers,
            "max_numbers": max_numbers,
            "max_number": max_number,
            "max_target": max_target,
        }
        self.numbers: list[int] = []
        self.target = 0
        self._done = True
        self._answers: list[str] | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Start the puzzle ``options["task"]``, or the one generated from ``seed`` (a random seed if ``None``)."""
        task = (options or {}).get("task") or make_task(_resolve_seed(seed), **self.generator_params)
        self.numbers = [int(n) for n in task["numbers"]]
        self.target = int(task["target"])
        self._done = False
        self._answers = None
        return self._prompt(), {"task_id": task["task_id"], "seed": int(task["seed"])}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Judge the expression ``action``; the episode ends whatever the answer."""
        if self._done:
            raise RuntimeError("The episode is over; call reset() first.")
        self._done = True
        try:
            value, used = evaluate_answer(action)
        except ExpressionError as error:
            info = self.step_info(valid=False, effective=False, success=False)
            return f"Invalid answer: {error}. {self._expected()}", 0.0, True, False, info
        uses_all = Counter(used) == Counter(self.numbers)
        reward = (SUCCESS_REWARD if value == self.target else FORMAT_REWARD) if uses_all else 0.0
        info = self.step_info(valid=True, effective=True, success=reward == SUCCESS_REWARD)
        return self._feedback(value, uses_all), reward, True, False, info

    def admissible_actions(self) -> list[str]:
        """Every expression that uses each number exactly once (``all_expressions``, up to 7,680 for four
        numbers); empty once the episode is over. Any parseable expression is a valid action: these are the ones
        that can pay."""
        if self._done:
            return []
        if self._answers is None:
            self._answers = all_expressions(self.numbers)
        return list(self._answers)

    def expert_action(self) -> str | None:
        """An expression reaching the target, found by ``solve``; ``None`` when the episode is over or the puzzle
        has no solution."""
        return None if self._done else solve(self.numbers, self.target)

    def _feedback(self, value: Fraction, uses_all: bool) -> str:
        if not uses_all:
            return f"Your expression equals {value}, but it must use each of {self.numbers} exactly once."
        if value != self.target:
            return f"Your expression equals {value}, not the target {self.target}."
        return f"Correct: your expression equals the target {self.target}."

    def _prompt(self) -> str:
        return (
            f"Numbers: {self.numbers}\nTarget: {self.target}\n"
            "Use each number exactly once with + - * / and parentheses."
        )

    def _expected(self) -> str:
        return (
            f"Answer with one arithmetic expression that uses each of {self.numbers} exactly once with + - * / and "
            f"parentheses and equals {self.target}."
        )


def _resolve_seed(seed: int | None) -> int:
    return int(np.random.default_rng().integers(2**31)) if seed is None else int(seed)


def load_environment(**kwargs: Any) -> CountdownEnv:
    """Create a ``CountdownEnv``; ``kwargs`` go to its constructor."""
    return CountdownEnv(**kwargs)


def load_tasks(split: str | None = None, source: str | None = None):
    """The shipped task sets (or those at ``source``) as a ``Dataset`` for one split, else a ``DatasetDict``."""
    return load_task_dataset(DATA_DIR, split, source)


def generate_tasks(split: str, size: int, **params: int) -> list[dict[str, Any]]:
    """``size`` puzzles of ``split``, with the seeds ``SPLIT_SEED_BASE[split] + i`` (disjoint across splits).

    ``params`` go to ``make_task``.
    """
    base = SPLIT_SEED_BASE[split]
    return [make_task(base + i, task_id=f"countdown-{split}-{i:05d}", **params) for i in range(size)]


def write_tasks(out_dir: str | Path = DATA_DIR, sizes: dict[str, int] = SPLIT_SIZES, **params: int) -> None:
    """Write ``<split>.jsonl`` for each split in ``sizes`` to ``out_dir``; ``params`` go to ``make_task``."""
    write_task_splits(out_dir, ((split, generate_tasks(split, size, **params)) for split, size in sizes.items()))


def _puzzle_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--min-numbers", type=int, default=3, help="fewest numbers in a puzzle (default 3)")
    parser.add_argument("--max-numbers", type=int, default=4, help="most numbers in a puzzle (default 4)")
    parser.add_argument("--max-number", type=int, default=100, help="largest number (default 100)")
    parser.add_argument("--max-target", type=int, default=1000, help="largest target (default 1000)")


def main(argv: Sequence[str] | None = None) -> None:
    """Regenerate the task files: ``python -m starpo_countdown [--out-dir DIR] [--train-size N] ...``."""
    args = parse_task_split_args("python -m starpo_countdown", SPLIT_SIZES, DATA_DIR, argv=argv,
                                 description="Regenerate the puzzle sets.", options=_puzzle_options)
    params = {name: getattr(args, name) for name in ("min_numbers", "max_numbers", "max_number", "max_target")}
    write_tasks(args.out_dir, args.split_sizes, **params)
