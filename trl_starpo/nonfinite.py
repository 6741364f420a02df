"""Training survives a non-finite loss or gradient, and a run that never changed the model says so.

One bad batch (a NaN or infinite reward from an environment, an overflow) would otherwise write NaN into every weight
and into the optimizer's moments, and the run would go on training a broken model without a word: that optimizer step
is skipped and logged, and the run goes on. A run in which no optimizer step carried a finite, nonzero gradient (every
step skipped, or every group's returns alike so every advantage was 0) trained nothing: the guard counts the steps
that did, and ``nothing_trained_reason`` says why when none did.
"""

from __future__ import annotations

import torch
from accelerate.logging import get_logger
from transformers import TrainerCallback

logger = get_logger(__name__)

SKIPPED_METRIC = "nonfinite/skipped"
"""Logged for every optimizer step: 1 when it was skipped, else 0 (averaged over a logging window: the fraction)."""


class NothingTrainedError(RuntimeError):
    """Raised by the recipes when a run ended without one optimizer step that changed the model."""


def total_norm(gradients: list[torch.Tensor]) -> torch.Tensor:
    """The 2-norm of all of ``gradients`` as a 0-d tensor (0 for none), without a host sync."""
    if not gradients:
        return torch.tensor(0.0)
    return torch.nn.utils.get_total_norm(gradients)


class NonFiniteGuard(TrainerCallback):
    """Skips the optimizer step of an accumulation window whose loss or gradients hold a NaN or an infinity.

    The trainer reports each micro-batch's loss to :meth:`observe_loss`; before each optimizer step the guard also
    checks the gradients (after clipping and the processes' all-reduce). When anything is not finite on any process,
    every process drops its gradients, so the optimizer changes nothing (torch optimizers skip parameters without a
    gradient) and its state stays as it was; a warning and ``nonfinite/skipped`` are logged, and training goes on
    with the next batch. The learning-rate schedule advances as for any step. ``skipped_steps`` lists the global
    steps skipped; ``steps_with_gradient`` counts the steps whose gradient was finite and nonzero on some process.
    (DeepSpeed skips overflowing steps itself; its gradients are not visible here.)
    """

    def __init__(self, trainer):
        self.trainer = trainer
        self.skipped_steps: list[int] = []
        self.steps = 0  # optimizer steps this process has seen
        self.steps_with_gradient = 0  # of which carried a finite, nonzero gradient
        self.resumed = False
        self._finite_losses = torch.tensor(True)

    def on_train_begin(self, args, state, control, **kwargs):
        self.steps = self.steps_with_gradient = 0  # per train() call (a hyperparameter search makes several)
        self.resumed = state.global_step > 0

    def observe_loss(self, loss: torch.Tensor) -> None:
        self._finite_losses = self._finite_losses.to(loss.device) & torch.isfinite(loss.detach()).all()

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        trainer = self.trainer
        parameters = [p for p in trainer.model.parameters() if p.grad is not None]
        device = trainer.accelerator.device
        norm = total_norm([p.grad for p in parameters]).to(device)
        finite = torch.isfinite(norm) & self._finite_losses.to(device)
        self._finite_losses = torch.tensor(True)
        bad, nonzero = trainer.accelerator.reduce(torch.stack([(~finite).float(), (norm > 0).float()]),
                                                  reduction="sum").tolist()
        skipped = bool(bad)
        self.steps += 1
        # DeepSpeed keeps its gradients to itself (and skips overflowing steps on its own): count its steps as moving
        if not skipped and (nonzero or getattr(trainer, "is_deepspeed_enabled", False)):
            self.steps_with_gradient += 1
        trainer.log_metric(SKIPPED_METRIC, float(skipped))
        if skipped:
            for parameter in parameters:
                parameter.grad = None
            step = state.global_step + 1
            self.skipped_steps.append(step)
            logger.warning(f"Step {step}: the loss or the gradients are not finite (NaN or inf); the optimizer step is "
                           "skipped and training goes on.")

    def nothing_trained_reason(self) -> str | None:
        """Why the optimizer steps this process ran changed nothing, or ``None`` when one did, when none ran, or when
        the run was resumed (its model was trained before: a converged policy may well have nothing left to learn)."""
        if not self.steps or self.steps_with_gradient or self.resumed:
            return None
        if len(self.skipped_steps) == self.steps:
            return (f"all {self.steps} optimizer steps were skipped because the loss or the gradients were not finite "
                    "(NaN or inf): check the config's numbers and the environment's rewards")
        return (f"none of the {self.steps} optimizer steps carried a gradient: every group's returns were equal, so "
                "every advantage was 0; make the rollouts of a task differ (start from a warm start, raise "
                "num_generations or the temperature, or give partial rewards)")
