"""Playing one episode in the terminal: a person types the actions, or a model plays and its turns are shown.

Observations, thinking, actions and rewards are printed in distinct styles (ANSI colours when the output is a
terminal, plain labels otherwise). A person plays under the same rules as the agent: one line is one turn, holding up
to ``max_actions_per_turn`` actions separated by the action separator, within the same turn and action budgets.
"""

from __future__ import annotations

import sys
import unicodedata
from typing import Any, TextIO

from .evaluation import ModelPolicy
from .rollout.settings import RolloutSettings
from .rollout.collector import step_action
from .trajectory import Trajectory, Turn

QUIT_WORDS = {"q", "quit", "exit"}

_STYLES = {
    "title": "\033[1m",
    "observation": "",
    "thinking": "\033[2;3;35m",
    "action": "\033[1;32m",
    "reward": "\033[33m",
    "success": "\033[1;32m",
    "failure": "\033[1;31m",
}
_RESET = "\033[0m"


# Bidirectional overrides, embeddings, isolates and marks: they reorder how the rest of a line is displayed
_BIDI_CONTROLS = frozenset(map(chr, (*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x061C, 0x200E, 0x200F)))


def printable(text: str) -> str:
    """``text`` without control characters other than newline and tab, and without bidirectional controls: model
    output and environment text cannot clear the screen, retitle the window or write the clipboard through terminal
    escape sequences, nor make a line display other than it reads (U+202E)."""
    return "".join(c for c in text
                   if c in "\n\t" or (unicodedata.category(c) != "Cc" and c not in _BIDI_CONTROLS))


class Printer:
    """Writes labelled, optionally coloured, lines of an episode to a stream; the text is made printable first."""

    def __init__(self, stream: TextIO | None = None, color: bool | None = None):
        self.stream = stream or sys.stdout
        self.color = self.stream.isatty() if color is None else color

    def line(self, kind: str, text: str, label: str | None = None) -> None:
        prefix = f"{label}: " if label else ""
        body = printable(f"{prefix}{text}")
        if self.color and _STYLES.get(kind):
            body = f"{_STYLES[kind]}{body}{_RESET}"
        print(body, file=self.stream, flush=True)

    def turn(self, index: int, turn: Turn, given: str | None = None) -> None:
        """One finished turn: observation, thinking, actions and reward; ``given``: the text the model was given,
        where it is not the whole episode so far (the ``window`` context policy)."""
        self.line("title", f"--- turn {index + 1} ---")
        if given is not None:
            self.line("observation", given, "the model was given (history window)")
        self.line("observation", turn.observation, "observation")
        if turn.thinking is not None:
            self.line("thinking", turn.thinking.strip(), "thinking")
        if turn.format_ok:
            self.line("action", " || ".join(turn.actions) or "(none)", "actions")
        else:
            self.line("failure", f"{turn.response!r} ({turn.format_error})", "malformed")
        self.line("reward", f"{turn.reward:+.3f}", "reward")

    def outcome(self, trajectory: Trajectory) -> None:
        """The episode's success, return and why it ended."""
        ended = trajectory.truncation or ("terminated" if trajectory.terminated else "stopped")
        kind = "success" if trajectory.success else "failure"
        self.line(kind, f"{'success' if trajectory.success else 'no success'}, return "
                        f"{trajectory.episode_return:+.3f}, {len(trajectory.turns)} turns, ended: {ended}", "episode")
        if trajectory.env_error:
            self.line("failure", trajectory.env_error, "environment error")


def play_model(policy: ModelPolicy, environment: str, task: dict[str, Any], *,
               environment_kwargs: dict[str, Any] | None = None, printer: Printer | None = None) -> Trajectory:
    """Let a model play ``task`` and print every turn."""
    from .envs import load_environment

    printer = printer or Printer()
    env = _LastObservation(load_environment(environment, **(environment_kwargs or {})))
    try:
        printer.line("title", f"{environment} — task {task.get('task_id', '?')}")
        printer.line("observation", env.system_prompt, "system")
        (trajectory,) = policy.play([env], [task], [0])
    finally:
        env.close()
    for index, turn in enumerate(trajectory.turns):
        given = policy.tokenizer.decode(turn.context_ids, skip_special_tokens=False) if turn.context_ids else None
        printer.turn(index, turn, given)
    if env.last is not None and trajectory.terminated:
        printer.line("observation", env.last, "final state")
    printer.outcome(trajectory)
    return trajectory


