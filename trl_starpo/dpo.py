"""Direct preference optimization over whole trajectories, with TRL's DPO loss.

By default a preference pair is the best and the worst trajectory of one task group, when their returns differ; with
ETO's pairing (Song et al. 2024, :func:`expert_pairs`) it is the expert's trajectory of a task against the agent's.
Both sides share the first prompt (system prompt and first observation); the rest of each trajectory is its
"completion", in which only the model's own tokens (thinking and action) enter the policy and reference
log-probabilities: observation and chat-template tokens are context, masked out of the sums exactly as prompt tokens
are.

``TrajectoryDPOTrainer`` is TRL's ``DPOTrainer`` fed such pairs (its loss, reference handling, PEFT and logging
unchanged); ``train_online`` iterates rounds of collect, pair and train (the online variant); ``recipes/dpo.py``
runs either from the command line.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import random
import shutil
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from trl import DPOConfig, DPOTrainer
from trl.trainer.dpo_trainer import DataCollatorForPreference
from trl.trainer.utils import pad

from .config import apply_cpu_defaults, parse_environment_kwargs
from .rollout.settings import RolloutArguments
from .trajectory import MODEL_SEGMENTS, Trajectory

logger = logging.getLogger(__name__)

PAIR_COLUMNS = ("prompt_ids", "chosen_ids", "rejected_ids", "chosen_mask", "rejected_mask")
PAIRINGS = ("best_worst", "expert")
ROUNDS_FILE = "rounds.json"
ETO_EXTRA_TURNS = 5  # ETO (on WebShop and ScienceWorld) cuts a failed exploration at the expert's turns plus five


# ------------------------------------------------------------------------------------------------------- pairing


def _model_token_mask(trajectory: Trajectory) -> list[int]:
    model = {int(segment) for segment in MODEL_SEGMENTS}
    return [int(segment in model) for segment in trajectory.completion_segments]


def _pairable(trajectory: Trajectory) -> bool:
    """Whether an episode can enter a pair: its environment did not fail and it holds a model token."""
    return trajectory.env_error is None and any(_model_token_mask(trajectory))


def preference_pairs(trajectories: Sequence[Trajectory], keys: Sequence[Hashable] | None = None):
    """The best and the worst trajectory of each task group, as rows for ``TrajectoryDPOTrainer``.

    A group with no spread in returns gives no pair; ties are broken by order (the first best, the first worst).
    Trajectories whose environment failed, or that hold no model token, never enter a pair; nor do two whose
    prompts differ (they do not answer the same state).

    Args:
        trajectories: Trajectories, in any order.
        keys: The task group of each trajectory (e.g. the store's ``(step, environment, group)``); by default its
            ``task_id`` and prompt tokens, so that episodes of one task pool together.

    Returns:
        A ``datasets.Dataset`` with the columns ``prompt_ids``, ``chosen_ids``, ``rejected_ids`` (token ids after
        the prompt), ``chosen_mask``, ``rejected_mask`` (1 on model tokens), ``task_id``, ``chosen_return`` and
        ``rejected_return``.
    """
    _refuse_windowed(trajectories)
    if keys is None:
        keys = [(t.task_id, tuple(t.token_ids[: t.prompt_length])) for t in trajectories]
    if len(keys) != len(trajectories):
        raise ValueError(f"{len(keys)} keys for {len(trajectories)} trajectories.")
    groups: dict[Hashable, list[Trajectory]] = {}
    for key, trajectory in zip(keys, trajectories):
        if _pairable(trajectory):
            groups.setdefault(key, []).append(trajectory)
    rows = []
    for members in groups.values():
        best = max(members, key=lambda t: t.episode_return)
        worst = min(members, key=lambda t: t.episode_return)
        if best.episode_return != worst.episode_return:
            rows.append(_pair_row(best, worst))
    return _pairs_dataset([row for row in rows if row is not None])


def expert_pairs(agent: Sequence[Trajectory], expert: Sequence[Trajectory], extra_turns: int = ETO_EXTRA_TURNS):
    """ETO's pairs: each of the agent's episodes of a task against the expert's won episode of that task.

    Where the agent's episode returned less, the expert's is chosen and the agent's rejected, cut (as ETO cuts its
    failed explorations) after the expert's number of turns plus ``extra_turns``; where it returned more, the agent's
    is chosen and the expert's rejected; an equal return makes no pair. Every agent episode of a task makes its own
    pair. ``agent`` and ``expert`` were played with the same rollout settings (so a task's episodes share their first
    prompt). Returns the columns of :func:`preference_pairs`.
    """
    _refuse_windowed([*agent, *expert])
    if extra_turns < 0:
        raise ValueError(f"extra_turns must be >= 0, got {extra_turns}.")
    demonstrations = {t.task_id: t for t in expert if t.success}
    rows = []
    for trajectory in agent:
        demonstration = demonstrations.get(trajectory.task_id)
        if demonstration is None or not _pairable(trajectory):
            continue
        if trajectory.episode_return < demonstration.episode_return:
            kept_turns = len(demonstration.turns) + extra_turns
            rows.append(_pair_row(demonstration, trajectory, rejected_turns=kept_turns))
        elif trajectory.episode_return > demonstration.episode_return:
            rows.append(_pair_row(trajectory, demonstration))
    return _pairs_dataset([row for row in rows if row is not None])


def _refuse_windowed(trajectories: Sequence[Trajectory]) -> None:
    if any(turn.context_ids is not None for t in trajectories for turn in t.turns):
        raise ValueError("Trajectory DPO pairs whole episodes, but these were played under context_policy='window' "
                         "(each turn saw its own context): play them with context_policy='full'.")


def _pair_row(chosen: Trajectory, rejected: Trajectory, rejected_turns: int | None = None) -> dict[str, Any] | None:
    """A pair's row; with ``rejected_turns``, the rejected side ends with the last token of that turn's response
    (its return stays the whole episode's)."""
    prompt = chosen.token_ids[: chosen.prompt_length]
    if prompt != rejected.token_ids[: rejected.prompt_length]:
        logger.warning("Task %s: the chosen and rejected trajectories start from different prompts; no pair.",
                       chosen.task_id)
        return None
    rejected_end = None
    if rejected_turns is not None and 0 < rejected_turns < len(rejected.turns):
        rejected_end = rejected.turns[rejected_turns - 1].response_end - rejected.prompt_length
    return {
        "prompt_ids": list(prompt),
        "chosen_ids": list(chosen.completion_ids),
        "rejected_ids": list(rejected.completion_ids[:rejected_end]),
        "chosen_mask": _model_token_mask(chosen),
        "rejected_mask": _model_token_mask(rejected)[:rejected_end],
        "task_id": chosen.task_id,
        "chosen_return": chosen.episode_return,
        "rejected_return": rejected.episode_return,
    }


def _pairs_dataset(rows: list[dict[str, Any]]):
    from datasets import Dataset

    return Dataset.from_list(rows) if rows else Dataset.from_dict({name: [] for name in (*PAIR_COLUMNS, "task_id")})


def store_preference_pairs(source):
    """``preference_pairs`` of logged trajectories (a saved store folder, a ``TrajectoryStore``, a Parquet file or a
    Hub dataset id), grouped as they were logged: by step, environment and group."""
    from .offline import load_trajectory_dataset
    from .store import from_dataset

    dataset = load_trajectory_dataset(source)
    keys = list(zip(dataset["step"], dataset["environment"], dataset["group"]))
    return preference_pairs(from_dataset(dataset), keys)


# ------------------------------------------------------------------------------------------------------ training


@dataclass
class TrajectoryPreferenceCollator(DataCollatorForPreference):
    """TRL's preference collator, with the completion mask cut down to the model's own tokens.

    Examples carry ``chosen_mask`` / ``rejected_mask`` (1 on thinking and action tokens) beside TRL's
    ``prompt_ids`` / ``chosen_ids`` / ``rejected_ids``; observation and template tokens get ``completion_mask`` 0, so
    ``DPOTrainer`` leaves them out of the log-probabilities of both the policy and the reference.
    """

    def torch_call(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        output = super().torch_call(examples)
        masks = [
            [0] * len(example["prompt_ids"]) + list(example[f"{side}_mask"])
            for side in ("chosen", "rejected")
            for example in examples
        ]
        if self.max_length is not None:
            keep_start = self.truncation_mode == "keep_start"
            cut = slice(None, self.max_length) if keep_start else slice(-self.max_length, None)
            masks = [mask[cut] for mask in masks]
        model_tokens = pad(
            [torch.tensor(mask, dtype=torch.long) for mask in masks],
            padding_value=0,
            padding_side="right",
            pad_to_multiple_of=self.pad_to_multiple_of,
        )
        output["completion_mask"] = output["completion_mask"] * model_tokens
        return output


@dataclass
class TrajectoryDPOConfig(DPOConfig, RolloutArguments):
    r"""
    Configuration of trajectory DPO: every [`~trl.DPOConfig`] field (`beta`, `loss_type`, ...), the rollout settings
    of the episodes it plays (as in `StarPOConfig`; give them the values of the SFT warm start), and the rounds of the
    online variant (`train_online`): each round plays `tasks_per_round` training tasks `num_generations` times with
    the current policy, pairs the best and worst episode of each task (or, with `pairs="expert"`, each episode with
    the expert's), and trains on the pairs with DPO for `num_train_epochs`, against the round's starting policy as
    the reference.
    """

    max_length: int | None = field(
        default=None, metadata={"help": "Tokens per sequence; default: none are cut (a trajectory is never truncated)."}
    )
    save_strategy: str = field(
        default="no",
        metadata={"help": "Checkpoints within a round's DPO training; the online loop saves each round itself."},
    )
    rounds: int = field(default=4, metadata={"help": "Rounds of collect, pair and train (online variant)."})
    tasks_per_round: int = field(default=8, metadata={"help": "Training tasks played per round."})
    num_generations: int = field(
        default=4, metadata={"help": "Episodes per task and round; the best and worst of them make its pair (with "
                                     "pairs='expert' each makes its own; ETO plays each task once: 1)."}
    )
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature of the collected episodes."})
    pairs: str = field(
        default="best_worst",
        metadata={"help": "How a round pairs episodes: 'best_worst', the best against the worst of the policy's "
                          "episodes of a task; 'expert', ETO's, the environment expert's won episode of the task "
                          "against each of the policy's episodes that returned less, cut after the expert's turns "
                          "plus five, and the policy's over the expert's where it returned more (the environment "
                          "needs expert_action())."},
    )
    turn_budget: int | None = field(
        default=None, metadata={"help": "Stop starting rounds once the collected episodes have played this many turns."}
    )
    environment_kwargs: dict | str | None = field(
        default=None, metadata={"help": "Keyword arguments for the environment's `load_environment`."}
    )

    def __post_init__(self):
        self.environment_kwargs = parse_environment_kwargs(self.environment_kwargs)
        apply_cpu_defaults(self)
        super().__post_init__()
        for name in ("rounds", "tasks_per_round"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}.")
        if self.pairs not in PAIRINGS:
            raise ValueError(f"pairs must be one of {PAIRINGS}, got {self.pairs!r}.")
        if self.num_generations < (2 if self.pairs == "best_worst" else 1):
            fewest = "2 to pair a task's best episode with its worst" if self.pairs == "best_worst" else "1"
            raise ValueError(f"num_generations must be at least {fewest}, got {self.num_generations}.")
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0: the episodes of a task must differ, got {self.temperature}.")
        if self.context_policy != "full":
            raise ValueError("Trajectory DPO pairs whole episodes: set context_policy='full' (a window's turns each "
                             "see their own context).")


class TrajectoryDPOTrainer(DPOTrainer):
    """TRL's ``DPOTrainer`` on trajectory preference pairs (rows of :func:`preference_pairs`).

    The rows are already tokenized (never re-tokenized from text) and carry the model-token masks; everything else
    (the loss types, ``beta``, the reference model or the disabled adapter under PEFT, logging) is ``DPOTrainer``'s.

    Example:
    ```python
    pairs = preference_pairs(trainer.last_trajectories)
    TrajectoryDPOTrainer(model, args=TrajectoryDPOConfig(output_dir="dpo"), train_dataset=pairs,
                         processing_class=tokenizer).train()
    ```
    """

    def __init__(self, model, ref_model=None, args: TrajectoryDPOConfig | None = None, train_dataset=None,
                 processing_class=None, callbacks=None, peft_config=None):
        if processing_class is None:
            raise ValueError("Pass processing_class (the tokenizer the trajectories were played with).")
        if train_dataset is None or len(train_dataset) == 0:
            raise ValueError("No preference pairs to train on (no task group had returns that differ).")
        args = args or TrajectoryDPOConfig(output_dir="trajectory-dpo")
        pad_id = processing_class.pad_token_id
        if pad_id is None:
            pad_id = processing_class.eos_token_id
        collator = TrajectoryPreferenceCollator(
            pad_token_id=pad_id,
            max_length=args.max_length,
            truncation_mode=args.truncation_mode,
            pad_to_multiple_of=args.pad_to_multiple_of,
        )
        super().__init__(model=model, ref_model=ref_model, args=args, data_collator=collator,
                         train_dataset=train_dataset, processing_class=processing_class, callbacks=callbacks,
                         peft_config=peft_config)

    def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
        missing = [name for name in PAIR_COLUMNS if name not in dataset.column_names]
        if missing:
            raise ValueError(
                f"The {dataset_name} dataset lacks {missing}: build it with trl_starpo.dpo.preference_pairs."
            )
        return dataset

    def _set_signature_columns_if_needed(self):
        super()._set_signature_columns_if_needed()
        self._signature_columns = [*self._signature_columns, "chosen_mask", "rejected_mask"]


# ---------------------------------------------------------------------------------------------- the online loop


def train_online(model, tokenizer, environment, tasks, args: TrajectoryDPOConfig, *, peft_config=None):
    """Rounds of collect, pair and train: ETO's iterated trajectory DPO.

    Each round plays ``args.tasks_per_round`` rows of ``tasks`` (cycling through them in a seeded order),
    ``args.num_generations`` episodes each, with the current policy; pairs them (:func:`preference_pairs`, or with
    ``args.pairs="expert"`` each episode against the expert's episode of its task, :func:`expert_pairs`: ETO's
    pairing, which explores every training task once each round when ``tasks_per_round`` is their number and
    ``num_generations`` 1); and trains
    on the pairs with ``TrajectoryDPOTrainer`` against the round's starting policy (a frozen copy, or the adapter
    disabled under ``peft_config``, which is merged into the model after the round). A round without a pair trains
    nothing. After each round the model is saved to ``output_dir/round-<k>`` (the previous round's folder is then
    removed) and the rounds' records to ``output_dir/rounds.json``; with ``args.resume_from_checkpoint`` set, a run
    resumes after its last saved round.

    Returns:
        ``(model, records)``: the trained model and one record per round (episodes, turns, success, return, pairs,
        and the DPO metrics of its last logged step).
    """
    from .evaluation import ModelPolicy, evaluate
    from .sft import expert_trajectories, usable_demonstration

    if args.world_size > 1:
        raise ValueError("The online DPO loop runs in one process: launch it with --num_processes 1.")
    if args.save_strategy != "no":
        raise ValueError("train_online saves each round itself: leave save_strategy at 'no'.")
    output = Path(args.output_dir)
    records: list[dict[str, Any]] = []
    if args.resume_from_checkpoint and (output / ROUNDS_FILE).is_file():
        records = json.loads((output / ROUNDS_FILE).read_text())
        if records:
            from transformers import AutoModelForCausalLM

            model = AutoModelForCausalLM.from_pretrained(output / f"round-{len(records)}",
                                                         **(args.model_init_kwargs or {}))
            logger.info("Resuming after round %d of %d.", len(records), args.rounds)
    order = list(range(len(tasks)))
    random.Random(args.seed).shuffle(order)
    if args.pairs == "expert":  # an environment without an expert fails now, not after a round of play
        expert_trajectories(environment, [], tokenizer, args.rollout_settings,
                            environment_kwargs=args.environment_kwargs)
    while len(records) < args.rounds:
        if args.turn_budget is not None and sum(r["turns"] for r in records) >= args.turn_budget:
            break
        number = len(records) + 1
        first = (number - 1) * args.tasks_per_round
        indices = [order[(first + j) % len(order)] for j in range(args.tasks_per_round)]
        rows = [dict(tasks[index]) for index in indices]
        policy = ModelPolicy(model, tokenizer, args.rollout_settings, temperature=args.temperature,
                             seed=args.seed * 1_000_003 + number * 10_007, bf16=args.bf16)
        played = evaluate(policy, environment, [row for row in rows for _ in range(args.num_generations)],
                          environment_kwargs=args.environment_kwargs)
        if args.pairs == "expert":
            expert = expert_trajectories(environment, rows, tokenizer, args.rollout_settings,
                                         environment_kwargs=args.environment_kwargs)
            # a task's episodes and the expert's pair by the task's row, named in case the row names none
            names = [str(row.get("task_id", f"task-{index}")) for row, index in zip(rows, indices)]
            for i, trajectory in enumerate(played.trajectories):
                trajectory.task_id = names[i // args.num_generations]
            for trajectory, name in zip(expert, names):
                trajectory.task_id = name
            demonstrations = [t for t in expert if usable_demonstration(t)]
            if not demonstrations:
                logger.warning("DPO round %d: the expert won none of its %d tasks, so nothing can pair with it (is "
                               "max_turns long enough for the expert's plans?).", number, len(rows))
            pairs = expert_pairs(played.trajectories, demonstrations)
        else:
            pairs = preference_pairs(played.trajectories)
        record = {"round": number, "episodes": len(played.trajectories),
                  "turns": sum(len(t.turns) for t in played.trajectories), "success": played.stats["success"],
                  "return": played.stats["return"], "format_error_rate": played.stats["format_error_rate"],
                  "pairs": len(pairs)}
        if len(pairs):
            model, metrics = _train_round(model, tokenizer, pairs, args, peft_config)
            record.update(metrics)
        records.append(record)
        _save_round(model, tokenizer, output, records)
        logger.info("DPO round %d: %s", number, record)
        if record["turns"] == 0:
            logger.warning("DPO round %d played no turn (every environment failed at reset); stopping.", number)
            break
    return model, records


def _train_round(model, tokenizer, pairs, args: TrajectoryDPOConfig, peft_config):
    reference = None if peft_config is not None else copy.deepcopy(model).eval()
    trainer = TrajectoryDPOTrainer(model, ref_model=reference, args=args, train_dataset=pairs,
                                   processing_class=tokenizer, peft_config=peft_config)
    trainer.train()
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    metrics = {k: v for k, v in (logged[-1] if logged else {}).items() if isinstance(v, (int, float))}
    trained = trainer.accelerator.unwrap_model(trainer.model)
    if peft_config is not None:
        trained = trained.merge_and_unload()
    return trained, metrics


def _save_round(model, tokenizer, output: Path, records: list[dict[str, Any]]) -> None:
    """Save the round's model, then point ``rounds.json`` at it, then drop the previous round's folder: a run killed
    at any moment leaves a complete last round to resume from."""
    folder = output / f"round-{len(records)}"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    temporary = output / f".{ROUNDS_FILE}.tmp"
    temporary.write_text(json.dumps(records, indent=2))
    os.replace(temporary, output / ROUNDS_FILE)
    previous = output / f"round-{len(records) - 1}"
    if previous.is_dir():
        shutil.rmtree(previous)
