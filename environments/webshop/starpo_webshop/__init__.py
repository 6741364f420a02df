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

from trl_starpo.envs import load_task_dataset, write_task_split

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
    parser = argparse.ArgumentParser(prog="python -m starpo_webshop", description=main.__doc__)
    parser.add_argument("--out-dir", type=Path, default=DATA_DIR, help="output folder (default: %(default)s)")
    parser.add_argument("--catalog-seed", type=int, default=CATALOG_SEED)
    parser.add_argument("--products-per-type", type=int, default=PRODUCTS_PER_TYPE)
    for split, size in SPLIT_SIZES.items():
        parser.add_argument(f"--{split}-size", type=int, default=size)
    args = parser.parse_args(argv)

    catalog = Catalog(generate_catalog(args.catalog_seed, args.products_per_type))
    catalog_path = Path(args.out_dir) / CATALOG_FILE
    _write_jsonl(catalog_path, catalog.to_rows())
    print(f"wrote {len(catalog)} products to {catalog_path}")
    taken: set[str] = set()
    for split, first_seed in SPLIT_FIRST_SEEDS.items():
        tasks = generate_tasks(catalog, split, getattr(args, f"{split}_size"), first_seed, exclude_asins=taken)
        taken.update(task["asin"] for task in tasks)
        print(f"wrote {len(tasks)} tasks to {write_task_split(args.out_dir, split, tasks)}")


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
