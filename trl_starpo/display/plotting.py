"""Learning curves of a StarPO run as one PNG (matplotlib, Agg backend: no display needed).

The curves come from a ``log_history``: the list of logged dicts that ``Trainer.state`` keeps and every checkpoint's
``trainer_state.json`` holds. Each panel plots the training metric by optimizer step and, when the run evaluated, the
matching ``eval_`` metric; validation before and after training are points (success with its Wilson interval), and
the echo-trap monitor's detections are marked on every panel.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

FIGURE_SIZE = (12.0, 6.5)  # inches
DPI = 100  # so the PNG is 1200 x 650 pixels
PLOT_FILE = "learning_curves.png"

PANELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("success", ("rollout/success",)),
    ("return", ("rollout/return", "reward")),
    ("in-group return std", ("rollout/group_return_std",)),
    ("entropy", ("entropy",)),
    ("gradient norm", ("grad_norm",)),
    ("format error rate", ("rollout/format_error_rate",)),
)
"""(title, metric names tried in order) of each panel; the first name present in the history is plotted."""


def metric_series(log_history: Sequence[dict[str, Any]], name: str) -> tuple[list[float], list[float]]:
    """``(steps, values)`` of metric ``name`` in ``log_history``, skipping entries without it or with NaN."""
    steps, values = [], []
    for entry in log_history:
        value = entry.get(name)
        if isinstance(value, (int, float)) and not math.isnan(value):
            steps.append(entry.get("step", len(steps)))
            values.append(float(value))
    return steps, values


def echo_trap_detections(log_history: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The steps where the echo-trap monitor detected a collapse (``echo_trap/detected`` in the log), with the
    detectors that fired and the step rolled back to, if any."""
    found = []
    for entry in log_history:
        if entry.get("echo_trap/detected"):
            marks = ("echo_trap/detected", "echo_trap/rollback_to")
            detectors = sorted(k.split("/", 1)[1] for k in entry if k.startswith("echo_trap/") and k not in marks)
            found.append({"step": entry.get("step"), "detectors": detectors,
                          "rollback_to": entry.get("echo_trap/rollback_to")})
    return found


def _validation_points(validation: dict[str, Any] | None, last_step: float) -> list[dict[str, Any]]:
    """Validation before (at step 0) and after (at the last step) training, with the episode counts."""
    points = []
    for when, step in (("before", 0), ("after", last_step)):
        stats = (validation or {}).get(when)
        if isinstance(stats, dict):
            episodes = stats.get("episodes", (validation or {}).get("episodes"))
            points.append({"when": when, "step": step, "stats": stats,
                           "episodes": episodes if isinstance(episodes, int) else None})
    return points


