"""An OpenEnv environment server as a StarPO text environment, through OpenEnv's own client.

OpenEnv (``pip install openenv-core``) serves an environment over a WebSocket: each client connection is one
session with its own environment instance on the server, driven by ``reset(seed=..., episode_id=..., **kwargs)``
and ``step(action)``, each answered with an observation, a reward and ``done``. TRL, SkyRL and ROLL speak the same
protocol.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ..base import TextEnvironment

MAX_ACTION_CHARS = 4000
"""Longer action texts are invalid without being sent."""

_VALIDATION_ERROR = "VALIDATION_ERROR"
"""The error code an OpenEnv server answers when an action does not fit its action model (nothing is stepped)."""


class OpenEnvAdapter(TextEnvironment):
    """One session with an OpenEnv environment server.

    The agent's action text becomes an action with ``action_from_text`` (by default ``{action_field: text}``, the
    shape of OpenEnv's text environments, e.g. ``{"message": text}``), and each observation becomes text with
    ``observation_to_text`` (by default the ``observation_field`` of the observation, else the observation as JSON).
    An action the adapter cannot build, or that the server rejects as not fitting its action model, is an invalid
    action: nothing is stepped, reward 0, ``info["action_is_valid"]`` False. Any other server error raises, which
    fails the episode (not the run). ``done`` ends the episode (``terminated``); the reward is the server's (``None``
    counts as 0).

    Args:
        base_url: The server, e.g. ``http://127.0.0.1:8000`` (``ws://`` works too).
        action_field: The action model's text field, for the default ``action_from_text``.
        action_from_text: Builds the action (a dict, or the client's action model) from the agent's text; it may
            raise on text it cannot read.
        observation_field: The observation's text field, for the default ``observation_to_text``.
        observation_to_text: Writes an observation (a dict with ``GenericEnvClient``) as text.
        client_class: An ``openenv.core.EnvClient`` subclass, such as an environment package's typed client;
            ``GenericEnvClient`` (plain dicts, no environment code installed locally) by default.
        system_prompt: The task and rules, shown once before the first observation.
        action_description: The valid actions in a few words.
        is_success: ``(reward, done, observation) -> bool`` after a step; by default ``done and reward > 0``.
        connect_timeout_s, message_timeout_s: The client's limits; a server that does not answer in time fails
            the episode.

    The connection opens on the first ``reset`` and closes with ``close``. A task row's ``seed`` and ``task_id``
    (as ``episode_id``) go to the server's ``reset``, with the row's other columns, which the server passes on to
    its environment's ``reset`` when it takes them by name.
    """

    def __init__(
        self,
        base_url: str,
        *,
        action_field: str | None = None,
        action_from_text: Callable[[str], Any] | None = None,
        observation_field: str | None = None,
        observation_to_text: Callable[[Any], str] | None = None,
        client_class: type | None = None,
        system_prompt: str = "",
        action_description: str = "",
        is_success: Callable[[float, bool, Any], bool] | None = None,
        connect_timeout_s: float = 10.0,
        message_timeout_s: float = 60.0,
    ):
        if (action_field is None) == (action_from_text is None):
            raise ValueError("Pass exactly one of action_field (the action's text field, e.g. 'message') and "
                             "action_from_text (text -> action).")
        if client_class is None:
            from openenv.core import GenericEnvClient

            client_class = GenericEnvClient
        self.base_url = base_url
        self.action_from_text = action_from_text or (lambda text: {action_field: text})
        self.observation_to_text = observation_to_text or (lambda observation: _field_or_json(observation,
                                                                                               observation_field))
        self.system_prompt = system_prompt
        self.action_description = action_description or (f"the text of the {action_field!r} field" if action_field
                                                          else "")
        self.is_success = is_success or (lambda reward, done, observation: done and reward > 0)
        self._client = client_class(base_url=base_url, connect_timeout_s=connect_timeout_s,
                                    message_timeout_s=message_timeout_s).sync()
        self._connected = False
        self._observation: Any = None
        self._text = ""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Start an episode on the server with the task row's seed, id and columns."""
        task = dict((options or {}).get("task") or {})
        kwargs = {**task, "seed": task.get("seed", seed)}
        if "task_id" in task:
            kwargs["episode_id"] = str(task["task_id"])
        if not self._connected:
            self._client.connect()
            self._connected = True
        result = self._client.reset(**{key: value for key, value in kwargs.items() if value is not None})
        self._observation, self._text = result.observation, self.observation_to_text(result.observation)
        return self._text, {key: task[key] for key in ("task_id", "seed") if key in task}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Send the action built from ``action``; an action the server rejects leaves the episode where it was."""
        error = None
        if len(action) > MAX_ACTION_CHARS:
            error = f"longer than {MAX_ACTION_CHARS} characters"
        else:
            try:
                result = self._client.step(self.action_from_text(action))
            except RuntimeError as server_error:
                if _VALIDATION_ERROR not in str(server_error):
                    raise
                error = f"the server rejected it: {server_error}"
            except (ValueError, TypeError, KeyError) as parse_error:  # action_from_text could not read the text
                error = f"cannot read {action.strip()[:40]!r}: {parse_error}"
        if error is not None:
            feedback = f"Invalid action ({error}). {self.action_description}\n{self._text}".strip()
            return feedback, 0.0, False, False, self.step_info(valid=False, effective=False, success=False)
        reward, done = float(result.reward or 0.0), bool(result.done)
        effective = result.observation != self._observation
        self._observation, self._text = result.observation, self.observation_to_text(result.observation)
        success = bool(self.is_success(reward, done, result.observation))
        return self._text, reward, done, False, self.step_info(valid=True, effective=effective, success=success)

    def close(self) -> None:
        """Close the session (and the server, when the client started one)."""
        self._client.close()
        self._connected = False


def _field_or_json(observation: Any, field: str | None) -> str:
    data = observation.model_dump() if hasattr(observation, "model_dump") else observation
    if field is not None:
        return str(data[field])
    return json.dumps(data, sort_keys=True, default=str) if isinstance(data, dict) else str(data)
