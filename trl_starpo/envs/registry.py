"""Finding installed environments through the ``trl_starpo.environments`` entry-point group.

An environment package registers either its module or its factory function, for example in its ``pyproject.toml``::

    [project.entry-points."trl_starpo.environments"]
    sokoban = "starpo_sokoban"                        # a module with load_environment() and load_tasks()
    maze = "maze_env.starpo:load_environment"         # a function (or class) returning an environment

A module provides ``load_environment(**kwargs) -> Environment`` and ``load_tasks(split=None, source=None)``, which
returns the environment's task instances as a ``datasets.Dataset`` (one split) or ``DatasetDict``. A registered
function is called as ``load_environment``; its tasks come from a ``load_tasks`` in the function's own module.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import inspect
import json
from collections.abc import Callable
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


def unknown_environment(name: str) -> ValueError:
    """The error for an environment name that is not installed: the closest installed name and the whole list."""
    installed = list_environments()
    close = difflib.get_close_matches(str(name), installed, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return ValueError(
        f"Unknown environment {name!r}.{hint} Installed environments: {', '.join(installed) or 'none'}. An "
        f"environment is a package that registers the entry-point group {ENTRY_POINT_GROUP!r} (see "
        "docs/environments.md)."
    )


def registered_object(name: str) -> ModuleType | Callable[..., Any]:
    """What ``name``'s entry point names: a module or a callable. Raises ``ValueError`` naming the installed
    environments when ``name`` is not one of them."""
    eps = _entry_points()
    if name not in eps:
        raise unknown_environment(name)
    return eps[name].load()


def _function(name: str, function: str) -> Callable[..., Any]:
    target = registered_object(name)
    if isinstance(target, ModuleType):
        found = getattr(target, function, None)
    elif function == "load_environment":
        found = target
    else:
        found = getattr(inspect.getmodule(target), function, None)
    if not callable(found):
        where = target.__name__ if isinstance(target, ModuleType) else f"the module of {target!r}"
        raise ValueError(
            f"Environment {name!r} ({_entry_points()[name].value}) provides no {function}(): define it in {where} "
            "(see docs/environments.md)."
        )
    return found


def task_split_sizes(name: str) -> dict[str, int] | None:
    """Rows of each task split of environment ``name``, counted in its package's ``data/<split>.jsonl`` files
    (those whose rows have a ``task_id``) without importing the package or building a dataset; ``None`` when the
    package keeps its tasks elsewhere (``load_tasks`` then counts them)."""
    eps = _entry_points()
    if name not in eps:
        raise unknown_environment(name)
    spec = importlib.util.find_spec(eps[name].module.split(".")[0])
    if spec is None or not spec.submodule_search_locations:
        return None
    sizes = {}
    for path in Path(next(iter(spec.submodule_search_locations)), "data").glob("*.jsonl"):
        with path.open(encoding="utf-8") as lines:
            try:
                first = json.loads(lines.readline())
            except ValueError:
                continue
            if isinstance(first, dict) and "task_id" in first:
                sizes[path.stem] = 1 + sum(1 for line in lines if line.strip())
    order = lambda split: (0 if split == "train" else 1 if split.startswith("valid") else 2, split)  # noqa: E731
    return {split: sizes[split] for split in sorted(sizes, key=order)} or None


def load_environment(name: str, **kwargs: Any):
    """Create the environment registered as ``name``, passing ``kwargs`` to its ``load_environment``."""
    return _function(name, "load_environment")(**kwargs)


def load_tasks(name: str, split: str | None = None, source: str | None = None):
    """Load the task instances of environment ``name`` (see ``load_task_dataset``)."""
    from ..store import _quiet_datasets

    with _quiet_datasets():  # no "Generating train split" bars each time a task set is read
        return _function(name, "load_tasks")(split=split, source=source)


def write_task_split(data_dir: str | Path, split: str, rows: list[dict[str, Any]]) -> Path:
    """Write one split of task rows as ``<data_dir>/<split>.jsonl``, the layout ``load_task_dataset`` reads."""
    if split not in SPLITS:
        raise ValueError(f"Unknown split {split!r}; choose one of {', '.join(SPLITS)}.")
    path = Path(data_dir) / f"{split}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return path


def tasks_data_dir(name: str) -> Path:
    """The ``data`` folder beside the module of environment ``name``, where its shipped task splits live."""
    eps = _entry_points()
    if name not in eps:
        raise unknown_environment(name)
    return Path(importlib.import_module(eps[name].module).__file__).parent / "data"


def load_task_dataset(data_dir: str | Path, split: str | None = None, source: str | None = None):
    """Load an environment's task instances with ``datasets.load_dataset``.

    Args:
        data_dir: The package's own data folder, holding ``train.jsonl``, ``validation.jsonl`` and ``test.jsonl``.
        split: One of ``train``, ``validation``, ``test``; ``None`` returns the whole ``DatasetDict``.
        source: A Hub dataset id or a local folder to load instead of the package's own files.
    """
    import datasets

    from ..store import _quiet_datasets

    if split is not None and split not in SPLITS:
        raise ValueError(f"Unknown split {split!r}; choose one of {', '.join(SPLITS)}.")
    with _quiet_datasets():
        if source is not None:
            return datasets.load_dataset(source, split=split)
        data_files = {s: str(Path(data_dir) / f"{s}.jsonl") for s in SPLITS}
        return datasets.load_dataset("json", data_files=data_files, split=split)

