"""Environment protocol and registry."""

from .base import Environment, TextEnvironment
from .registry import list_environments, load_environment, load_task_dataset, load_tasks, write_task_split

__all__ = ["Environment", "TextEnvironment", "list_environments", "load_environment", "load_task_dataset", "load_tasks", "write_task_split"]