def plot_learning_curves(
    log_history: Sequence[dict[str, Any]],
    path: str | Path,
    *,
    title: str | None = None,
    validation: dict[str, Any] | None = None,
) -> Path:
    """Draw the StarPO learning curves of ``log_history`` into the PNG ``path`` (1200 x 650 pixels).

    Echo-trap detections (``echo_trap/detected``, logged by the monitor) are red dashed lines across every panel.

    Args:
        log_history: ``trainer.state.log_history`` or the ``log_history`` of a ``trainer_state.json``.
        path: Where to write the PNG; parent folders are created.
        title: The figure's title.
        validation: Validation results before / after training (``{"before": {"success": ..., "episodes": ...},
            "after": ...}``, as the recipes record them), drawn as points at step 0 and at the last step on the
            success and return panels, the success with its 95% Wilson interval over the episodes played.
    """
    from matplotlib.figure import Figure  # a bare Figure renders with Agg and never touches pyplot's backend
    from matplotlib.ticker import MaxNLocator

    from ..statistics import success_interval

    figure = Figure(figsize=FIGURE_SIZE, dpi=DPI)
    axes = figure.subplots(2, 3)
    steps_logged = [entry["step"] for entry in log_history if isinstance(entry.get("step"), (int, float))]
    points = _validation_points(validation, max(steps_logged, default=1))
    detections = echo_trap_detections(log_history)
    for ax, (panel, names) in zip(axes.flat, PANELS):
        name = next((n for n in names if metric_series(log_history, n)[1]), names[0])
        steps, values = metric_series(log_history, name)
        if values:
            ax.plot(steps, values, marker="o" if len(values) < 30 else None, markersize=3, label="train")
        eval_steps, eval_values = metric_series(log_history, f"eval_{name}")
        if eval_values:
            ax.plot(eval_steps, eval_values, marker="s", markersize=3, label="eval")
        key = {"success": "success", "return": "return"}.get(panel)
        for point, color in zip(points, ("gray", "black")) if key else ():
            value = point["stats"].get(key)
            if not isinstance(value, (int, float)) or math.isnan(value):
                continue
            label = f"validation {point['when']}" + (f" (n={point['episodes']})" if point["episodes"] else "")
            error = None
            if key == "success" and point["episodes"]:
                low, high = success_interval(value, point["episodes"])
                error = [[value - low], [high - value]]
            ax.errorbar([point["step"]], [value], yerr=error, fmt="D", color=color, capsize=4, markersize=5,
                        label=label)
        for index, detection in enumerate(detections):
            ax.axvline(detection["step"], color="#c9383a", linestyle="--", linewidth=1,
                       label="echo-trap detection" if index == 0 and panel == "success" else None)
            if detection["rollback_to"] is not None and panel == "success":
                ax.annotate(f"rollback to {int(detection['rollback_to'])}", (detection["step"], 1),
                            xycoords=("data", "axes fraction"), fontsize=7, color="#c9383a", rotation=90,
                            ha="right", va="top")
        if not values and not eval_values:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes, color="gray")
        ax.set_title(f"{panel} ({name})", fontsize=10)
        ax.set_xlabel("step", fontsize=9)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.ticklabel_format(axis="y", useOffset=False)  # no "1e-8 - 3e-1" corner label on a flat series
        low, high = ax.get_ylim()
        if high - low < 1e-6:  # a flat series reads as flat, not as float noise magnified
            ax.set_ylim(low - 0.5, high + 0.5)
        ax.grid(alpha=0.3)
        if len(ax.get_legend_handles_labels()[0]) > 1:
            ax.legend(fontsize=8)
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png", dpi=DPI)
    return path


def find_trainer_state(run: str | Path) -> Path:
    """The ``trainer_state.json`` of ``run``: the file itself, the folder's own, or its latest checkpoint's."""
    run = Path(run)
    if run.is_file():
        return run
    if (run / "trainer_state.json").is_file():
        return run / "trainer_state.json"
    checkpoints = sorted(
        (p for p in run.glob("checkpoint-*") if p.name.split("-")[-1].isdigit()),
        key=lambda p: int(p.name.split("-")[-1]),
    )
    for checkpoint in reversed(checkpoints):
        if (checkpoint / "trainer_state.json").is_file():
            return checkpoint / "trainer_state.json"
    raise FileNotFoundError(f"No trainer_state.json in {run} or its checkpoint-* folders.")


def plot_run(run: str | Path, output: str | Path | None = None) -> Path:
    """Plot a logged run (an output_dir, a checkpoint or a ``trainer_state.json``); returns the PNG's path.

    The PNG goes to ``output`` or ``<run folder>/learning_curves.png``; a ``validation_results.json`` beside the
    state (written by the recipes) adds the before / after lines.
    """
    state_file = find_trainer_state(run)
    history = json.loads(state_file.read_text())["log_history"]
    folder = Path(run) if Path(run).is_dir() else state_file.parent
    validation = None
    for candidate in (folder / "validation_results.json", state_file.parent / "validation_results.json"):
        if candidate.is_file():
            validation = json.loads(candidate.read_text())
            break
    return plot_learning_curves(history, output or folder / PLOT_FILE, title=folder.name, validation=validation)