class _LastObservation:
    """An environment that remembers the observation of its last step (the collector keeps no observation after
    the episode ends), so that the final state can be shown."""

    def __init__(self, env):
        self.env, self.last = env, None

    def step(self, action):
        result = self.env.step(action)
        self.last = result[0]
        return result

    def __getattr__(self, name):
        return getattr(self.env, name)


def play_human(environment: str, task: dict[str, Any], settings: RolloutSettings | None = None, *,
               environment_kwargs: dict[str, Any] | None = None, printer: Printer | None = None,
               read_line=input) -> Trajectory | None:
    """Let a person play ``task``, one line a turn; returns the trajectory, or ``None`` if they quit."""
    from .envs import load_environment

    settings = settings or RolloutSettings()
    printer = printer or Printer()
    if read_line is input and sys.stdin.isatty():
        _line_editing()
    env = load_environment(environment, **(environment_kwargs or {}))
    try:
        return _human_episode(env, environment, task, settings, printer, read_line)
    finally:
        env.close()


def _line_editing() -> None:
    """Give ``input()`` line editing and history (arrow keys move the cursor instead of typing ``^[[D``)."""
    try:
        import readline  # noqa: F401  (importing it is what turns line editing on)
    except ImportError:  # not on every platform
        pass


MAX_LISTED_ACTIONS = 40
"""Admissible actions shown a turn; Countdown, for one, has thousands."""


def _listing(actions: list[str]) -> str:
    shown = ", ".join(actions[:MAX_LISTED_ACTIONS])
    return shown if len(actions) <= MAX_LISTED_ACTIONS else f"{shown}, ... ({len(actions)} in all)"


def _human_episode(env, name: str, task: dict[str, Any], settings: RolloutSettings, printer: Printer,
                   read_line) -> Trajectory | None:
    separator = settings.action_separator
    printer.line("title", f"{name} — task {task.get('task_id', '?')}")
    printer.line("observation", env.system_prompt, "system")
    printer.line("observation", f"{env.action_description}; up to {settings.max_actions_per_turn} a turn, separated "
                                f"by '{separator}'; 'quit' to stop.", "actions")
    trajectory = Trajectory(task_id=str(task.get("task_id", 0)), group=0)
    try:
        observation, _ = env.reset(seed=task.get("seed"), options={"task": task})
    except Exception as error:  # a broken task row or environment ends the episode with its reason, in one line
        trajectory.env_error, trajectory.truncation = f"{type(error).__name__}: {error}", "env_error"
        printer.outcome(trajectory)
        return trajectory
    used = 0
    while not trajectory.done and len(trajectory.turns) < settings.max_turns:
        printer.line("title", f"--- turn {len(trajectory.turns) + 1}/{settings.max_turns} ---")
        printer.line("observation", observation, "observation")
        admissible = getattr(env, "admissible_actions", None)
        if callable(admissible):
            printer.line("observation", _listing(admissible()), "admissible")
        try:
            line = read_line("> ")
        except EOFError:
            line = "quit"
        if line.strip().lower() in QUIT_WORDS:
            printer.line("failure", "quit", "episode")
            return None
        actions = [a.strip() for a in line.split(separator) if a.strip()][: settings.max_actions_per_turn]
        if not actions:
            printer.line("failure", "type an action, or 'quit'", "hint")
            continue
        turn = Turn(observation=observation, response=line, actions=[], format_ok=True)
        trajectory.turns.append(turn)
        for action in actions:
            if used >= settings.action_budget:
                break
            used += 1
            reward, valid = turn.reward, turn.num_valid_actions
            observation, episode_over = step_action(trajectory, env, turn, action)
            printer.line("action", action, "action")
            if trajectory.env_error is None:
                printer.line("reward", f"{turn.reward - reward:+.3f}"
                                       f"{'' if turn.num_valid_actions > valid else ' (invalid action)'}", "reward")
            if episode_over:
                break
        if not trajectory.done and used >= settings.action_budget:
            trajectory.truncation = "action_budget"
    if not trajectory.done:
        trajectory.truncation = "max_turns"
    if trajectory.env_error is None:
        printer.line("observation", observation, "final state")
    printer.outcome(trajectory)
    return trajectory
