"""The training recipe behind ``recipes/<env>.py`` and ``trl-starpo train``: read top to bottom, it is the whole
StarPO pipeline.

Every field of ``StarPOConfig`` and TRL's ``ModelConfig`` (``--model_name_or_path``, ``--use_peft``, ``--lora_r``,
...) is a command-line flag or a YAML key (``--config file.yaml``), as in TRL's own scripts, plus the
``RecipeArguments`` below.

A run leaves in ``output_dir``: the agent (the LoRA adapter when ``use_peft``), ``starpo_agent.json``,
``validation_results.json``, ``learning_curves.png``, ``trainer_state.json``, the trajectory store
``trajectories/`` with an HTML sample ``trajectories.html``, and a model card ``README.md``. With
``--push_to_hub`` the agent and its trajectories go to the Hub at the end.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from accelerate import PartialState
from transformers import TrainingArguments
from trl import ModelConfig, TrlParser, get_peft_config

from .checkpoints import resolve_resume
from .config import StarPOConfig
from .envs import load_tasks
from .field_checks import check_field_values
from .json_files import json_text
from .hub.push import public_model_name, write_agent_files
from .models import DEFAULT_MODEL, merged_warm_start, resolve_model_path, save_adapter
from .nonfinite import NothingTrainedError
from .trainer import StarPOTrainer


@dataclass
class EvaluationArguments:
    """The task source and validation episodes of a recipe."""

    tasks: str | None = field(
        default=None, metadata={"help": "A Hub dataset id or local folder of tasks instead of the environment's own."}
    )
    eval_episodes: int = field(
        default=32, metadata={"help": "Validation episodes played per split (0 to skip)."}
    )
    eval_splits: list[str] = field(
        default_factory=lambda: ["validation"],
        metadata={"help": "Task splits evaluated; the first is the one the card reports."},
    )
    eval_temperature: float | None = field(
        default=None,
        metadata={"help": "Sampling temperature of the validation episodes; 0 decodes greedily. Default: the "
                          "training temperature (1.0 for the SFT recipes)."},
    )

    def __post_init__(self):
        check_field_values(self, {"eval_episodes": (">= 0", lambda value: value >= 0),
                                  "eval_temperature": (">= 0 (0 decodes greedily)", lambda value: value >= 0)})

    def validation_temperature(self, training_temperature: float) -> float:
        """The temperature validation episodes are played at."""
        return training_temperature if self.eval_temperature is None else float(self.eval_temperature)


@dataclass
class WarmStartArguments(EvaluationArguments):
    """The task source, the validation episodes and the warm start of a recipe that starts from an SFT adapter."""

    warm_start: str | None = field(
        default=None,
        metadata={"help": "A LoRA adapter folder (an SFT run's, e.g. recipes/warm_starts/alfworld) merged into the "
                          "model before training (the StarPO recipes' validation also plays the model without it, "
                          "'untrained')."},
    )


@dataclass
class RecipeArguments(WarmStartArguments):
    """What a recipe adds to ``StarPOConfig`` and ``ModelConfig``: the task source, the validation episodes, played
    before and after training, and the warm start. (What is kept of the run, the trajectory store, its HTML sample
    and the agent files, are ``StarPOConfig`` fields.)"""


def recipe_parser() -> TrlParser:
    """The recipes' parser: every field of ``RecipeArguments``, ``StarPOConfig`` and ``ModelConfig`` as a flag."""
    parser = TrlParser((RecipeArguments, StarPOConfig, ModelConfig))
    parser.set_defaults(monitor="warn")  # the recipes watch for the echo trap; a YAML key or flag still wins
    return parser


def parse_arguments(argv: list[str] | None = None) -> tuple[RecipeArguments, StarPOConfig, ModelConfig]:
    """Parse ``argv`` (the command line by default) and its ``--config`` YAML into the recipe's three dataclasses."""
    return recipe_parser().parse_args_and_config(args=argv)


def resolve_model(model_args: ModelConfig, args) -> tuple[str, str]:
    """The model's name (what cards name as the base) and a loadable path; ``--dtype`` goes to model loading."""
    model_name = model_args.model_name_or_path or DEFAULT_MODEL
    if model_args.dtype not in (None, "auto"):
        args.model_init_kwargs = {**(args.model_init_kwargs or {}), "dtype": model_args.dtype}
    return model_name, resolve_model_path(model_name)


