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
    """Spread advantages over tokens, weighted by segment.

    Thinking tokens get ``thinking_weight``, action tokens ``action_weight``, and every other token (prompt,
    observation, template glue, padding) 0. Since the clipped objective is linear in the advantage for a
    non-negative weight, this scales each token's loss by its weight.

    Args:
        advantages: ``(B,)`` (one per trajectory) or ``(B, T)`` (one per token, e.g. from GAE).
        segments: ``(B, T)`` ``Segment`` labels (padding may be any value other than THINKING and ACTION).

    Returns:
        ``(B, T)`` per-token advantages.
    """
    weights = torch.zeros_like(segments, dtype=advantages.dtype)
    weights[segments == Segment.THINKING] = thinking_weight
    weights[segments == Segment.ACTION] = action_weight
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1)
    return advantages * weights


def masked_gae(
    rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0, lam: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimation over the masked positions only.

    Positions where ``mask`` is 0 (environment observations, template glue, padding) are skipped: the step after a
    model token is the next model token, wherever it lies, and the value after the last one is 0 (the episode is
    over or, when truncated, not bootstrapped).

    ``delta_k = r_k + gamma * V_{k+1} - V_k`` and ``A_k = delta_k + gamma * lam * A_{k+1}`` along the model tokens.

    Args:
        rewards: ``(B, T)`` rewards, non-zero only on model tokens (a turn's reward on its last generated token).
        values: ``(B, T)`` value estimates of the state before each token.
        mask: ``(B, T)`` 1 on model tokens.

    Returns:
        ``(advantages, returns)``, both ``(B, T)`` and 0 off the mask; ``returns = advantages + values``.
    """
    mask = mask.to(values.dtype)
    advantages = torch.zeros_like(values)
    next_value = torch.zeros_like(values[:, 0])
    next_advantage = torch.zeros_like(values[:, 0])
    for t in reversed(range(values.size(1))):
        on = mask[:, t] > 0
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        advantage = delta + gamma * lam * next_advantage
        advantages[:, t] = torch.where(on, advantage, torch.zeros_like(advantage))
        next_value = torch.where(on, values[:, t], next_value)
        next_advantage = torch.where(on, advantage, next_advantage)
    return advantages, (advantages + values) * mask


def turn_level_gae(
    turn_rewards: torch.Tensor, turn_values: torch.Tensor, turn_mask: torch.Tensor, gamma: float = 1.0, lam: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE with turns as the time steps (the bi-level estimator's outer level).

    ``V_i`` is the value of the state a turn starts from (before its first generated token) and ``r_i`` the turn's
    reward; ``gamma`` discounts from one turn to the next. The caller spreads each turn's advantage and return over
    that turn's generated tokens.

    Args:
        turn_rewards, turn_values: ``(B, K)`` per turn, padded.
        turn_mask: ``(B, K)`` 1 on real turns (a prefix of each row).

    Returns:
        ``(advantages, returns)``, ``(B, K)``.
    """
    return masked_gae(turn_rewards, turn_values, turn_mask, gamma, lam)


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, reduce=None, eps: float = 1e-8) -> torch.Tensor:
    """Normalize the masked entries to mean 0 and std 1 (the statistics over all processes when ``reduce`` sums a
    tensor across them, e.g. ``accelerator.reduce``); entries off the mask become 0."""
    mask = mask.to(values.dtype)
    totals = torch.stack([(values * mask).sum(), (values.pow(2) * mask).sum(), mask.sum()])
    if reduce is not None:
        totals = reduce(totals)
    count = totals[2].clamp(min=1.0)
    mean = totals[0] / count
    variance = (totals[1] / count - mean.pow(2)).clamp(min=0.0)
    return (values - mean) * torch.rsqrt(variance + eps) * mask
