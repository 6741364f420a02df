"""``EnvironmentPool``: one environment per episode of a batch, reused across batches."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from .base import Environment

logger = logging.getLogger(__name__)


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
        """Close every environment the pool holds (an environment whose ``close`` raises is logged and dropped, and
        the others are still closed); the next ``take`` builds new ones."""
        environments, self._environments = self._environments, []
        for env in environments:
            close = getattr(env, "close", None)
            if not callable(close):
                continue
            try:
                close()
            except Exception as error:  # an environment's bug must not hide the run's own outcome
                logger.warning("Closing environment %s failed: %s: %s", type(env).__name__, type(error).__name__, error)
