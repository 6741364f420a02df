"""Moving per-turn quantities to and from the token axis of a padded completion batch.

Column ``j`` of a completion tensor is token ``prompt_length + j`` of its trajectory; a turn's generated tokens are
columns ``[response_start - prompt_length, response_end - prompt_length)``.
"""

from __future__ import annotations

import torch

from ..trajectory import Trajectory


def turn_spans(trajectory: Trajectory) -> list[tuple[int, int]]:
    """``(start, end)`` completion columns of each turn's generated tokens (empty when the turn generated none)."""
    offset = trajectory.prompt_length
    return [(turn.response_start - offset, turn.response_end - offset) for turn in trajectory.turns]


def token_rewards(trajectories: list[Trajectory], length: int, like: torch.Tensor) -> torch.Tensor:
    """``(B, length)`` with each turn's reward on the turn's last generated token (a turn that generated nothing
    gives its reward to the previous turn's last token, if any)."""
    rewards = torch.zeros(len(trajectories), length, dtype=like.dtype, device=like.device)
    for row, trajectory in enumerate(trajectories):
        last = None
        for (start, end), turn in zip(turn_spans(trajectory), trajectory.turns):
            if end > start:
                last = end - 1
            if last is not None:
                rewards[row, last] += turn.reward
    return rewards


def per_turn_tensor(
    trajectories: list[Trajectory], values: list[list[float]] | torch.Tensor, like: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad ragged per-turn values into ``(B, K)`` plus the ``(B, K)`` mask of real turns."""
    width = max((len(t.turns) for t in trajectories), default=0) or 1
    out = torch.zeros(len(trajectories), width, dtype=like.dtype, device=like.device)
    mask = torch.zeros_like(out)
    for row, (trajectory, row_values) in enumerate(zip(trajectories, values)):
        count = len(trajectory.turns)
        out[row, :count] = torch.as_tensor(row_values[:count], dtype=like.dtype, device=like.device)
        mask[row, :count] = 1
    return out, mask


def values_at_turn_starts(values: torch.Tensor, trajectories: list[Trajectory]) -> list[list[float]]:
    """Each turn's value at its first generated token (0 for a turn that generated nothing)."""
    return [
        [values[row, start].item() if end > start else 0.0 for start, end in turn_spans(trajectory)]
        for row, trajectory in enumerate(trajectories)
    ]


def spread_over_turns(per_turn: torch.Tensor, trajectories: list[Trajectory], length: int) -> torch.Tensor:
    """``(B, length)`` where every generated token of turn ``k`` holds ``per_turn[b, k]`` (0 elsewhere)."""
    out = torch.zeros(len(trajectories), length, dtype=per_turn.dtype, device=per_turn.device)
    for row, trajectory in enumerate(trajectories):
        for k, (start, end) in enumerate(turn_spans(trajectory)):
            out[row, start:end] = per_turn[row, k]
    return out
