"""Echo-trap monitoring: see a StarPO run collapsing, and warn, stop or roll back when it does.

RAGEN's Echo Trap: success climbs, then collapses as the policy locks onto a brittle pattern; in-group reward
spread, entropy and diversity fall and the gradient norm spikes on the way. This module watches those signals.

- ``MonitorCallback``: logs the ``monitor/*`` statistics of every batch of trajectories and, every few batches, the
  reasoning-collapse probe ``monitor/probe/*`` (see ``trl_starpo.monitor.diagnostics``), beside what the trainer logs.
- Detectors (``trl_starpo.monitor.detectors``: ``SuccessDrop``, ``RewardStdCollapse``, ``EntropyCollapse``,
  ``GradNormSpike``, ``DiversityCollapse``, ``AnswerCollapse``): each reads one logged metric stream and fires on
  its threshold.
- ``EchoTrapCallback``: feeds every log entry to the detectors and acts on a detection: ``"warn"``, ``"stop"``
  training, or ``"rollback"``: restore the best checkpoint so far (by smoothed success), scale the learning rate
  down, and go on. Its state is saved as ``echo_trap_state.json`` in every checkpoint and restored on resume.
- ``add_echo_trap_monitor(trainer, ...)`` adds both callbacks to a ``StarPOTrainer``.

docs/monitoring.md lists every metric name and every threshold.

Example:
```python
from trl_starpo import StarPOConfig, StarPOTrainer
from trl_starpo.monitor import add_echo_trap_monitor

trainer = StarPOTrainer(model, environment="sokoban", args=StarPOConfig(output_dir="run", preset="starpo"))
echo = add_echo_trap_monitor(trainer, action="rollback")
trainer.train()
print(echo.detections)  # [{"step": 41, "detectors": ["success_drop"], "action": "rollback", ...}]
```
"""

from __future__ import annotations

import json
import logging
import os
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from .detectors import (
    SUCCESS_METRIC,
    Detector,
    Signal,
    _mean,
    _number,
    default_detectors,
)
from .diagnostics import PREFIX, reasoning_probe, top_answer, trajectory_diagnostics

logger = logging.getLogger(__name__)

STATE_FILE = "echo_trap_state.json"
"""The callback's state inside each ``checkpoint-N`` folder, and in ``output_dir`` at the end of training."""
MONITOR_STATE_FILE = "monitor_state.json"
"""``MonitorCallback``'s count of batches (which sets when the probe runs) inside each ``checkpoint-N`` folder."""
ACTIONS = ("warn", "stop", "rollback")


# -- callbacks ----------------------------------------------------------------------------------------------------


