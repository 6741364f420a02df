"""Advantage estimators, all of one shape: ``estimator(batch, settings) -> Estimate``.

An estimator reads this process's trajectories (with the returns of all processes, and the value critic's
estimates when it uses one) and gives ``(B, T)`` advantages on the completion columns, non-zero only on model
tokens. The trainer picks one from ``ESTIMATORS`` by ``StarPOConfig.advantage_estimator``, then weights the
result by segment (``advantages.token_advantages``) and applies the filter and the thinking critic. The
formulas are in docs/algorithms.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..trajectory import Trajectory
from . import turns
from .advantages import group_relative_advantages, masked_gae, masked_whiten, turn_level_gae
from .gigpo import step_advantages, step_records


@dataclass
class EstimatorSettings:
    """The knobs of every estimator (each reads its own).

    Attributes:
        scale: How group-relative returns are scaled: ``"group"``, ``"batch"`` or ``"none"`` (GRPO's
            ``scale_rewards``); the episode level of ``group`` and ``gigpo``.
        gae_gamma, gae_lambda: GAE's discount and lambda (per token for ``gae``, per turn for ``turn_gae``).
        step_weight: GiGPO's weight ``w`` of the step-level advantage.
        step_gamma: GiGPO's discount of turn rewards in the step return.
        step_std: GiGPO divides step advantages by their step group's std.
    """

    scale: str = "group"
    gae_gamma: float = 1.0
    gae_lambda: float = 1.0
    step_weight: float = 1.0
    step_gamma: float = 0.95
    step_std: bool = False

    @classmethod
    def from_config(cls, args) -> EstimatorSettings:
        """The settings of a ``StarPOConfig``."""
        return cls(
            scale=args.scale_rewards,
            gae_gamma=args.gae_gamma,
            gae_lambda=args.gae_lambda,
            step_weight=args.gigpo_step_weight,
            step_gamma=args.gigpo_gamma,
            step_std=args.gigpo_step_std,
        )


@dataclass
class AdvantageBatch:
    """What an estimator reads.

    Attributes:
        trajectories: This process's trajectories, one per row.
        mask: ``(B, T)`` 1 on model tokens of the completion columns.
        returns: ``(N,)`` episode returns of all processes in global order, consecutive runs of ``group_size``
            sharing a task.
        offset: This process's first row in ``returns``.
        group_size: Trajectories per task.
        keep: ``(B,)`` the rows that train (the trajectory filter's mask); statistics over tokens use only these.
        values: ``(B, T)`` the value critic's estimate before each token (estimators with a critic).
        reduce: Sums a tensor over processes (``accelerator.reduce(t, "sum")``); ``None`` on one process.
        gather: Concatenates a list over processes in process order (``accelerate.utils.gather_object``); ``None``
            on one process.
    """

    trajectories: list[Trajectory]
    mask: torch.Tensor
    returns: torch.Tensor
    offset: int
    group_size: int
    keep: torch.Tensor | None = None
    values: torch.Tensor | None = None
    reduce: Callable[[torch.Tensor], torch.Tensor] | None = None
    gather: Callable[[list], list] | None = None

    @property
    def rows(self) -> slice:
        """This process's rows of the gathered batch."""
        return slice(self.offset, self.offset + len(self.trajectories))

    @property
    def trained(self) -> torch.Tensor:
        """``(B, T)`` the model tokens of the kept rows."""
        mask = self.mask.float()
        return mask if self.keep is None else mask * self.keep.unsqueeze(1).to(mask.dtype)


@dataclass
class Estimate:
    """An estimator's output: ``(B, T)`` advantages, the value targets a critic trains on (critic estimators), and
    scalar statistics to log."""

    advantages: torch.Tensor
    value_targets: torch.Tensor | None = None
    metrics: dict[str, float] = field(default_factory=dict)


Estimator = Callable[[AdvantageBatch, EstimatorSettings], Estimate]


def group_estimator(batch: AdvantageBatch, settings: EstimatorSettings) -> Estimate:
    """StarPO's: each trajectory's group-relative return on all of its model tokens."""
    advantages = group_relative_advantages(batch.returns, batch.group_size, scale=settings.scale)[batch.rows]
    return Estimate(advantages.unsqueeze(1) * batch.mask)


def _whitened(advantages: torch.Tensor, batch: AdvantageBatch) -> torch.Tensor:
    return masked_whiten(advantages, batch.trained, reduce=batch.reduce)


def gae_estimator(batch: AdvantageBatch, settings: EstimatorSettings) -> Estimate:
    """Token-level GAE over model tokens from the critic's values, whitened over the kept model tokens of all
    processes."""
    values, mask = _values(batch), batch.mask
    rewards = turns.token_rewards(batch.trajectories, mask.size(1), like=values)
    advantages, targets = masked_gae(rewards, values, mask, settings.gae_gamma, settings.gae_lambda)
    return Estimate(_whitened(advantages, batch), targets)


def turn_gae_estimator(batch: AdvantageBatch, settings: EstimatorSettings) -> Estimate:
    """GAE with turns as the steps (the value before each turn's first token), spread over each turn's tokens and
    whitened as ``gae_estimator``'s."""
    values, mask, trajectories = _values(batch), batch.mask, batch.trajectories
    length = mask.size(1)
    turn_rewards, turn_mask = turns.per_turn_tensor(
        trajectories, [[turn.reward for turn in t.turns] for t in trajectories], like=values
    )
    turn_values, _ = turns.per_turn_tensor(trajectories, turns.values_at_turn_starts(values, trajectories), like=values)
    turn_advantages, turn_returns = turn_level_gae(
        turn_rewards, turn_values, turn_mask, settings.gae_gamma, settings.gae_lambda
    )
    advantages = turns.spread_over_turns(turn_advantages, trajectories, length) * mask
    targets = turns.spread_over_turns(turn_returns, trajectories, length) * mask
    return Estimate(_whitened(advantages, batch), targets)


def gigpo_estimator(batch: AdvantageBatch, settings: EstimatorSettings) -> Estimate:
    """GiGPO: a turn's advantage is its trajectory's group-relative return plus ``step_weight`` times its
    step-level advantage (``algorithms.gigpo``); step groups are formed over the task group on all processes."""
    episode = group_relative_advantages(batch.returns, batch.group_size, scale=settings.scale)[batch.rows]
    records = [step_records(t, settings.step_gamma) for t in batch.trajectories]
    everyone = batch.gather(records) if batch.gather is not None else records
    step, sizes = step_advantages(everyone, batch.group_size, std=settings.step_std)
    per_turn = [
        [episode[row].item() + settings.step_weight * value for value in step[batch.offset + row]]
        for row in range(len(batch.trajectories))
    ]
    like = batch.mask.float()
    padded, _ = turns.per_turn_tensor(batch.trajectories, per_turn, like=like)
    advantages = turns.spread_over_turns(padded, batch.trajectories, batch.mask.size(1)) * batch.mask
    shared = sum(size for size in sizes if size > 1)
    metrics = {
        "gigpo/step_group_size": sum(sizes) / len(sizes) if sizes else float("nan"),
        "gigpo/grouped_turn_fraction": shared / sum(sizes) if sizes else float("nan"),
    }
    return Estimate(advantages, metrics=metrics)


def _values(batch: AdvantageBatch) -> torch.Tensor:
    if batch.values is None:
        raise ValueError("This estimator needs the value critic's estimates (AdvantageBatch.values).")
    return batch.values


ESTIMATORS: dict[str, Estimator] = {
    "group": group_estimator,
    "gae": gae_estimator,
    "turn_gae": turn_gae_estimator,
    "gigpo": gigpo_estimator,
}
"""The estimators by ``StarPOConfig.advantage_estimator`` name."""

CRITIC_ESTIMATORS = ("gae", "turn_gae")
"""The estimators that read a value critic's estimates (the trainer builds and trains one for them)."""
