"""Trajectory filters of StarPO-S. Each returns a boolean keep-mask over the trajectories of a generation batch.

The trainer applies a mask by zeroing the dropped trajectories' advantages and loss masks rather than removing their
rows: every process keeps the same number of rows, so gradient accumulation, ``steps_per_generation`` chunking and
DDP/FSDP collectives see the batch shapes they expect, and the dropped rows add nothing to the loss or to the token
count it is normalized by. The price is the compute spent on the dropped rows' forward and backward passes.
"""

from __future__ import annotations

import math

import torch

FILTERS = ("none", "outlier", "variance")


def outlier_filter(returns: torch.Tensor, num_std: float = 2.0) -> torch.Tensor:
    """Keep trajectories whose return lies within ``num_std`` standard deviations of the batch mean.

    The standard deviation is the population one over the whole batch; when it is 0 every trajectory is kept.

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


def trajectory_filter_mask(
    name: str,
    returns: torch.Tensor,
    group_size: int,
    *,
    num_std: float = 2.0,
    keep_fraction: float = 0.25,
    drop_zero_variance: bool = False,
) -> torch.Tensor:
    """The keep-mask of the filter called ``name`` (one of ``FILTERS``)."""
    if name == "none":
        return torch.ones_like(returns, dtype=torch.bool)
    if name == "outlier":
        return outlier_filter(returns, num_std)
    if name == "variance":
        return variance_filter(returns, group_size, keep_fraction, drop_zero_variance)
    raise ValueError(f"Unknown trajectory filter {name!r}; choose one of {FILTERS}.")
