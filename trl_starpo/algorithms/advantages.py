"""Advantage estimators. Pure functions on tensors."""

from __future__ import annotations

import torch

from ..trajectory import Segment


def group_relative_advantages(returns: torch.Tensor, group_size: int, scale: str = "group", eps: float = 1e-4):
    """StarPO's estimator: each trajectory's return minus its group's mean, optionally divided by a std.

    Args:
        returns: ``(N,)`` episode returns, ordered so that consecutive runs of ``group_size`` share a task.
        group_size: Trajectories per task.
        scale: ``"group"`` divides by the group's std, ``"batch"`` by the whole batch's std, ``"none"`` not at
            all (the stds are unbiased, as in TRL's GRPO).
        eps: Added to the std, so a group whose returns are all equal gets advantage 0.

    Returns:
        ``(N,)`` advantages.
    """
    if returns.dim() != 1 or returns.numel() % group_size != 0:
        raise ValueError(f"expected a 1-D tensor with a multiple of {group_size} returns, got {tuple(returns.shape)}")
    grouped = returns.view(-1, group_size)
    centered = (grouped - grouped.mean(dim=1, keepdim=True)).view(-1)
    if scale == "none":
        return centered
    if scale == "group":
        std = grouped.std(dim=1, keepdim=True).expand_as(grouped).reshape(-1) if group_size > 1 else 0.0
    elif scale == "batch":
        std = returns.std() if returns.numel() > 1 else 0.0
    else:
        raise ValueError(f"scale must be 'group', 'batch' or 'none', got {scale!r}")
    return centered / (std + eps)


def token_advantages(
    advantages: torch.Tensor, segments: torch.Tensor, thinking_weight: float = 1.0, action_weight: float = 1.0
) -> torch.Tensor:
    """Spread one advantage per trajectory over its tokens, weighted by segment.

    Thinking tokens get ``thinking_weight``, action tokens ``action_weight``, and every other token (prompt,
    observation, template glue, padding) 0. Since the clipped objective is linear in the advantage for a
    non-negative weight, this scales each token's loss by its weight.

    Args:
        advantages: ``(B,)``.
        segments: ``(B, T)`` ``Segment`` labels (padding may be any value other than THINKING and ACTION).

    Returns:
        ``(B, T)`` per-token advantages.
    """
    weights = torch.zeros_like(segments, dtype=advantages.dtype)
    weights[segments == Segment.THINKING] = thinking_weight
    weights[segments == Segment.ACTION] = action_weight
    return advantages.unsqueeze(1) * weights
