"""Environment protocol and registry."""

from .base import Environment, TextEnvironment
from .registry import (
    list_environments,
    load_environment,
    load_task_dataset,
    load_tasks,
    tasks_data_dir,
    write_task_split,
    write_tasks_card,
)

__all__ = [
    "Environment",
    "TextEnvironment",
    "list_environments",
    "load_environment",
    "load_task_dataset",
    "load_tasks",
    "tasks_data_dir",
    "write_task_split",
    "write_tasks_card",
]
