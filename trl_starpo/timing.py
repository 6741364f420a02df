"""Where an update's wall time goes: each optimizer step is split into phases, logged as ``time/<phase>`` seconds.

- ``generation``: the model generating the rollouts' tokens;
- ``environment``: environment resets and steps;
- ``scoring``: turning the rollouts into a training batch (the old-policy and reference forwards, the critics,
  returns and advantages);
- ``loss_forward``: the policy's forward passes and the loss, over the step's micro-batches;
- ``backward``: their backward passes;
- ``optimizer``: the non-finite check and the optimizer step;
- ``other``: the rest of the step's wall time (tokenizing turns, padding, gradient clipping, callbacks).

The phases of one step add up to its wall time; ``time/step`` is that total.
"""

from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager

from transformers import TrainerCallback

PHASES = ("generation", "environment", "scoring", "loss_forward", "backward", "optimizer", "other")


class UpdateTimer(TrainerCallback):
    """Measures the phases of each optimizer step (``phase`` and ``add`` from the trainer, the optimizer step by
    its own callback events) and logs them through ``trainer.log_metric`` at the step's end."""

    def __init__(self, trainer):
        self.trainer = trainer
        self._spent: dict[str, float] = defaultdict(float)
        self._step_start: float | None = None
        self._optimizer_start: float | None = None

    @contextmanager
    def phase(self, name: str):
        """Count the time spent in the ``with`` block towards phase ``name``."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self._spent[name] += time.perf_counter() - start

    def add(self, name: str, seconds: float) -> None:
        self._spent[name] += seconds

    def on_step_begin(self, args, state, control, **kwargs):
        self._step_start = time.perf_counter()

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self._optimizer_start = time.perf_counter()

    def on_optimizer_step(self, args, state, control, **kwargs):
        if self._optimizer_start is not None:
            self._spent["optimizer"] += time.perf_counter() - self._optimizer_start
            self._optimizer_start = None

    def on_step_end(self, args, state, control, **kwargs):
        if self._step_start is None:
            return
        total = time.perf_counter() - self._step_start
        measured = {name: self._spent.get(name, 0.0) for name in PHASES if name != "other"}
        measured["other"] = max(total - sum(measured.values()), 0.0)
        for name, seconds in measured.items():
            self.trainer.log_metric(f"time/{name}", seconds)
        self.trainer.log_metric("time/step", total)
        self._spent.clear()
        self._step_start = None
