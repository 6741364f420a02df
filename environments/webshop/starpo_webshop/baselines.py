"""Baseline agents on a task split: the scripted expert and a uniformly random agent over the admissible actions.

    python -m starpo_webshop.baselines --split validation --episodes 100

prints, for each agent, the success rate (reward 1), the mean reward and the mean number of steps. Each episode is
capped at the environment's ``max_steps`` valid actions.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import load_tasks
from .env import WebShopEnv

Policy = Callable[[WebShopEnv], str]


def expert_policy(env: WebShopEnv) -> str:
    """The environment's scripted expert."""
    return env.expert_action()


def random_policy(seed: int = 0) -> Policy:
    """A policy drawing uniformly from ``env.admissible_actions()``."""
    rng = np.random.default_rng(seed)

    def act(env: WebShopEnv) -> str:
        actions = env.admissible_actions()
        return actions[int(rng.integers(len(actions)))]

    return act


def play(env: WebShopEnv, task: dict[str, Any], policy: Policy) -> tuple[float, int]:
    """One episode of ``policy`` on ``task``; returns the final reward and the number of steps."""
    env.reset(options={"task": task})
    reward, steps, done = 0.0, 0, False
    while not done:
        _, reward, terminated, truncated, _ = env.step(policy(env))
        steps += 1
        done = terminated or truncated
    return reward, steps


def evaluate(env: WebShopEnv, tasks: Sequence[dict[str, Any]], policy: Policy) -> dict[str, float]:
    """Success rate, mean reward and mean steps of ``policy`` over ``tasks``."""
    results = np.array([play(env, task, policy) for task in tasks])
    return {
        "success": float(np.mean(results[:, 0] == 1.0)),
        "reward": float(results[:, 0].mean()),
        "steps": float(results[:, 1].mean()),
    }


def main(argv: Sequence[str] | None = None) -> None:
    """Measure the expert and the random agent on a split."""
    parser = argparse.ArgumentParser(prog="python -m starpo_webshop.baselines", description=main.__doc__)
    parser.add_argument("--split", default="validation")
    parser.add_argument("--episodes", type=int, default=None, help="first N tasks (default: all)")
    parser.add_argument("--max-steps", type=int, default=15)
    parser.add_argument("--seed", type=int, default=0, help="seed of the random agent")
    args = parser.parse_args(argv)
    tasks = load_tasks(args.split)
    tasks = list(tasks.select(range(min(args.episodes, len(tasks))))) if args.episodes else list(tasks)
    env = WebShopEnv(max_steps=args.max_steps)
    print(f"{args.split}: {len(tasks)} tasks, at most {args.max_steps} steps")
    for name, policy in (("scripted expert", expert_policy), ("random agent", random_policy(args.seed))):
        stats = evaluate(env, tasks, policy)
        print(f"{name:16s} success {stats['success']:.3f}  reward {stats['reward']:.3f}  steps {stats['steps']:.1f}")


if __name__ == "__main__":
    main()
