"""Echo-trap detectors: each reads one logged metric stream and fires on a documented threshold.

- ``SuccessDrop``: success fell far below its running peak (the echo trap itself).
- ``RewardStdCollapse``: the in-group return spread collapsed (groups no longer tell good from bad).
- ``EntropyCollapse``: the policy's entropy left its starting band (collapsed, or blew up).
- ``GradNormSpike``: the gradient norm jumped far outside its recent range (robust z-score, median / MAD).
- ``DiversityCollapse``: the batch's thinking became a copy of itself (distinct bigrams).

A detector sees one log entry at a time (``observe(logs)``), so the same code runs on a live run (through
``trl_starpo.monitor.EchoTrapCallback``) and on a recorded ``log_history``. Thresholds are tabled in
docs/monitoring.md.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

SUCCESS_METRIC = "rollout/success"


def _number(logs: dict[str, Any], name: str) -> float | None:
    value = logs.get(name)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _mean(values) -> float | None:
    values = list(values)
    return sum(values) / len(values) if values else None


@dataclass
class Signal:
    """One detector firing: the metric, its (smoothed) value, the reference level and threshold, and why."""

    detector: str
    metric: str
    value: float
    reference: float
    threshold: float
    message: str


class Detector:
    """A detector of one failure mode on one logged metric stream.

    ``observe(logs)`` reads ``metric`` from one log entry (entries without it are skipped) and returns a
    ``Signal`` when the detector fires: once its condition has held for ``patience`` consecutive observations. It
    fires again only after the condition has cleared. Subclasses implement ``_check(value, logs)`` (on the raw value,
    before it joins the window) or ``_check_smoothed(logs)`` (after), returning a ``Signal`` while the condition
    holds.

    Args:
        metric: The logged name read.
        window: Observations in the trailing mean compared (``smoothed``).
        patience: Consecutive observations the condition must hold.
    """

    name = "detector"

    def __init__(self, metric: str, *, window: int = 5, patience: int = 1):
        if window < 1 or patience < 1:
            raise ValueError(f"{type(self).__name__}: window and patience must be at least 1.")
        self.metric = metric
        self.window = window
        self.patience = patience
        self._values: deque[float] = deque(maxlen=window)
        self._streak = 0

    @property
    def smoothed(self) -> float | None:
        """The mean of the last ``window`` observations; ``None`` until there are ``window`` of them."""
        return _mean(self._values) if len(self._values) == self.window else None

    def observe(self, logs: dict[str, Any]) -> Signal | None:
        """Take one log entry; return a ``Signal`` if the detector fires on it."""
        value = _number(logs, self.metric)
        if value is None:
            return None
        signal = self._check(value, logs)
        self._values.append(value)
        if signal is None:
            signal = self._check_smoothed(logs)
        self._streak = self._streak + 1 if signal is not None else 0
        return signal if self._streak == self.patience else None

    def _check(self, value: float, logs: dict[str, Any]) -> Signal | None:
        """Checked on the raw value before it joins the window (used by ``GradNormSpike``)."""
        return None

    def _check_smoothed(self, logs: dict[str, Any]) -> Signal | None:
        """Checked once the value has joined the window (used by the trailing-mean detectors)."""
        return None

    def reset(self) -> None:
        """Forget recent observations (after a rollback); reference levels (peaks, baselines) are kept."""
        self._values.clear()
        self._streak = 0

    def _signal(self, value: float, reference: float, threshold: float, message: str) -> Signal:
        return Signal(self.name, self.metric, value, reference, threshold, message)

    def state_dict(self) -> dict[str, Any]:
        """A JSON-serializable snapshot (see ``load_state_dict``)."""
        return {"values": list(self._values), "streak": self._streak}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._values = deque(state.get("values", []), maxlen=self.window)
        self._streak = state.get("streak", 0)


class SuccessDrop(Detector):
    """Success has fallen far below its running peak (the echo trap itself).

    With ``m`` the trailing mean of ``rollout/success`` over ``window`` observations and ``peak`` the highest
    ``m`` so far, fires when ``peak >= min_peak`` and ``m <= min((1 - drop) * peak, peak - min_drop)`` for
    ``patience`` observations. Defaults: window 5, drop 0.5, min_drop 0.15, min_peak 0.1, patience 2.
    """

    name = "success_drop"

    def __init__(self, metric: str = SUCCESS_METRIC, *, window: int = 5, drop: float = 0.5, min_drop: float = 0.15,
                 min_peak: float = 0.1, patience: int = 2):
        super().__init__(metric, window=window, patience=patience)
        self.drop, self.min_drop, self.min_peak = drop, min_drop, min_peak
        self.peak: float | None = None

    def _check_smoothed(self, logs):
        current = self.smoothed
        if current is None:
            return None
        self.peak = current if self.peak is None else max(self.peak, current)
        threshold = min((1 - self.drop) * self.peak, self.peak - self.min_drop)
        if self.peak >= self.min_peak and current <= threshold:
            return self._signal(current, self.peak, threshold,
                                f"success {current:.3f} (mean of {self.window}) fell from its peak {self.peak:.3f}")
        return None

    def state_dict(self):
        return {**super().state_dict(), "peak": self.peak}

    def load_state_dict(self, state):
        super().load_state_dict(state)
        self.peak = state.get("peak")


class _LevelDetector(Detector):
    """A metric whose trailing mean leaves a band around a reference level.

    The reference is the metric's running peak (``reference="peak"``) or its first full trailing mean
    (``reference="baseline"``). The detector fires when the trailing mean is at most ``low * reference`` or, if
    ``high`` is set, at least ``high * reference``, and the reference is at least ``min_reference``.

    Reward spread, entropy and diversity also vanish when every episode succeeds, which is convergence, not
    collapse: while the trailing mean of ``rollout/success`` over the same window is at least ``solved_success``
    (``None``: never) the detector holds its fire.
    """

    def __init__(self, metric: str, *, reference: str, low: float, high: float | None = None, window: int = 5,
                 patience: int = 3, min_reference: float = 0.0, solved_success: float | None = 0.9):
        super().__init__(metric, window=window, patience=patience)
        if reference not in ("peak", "baseline"):
            raise ValueError(f"reference must be 'peak' or 'baseline', got {reference!r}.")
        self.reference_kind, self.low, self.high = reference, low, high
        self.min_reference, self.solved_success = min_reference, solved_success
        self.reference: float | None = None
        self._success: deque[float] = deque(maxlen=window)

    def observe(self, logs):
        success = _number(logs, SUCCESS_METRIC)
        if success is not None:
            self._success.append(success)
        return super().observe(logs)

    @property
    def solved(self) -> bool:
        """Whether the trailing success is at least ``solved_success``."""
        success = _mean(self._success)
        return self.solved_success is not None and success is not None and success >= self.solved_success

    def _check_smoothed(self, logs):
        current = self.smoothed
        if current is None:
            return None
        if self.reference is None or self.reference_kind == "peak":
            self.reference = current if self.reference is None else max(self.reference, current)
        if self.solved or self.reference < self.min_reference:
            return None
        if current <= self.low * self.reference:
            return self._signal(current, self.reference, self.low * self.reference,
                                f"{self.metric} {current:.4g} (mean of {self.window}) fell to <= {self.low:g} x its "
                                f"{self.reference_kind} {self.reference:.4g}")
        if self.high is not None and current >= self.high * self.reference:
            return self._signal(current, self.reference, self.high * self.reference,
                                f"{self.metric} {current:.4g} (mean of {self.window}) rose to >= {self.high:g} x its "
                                f"{self.reference_kind} {self.reference:.4g}")
        return None

    def reset(self):
        super().reset()
        self._success.clear()

    def state_dict(self):
        return {**super().state_dict(), "reference": self.reference, "success": list(self._success)}

    def load_state_dict(self, state):
        super().load_state_dict(state)
        self.reference = state.get("reference")
        self._success = deque(state.get("success", []), maxlen=self.window)


class RewardStdCollapse(_LevelDetector):
    """The in-group return spread has collapsed: groups no longer tell good from bad trajectories.

    Reads ``rollout/group_return_std`` (mean over task groups of the return's standard deviation within the
    group). Fires when its trailing mean (window 5) is at most 0.2 x its running peak, the peak is at least 0.05,
    and success is below 0.9 (not solved), for 3 observations.
    """

    name = "reward_std_collapse"

    def __init__(self, metric: str = "rollout/group_return_std", *, window: int = 5, fraction: float = 0.2,
                 patience: int = 3, min_peak: float = 0.05, solved_success: float | None = 0.9):
        super().__init__(metric, reference="peak", low=fraction, window=window, patience=patience,
                         min_reference=min_peak, solved_success=solved_success)


class EntropyCollapse(_LevelDetector):
    """The policy's token entropy has left its starting band: collapsed onto one pattern, or blown up.

    Reads ``entropy`` (GRPO's mean per-token entropy of the trained tokens). The baseline is the mean of the first
    ``window`` (5) observations. Fires when the trailing mean is at most 0.2 x the baseline, or at least 4 x the
    baseline (a policy dissolving into noise, as aggressive updates do to a small model), with success below 0.9,
    for 3 observations.
    """

    name = "entropy_collapse"

    def __init__(self, metric: str = "entropy", *, window: int = 5, low: float = 0.2, high: float | None = 4.0,
                 patience: int = 3, solved_success: float | None = 0.9):
        super().__init__(metric, reference="baseline", low=low, high=high, window=window, patience=patience,
                         min_reference=1e-6, solved_success=solved_success)


class DiversityCollapse(_LevelDetector):
    """The batch's thinking has become a copy of itself.

    Reads ``monitor/thinking_distinct_2`` (distinct word bigrams / all word bigrams of every turn's thinking in the
    batch, logged by ``MonitorCallback``). The baseline is the mean of the first ``window`` (5) observations. Fires
    when the trailing mean is at most 0.3 x the baseline, with success below 0.9, for 3 observations.
    """

    name = "diversity_collapse"

    def __init__(self, metric: str = "monitor/thinking_distinct_2", *, window: int = 5, fraction: float = 0.3,
                 patience: int = 3, solved_success: float | None = 0.9):
        super().__init__(metric, reference="baseline", low=fraction, window=window, patience=patience,
                         min_reference=1e-6, solved_success=solved_success)


class GradNormSpike(Detector):
    """The gradient norm jumped far outside its recent range.

    A robust z-score on the log scale (gradient norms are positive and vary multiplicatively): with ``h`` the log
    gradient norms of the previous ``window`` (50) observations, ``z = (log g - median(h)) / (1.4826 * MAD(h))``,
    the scale floored at ``min_scale`` (0.05). Fires when ``z >= z_threshold`` (6) and ``g >= min_ratio`` (3) times
    the median norm, once ``h`` holds at least ``min_history`` (10) observations. ``grad_norm`` is the norm before
    clipping; zero norms (nothing trained) are skipped.
    """

    name = "grad_norm_spike"

    def __init__(self, metric: str = "grad_norm", *, window: int = 50, z_threshold: float = 6.0,
                 min_ratio: float = 3.0, min_history: int = 10, min_scale: float = 0.05, patience: int = 1):
        super().__init__(metric, window=window, patience=patience)
        self.z_threshold, self.min_ratio = z_threshold, min_ratio
        self.min_history, self.min_scale = min_history, min_scale

    def observe(self, logs):
        value = _number(logs, self.metric)
        if value is None or value <= 0:  # log scale: a zero norm (nothing trained) carries no spike information
            return None
        return super().observe(logs)

    @staticmethod
    def _median(values: Sequence[float]) -> float:
        ordered = sorted(values)
        middle = len(ordered) // 2
        return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2

    def robust_z(self, value: float) -> float | None:
        """The robust z-score of ``value`` against the current history (``None`` while it is too short)."""
        if len(self._values) < self.min_history:
            return None
        history = [math.log(v) for v in self._values]
        median = self._median(history)
        scale = max(1.4826 * self._median([abs(h - median) for h in history]), self.min_scale)
        return (math.log(value) - median) / scale

    def _check(self, value, logs):
        z = self.robust_z(value)
        if z is None or z < self.z_threshold:
            return None
        typical = math.exp(self._median([math.log(v) for v in self._values]))
        if value < self.min_ratio * typical:
            return None
        return self._signal(value, typical, self.z_threshold,
                            f"grad_norm {value:.4g} is {z:.1f} robust standard deviations above its recent median "
                            f"{typical:.4g}")

    def reset(self):
        self._streak = 0  # the history of healthy norms stays the reference


def default_detectors() -> list[Detector]:
    """One of each detector, with its documented default thresholds."""
    return [SuccessDrop(), RewardStdCollapse(), EntropyCollapse(), GradNormSpike(), DiversityCollapse()]
