"""``EnvironmentPool``: one environment per episode of a batch, reused across batches."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .base import Environment


class EnvironmentPool:
    """Environments built by ``factory`` when first needed and reused by later batches.

    An environment whose call timed out may still be running in the thread that was left waiting for it
    (see ``trl_starpo.rollout.env_calls``): ``discard_timed_out`` drops it, unclosed, and the next batch gets a new one.
    """

    def __init__(self, factory: Callable[[], Environment]):
        self.factory = factory
        self._environments: list[Environment | None] = []

    def take(self, size: int) -> list[Environment]:
        """The first ``size`` environments, building the missing ones."""
        while len(self._environments) < size:
            self._environments.append(None)
        for i in range(size):
            if self._environments[i] is None:
                self._environments[i] = self.factory()
        return list(self._environments[:size])

    def discard_timed_out(self, trajectories: Sequence[Any]) -> int:
        """Drop the environment of each trajectory (by position, as played) that ended ``"env_timeout"``; returns how
        many were dropped."""
        dropped = [i for i, t in enumerate(trajectories[: len(self._environments)]) if t.truncation == "env_timeout"]
        for i in dropped:
            self._environments[i] = None
        return len(dropped)

    def close(self) -> None:
        """Close every environment the pool holds."""
        for env in self._environments:
            close = getattr(env, "close", None)
            if callable(close):
                close()
        self._environments.clear()
