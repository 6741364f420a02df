"""The episode limits and answer format of StarPO rollouts, and reading them back from a saved agent."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from ..json_files import read_json_mapping
from .context import CONTEXT_POLICIES
from .env_calls import check_env_timeout

AGENT_FILE = "starpo_agent.json"
"""Written beside a saved agent (see ``trl_starpo.monitor.callbacks``): its environment, preset and rollout
settings."""


@dataclass
class RolloutSettings:
    """Episode limits and answer format of StarPO rollouts: the fields of ``StarPOConfig`` the collector reads.

    The defaults are ``StarPOConfig``'s. A saved agent records the values it was trained with in
    ``starpo_agent.json``; :meth:`from_pretrained` reads them so that evaluation plays the episodes training did.
    """

    max_turns: int = 5
    max_actions_per_turn: int = 2
    max_actions_per_trajectory: int | None = 10
    max_tokens_per_turn: int = 128
    max_context_length: int = 2048
    enable_thinking: bool = True
    prefill_opening_tag: bool = True
    format_penalty: float = -0.1
    invalid_action_penalty: float | None = None  # None: format_penalty
    action_separator: str = "||"
    env_timeout: float | None = None
    context_policy: str = "full"
    history_turns: int = 2
    history_thinking: bool = False

    def __post_init__(self):
        for name in ("max_turns", "max_actions_per_turn", "max_tokens_per_turn", "max_context_length"):
            _require_count(name, getattr(self, name))
        if self.max_actions_per_trajectory is not None:
            _require_count("max_actions_per_trajectory", self.max_actions_per_trajectory, " (or None)")
        if self.max_context_length <= self.max_tokens_per_turn:
            raise ValueError(
                f"max_context_length ({self.max_context_length}) must exceed max_tokens_per_turn "
                f"({self.max_tokens_per_turn}) to leave room for the prompt; raise max_context_length."
            )
        if not isinstance(self.format_penalty, (int, float)) or self.format_penalty > 0:
            raise ValueError(f"format_penalty must be <= 0 (a penalty), got {self.format_penalty!r}.")
        if self.invalid_action_penalty is not None and (
            not isinstance(self.invalid_action_penalty, (int, float)) or self.invalid_action_penalty > 0
        ):
            raise ValueError(f"invalid_action_penalty must be <= 0 (a penalty), got {self.invalid_action_penalty!r}.")
        if not isinstance(self.action_separator, str) or not self.action_separator:
            raise ValueError("action_separator must be a non-empty string, for example '||'.")
        check_env_timeout(self.env_timeout)
        if self.context_policy not in CONTEXT_POLICIES:
            raise ValueError(f"context_policy must be one of {CONTEXT_POLICIES}, got {self.context_policy!r}.")
        _require_count("history_turns", self.history_turns)

    @classmethod
    def from_config(cls, config: Any) -> RolloutSettings:
        """Take the settings from any object with these attributes (a ``StarPOConfig``, a namespace)."""
        return cls(**{f.name: getattr(config, f.name) for f in fields(cls) if hasattr(config, f.name)})

    @classmethod
    def from_pretrained(cls, path: str | Path | None) -> RolloutSettings:
        """The settings recorded in ``<path>/starpo_agent.json``, or the defaults when there is none.

        An agent recorded before ``invalid_action_penalty`` existed was trained without it, so it plays with 0.
        """
        info = read_agent_info(path)
        known = {f.name for f in fields(cls)}
        recorded = info.get("rollout", {})
        if recorded and "invalid_action_penalty" not in recorded:
            recorded = {**recorded, "invalid_action_penalty": 0.0}
        return cls(**{k: v for k, v in recorded.items() if k in known})

    def updated(self, **overrides: Any) -> RolloutSettings:
        """A copy with the given fields replaced; ``None`` values are ignored."""
        values = asdict(self)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return RolloutSettings(**values)

    @property
    def action_budget(self) -> int:
        return self.max_actions_per_trajectory or self.max_turns * self.max_actions_per_turn


def _require_count(name: str, value: Any, alternative: str = "") -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}.")
    if value < 1:
        raise ValueError(f"{name} must be at least 1{alternative}, got {value}.")


CONTEXT_POLICY_HELP = (
    "What the model is given each turn: 'full', the whole episode so far (one training sample per trajectory); "
    "'window', the system prompt, the task and the last `history_turns` turns, each turn trained as its own sample "
    "(for long episodes: a turn's cost stays flat)."
)
HISTORY_TURNS_HELP = "Turns a 'window' context keeps; the last of them ends with the current observation."
HISTORY_THINKING_HELP = "Keep earlier turns' thinking in a 'window' context (by default only their answers)."


@dataclass
class RolloutArguments:
    """The rollout fields of a config whose training plays or replays StarPO episodes (the SFT warm start, trajectory
    DPO): the names, defaults and meaning of ``StarPOConfig``'s, so both runs can share one YAML block."""

    max_turns: int = field(default=5, metadata={"help": "Turns per episode before it is truncated."})
    max_actions_per_turn: int = field(default=2, metadata={"help": "Actions one answer may hold."})
    max_actions_per_trajectory: int | None = field(default=10, metadata={"help": "Actions sent per episode."})
    max_tokens_per_turn: int = field(default=128, metadata={"help": "New tokens the model may generate per turn."})
    max_context_length: int = field(default=2048, metadata={"help": "Tokens per episode, prompt included."})
    enable_thinking: bool = field(default=True, metadata={"help": "Ask for <think>…</think> before the answer."})
    prefill_opening_tag: bool = field(default=True, metadata={"help": "The opening tag is a prompt token."})
    format_penalty: float = field(default=-0.1, metadata={"help": "Reward added to a malformed turn (<= 0)."})
    invalid_action_penalty: float | None = field(
        default=None, metadata={"help": "Reward added to a turn with an invalid action (<= 0); default: format_penalty."}
    )
    action_separator: str = field(default="||", metadata={"help": "Separator between actions in one answer."})
    env_timeout: float | None = field(
        default=None, metadata={"help": "Seconds one environment reset or step may take (None: no limit)."}
    )
    context_policy: str = field(default="full", metadata={"help": CONTEXT_POLICY_HELP})
    history_turns: int = field(default=2, metadata={"help": HISTORY_TURNS_HELP})
    history_thinking: bool = field(default=False, metadata={"help": HISTORY_THINKING_HELP})

    @property
    def rollout_settings(self) -> RolloutSettings:
        """These fields as ``RolloutSettings``."""
        return RolloutSettings.from_config(self)


