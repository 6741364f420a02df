"""KL early stopping: stop updating on a generation batch once the policy has moved too far from the one that sampled it."""

from __future__ import annotations

import torch


def sampling_kl(logps: torch.Tensor, old_logps: torch.Tensor, mask: torch.Tensor, reduce=None) -> float:
    """Mean ``KL(pi_old || pi)`` per model token, by the k3 estimator ``(r - 1) - log r`` with ``r = pi / pi_old``.

    The estimate is unbiased for samples drawn from ``pi_old`` (the sampling policy) and never negative. ``reduce``
    (e.g. ``accelerator.reduce``) sums the numerator and token count across processes, so all agree on the value.
    """
    log_ratio = (logps - old_logps).float()
    per_token = torch.expm1(log_ratio) - log_ratio
    mask = mask.to(per_token.dtype)
    totals = torch.stack([(per_token * mask).sum(), mask.sum()])
    if reduce is not None:
        totals = reduce(totals)
    return (totals[0] / totals[1].clamp(min=1.0)).item()


class KLEarlyStopping:
    """Tracks the measured sampling KL within one generation batch's inner updates.

    ``observe(kl)`` records a measurement and returns whether it exceeds ``target``; once it has, ``triggered``
    stays True until ``reset()`` (called when fresh rollouts are collected). ``target <= 0`` disables it.
    """

    def __init__(self, target: float):
        self.target = target
        self.triggered = False
        self.last_kl = 0.0

    def observe(self, kl: float) -> bool:
        self.last_kl = kl
        if self.target > 0 and kl > self.target:
            self.triggered = True
        return self.triggered

    def reset(self) -> None:
        self.triggered = False
