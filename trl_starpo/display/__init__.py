"""What people look at: learning curves (``plotting``), the HTML trajectory viewer (``html_export``) and the
rollout progress bar (``progress``)."""

from .html_export import write_html, write_store_html
from .plotting import plot_learning_curves, plot_run
from .progress import show_rollout_progress

__all__ = ["plot_learning_curves", "plot_run", "show_rollout_progress", "write_html", "write_store_html"]
