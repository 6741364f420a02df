"""The task splits: goals written from distinct products, each checked to be solvable.

Task ``i`` of a split is drawn from seed ``first_seed + i`` (``goals.make_task``); a seed is skipped when its product
was already the goal of an earlier task (of any split), so no two tasks share a goal product. A task is kept only if
its goal product, bought with the goal options, earns reward 1 and the scripted expert reaches that within the step
limit: every shipped task is solvable.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from .catalog import Catalog
from .env import WebShopEnv
from .goals import make_task
from .records import Goal
from .reward import get_reward

SPLIT_SIZES = {"train": 500, "validation": 100, "test": 100}
SPLIT_FIRST_SEEDS = {"train": 0, "validation": 100_000, "test": 200_000}


def run_expert(env: WebShopEnv, task: dict[str, Any]) -> tuple[float, int]:
    """Play ``task`` with the scripted expert; returns the final reward and the number of steps taken."""
    env.reset(options={"task": task})
    reward, steps, done = 0.0, 0, False
    while not done:
        action = env.expert_action()
        if action is None:
            break
        _, reward, terminated, truncated, _ = env.step(action)
        steps += 1
        done = terminated or truncated
    return reward, steps


def is_solvable(env: WebShopEnv, task: dict[str, Any]) -> bool:
    """Whether the goal product with the goal options earns reward 1 and the expert gets it within the step limit."""
    goal = Goal.from_row(task)
    product = env.catalog[goal.asin]
    reward, _ = get_reward(product, goal, price=product.price, options=goal.goal_options)
    return reward == 1.0 and run_expert(env, task)[0] == 1.0


def generate_tasks(
    catalog: Catalog,
    split: str,
    num_tasks: int,
    first_seed: int,
    exclude_asins: Collection[str] = (),
    max_steps: int = 15,
) -> list[dict[str, Any]]:
    """Task rows of ``num_tasks`` solvable goals on distinct products, none in ``exclude_asins``."""
    env = WebShopEnv(catalog, max_steps=max_steps)
    taken = set(exclude_asins)
    tasks: list[dict[str, Any]] = []
    seed = first_seed
    while len(tasks) < num_tasks:
        task = {"task_id": f"webshop-{split}-{len(tasks):05d}", **make_task(catalog, seed)}
        seed += 1
        if task["asin"] in taken or not is_solvable(env, task):
            continue
        taken.add(task["asin"])
        tasks.append(task)
    return tasks