def read_agent_info(path: str | Path | None) -> dict[str, Any]:
    """The contents of ``starpo_agent.json`` of an agent (a local folder, or a Hub id when reachable or cached),
    or ``{}`` when it has none."""
    if path is None:
        return {}
    if Path(path).is_dir():
        file = Path(path, AGENT_FILE)
        return parse_agent_info(file) if file.is_file() else {}
    try:
        from huggingface_hub import hf_hub_download

        file = Path(hf_hub_download(str(path), AGENT_FILE))
    except Exception:  # not a repo, no such file, or offline without a cached copy: the defaults apply
        return {}
    return parse_agent_info(file)


_AGENT_INFO_TYPES = {"environments": list, "rollout": dict, "training": dict, "validation": dict}


def parse_agent_info(file: Path) -> dict[str, Any]:
    """``starpo_agent.json`` as untrusted data: a JSON mapping whose sections have their types; anything else is a
    one-line ``ValueError``."""
    info = read_json_mapping(file)
    for name, kind in _AGENT_INFO_TYPES.items():
        if name in info and not isinstance(info[name], kind):
            raise ValueError(f"{file} is damaged: {name!r} must be a {'list' if kind is list else 'mapping'}, "
                             f"got {json.dumps(info[name])[:60]}.")
    return info
