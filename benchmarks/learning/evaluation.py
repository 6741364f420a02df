"""Held-out evaluation: the tasks every row of a column plays, and a model's success on them."""

from __future__ import annotations

import hashlib
import json

from .protocol import BF16_AUTOCAST, Column, FP32, Scale
from .statistics import wilson


def rollout_settings(column: Column):
    from trl_starpo.rollout.settings import RolloutSettings

    return RolloutSettings(**column.rollout)


def held_out_tasks(environment: str, column: Column, scale: Scale) -> list[dict]:
    """The held-out rows every run of a column plays: the first ``eval_episodes`` of its held-out split, each with a
    task id of its own (``paired`` matches runs task by task)."""
    from trl_starpo import load_tasks

    tasks = load_tasks(environment, split=column.held_out)
    rows = [dict(tasks[i]) for i in range(min(scale.eval_episodes, len(tasks)))]
    if len({str(row.get("task_id", i)) for i, row in enumerate(rows)}) != len(rows):
        raise ValueError(f"The {column.held_out} split of {environment} repeats task ids; each held-out row needs "
                         "its own.")
    return rows


def tasks_digest(rows: list[dict]) -> str:
    """A short hash of task rows' content: two runs played the same tasks exactly when their digests agree (a split
    regenerated under the same ids gets another)."""
    blob = json.dumps([{key: row[key] for key in sorted(row)} for row in rows], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def eval_temperature(column: Column, scale: Scale) -> float:
    return scale.temperature if column.eval_temperature is None else column.eval_temperature


def held_out(model, tokenizer, environment: str, column: Column, scale: Scale, seed: int) -> dict:
    """Success of ``model`` (the random agent when None) on the first ``eval_episodes`` held-out tasks, one episode
    each, in the precision the column's runs train in (bf16 autocast with ``scale.bf16``), whichever row it is, at
    the column's evaluation temperature (its training temperature unless the column names one)."""
    from trl_starpo.evaluation import ModelPolicy, RandomPolicy, evaluate

    if model is None:
        policy = RandomPolicy(rollout_settings(column), seed=seed)
    else:
        # a model fresh from training runs under its trainer's autocast and one loaded from disk does not: the policy's
        # own keeps every row of a column in one precision
        policy = ModelPolicy(model, tokenizer, rollout_settings(column), temperature=eval_temperature(column, scale),
                             seed=seed,
                             bf16=bool(scale.bf16))
    tasks = held_out_tasks(environment, column, scale)
    result = evaluate(policy, environment, tasks, environment_kwargs=column.environment_kwargs)
    successes = sum(bool(t.success) for t in result.trajectories)
    outcomes = {t.task_id: int(bool(t.success)) for t in result.trajectories}
    return {"split": column.held_out, "episodes": result.episodes, "successes": successes,
            "success": successes / result.episodes, "wilson95": list(wilson(successes, result.episodes)),
            "return": result.stats["return"], "format_error_rate": result.stats["format_error_rate"],
            "turns": result.stats["turns"],
            "context_truncated": sum(t.truncation == "context" for t in result.trajectories),
            "precision": BF16_AUTOCAST if scale.bf16 else FP32,
            "temperature": None if model is None else eval_temperature(column, scale),
            "outcomes": outcomes, "tasks_sha256": tasks_digest(tasks)}


def load_model(path: str):
    """A saved model and its tokenizer, on the accelerator where there is one (where a trained model already is, so
    that every row plays on the same device)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(path)
    if torch.accelerator.is_available():
        model = model.to(torch.accelerator.current_accelerator())
    return model, tokenizer
