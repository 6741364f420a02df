"""Per-trajectory rollout statistics; the trainer averages them over the batch and logs them under ``rollout/``."""

from __future__ import annotations

import math

from ..trajectory import Segment, Trajectory

STAT_NAMES = (
    "success",
    "return",
    "turns",
    "actions",
    "action_validity",
    "action_effectiveness",
    "format_error_rate",
    "dropped_actions",
    "response_tokens",
    "thinking_tokens",
    "action_tokens",
    "env_error",
    "env_timeout",
    "truncated",
    "context_truncated",
)


def trajectory_stats(trajectory: Trajectory) -> list[float]:
    """The statistics of one trajectory, in the order of ``STAT_NAMES``.

    ``action_validity`` and ``action_effectiveness`` are fractions of the actions sent to the environment (NaN when
    none was sent: averages over trajectories leave it out, see ``mean_stats``); ``format_error_rate`` is the
    fraction of malformed turns; token counts are per trajectory;
    ``env_error`` and ``env_timeout`` are 1 when the environment failed the trajectory (raised or broke the protocol;
    took longer than ``env_timeout``); ``truncated`` is 1 when the episode was cut short for any reason and
    ``context_truncated`` when the cause was ``max_context_length``.
    """
    turns = trajectory.turns
    actions = sum(len(turn.actions) for turn in turns)
    valid = sum(turn.num_valid_actions for turn in turns)
    effective = sum(turn.num_effective_actions for turn in turns)
    malformed = sum(not turn.format_ok for turn in turns)
    thinking = trajectory.count(Segment.THINKING)
    action = trajectory.count(Segment.ACTION)
    return [
        float(trajectory.success),
        trajectory.episode_return,
        float(len(turns)),
        float(actions),
        valid / actions if actions else math.nan,
        effective / actions if actions else math.nan,
        malformed / len(turns) if turns else 0.0,
        float(sum(turn.num_dropped_actions for turn in turns)),
        float(thinking + action),
        float(thinking),
        float(action),
        float(trajectory.truncation == "env_error"),
        float(trajectory.truncation == "env_timeout"),
        float(trajectory.truncation is not None),
        float(trajectory.truncation == "context"),
    ]


PER_ACTION = ("action_validity", "action_effectiveness")
"""Fractions of the actions sent: undefined (NaN) for a trajectory that sent none, left out of averages."""


def mean_stats(rows: list[list[float]]) -> dict[str, float]:
    """Each statistic of ``STAT_NAMES`` averaged over the trajectories' ``rows`` (``trajectory_stats``); the
    ``PER_ACTION`` ones over the trajectories that sent an action (NaN when none did)."""
    means = {}
    for name, column in zip(STAT_NAMES, zip(*rows)):
        known = [value for value in column if not (name in PER_ACTION and math.isnan(value))]
        means[name] = sum(known) / len(known) if known else math.nan
    return means
