"""ALFWorld as a text environment for StarPO, on ALFWorld's real engine.

ALFWorld (Shridhar et al., 2021) puts an agent in ALFRED's household scenes as a text game: it reads what it sees
and types commands (``go to countertop 1``, ``take apple 1 from countertop 1``, ``heat apple 1 with microwave 1``,
...) until the task is done. This package runs the games on ALFWorld's own engine (TextWorld's ``PddlEnv`` with
ALFWorld's domain, grammar, demangler and planner expert), so observations, admissible commands and rewards are
ALFWorld's.

ALFWorld's official games cannot be downloaded everywhere, so the package ships an offline generator of games in
ALFWorld's own format over ALFRED's floor plans and sampling rules (``generator``), and task splits of such games
(``data/{train,valid_seen,valid_unseen}.jsonl``); with the official data installed, ``load_tasks(split,
source="official")`` plays the official games instead. ``python -m starpo_alfworld --help`` rebuilds the splits.

Modules: ``world`` (ALFRED's scenes and rules), ``pddl`` (ALFWorld's file format), ``generator`` (drawing games and
splits), ``engine`` (the engine stack), ``games`` (task rows to game files, the cache, official data), ``env``
(``AlfWorldEnv``), ``cli``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .env import ACTION_DESCRIPTION, SYSTEM_PROMPT, AlfWorldEnv
from .games import GeneratorMismatchError, cache_dir, game_file, official_tasks
from .generator import GENERATOR_VERSION, SPLIT_RULES, NoGameError, build_game, generate_split
from .world import TASK_TYPES

__all__ = [
    "ACTION_DESCRIPTION",
    "GENERATOR_VERSION",
    "SPLITS",
    "SPLIT_ALIASES",
    "SPLIT_RULES",
    "SYSTEM_PROMPT",
    "TASK_TYPES",
    "AlfWorldEnv",
    "GeneratorMismatchError",
    "NoGameError",
    "build_game",
    "cache_dir",
    "game_file",
    "generate_split",
    "load_environment",
    "load_tasks",
    "main",
    "official_tasks",
    "resolve_split",
]

DATA_DIR = Path(__file__).parent / "data"
SPLITS = ("train", "valid_seen", "valid_unseen")
"""ALFWorld's splits: training games, new games in seen scenes (in-distribution) and games in unseen scenes."""
SPLIT_ALIASES = {
    "validation": "valid_seen",
    "test": "valid_unseen",
    "eval_in_distribution": "valid_seen",
    "eval_out_of_distribution": "valid_unseen",
}
"""Other names accepted for the splits: the trainer's ``validation`` and ``test``, and ALFWorld's config names."""


def resolve_split(split: str) -> str:
    """The ALFWorld split called ``split`` (an ALFWorld name or an alias in ``SPLIT_ALIASES``)."""
    name = SPLIT_ALIASES.get(split, split)
    if name not in SPLITS:
        choices = ", ".join([*SPLITS, *SPLIT_ALIASES])
        raise ValueError(f"Unknown split {split!r}; choose one of {choices}.")
    return name


def load_environment(**kwargs: Any) -> AlfWorldEnv:
    """Create an ``AlfWorldEnv``; ``kwargs`` are its constructor arguments (``max_steps``, ``show_admissible``,
    ``expert``, ``cache_dir``, ``expert_search``)."""
    return AlfWorldEnv(**kwargs)


def load_tasks(split: str | None = None, source: str | None = None):
    """The task rows of a split, as a ``datasets.Dataset`` (all splits as a ``DatasetDict`` when ``split`` is None).

    Args:
        split: ``train``, ``valid_seen`` or ``valid_unseen``, or an alias: ``validation`` is ``valid_seen`` and
            ``test`` is ``valid_unseen``.
        source: ``None`` for the shipped generated games (``data/<split>.jsonl``, read with
            ``datasets.load_dataset("json", ...)``); ``"official"`` for ALFWorld's official games under
            ``$ALFWORLD_DATA`` (see ``official_tasks``); otherwise a Hub dataset id or local folder of task rows,
            read with ``datasets.load_dataset(source)`` (its split named as asked, else its ALFWorld name).
    """
    import datasets

    if source == "official":
        if split is None:
            return datasets.DatasetDict({name: official_tasks(name) for name in SPLITS})
        return official_tasks(resolve_split(split))
    if source is not None:
        if split is None:
            return datasets.load_dataset(source)
        try:
            return datasets.load_dataset(source, split=split)
        except ValueError:
            return datasets.load_dataset(source, split=resolve_split(split))
    data_files = {name: str(DATA_DIR / f"{name}.jsonl") for name in SPLITS}
    return datasets.load_dataset("json", data_files=data_files, split=None if split is None else resolve_split(split))


def main(argv=None) -> None:
    """``python -m starpo_alfworld``: see ``starpo_alfworld.cli``."""
    from .cli import main as cli_main

    cli_main(argv)
