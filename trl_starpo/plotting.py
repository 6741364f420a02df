"""Learning curves of a StarPO run as one PNG (matplotlib, Agg backend: no display needed).

The curves come from a ``log_history``: the list of logged dicts that ``Trainer.state`` keeps and every checkpoint's
``trainer_state.json`` holds. Each panel plots the training metric by optimizer step and, when the run evaluated, the
matching ``eval_`` metric.
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


def plot_learning_curves(
    log_history: Sequence[dict[str, Any]],
    path: str | Path,
    *,
    title: str | None = None,
    validation: dict[str, dict[str, float]] | None = None,
) -> Path:
    """Draw the StarPO learning curves of ``log_history`` into the PNG ``path`` (1200 x 650 pixels).

    Args:
        log_history: ``trainer.state.log_history`` or the ``log_history`` of a ``trainer_state.json``.
        path: Where to write the PNG; parent folders are created.
        title: The figure's title.
        validation: Validation results before / after training (``{"before": {"success": ...}, "after": ...}``),
            drawn as horizontal lines on the success and return panels.
    """
    from matplotlib.figure import Figure  # a bare Figure renders with Agg and never touches pyplot's backend
    from matplotlib.ticker import MaxNLocator

    figure = Figure(figsize=FIGURE_SIZE, dpi=DPI)
    axes = figure.subplots(2, 3)
    for ax, (panel, names) in zip(axes.flat, PANELS):
        name = next((n for n in names if metric_series(log_history, n)[1]), names[0])
        steps, values = metric_series(log_history, name)
        if values:
            ax.plot(steps, values, marker="o" if len(values) < 30 else None, markersize=3, label="train")
        eval_steps, eval_values = metric_series(log_history, f"eval_{name}")
        if eval_values:
            ax.plot(eval_steps, eval_values, marker="s", markersize=3, label="eval")
        for when, style in (("before", ":"), ("after", "--")):
            key = {"success": "success", "return": "return"}.get(panel)
            if key and validation and when in validation and key in validation[when]:
                ax.axhline(validation[when][key], linestyle=style, color="gray", label=f"validation {when}")
        if not values and not eval_values:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes, color="gray")
        ax.set_title(f"{panel} ({name})", fontsize=10)
        ax.set_xlabel("step", fontsize=9)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
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
