"""Watching a StarPO run: the echo-trap monitor (``echo_trap``), its detectors and batch diagnostics, and the
callbacks that keep the run's trajectories and agent files (``callbacks``)."""

from .echo_trap import (
    ACTIONS,
    STATE_FILE,
    Detector,
    DiversityCollapse,
    EchoTrapCallback,
    EntropyCollapse,
    GradNormSpike,
    MonitorCallback,
    RewardStdCollapse,
    Signal,
    SuccessDrop,
    add_echo_trap_monitor,
    default_detectors,
)

__all__ = [
    "ACTIONS",
    "STATE_FILE",
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
