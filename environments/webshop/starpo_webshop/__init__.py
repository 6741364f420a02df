"""WebShop (Yao et al., 2022) as an offline text environment for StarPO.

An agent shops on a simulated store for a customer's instruction ("i need a long lasting deodorant ..., and price
lower than 30.00 dollars"): it searches, browses results, opens products, selects options and buys. The store is a
procedurally generated catalog shipped in ``data/catalog.jsonl``; pages, actions and the reward follow WebShop's text
environment and ``get_reward``. Rebuild the data with ``python -m starpo_webshop``; a running real WebShop server can
be played through ``WebShopServerEnv`` instead.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trl_starpo.envs import load_task_dataset, parse_task_split_args, write_task_splits

from .catalog import (
    CATALOG_FILE,
    CATALOG_SEED,
    CATALOG_VERSION,
    DATA_DIR,
    PRODUCTS_PER_TYPE,
    Catalog,
    generate_catalog,
    load_catalog,
)
from .env import WebShopEnv, parse_action
from .goals import make_goal, make_task, search_query
from .records import Goal, Product, Review
from .reward import get_reward, normalize_color
from .search import SearchEngine
from .server import WebShopServerEnv
from .tasks import SPLIT_FIRST_SEEDS, SPLIT_SIZES, generate_tasks, run_expert

__all__ = [
    "CATALOG_VERSION",
    "Catalog",
    "Goal",
    "Product",
    "Review",
    "SearchEngine",
    "WebShopEnv",
    "WebShopServerEnv",
    "generate_catalog",
    "generate_tasks",
    "get_reward",
    "load_catalog",
    "load_environment",
    "load_tasks",
    "main",
    "make_goal",
    "make_task",
    "normalize_color",
    "parse_action",
    "run_expert",
    "search_query",
]


def load_environment(**kwargs: Any) -> WebShopEnv:
    """Create a ``WebShopEnv``; ``kwargs`` are its constructor arguments (``catalog``, ``max_steps``)."""
    return WebShopEnv(**kwargs)


def load_tasks(split: str | None = None, source: str | None = None):
    """The shipped task splits (or those of ``source``), as with ``trl_starpo.envs.load_task_dataset``."""
    return load_task_dataset(DATA_DIR, split, source)


def main(argv: Sequence[str] | None = None) -> None:
    """Regenerate the catalog and the task splits (``python -m starpo_webshop --help``)."""
    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--catalog-seed", type=int, default=CATALOG_SEED)
        parser.add_argument("--products-per-type", type=int, default=PRODUCTS_PER_TYPE)

    args = parse_task_split_args("python -m starpo_webshop", SPLIT_SIZES, DATA_DIR, argv=argv,
                                 description=main.__doc__, options=options)
    catalog = Catalog(generate_catalog(args.catalog_seed, args.products_per_type))
    catalog_path = Path(args.out_dir) / CATALOG_FILE
    _write_jsonl(catalog_path, catalog.to_rows())
    print(f"wrote {len(catalog)} products to {catalog_path}")
    taken: set[str] = set()  # no product is the goal in two splits

    def split_tasks(split: str, count: int) -> list[dict[str, Any]]:
        tasks = generate_tasks(catalog, split, count, SPLIT_FIRST_SEEDS[split], exclude_asins=taken)
        taken.update(task["asin"] for task in tasks)
        return tasks

    write_task_splits(args.out_dir, ((split, split_tasks(split, count)) for split, count in args.split_sizes.items()))


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
