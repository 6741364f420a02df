"""Training survives a non-finite loss or gradient: that optimizer step is skipped and logged, and the run goes on.

One bad batch (a NaN or infinite reward from an environment, an overflow) would otherwise write NaN into every weight
and into the optimizer's moments, and the run would go on training a broken model without a word.
"""

from __future__ import annotations

import torch
from accelerate.logging import get_logger
from transformers import TrainerCallback

logger = get_logger(__name__)

SKIPPED_METRIC = "nonfinite/skipped"
"""Logged for every optimizer step: 1 when it was skipped, else 0 (averaged over a logging window: the fraction)."""


def all_finite(gradients: list[torch.Tensor]) -> torch.Tensor:
    """A 0-d bool tensor: whether every entry of ``gradients`` is finite (without a host sync)."""
    if not gradients:
        return torch.tensor(True)
    return torch.isfinite(torch.nn.utils.get_total_norm(gradients))


class NonFiniteGuard(TrainerCallback):
    """Skips the optimizer step of an accumulation window whose loss or gradients hold a NaN or an infinity.

    The trainer reports each micro-batch's loss to :meth:`observe_loss`; before each optimizer step the guard also
    checks the gradients (after clipping and the processes' all-reduce). When anything is not finite on any process,
    every process drops its gradients, so the optimizer changes nothing (torch optimizers skip parameters without a
    gradient) and its state stays as it was; a warning and ``nonfinite/skipped`` are logged, and training goes on
    with the next batch. The learning-rate schedule advances as for any step. ``skipped_steps`` lists the global
    steps skipped. (DeepSpeed skips overflowing steps itself; its gradients are not visible here.)
    """

    def __init__(self, trainer):
        self.trainer = trainer
        self.skipped_steps: list[int] = []
        self._finite_losses = torch.tensor(True)

    def observe_loss(self, loss: torch.Tensor) -> None:
        self._finite_losses = self._finite_losses.to(loss.device) & torch.isfinite(loss.detach()).all()

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        trainer = self.trainer
        parameters = [p for p in trainer.model.parameters() if p.grad is not None]
        device = trainer.accelerator.device
        finite = all_finite([p.grad for p in parameters]).to(device) & self._finite_losses.to(device)
        self._finite_losses = torch.tensor(True)
        bad_processes = trainer.accelerator.reduce((~finite).float(), reduction="sum")
        skipped = bool(bad_processes.item())
        trainer.log_metric(SKIPPED_METRIC, float(skipped))
        if skipped:
            for parameter in parameters:
                parameter.grad = None
            step = state.global_step + 1
            self.skipped_steps.append(step)
            logger.warning(f"Step {step}: the loss or the gradients are not finite (NaN or inf); the optimizer step is "
                           "skipped and training goes on.")
