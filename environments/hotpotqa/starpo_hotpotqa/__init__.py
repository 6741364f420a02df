"""HotPotQA in the ReAct setting, offline: multi-hop questions answered with ``search``, ``lookup`` and ``finish``.

The agent answers a question that needs two encyclopedia pages (HotPotQA's bridge and comparison questions) by
searching pages by title, looking up keywords in the current page and finishing with an answer, as in ReAct
(Yao et al., 2023). The answer is scored with HotPotQA's official normalization, F1 and exact match, through a local
``evaluate`` metric shipped in the package (``load_metric()``).

Real HotPotQA cannot be downloaded here, so the package ships a generated encyclopedia of fictional entities
(``data/corpus.jsonl``) and 1 400 questions over it (``data/{train,validation,test}.jsonl``); ``python -m
starpo_hotpotqa`` regenerates them. Rows of the real dataset (``question``, ``answer``, ``context``) are accepted as
they are: the episode then searches the row's own paragraphs.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from trl_starpo.envs import parse_task_split_args, write_task_splits

from .env import (
    CORPUS_FILE,
    DATA_DIR,
    MAX_STEPS,
    Corpus,
    HotpotQAEnv,
    answer_in_text,
    corpus_from_contexts,
    default_corpus,
    load_corpus,
    load_tasks,
    parse_action,
)
from .hotpotqa_answer.hotpotqa_answer import exact_match_score, f1_score, normalize_answer, score_answer

__all__ = [
    "CORPUS_FILE",
    "Corpus",
    "DATA_DIR",
    "HotpotQAEnv",
    "MAX_STEPS",
    "METRIC_PATH",
    "answer_in_text",
    "corpus_from_contexts",
    "default_corpus",
    "exact_match_score",
    "f1_score",
    "load_corpus",
    "load_environment",
    "load_metric",
    "load_tasks",
    "main",
    "normalize_answer",
    "parse_action",
    "play",
    "score_answer",
]

METRIC_PATH = Path(__file__).parent / "hotpotqa_answer"


def load_environment(**kwargs: Any) -> HotpotQAEnv:
    """Create a ``HotpotQAEnv``; ``kwargs`` are its constructor arguments (``reward="em"``, ``max_steps``, ...)."""
    return HotpotQAEnv(**kwargs)


def load_metric(**kwargs: Any):
    """HotPotQA's answer exact match and F1 as an ``evaluate`` module, loaded from the package (no download)."""
    import evaluate

    return evaluate.load(str(METRIC_PATH), **kwargs)


# ---------------------------------------------------------------------------------------------------------------
# Baselines and data


def play(env: HotpotQAEnv, task: Mapping[str, Any], policy: Callable[[HotpotQAEnv], str]) -> dict[str, Any]:
    """Play one episode of ``task`` with ``policy`` (the environment in, an action out); the last step's ``info``
    with the episode's ``return`` and ``steps``."""
    env.reset(options={"task": task})
    total, steps, info = 0.0, 0, {}
    terminated = truncated = False
    while not (terminated or truncated):
        _, reward, terminated, truncated, info = env.step(policy(env))
        total, steps = total + reward, steps + 1
    return {**info, "return": total, "steps": steps}


def _baselines(split: str, num_tasks: int | None, random_runs: int, seed: int) -> None:
    tasks = load_tasks(split)
    tasks = tasks.select(range(min(num_tasks, len(tasks)))) if num_tasks else tasks
    env = load_environment()
    rng = random.Random(seed)
    policies = {
        "scripted expert": (1, lambda e: e.expert_action()),
        "random (admissible actions)": (random_runs, lambda e: rng.choice(e.admissible_actions())),
    }
    print(f"{split}, {len(tasks)} questions, max_steps={env.max_steps}")
    print("| agent | episodes | success (EM) | mean F1 | mean steps |")
    print("|---|---:|---:|---:|---:|")
    for name, (runs, policy) in policies.items():
        results = [play(env, task, policy) for _ in range(runs) for task in tasks]
        success = sum(r["success"] for r in results) / len(results)
        f1 = sum(r.get("f1", 0.0) for r in results) / len(results)
        steps = sum(r["steps"] for r in results) / len(results)
        print(f"| {name} | {len(results)} | {success:.3f} | {f1:.3f} | {steps:.2f} |")


def main(argv: Sequence[str] | None = None) -> None:
    """Regenerate the corpus and the task splits, or measure the baselines (``python -m starpo_hotpotqa --help``)."""
    from .generate import SPLIT_SIZES, generate

    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--seed", type=int, default=0, help="generator seed; with --baselines, the random agent's (default: 0)"
        )
        parser.add_argument("--baselines", metavar="SPLIT", help="instead: play the scripted expert and a random agent")
        parser.add_argument("--episodes", type=int, default=None, help="with --baselines: questions to play (all)")
        parser.add_argument("--random-runs", type=int, default=5, help="with --baselines: random episodes per question")

    args = parse_task_split_args("python -m starpo_hotpotqa", SPLIT_SIZES, DATA_DIR, argv=argv,
                                 description=main.__doc__, options=options)
    if args.baselines:
        _baselines(args.baselines, args.episodes, args.random_runs, args.seed)
        return
    corpus, tasks = generate(args.seed, split_sizes=args.split_sizes)
    path = args.out_dir / CORPUS_FILE.name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(page, ensure_ascii=False) + "\n" for page in corpus), encoding="utf-8")
    print(f"wrote {len(corpus)} pages to {path}")
    write_task_splits(args.out_dir, tasks.items())
