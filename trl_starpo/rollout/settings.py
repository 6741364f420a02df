"""The episode limits and answer format of StarPO rollouts, and reading them back from a saved agent."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

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
    action_separator: str = "||"

    @classmethod
    def from_config(cls, config: Any) -> RolloutSettings:
        """Take the settings from any object with these attributes (a ``StarPOConfig``, a namespace)."""
        return cls(**{f.name: getattr(config, f.name) for f in fields(cls) if hasattr(config, f.name)})

    @classmethod
    def from_pretrained(cls, path: str | Path | None) -> RolloutSettings:
        """The settings recorded in ``<path>/starpo_agent.json``, or the defaults when there is none."""
        info = read_agent_info(path)
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in info.get("rollout", {}).items() if k in known})

    def updated(self, **overrides: Any) -> RolloutSettings:
        """A copy with the given fields replaced; ``None`` values are ignored."""
        values = asdict(self)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return RolloutSettings(**values)

    @property
    def action_budget(self) -> int:
        return self.max_actions_per_trajectory or self.max_turns * self.max_actions_per_turn


def read_agent_info(path: str | Path | None) -> dict[str, Any]:
    """The contents of ``starpo_agent.json`` of an agent (a local folder, or a Hub id when reachable or cached),
    or ``{}`` when it has none."""
    if path is None:
        return {}
    if Path(path).is_dir():
        file = Path(path, AGENT_FILE)
        return json.loads(file.read_text(encoding="utf-8")) if file.is_file() else {}
    try:
        from huggingface_hub import hf_hub_download

        return json.loads(Path(hf_hub_download(str(path), AGENT_FILE)).read_text(encoding="utf-8"))
    except Exception:  # not a repo, no such file, or offline without a cached copy: the defaults apply
        return {}
