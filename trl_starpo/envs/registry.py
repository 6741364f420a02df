"""Finding installed environments through the ``trl_starpo.environments`` entry-point group.

An environment package registers its module, for example in its ``pyproject.toml``::

    [project.entry-points."trl_starpo.environments"]
    sokoban = "starpo_sokoban"

The module provides ``load_environment(**kwargs) -> Environment`` and ``load_tasks(split=None, source=None)``,
which returns the environment's task instances as a ``datasets.Dataset`` (one split) or ``DatasetDict``.
"""

from __future__ import annotations

from functools import cache
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType
from typing import Any

ENTRY_POINT_GROUP = "trl_starpo.environments"
SPLITS = ("train", "validation", "test")


@cache
def _entry_points() -> dict[str, Any]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def list_environments() -> list[str]:
    """Names of the installed environments, sorted."""
    return sorted(_entry_points())


def environment_module(name: str) -> ModuleType:
    """The module registered under ``name``; raises ``ValueError`` naming the installed environments otherwise."""
    eps = _entry_points()
    if name not in eps:
        installed = ", ".join(list_environments()) or "none"
        raise ValueError(
            f"Unknown environment {name!r}. Installed environments: {installed}. An environment is a package that "
            f"registers the entry-point group {ENTRY_POINT_GROUP!r} (see docs/environments.md)."
        )
    return eps[name].load()


def load_environment(name: str, **kwargs: Any):
    """Create the environment registered as ``name``, passing ``kwargs`` to its ``load_environment``."""
    return environment_module(name).load_environment(**kwargs)


def load_tasks(name: str, split: str | None = None, source: str | None = None):
    """Load the task instances of environment ``name`` (see ``load_task_dataset``)."""
    return environment_module(name).load_tasks(split=split, source=source)


def write_task_split(data_dir: str | Path, split: str, rows: list[dict[str, Any]]) -> Path:
    """Write one split of task rows as ``<data_dir>/<split>.jsonl``, the layout ``load_task_dataset`` reads."""
    import json

    if split not in SPLITS:
        raise ValueError(f"Unknown split {split!r}; choose one of {', '.join(SPLITS)}.")
    path = Path(data_dir) / f"{split}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return path


def tasks_data_dir(name: str) -> Path:
    """The ``data`` folder beside the module of environment ``name``, where its shipped task splits live."""
    return Path(environment_module(name).__file__).parent / "data"


def write_tasks_card(name: str, data_dir: str | Path | None = None) -> Path:
    """Write the ``README.md`` of environment ``name``'s data folder (``tasks_data_dir`` by default): a dataset card
    whose ``configs`` map each split of ``load_tasks(name)`` to its ``<split>.jsonl``, so that
    ``datasets.load_dataset(folder)`` returns the splits by the environment's own names (without it, ALFWorld's
    ``valid_seen`` and ``valid_unseen`` merge into one ``validation`` split)."""
    from ..cards import tasks_card

    folder = Path(data_dir) if data_dir is not None else tasks_data_dir(name)
    tasks = load_tasks(name)
    files = {split: f"{split}.jsonl" for split in tasks}
    size = sum((folder / file).stat().st_size for file in files.values())
    path = folder / "README.md"
    path.write_text(tasks_card(name, files, tasks, download_size=size), encoding="utf-8")
    return path


def load_task_dataset(data_dir: str | Path, split: str | None = None, source: str | None = None):
    """Load an environment's task instances with ``datasets.load_dataset``.

    Args:
        data_dir: The package's own data folder, holding ``train.jsonl``, ``validation.jsonl`` and ``test.jsonl``.
        split: One of ``train``, ``validation``, ``test``; ``None`` returns the whole ``DatasetDict``.
        source: A Hub dataset id or a local folder to load instead of the package's own files.
    """
    import datasets

    if split is not None and split not in SPLITS:
        raise ValueError(f"Unknown split {split!r}; choose one of {', '.join(SPLITS)}.")
    if source is not None:
        return datasets.load_dataset(source, split=split)
    data_files = {s: str(Path(data_dir) / f"{s}.jsonl") for s in SPLITS}
    return datasets.load_dataset("json", data_files=data_files, split=split)