class MonitorCallback(TrainerCallback):
    """Logs the ``monitor/*`` batch statistics and the ``monitor/probe/*`` reasoning-collapse probe.

    After every optimizer step whose batch of trajectories is new (``trainer.last_trajectories``, gathered from all
    processes), ``trajectory_diagnostics`` is appended to the trainer's metrics, so it is logged with the same
    step's ``rollout/*`` metrics, with ``monitor/top_answer_unchanged``: 1 when the batch's most common answer is
    the previous batch's, else 0. Every ``probe_every`` batches (0: never), ``reasoning_probe`` runs on up to
    ``probe_size`` start states of this process's trajectories.

    Args:
        trainer: The ``StarPOTrainer``.
        probe_every: Batches between probes (the first batch is probed).
        probe_size: Start states per probe; the probe scores ``probe_size ** 2`` sequences.
        resume_from_checkpoint: Where to restore the batch count and the last top answer from on resume, if not
            ``output_dir/checkpoint-<step>``.
    """

    def __init__(self, trainer, *, probe_every: int = 10, probe_size: int = 8, resume_from_checkpoint: str | None = None):
        self.trainer = trainer
        self.probe_every = probe_every
        self.probe_size = probe_size
        self.resume_from_checkpoint = resume_from_checkpoint
        self.batches = 0
        self._seen = trainer.last_trajectories
        self._top_answer: str | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        if state.global_step > 0:
            folder = (self.resume_from_checkpoint or getattr(self.trainer, "resumed_from", None)
                      or os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"))
            path = Path(folder, MONITOR_STATE_FILE)
            if path.is_file():
                saved = json.loads(path.read_text())
                self.batches = int(saved["batches"])
                self._top_answer = saved.get("top_answer")  # so the first batch after a resume compares with it

    def on_save(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            folder = Path(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
            folder.mkdir(parents=True, exist_ok=True)
            saved = {"batches": self.batches, "top_answer": self._top_answer}
            (folder / MONITOR_STATE_FILE).write_text(json.dumps(saved))

    def on_step_end(self, args, state, control, **kwargs):
        trainer = self.trainer
        local = trainer.last_trajectories
        if local is self._seen or not local:
            return
        self._seen = local
        trajectories = list(local)
        if trainer.accelerator.num_processes > 1:
            from accelerate.utils import gather_object

            trajectories = gather_object(trajectories)
        metrics = trajectory_diagnostics(trajectories)
        answer, _ = top_answer(trajectories)
        metrics[f"{PREFIX}top_answer_unchanged"] = float(answer is not None and answer == self._top_answer)
        self._top_answer = answer
        if self.probe_every and self.batches % self.probe_every == 0:
            model = trainer.accelerator.unwrap_model(trainer.model)
            metrics.update(reasoning_probe(model, local, size=self.probe_size,
                                           pad_token_id=trainer.processing_class.pad_token_id or 0,
                                           batch_size=max(args.per_device_train_batch_size, 1)))
        self.batches += 1
        for name, value in metrics.items():
            trainer.log_metric(name, value)


@dataclass
class _Checkpoint:
    step: int
    success: float | None  # trailing success when it was saved


class EchoTrapCallback(TrainerCallback):
    """Runs echo-trap detectors on every log entry and warns, stops or rolls back on a detection.

    A detection is logged (``logging.WARNING``) with its step and the signals that fired, kept in ``detections``,
    and written into that step's ``trainer.state.log_history`` entry as ``echo_trap/detected`` and
    ``echo_trap/<detector>`` (1.0), plus ``echo_trap/rollback_to`` (the step restored) on a rollback.

    Actions:

    - ``"warn"``: only the above.
    - ``"stop"``: training stops after this step (``control.should_training_stop``).
    - ``"rollback"``: the checkpoint with the highest trailing success (window ``success_window``) among those
      saved so far is restored: model weights (and StarPO's critics), optimizer state; the learning-rate schedule
      keeps its position and every learning rate is multiplied by ``lr_factor``; fresh rollouts are collected and
      training goes on. A new peak of trailing success (by at least ``peak_min_delta``) asks the trainer to save a
      checkpoint at that step, so the best point is on disk whatever ``save_strategy`` says; it is kept out of
      ``save_total_limit``'s rotation as ``state.best_model_checkpoint`` when no ``metric_for_best_model`` is set.
      After ``max_rollbacks`` rollbacks, or with no checkpoint to go back to, a detection only warns.

    After a detection, further detections within ``cooldown_steps`` optimizer steps are recorded but not acted on.

    The state (detectors, checkpoints seen, detections, rollbacks, learning-rate scale) is written as
    ``echo_trap_state.json`` into every checkpoint and into ``output_dir`` at the end, and restored from the
    checkpoint training resumes from (``resume_from_checkpoint``, default ``output_dir/checkpoint-<step>``).

    Args:
        trainer: The trainer (required for ``"rollback"``; ``"warn"`` and ``"stop"`` work on any ``Trainer``).
        action: One of ``"warn"``, ``"stop"``, ``"rollback"``.
        detectors: The detectors to run (default: ``default_detectors()``).
        lr_factor: Learning-rate multiplier applied at each rollback, in (0, 1].
        max_rollbacks: Rollbacks allowed before detections only warn.
        cooldown_steps: Optimizer steps after an acted-on detection during which detections are not acted on.
        success_window: Observations of ``rollout/success`` averaged to rank checkpoints.
        peak_min_delta: How much a new trailing-success peak must exceed the last to trigger a save.
        resume_from_checkpoint: Where to restore the state from on resume, if not ``output_dir/checkpoint-<step>``.
    """

    def __init__(
        self,
        trainer=None,
        *,
        action: str = "warn",
        detectors: Sequence[Detector] | None = None,
        lr_factor: float = 0.5,
        max_rollbacks: int = 3,
        cooldown_steps: int = 10,
        success_window: int = 5,
        peak_min_delta: float = 0.02,
        resume_from_checkpoint: str | None = None,
    ):
        if action not in ACTIONS:
            raise ValueError(f"action must be one of {ACTIONS}, got {action!r}.")
        if action == "rollback" and trainer is None:
            raise ValueError("action='rollback' needs the trainer: EchoTrapCallback(trainer, action='rollback').")
        if action == "rollback" and getattr(trainer, "is_deepspeed_enabled", False):
            raise ValueError("action='rollback' cannot restore DeepSpeed optimizer state mid-training; use 'stop'.")
        if not 0 < lr_factor <= 1:
            raise ValueError(f"lr_factor must be in (0, 1], got {lr_factor}.")
        self.trainer = trainer
        self.action = action
        self.detectors = list(detectors) if detectors is not None else default_detectors()
        names = [d.name for d in self.detectors]
        if len(set(names)) != len(names):
            raise ValueError(f"Detector names must be unique, got {names}.")
        self.lr_factor = lr_factor
        self.max_rollbacks = max_rollbacks
        self.cooldown_steps = cooldown_steps
        self.peak_min_delta = peak_min_delta
        self.resume_from_checkpoint = resume_from_checkpoint
        self.detections: list[dict[str, Any]] = []
        self.rollbacks = 0
        self.lr_scale = 1.0
        self.checkpoints: dict[int, _Checkpoint] = {}
        self._success: deque[float] = deque(maxlen=success_window)
        self._peak: float | None = None
        self._last_action_step: int | None = None

    # -- state

    @property
    def trailing_success(self) -> float | None:
        """Mean ``rollout/success`` over the last ``success_window`` observations (``None`` before a full window)."""
        return _mean(self._success) if len(self._success) == self._success.maxlen else None

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue monitoring after a resume, as JSON-serializable data."""
        return {
            "action": self.action,
            "detectors": {d.name: d.state_dict() for d in self.detectors},
            "detections": self.detections,
            "rollbacks": self.rollbacks,
            "lr_scale": self.lr_scale,
            "checkpoints": [asdict(c) for c in self.checkpoints.values()],
            "success": list(self._success),
            "peak": self._peak,
            "last_action_step": self._last_action_step,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for detector in self.detectors:
            if detector.name in state.get("detectors", {}):
                detector.load_state_dict(state["detectors"][detector.name])
        self.detections = list(state.get("detections", []))
        self.rollbacks = state.get("rollbacks", 0)
        self.lr_scale = state.get("lr_scale", 1.0)
        self.checkpoints = {c["step"]: _Checkpoint(**c) for c in state.get("checkpoints", [])}
        self._success = deque(state.get("success", []), maxlen=self._success.maxlen)
        self._peak = state.get("peak")
        self._last_action_step = state.get("last_action_step")

    def save(self, folder: str | os.PathLike) -> Path:
        """Write ``echo_trap_state.json`` into ``folder``."""
        path = Path(folder, STATE_FILE)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.state_dict(), indent=1))
        return path

    def on_train_begin(self, args, state, control, **kwargs):
        if state.global_step == 0:
            return
        folder = (self.resume_from_checkpoint or getattr(self.trainer, "resumed_from", None)
                  or os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"))
        path = Path(folder, STATE_FILE)
        if path.is_file():
            self.load_state_dict(json.loads(path.read_text()))
            logger.info("Echo-trap monitor state restored from %s.", path)
        else:
            logger.warning("Resuming at step %d without echo-trap monitor state (no %s).", state.global_step, path)

    def on_save(self, args, state, control, **kwargs):
        self.checkpoints[state.global_step] = _Checkpoint(state.global_step, self.trailing_success)
        if state.is_world_process_zero:
            self.save(os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"))

    def on_train_end(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self.save(args.output_dir)

    # -- detection

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        success = _number(logs, SUCCESS_METRIC)
        if success is not None:
            self._success.append(success)
        signals = [signal for signal in (d.observe(logs) for d in self.detectors) if signal is not None]
        if signals:
            self._detected(signals, args, state, control, logs)
        elif self.action == "rollback":
            self._maybe_save_peak(args, state, control)
        return control

    def _maybe_save_peak(self, args, state, control) -> None:
        current = self.trailing_success
        if current is None or (self._peak is not None and current < self._peak + self.peak_min_delta):
            return
        self._peak = current
        control.should_save = True
        if args.metric_for_best_model is None:  # keep it out of save_total_limit's rotation
            state.best_model_checkpoint = os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")

    def _detected(self, signals: list[Signal], args, state, control, logs: dict[str, Any]) -> None:
        step = state.global_step
        cooling = self._last_action_step is not None and step - self._last_action_step < self.cooldown_steps
        action = "cooldown" if cooling else self.action
        record: dict[str, Any] = {"step": step, "detectors": [s.detector for s in signals],
                                  "signals": [asdict(s) for s in signals]}
        if action == "rollback":
            action = self._rollback(args, state, record)
        elif action == "stop":
            control.should_training_stop = True
        if action != "cooldown":
            self._last_action_step = step
        record["action"] = action
        self.detections.append(record)
        logger.warning(
            "Echo trap at step %d (%s): %s", step, action, "; ".join(f"{s.detector}: {s.message}" for s in signals)
        )
        marks = {"echo_trap/detected": 1.0, **{f"echo_trap/{s.detector}": 1.0 for s in signals}}
        if "rollback_to" in record:
            marks["echo_trap/rollback_to"] = float(record["rollback_to"])
        logs.update(marks)
        if state.log_history and state.log_history[-1].get("step") == step:
            state.log_history[-1].update(marks)

    # -- rollback

    def best_checkpoint(self, output_dir: str) -> tuple[str, _Checkpoint] | None:
        """The saved checkpoint with the highest trailing success that is still on disk (latest on ties)."""
        ranked = sorted((c for c in self.checkpoints.values() if c.success is not None),
                        key=lambda c: (c.success, c.step), reverse=True)
        for checkpoint in ranked:
            folder = os.path.join(output_dir, f"{PREFIX_CHECKPOINT_DIR}-{checkpoint.step}")
            if os.path.isdir(folder):
                return folder, checkpoint
        return None

    def _rollback(self, args, state, record: dict[str, Any]) -> str:
        if self.rollbacks >= self.max_rollbacks:
            logger.warning("Echo trap: %d rollbacks already (max_rollbacks); only warning.", self.rollbacks)
            return "warn"
        best = self.best_checkpoint(args.output_dir)
        if best is None:
            logger.warning("Echo trap: no checkpoint with a measured success to roll back to; only warning.")
            return "warn"
        folder, checkpoint = best
        self.trainer.restore_checkpoint(folder, lr_factor=self.lr_factor)
        self.rollbacks += 1
        self.lr_scale *= self.lr_factor
        for detector in self.detectors:
            detector.reset()
        self._success.clear()
        record.update(rollback_to=checkpoint.step, checkpoint=folder, lr_scale=self.lr_scale)
        return "rollback"


def add_echo_trap_monitor(
    trainer,
    *,
    action: str = "warn",
    detectors: Sequence[Detector] | None = None,
    probe_every: int = 10,
    probe_size: int = 8,
    **kwargs: Any,
) -> EchoTrapCallback:
    """Add ``MonitorCallback`` and ``EchoTrapCallback`` to ``trainer``; returns the ``EchoTrapCallback``.

    A ``StarPOTrainer`` whose config sets ``monitor`` already has them; calling this replaces them.
    ``kwargs`` go to ``EchoTrapCallback`` (``lr_factor``, ``max_rollbacks``, ``cooldown_steps``,
    ``resume_from_checkpoint``, ...); ``resume_from_checkpoint`` to ``MonitorCallback`` too.
    """
    for callback in list(trainer.callback_handler.callbacks):
        if isinstance(callback, (MonitorCallback, EchoTrapCallback)):
            trainer.remove_callback(callback)
    trainer.add_callback(MonitorCallback(trainer, probe_every=probe_every, probe_size=probe_size,
                                         resume_from_checkpoint=kwargs.get("resume_from_checkpoint")))
    echo = EchoTrapCallback(trainer, action=action, detectors=detectors, **kwargs)
    trainer.add_callback(echo)
    return echo
