"""Watching a StarPO run: the echo-trap monitor (``echo_trap``), its detectors and batch diagnostics, and the
callbacks that keep the run's trajectories and agent files (``callbacks``)."""

from .detectors import (
    AnswerCollapse,
    Detector,
    DiversityCollapse,
    EntropyCollapse,
    GradNormSpike,
    RewardStdCollapse,
    Signal,
    SuccessDrop,
    default_detectors,
)
from .echo_trap import ACTIONS, STATE_FILE, EchoTrapCallback, MonitorCallback, add_echo_trap_monitor

__all__ = [
    "ACTIONS",
    "STATE_FILE",
    "AnswerCollapse",
    "Detector",
    "DiversityCollapse",
    "EchoTrapCallback",
    "EntropyCollapse",
    "GradNormSpike",
    "MonitorCallback",
    "RewardStdCollapse",
    "Signal",
    "SuccessDrop",
    "add_echo_trap_monitor",
    "default_detectors",
]
