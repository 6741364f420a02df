"""The training recipe behind ``recipes/<env>.py``: read top to bottom, it is the whole StarPO pipeline.

Every field of ``StarPOConfig`` and TRL's ``ModelConfig`` (``--model_name_or_path``, ``--use_peft``, ``--lora_r``,
...) is a command-line flag or a YAML key (``--config file.yaml``), as in TRL's own scripts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from trl import ModelConfig, TrlParser, get_peft_config

from .config import StarPOConfig
from .envs import load_tasks
from .models import DEFAULT_MODEL, resolve_model_path
from .trainer import StarPOTrainer


@dataclass
class RecipeArguments:
    """What a recipe adds to ``StarPOConfig`` and ``ModelConfig``."""

    tasks: str | None = field(
        default=None, metadata={"help": "A Hub dataset id or local folder of tasks instead of the environment's own."}
    )
    eval_episodes: int = field(
        default=32, metadata={"help": "Validation episodes played before and after training (0 to skip)."}
    )


def run(environment: str) -> dict[str, dict[str, float]]:
    """Train a StarPO agent on ``environment`` from command-line / YAML arguments; returns validation results."""
    parser = TrlParser((RecipeArguments, StarPOConfig, ModelConfig))
    recipe, args, model_args = parser.parse_args_and_config()
    model_path = resolve_model_path(model_args.model_name_or_path or DEFAULT_MODEL)
    if model_args.dtype not in (None, "auto"):
        args.model_init_kwargs = {**(args.model_init_kwargs or {}), "dtype": model_args.dtype}

    trainer = StarPOTrainer(
        model=model_path,
        environment=environment,
        args=args,
        train_dataset=load_tasks(environment, split="train", source=recipe.tasks),
        peft_config=get_peft_config(model_args),
    )
    validation = load_tasks(environment, split="validation", source=recipe.tasks)

    results = {}
    if recipe.eval_episodes:
        results["before"] = trainer.evaluate_episodes(validation, recipe.eval_episodes)
    trainer.train()
    if recipe.eval_episodes:
        results["after"] = trainer.evaluate_episodes(validation, recipe.eval_episodes)
    trainer.save_model(args.output_dir)

    if trainer.accelerator.is_main_process:
        Path(args.output_dir, "validation_results.json").write_text(json.dumps(results, indent=2))
        for when, stats in results.items():
            print(f"validation {when} training: success {stats['success']:.3f}, return {stats['return']:.3f}, "
                  f"format errors {stats['format_error_rate']:.3f}")
    trainer.accelerator.wait_for_everyone()
    return results