def resume_checkpoint(args: TrainingArguments, *, sealed: bool = False) -> str | None:
    """The checkpoint to resume from: ``resume_from_checkpoint`` as given, or output_dir's last one for ``true``.
    ``sealed`` (a ``StarPOTrainer``'s checkpoints): only a whole checkpoint, the newest one for ``true``."""
    value = args.resume_from_checkpoint
    if sealed:
        return resolve_resume(value, args.output_dir)
    if value is None or str(value).lower() in ("false", "none", ""):
        return None
    if str(value).lower() in ("true", "last"):
        from transformers.trainer_utils import get_last_checkpoint

        last = get_last_checkpoint(args.output_dir) if Path(args.output_dir).is_dir() else None
        if last is None:
            raise ValueError(f"resume_from_checkpoint={value!r} but {args.output_dir} holds no checkpoint-* folder.")
        return last
    return str(value)


def validation_table(splits: dict[str, dict[str, dict]], *, warm_start: bool, method: str) -> str:
    """The validation results of a run as a Markdown table, one row a split and stage, with 95% Wilson intervals:
    ``untrained`` and ``warm start`` where the run started from one, then the trained model."""
    from .statistics import success_interval

    names = {"untrained": "untrained", "before": "warm start" if warm_start else "before training",
             "after": f"after {method}"}
    lines = ["| split | stage | success | 95% interval | return | valid actions | format errors |",
             "|---|---|---:|---|---:|---:|---:|"]
    for split, stages in splits.items():
        for when, stats in stages.items():
            episodes = stats["episodes"]
            low, high = success_interval(stats["success"], episodes)
            validity = f"{stats['action_validity']:.3f}" if stats.get("actions") else "-"  # no action sent
            lines.append(
                f"| {split} | {names.get(when, when)} | {round(stats['success'] * episodes)}/{episodes} | "
                f"[{low:.2f}, {high:.2f}] | {stats['return']:.3f} | {validity} | {stats['format_error_rate']:.3f} |"
            )
    return "\n".join(lines)


def evaluate_untrained(trainer: StarPOTrainer, model_path: str, splits: dict, episodes: int,
                       temperature: float) -> dict[str, dict]:
    """Play the model at ``model_path`` (the base of a warm start) on each split with the trainer's prompts, limits,
    top-p and precision, at ``temperature``. Every process plays every episode (validation before training is
    small)."""
    from transformers import AutoModelForCausalLM

    from .evaluation import ModelPolicy, evaluate
    from .rollout.settings import RolloutSettings

    import torch

    args = trainer.args
    rng = torch.get_rng_state()  # the policy seeds torch per batch; training goes on as it would have without this
    model = AutoModelForCausalLM.from_pretrained(model_path, **(args.model_init_kwargs or {}))
    model = model.to(trainer.accelerator.device).eval()
    policy = ModelPolicy(model, trainer.processing_class, RolloutSettings.from_config(args), temperature=temperature,
                         top_p=args.top_p, seed=args.seed)
    results = {}
    with trainer.accelerator.autocast():
        for split, tasks in splits.items():
            count = min(episodes, len(tasks))
            stats = evaluate(policy, trainer.environment_name, tasks, count,
                             environment_kwargs=args.environment_kwargs, split=split).stats
            results[split] = {**stats, "episodes": count}
    torch.set_rng_state(rng)
    return results


