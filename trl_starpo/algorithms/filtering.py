"""Trajectory filters of StarPO-S. Each returns a weight per trajectory of a generation batch: 1 trains it as it
is, 0 drops it, a value in between scales its advantages down.

The trainer applies the weights by scaling the trajectories' advantages and zeroing the dropped ones' loss masks
rather than removing their rows: every process keeps the same number of rows, so gradient accumulation,
``steps_per_generation`` chunking and DDP/FSDP collectives see the batch shapes they expect, and the dropped rows add
nothing to the loss or to the token count it is normalized by (the loss is rescaled so that the kept rows get the
update they would get alone; see ``StarPOTrainer._compute_loss``). The price is the compute spent on the dropped
rows' forward and backward passes.
"""

from __future__ import annotations

import math

import torch

FILTERS = ("none", "outlier_clip", "outlier", "variance")


def outlier_filter(returns: torch.Tensor, num_std: float = 2.0) -> torch.Tensor:
    """Keep trajectories whose return lies within ``num_std`` standard deviations of the batch mean (the
    specification's StarPO-S filter, as written).

    The standard deviation is the population one over the whole batch; when it is 0 every trajectory is kept. On
    sparse 0/1 rewards this drops every success while fewer than about 20% of the batch succeed (a success sits
    ``sqrt((1 - p) / p)`` standard deviations above the mean: 3.9 at 1/16, 2.1 at 3/16); ``outlier_clip_weights``
    keeps them.

    Args:
        returns: ``(N,)`` episode returns of the whole (gathered) batch.
        num_std: Width of the kept band, in standard deviations.

    Returns:
        ``(N,)`` bool mask, True for kept trajectories.
    """
    std = returns.std(unbiased=False)
    if std == 0:
        return torch.ones_like(returns, dtype=torch.bool)
    return (returns - returns.mean()).abs() <= num_std * std


def outlier_clip_weights(returns: torch.Tensor, group_size: int, num_std: float = 2.0) -> torch.Tensor:
    """Bound each trajectory's pull without dropping the rare ones: weight ``min(1, num_std / |z|)``, where ``z`` is
    its return's distance from its group's mean in units of the group's (population) standard deviation.

    Under group-relative advantages this clips a trajectory's advantage at ``num_std`` group standard deviations.
    Unlike the batch outlier filter it never removes a trajectory, so the one success of a group that has one keeps
    part of its credit (a z-score test removes exactly the rare outcomes, which on sparse rewards are the signal).

    Args:
        returns: ``(N,)`` returns, consecutive runs of ``group_size`` sharing a task.
        group_size: Trajectories per task.
        num_std: Deviation, in group standard deviations, above which a trajectory's weight shrinks.

    Returns:
        ``(N,)`` float weights in ``(0, 1]``.
    """
    if returns.numel() % group_size != 0:
        raise ValueError(f"{returns.numel()} returns do not split into groups of {group_size}.")
    grouped = returns.float().view(-1, group_size)
    std = grouped.std(dim=1, unbiased=False, keepdim=True)
    z = ((grouped - grouped.mean(dim=1, keepdim=True)) / std.clamp(min=1e-12)).abs()
    weights = torch.where(std > 0, (num_std / z.clamp(min=1e-12)).clamp(max=1.0), torch.ones_like(z))
    return weights.view(-1)


def variance_filter(
    returns: torch.Tensor, group_size: int, keep_fraction: float = 0.25, drop_zero_variance: bool = False
) -> torch.Tensor:
    """RAGEN's uncertainty filter: keep the task groups whose returns vary most, as whole groups.

    Groups are ranked by the standard deviation of their returns and the top ``max(1, floor(keep_fraction * G))`` of
    the ``G`` groups are kept (ties broken by group order). With ``drop_zero_variance``, groups whose returns are all
    equal are dropped even when ranked in the top fraction; they carry no learning signal under group-relative
    advantages.

    Args:
        returns: ``(N,)`` returns, consecutive runs of ``group_size`` sharing a task.
        group_size: Trajectories per task.
        keep_fraction: Fraction of groups kept, in (0, 1].

    Returns:
        ``(N,)`` bool mask.
    """
    if returns.numel() % group_size != 0:
        raise ValueError(f"{returns.numel()} returns do not split into groups of {group_size}.")
    group_std = returns.view(-1, group_size).std(dim=1, unbiased=False)
    num_groups = group_std.numel()
    num_kept = max(1, math.floor(keep_fraction * num_groups + 1e-9))
    # A stable sort on -std keeps the earlier group first among equals.
    order = torch.sort(-group_std, stable=True).indices
    keep_group = torch.zeros(num_groups, dtype=torch.bool, device=returns.device)
    keep_group[order[:num_kept]] = True
    if drop_zero_variance:
        keep_group &= group_std > 0
    return keep_group.repeat_interleave(group_size)


def trajectory_filter_weights(
    name: str,
    returns: torch.Tensor,
    group_size: int,
    *,
    num_std: float = 2.0,
    keep_fraction: float = 0.25,
    drop_zero_variance: bool = False,
) -> torch.Tensor:
    """The ``(N,)`` float weights of the filter called ``name`` (one of ``FILTERS``): 0 drops a trajectory."""
    if name == "none":
        return torch.ones_like(returns, dtype=torch.float32)
    if name == "outlier_clip":
        return outlier_clip_weights(returns, group_size, num_std)
    if name == "outlier":
        return outlier_filter(returns, num_std).float()
    if name == "variance":
        return variance_filter(returns, group_size, keep_fraction, drop_zero_variance).float()
    raise ValueError(f"Unknown trajectory filter {name!r}; choose one of {FILTERS}.")
