"""Any gymnasium environment as a StarPO text environment."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..base import TextEnvironment

MAX_ACTION_CHARS = 1000
"""Longer action texts are invalid without being parsed."""


class GymnasiumAdapter(TextEnvironment):
    """A ``gymnasium.Env`` that speaks text: observations are written with ``observation_to_text`` and each action
    text is read with ``parse_action`` and checked with the action space's ``contains``.

    An action text that does not parse (``parse_action`` raises or returns ``None``), is longer than
    ``MAX_ACTION_CHARS`` or falls outside the action space is an invalid action: the environment is not stepped, the
    reward is 0 and ``info["action_is_valid"]`` is False. Rewards, ``terminated`` and ``truncated`` are the
    environment's own (wrap it in ``gymnasium.wrappers.TimeLimit`` to bound episodes).

    Args:
        env: The environment, or a registered id for ``gymnasium.make(env, **make_kwargs)``. The adapter owns it
            (``close`` closes it); create one adapter per episode played at once.
        observation_to_text: Writes an observation as the text the agent reads; ``str`` by default. When it needs
            more than the observation (the map of a grid world, say), wrap the environment in a gymnasium
            ``ObservationWrapper`` that adds it.
        parse_action: Reads an action from the agent's text; it may raise on text it cannot read. By default a
            ``Discrete`` space reads the names in ``action_names`` (case-insensitive) or else integers.
        action_names: Names of the actions of a ``Discrete`` space, in order (``["Left", "Down", ...]``).
        system_prompt: The task and rules, shown once before the first observation.
        action_description: The valid actions in a few words; by default the action names, or the integer range of
            a ``Discrete`` space.
        example_action: One action the response format's example shows (``<answer>Left</answer>``); by default the
            first action of a ``Discrete`` space read by the default parser. Without one, a small model from
            scratch mostly answers with something else than an action.
        is_success: ``(reward, terminated, info) -> bool`` after a step; by default ``info["is_success"]`` where
            the environment reports it, else ``terminated and reward > 0``.
        make_kwargs: Keyword arguments of ``gymnasium.make`` when ``env`` is an id.

    With a ``Discrete`` space read by the default parser the adapter also offers ``admissible_actions()`` (every
    action name, or number), so ``trl-starpo eval --policy random`` has a baseline.
    """

    def __init__(
        self,
        env: Any,
        *,
        observation_to_text: Callable[[Any], str] = str,
        parse_action: Callable[[str], Any] | None = None,
        action_names: Sequence[str] | None = None,
        system_prompt: str = "",
        action_description: str | None = None,
        example_action: str | None = None,
        is_success: Callable[[float, bool, dict], bool] | None = None,
        **make_kwargs: Any,
    ):
        import gymnasium as gym

        self.env = gym.make(env, **make_kwargs) if isinstance(env, str) else env
        space = self.env.action_space
        discrete = isinstance(space, gym.spaces.Discrete)
        if action_names is not None:
            if not discrete or len(action_names) != space.n:
                raise ValueError(f"action_names needs a Discrete action space of {len(action_names)} actions, got "
                                 f"{space}.")
            if len({name.strip().casefold() for name in action_names}) != len(action_names):
                raise ValueError(f"action_names must be distinct (case-insensitive): {list(action_names)}.")
        if parse_action is None and not discrete:
            raise ValueError(f"Pass parse_action: text -> action for the action space {space}; only a Discrete space "
                             "has a default parser.")
        self.observation_to_text = observation_to_text
        self.action_names = list(action_names) if action_names is not None else None
        self.parse_action = parse_action or self._parse_discrete
        self.system_prompt = system_prompt
        self.action_description = action_description or self._describe_actions(space)
        self.is_success = is_success or _default_success
        if parse_action is not None or not discrete:
            self.admissible_actions = None  # the random baseline needs a finite set of texts the parser reads
        self.example_action = example_action or (self.admissible_actions()[0] if self.admissible_actions else None)
        self._observation = None
        self._text = ""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Reset the environment with the task row's ``seed`` (else ``seed``) and its ``options`` column."""
        task = (options or {}).get("task") or {}
        seed = task.get("seed", seed)
        observation, info = self.env.reset(seed=seed, options=task.get("options"))
        self._observation, self._text = observation, self.observation_to_text(observation)
        return self._text, {**info, **{key: task[key] for key in ("task_id", "seed") if key in task}}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Parse ``action`` and step the environment with it, or report it invalid without stepping."""
        parsed, error = self._read(action)
        if error is not None:
            feedback = f"Invalid action ({error}). Valid actions: {self.action_description}.\n{self._text}"
            return feedback, 0.0, False, False, self.step_info(valid=False, effective=False, success=False)
        observation, reward, terminated, truncated, info = self.env.step(parsed)
        reward, terminated, truncated = float(reward), bool(terminated), bool(truncated)
        effective = not _same(observation, self._observation)
        self._observation, self._text = observation, self.observation_to_text(observation)
        success = bool(self.is_success(reward, terminated, info))
        return self._text, reward, terminated, truncated, {
            **info, **self.step_info(valid=True, effective=effective, success=success)}

    def admissible_actions(self) -> list[str]:
        """Every action of the ``Discrete`` space, as the default parser reads it (names, else numbers)."""
        space = self.env.action_space
        return list(self.action_names or (str(space.start + i) for i in range(space.n)))

    def close(self) -> None:
        """Close the gymnasium environment."""
        self.env.close()

    def _read(self, text: str) -> tuple[Any, str | None]:
        if len(text) > MAX_ACTION_CHARS:
            return None, f"longer than {MAX_ACTION_CHARS} characters"
        try:
            action = self.parse_action(text)
        except Exception as error:  # any failure to read the model's text is that action's fault, not the run's
            return None, f"cannot read {text.strip()[:40]!r}: {error}"
        if action is None or not self.env.action_space.contains(action):
            return None, f"{text.strip()[:40]!r} is not in the action space"
        return action, None

    def _parse_discrete(self, text: str) -> int:
        space = self.env.action_space
        if self.action_names is not None:
            names = [name.strip().casefold() for name in self.action_names]
            return int(space.start) + names.index(text.strip().casefold())
        return int(text.strip())

    def _describe_actions(self, space) -> str:
        if self.action_names is not None:
            return ", ".join(self.action_names)
        if hasattr(space, "n") and hasattr(space, "start"):
            return f"an integer from {space.start} to {space.start + space.n - 1}"
        return f"an action of the space {space}"


def _default_success(reward: float, terminated: bool, info: dict) -> bool:
    return bool(info["is_success"]) if "is_success" in info else terminated and reward > 0


def _same(a: Any, b: Any) -> bool:
    import numpy as np

    try:
        return bool(np.array_equal(np.asarray(a), np.asarray(b)))
    except (TypeError, ValueError):  # observations numpy cannot compare (dicts of arrays, text): compare their text
        return repr(a) == repr(b)