def run(environment: str, argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    """Train a StarPO agent on ``environment`` from command-line / YAML arguments; returns validation results.

    A run that changed nothing exits with status 1 and a one-line reason (``NothingTrainedError`` from
    :func:`train`)."""
    try:
        return train(environment, *parse_arguments(argv))
    except NothingTrainedError as error:
        raise SystemExit(f"error: {error}") from None


def refuse_untrained(trainer: StarPOTrainer) -> None:
    """Raise ``NothingTrainedError`` when no optimizer step of ``trainer``'s run changed the model, before anything
    that looks like a trained agent is saved (the trainer itself then wrote no card or agent files)."""
    reason = trainer.nonfinite_guard.nothing_trained_reason()
    if reason:
        raise NothingTrainedError(
            f"training ended without changing the model: {reason}. No model was saved in {trainer.args.output_dir}."
        )


def train(environment: str, recipe: RecipeArguments, args: StarPOConfig, model_args: ModelConfig):
    """Train a StarPO agent on ``environment`` from parsed arguments (see :func:`run`); returns validation results."""
    model_name, model_path = resolve_model(model_args, args)
    untrained_path = None
    if recipe.warm_start:
        if args.push_to_hub and model_args.use_peft:
            raise ValueError(
                "push_to_hub with warm_start and use_peft would push a LoRA adapter whose base is the merged warm "
                "start in this machine's cache: push the warm start's merged model first and train from it with "
                "--model_name_or_path, or train without use_peft."
            )
        untrained_path, model_path = model_path, merged_warm_start(model_path, recipe.warm_start)

    checkpoint = resume_checkpoint(args, sealed=True)  # a missing or half-written one fails before the model loads
    trainer = StarPOTrainer(
        model=model_path,
        environment=environment,
        args=args,
        train_dataset=load_tasks(environment, split="train", source=recipe.tasks),
        peft_config=get_peft_config(model_args),
    )
    agent = trainer.starpo_agent  # what starpo_agent.json and the card say; the validation results are added below
    agent.base_model = public_model_name(model_name)
    if recipe.warm_start:
        agent.training["warm_start"] = recipe.warm_start
    splits = {split: load_tasks(environment, split=split, source=recipe.tasks) for split in recipe.eval_splits}
    by_split = {split: {} for split in splits}
    temperature = recipe.validation_temperature(args.temperature)

    def evaluate(when: str) -> None:
        for split, tasks in splits.items():
            stats = trainer.evaluate_episodes(tasks, recipe.eval_episodes, temperature=temperature)
            by_split[split][when] = {**stats, "episodes": min(recipe.eval_episodes, len(tasks))}

    primary = recipe.eval_splits[0] if recipe.eval_splits else None
    try:
        if recipe.eval_episodes and primary:
            agent.validation = {"split": primary, "episodes": min(recipe.eval_episodes, len(splits[primary])),
                                "temperature": temperature}
            if untrained_path:
                untrained = evaluate_untrained(trainer, untrained_path, splits, recipe.eval_episodes, temperature)
                for split, stats in untrained.items():
                    by_split[split]["untrained"] = stats
            evaluate("before")
            agent.validation["before"] = by_split[primary]["before"]
        trainer.train(resume_from_checkpoint=checkpoint)
        refuse_untrained(trainer)
        if recipe.eval_episodes and primary:
            evaluate("after")
            agent.validation["after"] = by_split[primary]["after"]
    finally:  # the validation episodes' environments (training closes its own)
        trainer.environment_pool.close()
    # The first split at the top level (what the card and the plot show), every split under "splits".
    results = {**by_split[primary], "splits": by_split} if recipe.eval_episodes and primary else {}

    if trainer.accelerator.is_main_process:
        Path(args.output_dir, "validation_results.json").write_text(json_text(results, indent=2))
        write_agent_files(trainer)  # the learning curves again, now with the validation lines
        print(validation_table(results.get("splits", {}), warm_start=bool(recipe.warm_start),
                               method=args.preset or "StarPO"))
    # Saves the agent and its card; with push_to_hub, also pushes it and its trajectories.
    trainer.save_model(args.output_dir)
    if trainer.accelerator.is_main_process and not args.push_to_hub:
        trainer.create_model_card(model_name=Path(args.output_dir).name)
    trainer.accelerator.wait_for_everyone()
    return results


@dataclass
class OfflineArguments:
    """What the offline recipe adds to ``StarPOConfig`` and ``ModelConfig``."""

    trajectories: str | None = field(
        default=None,
        metadata={"help": "The logged trajectories: a saved store folder (output_dir/trajectories), a Parquet file or "
                          "a Hub dataset id."},
    )


def run_offline(argv: list[str] | None = None):
    """Train with offline StarPO on logged trajectories (``recipes/offline.py``); returns the trainer."""
    from .offline import OfflineStarPOTrainer

    parser = TrlParser((OfflineArguments, StarPOConfig, ModelConfig))
    offline, args, model_args = parser.parse_args_and_config(args=argv)
    if not offline.trajectories:
        raise ValueError("Pass --trajectories (a saved store folder, a Parquet file or a Hub dataset id).")
    model_name, model_path = resolve_model(model_args, args)
    trainer = OfflineStarPOTrainer(
        model=model_path,
        trajectories=offline.trajectories,
        args=args,
        peft_config=get_peft_config(model_args),
    )
    trainer.starpo_agent.environments = sorted({e for e in trainer.logged.unique("environment") if e})
    trainer.starpo_agent.base_model = public_model_name(model_name)
    trainer.train(resume_from_checkpoint=resume_checkpoint(args, sealed=True))
    refuse_untrained(trainer)
    trainer.save_model(args.output_dir)
    if trainer.accelerator.is_main_process and not args.push_to_hub:
        trainer.create_model_card(model_name=Path(args.output_dir).name)
    trainer.accelerator.wait_for_everyone()
    return trainer


def run_sft(environment: str, argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    """Fine-tune on expert demonstrations of ``environment`` (``recipes/<env>_sft.py``): the warm start of StarPO.

    The demonstrations are the expert's train-split episodes played through the rollout collector (see
    ``trl_starpo.sft``), trained on with TRL's ``SFTTrainer``. ``output_dir`` gets a full model (a LoRA adapter is
    merged into its base), ready as ``--model_name_or_path`` of the StarPO recipe, with ``starpo_agent.json`` and
    ``validation_results.json`` (the model's success after fine-tuning); with LoRA, also the adapter alone in bf16
    under ``adapter/``, ready as the StarPO recipe's ``--warm_start``; and the demonstrations under ``_demonstrations/``
    (a ``datasets`` dataset, not pushed to the Hub), which a run resumed with the same settings trains on instead of
    playing the expert again. Returns the validation results.
    """
    from transformers import AutoTokenizer
    from trl import SFTTrainer

    from .hub.cards import AgentRecord
    from .evaluation import ModelPolicy
    from .logprobs import project_labelled_positions_only
    from .sft import ExpertSFTConfig, expert_demonstrations, resumable_demonstrations

    parser = TrlParser((EvaluationArguments, ExpertSFTConfig, ModelConfig))
    recipe, args, model_args = parser.parse_args_and_config(args=argv)
    model_name, model_path = resolve_model(model_args, args)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token

    checkpoint = resume_checkpoint(args)  # a missing one is an error before the expert plays
    tasks = load_tasks(environment, split="train", source=recipe.tasks)
    played_with = {"environment": environment, "tasks": [dict(row) for row in tasks], "model": model_path,
                   "rollout": dataclasses.asdict(args.rollout_settings), "episodes": args.expert_episodes,
                   "environment_kwargs": args.environment_kwargs, "only_successes": args.only_successes}
    demonstrations = resumable_demonstrations(
        args.output_dir, played_with,
        lambda: expert_demonstrations(environment, tasks, tokenizer, args.rollout_settings,
                                      episodes=args.expert_episodes, environment_kwargs=args.environment_kwargs,
                                      only_successes=args.only_successes),
        resuming=checkpoint is not None, save=PartialState().is_main_process,
    )
    trainer = SFTTrainer(
        model=model_path,
        args=args,
        train_dataset=demonstrations.select_columns(["input_ids", "completion_mask"]),
        processing_class=tokenizer,
        peft_config=get_peft_config(model_args),
    )
    with project_labelled_positions_only():  # the LM head projects only the demonstrations' generated tokens
        trainer.train(resume_from_checkpoint=checkpoint)
    trainer.save_state()  # trainer_state.json: the loss curve

    results: dict[str, dict[str, float]] = {}
    if trainer.accelerator.is_main_process:
        model = trainer.accelerator.unwrap_model(trainer.model)
        if hasattr(model, "merge_and_unload"):
            # the warm start alone, for --warm_start
            save_adapter(model, Path(args.output_dir, "adapter"), base_model=public_model_name(model_name))
            model = model.merge_and_unload()
        model.save_pretrained(args.output_dir)
        tokenizer.save_pretrained(args.output_dir)
        record = AgentRecord.from_config(
            args, environments=[environment], base_model=model_name, global_step=trainer.state.global_step
        )
        record.training["sft_demonstrations"] = len(demonstrations)
        if recipe.eval_episodes:
            temperature = recipe.validation_temperature(1.0)
            policy = ModelPolicy(model, tokenizer, args.rollout_settings, temperature=temperature)
            with trainer.accelerator.autocast():  # the merged model lost the trainer's; RL recipes play under it
                results = evaluate_splits(policy, environment, recipe, args.environment_kwargs, "after SFT")
            record.validation = {"split": recipe.eval_splits[0], "episodes": recipe.eval_episodes,
                                 "temperature": temperature, "after": results[recipe.eval_splits[0]]}
        record.save(args.output_dir)
        Path(args.output_dir, "validation_results.json").write_text(json_text(results, indent=2))
    trainer.accelerator.wait_for_everyone()
    return results


def evaluate_splits(policy, environment: str, recipe: EvaluationArguments, environment_kwargs: dict | None,
                    when: str) -> dict[str, dict[str, float]]:
    """Play ``recipe.eval_episodes`` episodes of each of ``recipe.eval_splits`` with ``policy``; print and return
    each split's statistics."""
    from .evaluation import evaluate

    results = {}
    for split in recipe.eval_splits:
        tasks = load_tasks(environment, split=split, source=recipe.tasks)
        stats = evaluate(policy, environment, tasks, recipe.eval_episodes, environment_kwargs=environment_kwargs,
                         split=split).stats
        results[split] = stats
        print(f"{split} {when}: success {stats['success']:.3f}, return {stats['return']:.3f}, "
              f"format errors {stats['format_error_rate']:.3f}")
    return results


def discard_untrained_rounds(output_dir: Path) -> None:
    """Remove what the rounds of a DPO run that trained nothing saved (each round's model, ``rounds.json``), so that
    neither a resume nor a later reader takes them for a trained run."""
    import shutil

    from .dpo import ROUNDS_FILE

    for folder in output_dir.glob("round-*"):
        shutil.rmtree(folder, ignore_errors=True)
    (output_dir / ROUNDS_FILE).unlink(missing_ok=True)


@dataclass
class DPOArguments(WarmStartArguments):
    """What the trajectory-DPO recipe adds to ``TrajectoryDPOConfig`` and ``ModelConfig``."""

    environment: str = field(default="alfworld", metadata={"help": "The installed environment to play and train on."})
    trajectories: str | None = field(
        default=None,
        metadata={"help": "Train once on the pairs of logged trajectories (a saved store folder, a Parquet file or a "
                          "Hub dataset id) instead of collecting rounds."},
    )


def run_dpo(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    """Trajectory DPO (``recipes/dpo.py``): rounds of collect, pair and train from the model (online), or one
    training on the pairs of logged trajectories (``--trajectories``).

    ``output_dir`` gets the trained model (a LoRA adapter is merged into it), ``starpo_agent.json`` (its rollout
    settings, for ``trl-starpo eval``), ``rounds.json`` (one record per online round) and ``validation_results.json``
    (validation before and after). Returns the validation results.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .hub.cards import AgentRecord
    from .dpo import TrajectoryDPOConfig, TrajectoryDPOTrainer, store_preference_pairs, train_online
    from .evaluation import ModelPolicy

    parser = TrlParser((DPOArguments, TrajectoryDPOConfig, ModelConfig))
    recipe, args, model_args = parser.parse_args_and_config(args=argv)
    environment = recipe.environment
    if recipe.trajectories and args.pairs != "best_worst":
        raise SystemExit(f"--pairs {args.pairs} plays the expert in online rounds; logged trajectories "
                         "(--trajectories) pair the best and worst of each group: drop one of the two.")
    model_name, model_path = resolve_model(model_args, args)
    if recipe.warm_start:
        model_path = merged_warm_start(model_path, recipe.warm_start)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(model_path, **(args.model_init_kwargs or {}))
    peft_config = get_peft_config(model_args)

    def validate(when: str) -> dict[str, dict[str, float]]:
        if not recipe.eval_episodes:
            return {}
        policy = ModelPolicy(model, tokenizer, args.rollout_settings, temperature=recipe.validation_temperature(
            args.temperature), bf16=args.bf16)
        return evaluate_splits(policy, environment, recipe, args.environment_kwargs, when)

    before = validate("before DPO")
    if recipe.trajectories:
        trainer = TrajectoryDPOTrainer(model, args=args, train_dataset=store_preference_pairs(recipe.trajectories),
                                       processing_class=tokenizer, peft_config=peft_config)
        trainer.train(resume_from_checkpoint=resume_checkpoint(args))
        model = trainer.accelerator.unwrap_model(trainer.model)
        model = model.merge_and_unload() if hasattr(model, "merge_and_unload") else model
        steps = trainer.state.global_step
    else:
        tasks = load_tasks(environment, split="train", source=recipe.tasks)
        model, rounds = train_online(model, tokenizer, environment, tasks, args, peft_config=peft_config)
        steps = len(rounds)
        if not any(round_record["pairs"] for round_record in rounds):
            discard_untrained_rounds(Path(args.output_dir))
            other_pairing = " or use --pairs expert" if args.pairs != "expert" else ""
            raise SystemExit(f"No DPO round formed a preference pair (success by round: "
                             f"{[r['success'] for r in rounds]}), so the model was not trained and nothing is saved. "
                             "Start from a warm start that wins some episodes (--warm_start), raise num_generations "
                             f"or tasks_per_round{other_pairing}.")
    after = validate("after DPO")
    results = {split: {"before": before[split], "after": after[split]} for split in before}

    model.save_pretrained(args.output_dir)
    tokenizer.save_pretrained(args.output_dir)
    record = AgentRecord.from_config(args, environments=[environment], base_model=model_name, global_step=steps)
    if recipe.warm_start:
        record.training["warm_start"] = recipe.warm_start
    if results:
        primary = recipe.eval_splits[0]
        record.validation = {"split": primary, "episodes": recipe.eval_episodes,
                             "temperature": recipe.validation_temperature(args.temperature), **results[primary]}
    record.save(args.output_dir)
    Path(args.output_dir, "validation_results.json").write_text(json_text(results, indent=2))
    return results
