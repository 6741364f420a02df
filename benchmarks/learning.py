"""Success Rate Comparison at CPU scale: does RL lift an SFT-warm-started agent on held-out tasks?

The specification's table (`shared/reference/starpo-spec.txt`, "Success Rate Comparison") compares PPO, DPO, StarPO and
StarPO-S on ALFWorld, WebShop, HotPotQA and MiniGrid. This script makes that comparison with the embedded
SmolLM2-135M-Instruct on a CPU (or a GPU where one is lent; each record names its machine), each (method,
environment, seed) run its own resumable process (several side by side with ``--jobs``), and regenerates the table of
docs/results.md from the run records it commits.

Protocol (``COLUMNS`` and ``Scale`` below hold every number)
    Rows: ``random`` (uniform over the environment's ``admissible_actions()``, the chance level of the held-out
    tasks), ``untrained`` (the embedded model as it ships), ``sft`` (the warm start), and from that warm start ``ppo``,
    ``dpo``, ``starpo``, ``starpo-s``, ``starpo-s-ragen`` and ``gigpo`` (the presets of trl_starpo/presets.py; ``dpo``
    is trl_starpo.dpo's online trajectory DPO).
    Warm start: one per environment, shared by every method and seed: the environment's expert plays
    ``sft_episodes`` training tasks through the rollout collector and the model is fine-tuned on them with LoRA
    (``trl_starpo.recipes.run_sft``, as ``recipes/alfworld_sft.py``), the adapter merged. The ALFWorld and MiniGrid
    experts explain their actions (``expert_thinking``), so those turns are ``<think>…</think><answer>…</answer>``;
    the WebShop and HotPotQA experts do not, so those columns answer directly (``enable_thinking`` off, and with it
    StarPO-S's thinking critic).
    Training: every RL method gets the same budget of environment turns (``COLUMNS[...].budget``; one turn is one
    model response and the environment's reply) on the training split, LoRA on the warm start, the same learning
    rate (``--learning-rate``; 3e-4 unless a sitting says otherwise), batch (``tasks_per_update`` tasks x
    ``num_generations`` episodes per update) and rollout settings; the preset sets the rest. Each rollout batch
    serves ``num_iterations`` optimizer steps (``--num-iterations``; 1, on-policy, unless a sitting says otherwise).
    A run stops at the first update that reaches the budget, after all of that batch's optimizer steps.
    Learning-rate schedules are constant after the preset's warmup, a warmup fraction being of the fewest updates the
    budget allows (all episodes at ``max_turns``). DPO plays rounds of ``dpo_tasks_per_round`` tasks x
    ``num_generations`` episodes under the same turn budget.
    Success: on held-out tasks (ALFWorld's ``valid_unseen``, the ``test`` split elsewhere), the first
    ``eval_episodes`` (at least 32) tasks, one episode each, sampled at temperature 1.0 with the seed of the run;
    95% Wilson intervals (``scipy.stats.binomtest(k, n).proportion_ci(method="wilson")``) on the episodes pooled
    over seeds. Every row plays in the precision its column trains in (bf16 autocast where ``Scale.bf16``, else
    fp32); before 2026-12-04 only a preset's model evaluated in the process that trained it did, the SFT, untrained
    and DPO rows playing in fp32, and the table warns where a column's records mix the two; DPO's rounds, which
    had played its merged models in fp32, play in the column's precision too (``collection_precision``). Records
    keep each episode's outcome by task (since 2026-12-04), so that an RL method and the SFT start, which play the
    same tasks, are also compared episode by episode: with the task as the unit (every seed plays the same tasks),
    the exact sign test on the tasks whose successes over the seeds rose and fell. Learning curves: success and return
    of the training rollouts against the turns spent.

Runs and records
    Each (method, environment, seed) run works in ``<workdir>/runs/<environment>/<method>-seed<seed>-<key>/``, one
    folder per setting (TRL checkpoints every ``save_every`` updates, or DPO's rounds), and resumes from there when
    restarted with the same settings; a finished run writes its record, a small JSON file, to
    ``benchmarks/learning_runs/<environment>/<method>-seed<seed>.json`` (held-out success, the curve, the settings'
    key, the commit). ``--table`` rebuilds docs/results.md's table and ``docs/learning_<environment>.png`` from the
    committed records alone; ``--table --records <folder>`` prints another folder's table (an ablation, with another
    budget or rule, keeps its records apart under ``benchmarks/learning_runs/ablations/``, indexed in that folder's
    README) and writes its curves into that folder.

Usage
    python benchmarks/learning.py --env minigrid --method gigpo --seed 0       # one run (resumes when restarted)
    python benchmarks/learning.py --env minigrid --method all --seed 0 1 2     # every row, one process per run
    python benchmarks/learning.py --env all --method all --seed 0
    python benchmarks/learning.py --env webshop --method sft starpo-s --seed 0 1 2 --jobs 6   # side by side (a GPU)
    python benchmarks/learning.py --table                                      # the table, from the records
    python benchmarks/learning.py --table --records benchmarks/learning_runs/ablations/archive   # a sitting's table, printed
    python benchmarks/learning.py --smoke                                      # every row end to end, tiny budgets

    On a machine shared with other jobs, pass ``--threads 1`` (or set OMP_NUM_THREADS=1): oversubscribed torch threads
    spin instead of working (an evaluation of two MiniGrid episodes was unfinished after 24 minutes with the default
    threads at a load of 13 on 2 cores, and took one minute with one thread).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent
RECORDS = ROOT / "benchmarks" / "learning_runs"
RESULTS_MD = ROOT / "docs" / "results.md"
WORKDIR = Path.home() / ".cache" / "trl_starpo" / "learning"

METHODS = ("random", "untrained", "sft", "ppo", "dpo", "starpo", "starpo-s", "starpo-s-ragen", "gigpo")
PRESET_METHODS = ("ppo", "starpo", "starpo-s", "starpo-s-ragen", "gigpo")
RL_METHODS = ("ppo", "dpo", *PRESET_METHODS[1:])
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
PROGRESS_FILE = "learning_progress.json"
BF16_AUTOCAST, FP32 = "bf16 autocast", "fp32"
# trl_starpo.algorithms.critics' rules, named here because --table loads no torch (a test keeps the two equal)
THINKING_SCALE_RULES = ("multiplicative", "sign_aware", "relative")
# The rule of each preset with a thinking critic (trl_starpo.presets; a test keeps them equal). A run names the rule
# it applied in its record, so that a change of the preset's rule starts new runs instead of reusing the old ones.
PRESET_THINKING_SCALE_RULES = {"starpo-s": "multiplicative"}
# starpo-s's rule until 2026-12-03: its records of that time name no rule, and keep their key.
FORMER_THINKING_SCALE_RULE = "sign_aware"


@dataclass(frozen=True)
class Column:
    """One environment's protocol: its held-out split, turn budget, rollout settings and warm start."""

    held_out: str
    budget: int
    rollout: dict
    environment_kwargs: dict = field(default_factory=dict)
    sft_episodes: int = 64
    sft_epochs: int = 2
    gradient_checkpointing: bool = False


COLUMNS = {
    "alfworld": Column(
        held_out="valid_unseen", budget=2560, environment_kwargs={"max_steps": 50, "expert_search": 2},
        rollout=dict(max_turns=10, max_actions_per_turn=1, max_actions_per_trajectory=10, max_tokens_per_turn=64,
                     max_context_length=2048, enable_thinking=True),
        # every train game, with the searching expert and grounded thinking, as recipes/configs/alfworld_sft.yaml
        # (this column's own schedule; 48 planner-only games won 0 of 8 validation games, all 300 planner-only 7 of 60)
        sft_episodes=300, sft_epochs=1, gradient_checkpointing=True,
    ),
    "webshop": Column(
        held_out="test", budget=1536,
        rollout=dict(max_turns=6, max_actions_per_turn=1, max_actions_per_trajectory=6, max_tokens_per_turn=48,
                     max_context_length=3072, enable_thinking=False),
        # HotPotQA's lesson (64 expert episodes x 2 left its warm start at chance); an expert episode here is ~1,350
        # tokens, 63 of them the expert's
        sft_episodes=256, sft_epochs=1, gradient_checkpointing=True,
    ),
    "hotpotqa": Column(
        held_out="test", budget=1024, environment_kwargs={"reward": "f1", "max_steps": 7},
        rollout=dict(max_turns=4, max_actions_per_turn=1, max_actions_per_trajectory=4, max_tokens_per_turn=48,
                     max_context_length=1280, enable_thinking=False),
        # 64 expert episodes x 2 epochs left the warm start at chance (13/192, the records in archive/hotpotqa-sft64)
        sft_episodes=256, sft_epochs=1,
    ),
    "minigrid": Column(
        held_out="test", budget=1024,
        rollout=dict(max_turns=4, max_actions_per_turn=3, max_actions_per_trajectory=12, max_tokens_per_turn=96,
                     max_context_length=1536, enable_thinking=True),
        # 256 expert episodes x 1 left the warm start near chance (6/64, archive/minigrid-sft256), all 500 of train
        # too when the expert only answered (20/192, answer-only/minigrid); its thinking names the target,
        # where it lies and the plan to it (starpo_minigrid.thinking)
        sft_episodes=500, sft_epochs=1,
    ),
}


def native_bf16() -> bool:
    """Whether training here should use bf16: on an accelerator, or a CPU that computes it
    (``trl_starpo.config.cpu_computes_bf16``)."""
    import torch

    from trl_starpo.config import cpu_computes_bf16

    return torch.accelerator.is_available() or cpu_computes_bf16()


@dataclass(frozen=True)
class Scale:
    """The knobs shared by every column and method."""

    eval_episodes: int = 32
    tasks_per_update: int = 2
    num_generations: int = 4
    micro_batch: int = 2
    learning_rate: float = 3e-4
    num_iterations: int = 1  # optimizer passes over each rollout batch (GRPOConfig.num_iterations; RL presets only)
    thinking_scale_rule: str | None = None  # StarPOConfig.thinking_scale_rule; None: the preset's (RL presets only)
    advantage_estimator: str | None = None  # StarPOConfig.advantage_estimator; None: the preset's (an ablation knob)
    lora_r: int = 16
    sft_learning_rate: float = 1e-3
    dpo_learning_rate: float = 5e-5
    dpo_beta: float = 0.1
    dpo_tasks_per_round: int = 8
    dpo_epochs: int = 2
    temperature: float = 1.0
    save_every: int = 2
    # autocast in SFT, RL and DPO training where the CPU computes bf16 (an update: 55.5 s against fp32's 74.5 s,
    # RESULTS.md); fp32 where its matmuls would be emulated, far slower (trl_starpo.config.cpu_computes_bf16).
    # None: the hardware's answer (native_bf16), asked when a run starts, so that --table never loads torch.
    bf16: bool | None = None

    @property
    def episodes_per_update(self) -> int:
        return self.tasks_per_update * self.num_generations


SMOKE = Scale(eval_episodes=2, tasks_per_update=1, num_generations=2, micro_batch=2, dpo_tasks_per_round=1,
              dpo_epochs=1, save_every=1)


def setting_key(environment: str, column: Column, scale: Scale, model: str) -> str:
    """A short hash of everything a run's result depends on (the method and seed aside)."""
    scale_fields = dataclasses.asdict(scale)
    for name, defaults in (("num_iterations", (1,)), ("thinking_scale_rule", (None, FORMER_THINKING_SCALE_RULE)),
                           ("advantage_estimator", (None,))):
        if scale_fields[name] in defaults:
            del scale_fields[name]  # added later: records made before it keep their key
    blob = json.dumps([environment, dataclasses.asdict(column), scale_fields, model], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:10]


def thinks(rollout: dict) -> bool:
    """Whether a column's turns think, and so a thinking critic has something to score (StarPOConfig turns it off)."""
    return bool(rollout.get("enable_thinking", True))  # RolloutSettings' default


def applied_rule(method: str, column: Column, scale: Scale) -> str | None:
    """The thinking-scale rule a run of ``method`` applies on ``column`` (None where no thinking critic acts)."""
    if method not in PRESET_THINKING_SCALE_RULES or not thinks(column.rollout):
        return None
    return scale.thinking_scale_rule or PRESET_THINKING_SCALE_RULES[method]


def recorded_rule(record: dict) -> str | None:
    """The thinking-scale rule a recorded run applied; records made before runs named it applied the one chosen,
    else the preset's rule of their time."""
    if "thinking_scale_rule" in record:
        return record["thinking_scale_rule"]
    if record["method"] not in PRESET_THINKING_SCALE_RULES or not thinks(record["column"]["rollout"]):
        return None
    return record["scale"].get("thinking_scale_rule") or FORMER_THINKING_SCALE_RULE


def collection_precision(method: str, bf16: bool | None) -> str | None:
    """The precision an RL run plays its training episodes in (None for rows that train on none)."""
    return (BF16_AUTOCAST if bf16 else FP32) if method in RL_METHODS else None


def recorded_collection_precision(record: dict) -> str | None:
    """The precision a recorded run played its training episodes in. DPO's rounds played the models it loaded or
    merged out of LoRA, which have no trainer autocast, in fp32 until 2026-12-04."""
    if "collection_precision" in record:
        return record["collection_precision"]
    return FP32 if record["method"] == "dpo" else collection_precision(record["method"], record["scale"].get("bf16"))


# -- the warm start and evaluation ---------------------------------------------------------------------------------


def rollout_flags(column: Column) -> list[str]:
    flags = []
    for name, value in column.rollout.items():
        flags += [f"--{name}", str(value).lower() if isinstance(value, bool) else str(value)]
    return flags + ["--environment_kwargs", json.dumps(column.environment_kwargs)]


def warm_start(environment: str, column: Column, scale: Scale, model: str, workdir: Path) -> Path:
    """The SFT warm start of ``environment`` (made once, then reused by every method, seed and budget)."""
    from filelock import FileLock
    from transformers.trainer_utils import get_last_checkpoint

    from trl_starpo.recipes import run_sft

    what = [environment, model, column.rollout, column.environment_kwargs, column.sft_episodes, column.sft_epochs,
            column.gradient_checkpointing, scale.lora_r, scale.sft_learning_rate, scale.bf16]
    key = hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:10]
    folder = workdir / "sft" / f"{environment}-{key}"
    done = folder / "warm_start.json"
    if done.is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{folder}.lock"):  # runs started side by side build it once, one after the other
        if done.is_file():
            return folder
        print(f"[{environment}] SFT warm start on {column.sft_episodes} expert episodes -> {folder}", flush=True)
        cut_short = folder.is_dir() and get_last_checkpoint(str(folder)) is not None  # goes on from its last
        run_sft(environment, [
            "--model_name_or_path", model, "--output_dir", str(folder), "--use_peft", "true",
            "--lora_r", str(scale.lora_r), "--lora_alpha", str(2 * scale.lora_r),
            "--lora_target_modules", *LORA_TARGETS,
            "--expert_episodes", str(column.sft_episodes), "--num_train_epochs", str(column.sft_epochs),
            "--per_device_train_batch_size", "4", "--learning_rate", str(scale.sft_learning_rate),
            "--lr_scheduler_type", "cosine", "--logging_steps", "1", "--save_strategy", "steps",
            "--save_steps", str(scale.save_every * 4), "--save_total_limit", "1",
            "--resume_from_checkpoint", str(cut_short).lower(), "--report_to", "none",
            "--gradient_checkpointing", str(column.gradient_checkpointing).lower(), "--eval_episodes", "0",
            "--bf16", str(scale.bf16).lower(),
            *rollout_flags(column),
        ])
        for checkpoint in folder.glob("checkpoint-*"):  # the merged model is what every run starts from
            shutil.rmtree(checkpoint)
        done.write_text(json.dumps({"setting": key, "base_model": model}))
    return folder


def rollout_settings(column: Column):
    from trl_starpo.rollout.settings import RolloutSettings

    return RolloutSettings(**column.rollout)


def wilson(successes: int, episodes: int) -> tuple[float, float]:
    """The 95% Wilson score interval of a success rate."""
    from scipy.stats import binomtest

    interval = binomtest(successes, episodes).proportion_ci(confidence_level=0.95, method="wilson")
    return float(interval.low), float(interval.high)


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


def held_out(model, tokenizer, environment: str, column: Column, scale: Scale, seed: int) -> dict:
    """Success of ``model`` (the random agent when None) on the first ``eval_episodes`` held-out tasks, one episode
    each, in the precision the column's runs train in (bf16 autocast with ``scale.bf16``), whichever row it is."""
    from trl_starpo.evaluation import ModelPolicy, RandomPolicy, evaluate

    if model is None:
        policy = RandomPolicy(rollout_settings(column), seed=seed)
    else:
        # a model fresh from training runs under its trainer's autocast and one loaded from disk does not: the policy's
        # own keeps every row of a column in one precision
        policy = ModelPolicy(model, tokenizer, rollout_settings(column), temperature=scale.temperature, seed=seed,
                             bf16=bool(scale.bf16))
    result = evaluate(policy, environment, held_out_tasks(environment, column, scale),
                      environment_kwargs=column.environment_kwargs)
    successes = sum(bool(t.success) for t in result.trajectories)
    outcomes = {t.task_id: int(bool(t.success)) for t in result.trajectories}
    return {"split": column.held_out, "episodes": result.episodes, "successes": successes,
            "success": successes / result.episodes, "wilson95": list(wilson(successes, result.episodes)),
            "return": result.stats["return"], "format_error_rate": result.stats["format_error_rate"],
            "precision": BF16_AUTOCAST if scale.bf16 else FP32,
            "outcomes": outcomes}


def eval_precision(record: dict) -> str:
    """The precision a record's held-out episodes were played in. Records made before they named it (2026-12-04)
    played a preset's model fresh from training under its trainer's autocast, where the run trained in bf16; the
    SFT and untrained rows' models, loaded from disk, and DPO's, merged out of the LoRA wrapper that carried the
    autocast, played in fp32 (as did a preset's run evaluated from its checkpoint, which no committed record
    without a named precision was)."""
    if "precision" in record["held_out"]:
        return record["held_out"]["precision"]
    return BF16_AUTOCAST if record.get("scale", {}).get("bf16") and record["method"] in PRESET_METHODS else FP32


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


# -- training -------------------------------------------------------------------------------------------------------


def curve_point(turns: int, trajectories) -> list[float]:
    count = max(len(trajectories), 1)
    return [turns, round(sum(bool(t.success) for t in trajectories) / count, 4),
            round(sum(t.episode_return for t in trajectories) / count, 4)]


def train_preset(method, environment, column, scale, seed, start: Path, run_dir: Path):
    """Train the warm start with ``method``'s preset until the turn budget is spent; resumes from ``run_dir``."""
    from peft import LoraConfig
    from transformers import TrainerCallback, TrainerState
    from transformers.trainer import TRAINER_STATE_NAME

    from trl_starpo import StarPOConfig, StarPOTrainer, load_tasks
    from trl_starpo.presets import PRESETS

    class Progress(TrainerCallback):
        """Counts the turns of the training rollouts, stops at the budget, and saves the count with each
        checkpoint."""

        def __init__(self, curve):
            self.curve = curve

        @property
        def turns(self) -> int:
            return self.curve[-1][0] if self.curve else 0

        def on_step_end(self, args, state, control, **kwargs):
            # a rollout batch serves num_iterations optimizer steps: the last one gets all KL early stopping leaves it
            if self.turns >= column.budget and trainer.batch_finished():
                control.should_training_stop = control.should_save = True

        def on_save(self, args, state, control, **kwargs):
            folder = Path(args.output_dir, f"checkpoint-{state.global_step}")
            (folder / PROGRESS_FILE).write_text(json.dumps(self.curve))

    class BudgetedTrainer(StarPOTrainer):
        def batch_finished(self) -> bool:
            """Whether the next micro-step collects fresh rollouts: the buffered batch has had all its passes, or
            KL early stopping cut them short (so batches need not start on a multiple of num_iterations steps)."""
            generate_every = self.args.steps_per_generation * self.num_iterations
            return self.kl_early_stopping.triggered or (self._step - self._generation_start) % generate_every == 0

        def _generate_and_score_completions(self, inputs):
            output = super()._generate_and_score_completions(inputs)
            if self.model.training:
                progress.curve.append(curve_point(progress.turns + sum(len(t.turns) for t in self.last_trajectories),
                                                  self.last_trajectories))
            return output

    episodes = scale.episodes_per_update
    # in optimizer steps: each rollout batch serves num_iterations of them
    fewest_updates = max(1, column.budget // (episodes * column.rollout["max_turns"])) * scale.num_iterations
    warmup = PRESETS[method].get("warmup_steps", 0.0)
    last = last_whole_checkpoint(run_dir)
    progress = Progress(json.loads((Path(last) / PROGRESS_FILE).read_text()) if last else [])
    args = StarPOConfig(
        output_dir=str(run_dir), preset=method, seed=seed, num_generations=scale.num_generations,
        per_device_train_batch_size=scale.micro_batch, gradient_accumulation_steps=episodes // scale.micro_batch,
        max_steps=max(1, column.budget // episodes) * scale.num_iterations, num_iterations=scale.num_iterations,
        learning_rate=scale.learning_rate,
        lr_scheduler_type="constant_with_warmup", warmup_steps=round(warmup * fewest_updates) if warmup < 1 else warmup,
        temperature=scale.temperature, gradient_checkpointing=column.gradient_checkpointing, bf16=scale.bf16,
        save_strategy="steps", save_steps=scale.save_every * scale.num_iterations, save_total_limit=1, logging_steps=1,
        report_to="none",
        environment_kwargs=column.environment_kwargs, **column.rollout,
        **({"thinking_scale_rule": scale.thinking_scale_rule} if scale.thinking_scale_rule else {}),
        **({"advantage_estimator": scale.advantage_estimator} if scale.advantage_estimator else {}),
    )
    lora = LoraConfig(r=scale.lora_r, lora_alpha=2 * scale.lora_r, target_modules=LORA_TARGETS, task_type="CAUSAL_LM")
    trainer = BudgetedTrainer(str(start), environment=environment, args=args, callbacks=[progress],
                              train_dataset=load_tasks(environment, split="train"), peft_config=lora)
    if last and progress.turns >= column.budget:
        # finished before its record was written: only the evaluation is left, and the training log is the saved one
        trainer._load_from_checkpoint(last)
        trainer.state = TrainerState.load_from_json(str(Path(last) / TRAINER_STATE_NAME))
    else:
        trainer.train(resume_from_checkpoint=last)
    means = training_means(trainer.state.log_history)
    return trainer.accelerator.unwrap_model(trainer.model), trainer.processing_class, progress.curve, means


TRAINING_SERIES = (
    "frac_reward_zero_std", "rollout/group_return_std", "rollout/action_validity", "rollout/format_error_rate",
    "rollout/turns", "grad_norm", "kl", "entropy", "filter/mean_weight", "gigpo/grouped_turn_fraction",
    "gigpo/step_group_size", "critic/thinking_scale", "critic/scale_on_credit", "critic/scale_on_blame",
    "critic/advantage_shift",
    # where an update's wall time went (trl_starpo/timing.py): seconds per update
    "time/generation", "time/environment", "time/scoring", "time/loss_forward", "time/backward", "time/optimizer",
    "time/other", "time/step",
)


def last_whole_checkpoint(run_dir: Path) -> str | None:
    """The newest whole checkpoint of an RL run's folder (a run killed while saving leaves one half-written), or
    ``None``."""
    from trl_starpo.checkpoints import IncompleteCheckpointError, last_complete_checkpoint

    if not run_dir.is_dir():
        return None
    try:
        return last_complete_checkpoint(run_dir)
    except IncompleteCheckpointError:
        return None


def training_means(log_history: list[dict]) -> dict[str, float]:
    """The mean over a run's logged updates of the figures that say why it did or did not learn (groups without
    spread, valid actions, GiGPO's step groups, ...)."""
    means = {}
    for name in TRAINING_SERIES:
        values = [float(entry[name]) for entry in log_history if isinstance(entry.get(name), (int, float))]
        if values:
            means[name] = round(sum(values) / len(values), 4)
    return means


def train_dpo(environment, column, scale, seed, start: Path, run_dir: Path):
    """Online trajectory DPO from the warm start until the turn budget is spent; resumes after its last round."""
    from peft import LoraConfig

    from trl_starpo import load_tasks
    from trl_starpo.dpo import TrajectoryDPOConfig, train_online

    model, tokenizer = load_model(str(start))
    args = TrajectoryDPOConfig(
        output_dir=str(run_dir), seed=seed, rounds=10**6, turn_budget=column.budget,
        tasks_per_round=scale.dpo_tasks_per_round, num_generations=scale.num_generations,
        temperature=scale.temperature, beta=scale.dpo_beta, learning_rate=scale.dpo_learning_rate,
        num_train_epochs=scale.dpo_epochs, per_device_train_batch_size=scale.micro_batch, logging_steps=1,
        report_to="none", gradient_checkpointing=column.gradient_checkpointing, bf16=scale.bf16,
        resume_from_checkpoint="true",
        environment_kwargs=column.environment_kwargs, **column.rollout,
    )
    lora = LoraConfig(r=scale.lora_r, lora_alpha=2 * scale.lora_r, target_modules=LORA_TARGETS, task_type="CAUSAL_LM")
    model, rounds = train_online(model, tokenizer, environment, load_tasks(environment, split="train"), args,
                                 peft_config=lora)
    turns, curve = 0, []
    for record in rounds:
        turns += record["turns"]
        curve.append([turns, round(record["success"], 4), round(record["return"], 4)])
    return model, tokenizer, curve


# -- one run --------------------------------------------------------------------------------------------------------


def record_path(records: Path, environment: str, method: str, seed: int) -> Path:
    return records / environment / f"{method}-seed{seed}.json"


def run_one(method: str, environment: str, seed: int, *, scale: Scale = Scale(), model: str | None = None,
            workdir: Path = WORKDIR, records: Path = RECORDS, column: Column | None = None) -> dict:
    """Make (or resume) one run and write its record; a run already recorded with these settings is returned."""
    import torch

    from trl_starpo.models import DEFAULT_MODEL, resolve_model_path

    column = column or COLUMNS[environment]
    if scale.bf16 is None:
        scale = dataclasses.replace(scale, bf16=native_bf16())
    model_name = model or DEFAULT_MODEL
    key, rule = setting_key(environment, column, scale, model_name), applied_rule(method, column, scale)
    path = record_path(records, environment, method, seed)
    if path.is_file():
        recorded = json.loads(path.read_text())
        if (recorded.get("setting") == key and recorded_rule(recorded) == rule
                and recorded_collection_precision(recorded) == collection_precision(method, scale.bf16)):
            return recorded
    held_out_tasks(environment, column, scale)  # a split that cannot be evaluated fails before any training
    started = time.time()
    torch.manual_seed(seed)
    run_dir = run_directory(workdir, environment, method, seed, key, rule)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "setting.json").write_text(json.dumps({"setting": key, "thinking_scale_rule": rule}))

    curve: list = []
    means: dict = {}
    start = None
    if method == "random":
        trained, tokenizer = None, None
    elif method == "untrained":
        trained, tokenizer = load_model(resolve_model_path(model_name))
    else:
        start = warm_start(environment, column, scale, resolve_model_path(model_name), workdir)
        if method == "sft":
            trained, tokenizer = load_model(str(start))
        elif method == "dpo":
            trained, tokenizer, curve = train_dpo(environment, column, scale, seed, start, run_dir)
        elif method in PRESET_METHODS:
            trained, tokenizer, curve, means = train_preset(method, environment, column, scale, seed, start, run_dir)
        else:
            raise ValueError(f"Unknown method {method!r}; choose from {METHODS}.")
    print(f"[{environment}] {method} seed {seed}: evaluating on {scale.eval_episodes} {column.held_out} tasks",
          flush=True)
    result = held_out(trained, tokenizer, environment, column, scale, seed)
    commit, dirty = git_state()
    record = {
        "method": method, "environment": environment, "seed": seed, "setting": key, "thinking_scale_rule": rule,
        "collection_precision": collection_precision(method, scale.bf16), "model": model_name,
        "warm_start": start.name if start else None, "held_out": result, "turns": curve[-1][0] if curve else 0,
        "updates": len(curve), "budget": column.budget, "curve": curve, "training_means": means,
        "column": dataclasses.asdict(column),
        "scale": dataclasses.asdict(scale),
        "recorded": datetime.date.today().isoformat(), "commit": commit, "dirty": dirty,
        "machine": machine(), "wall_s": round(time.time() - started),
        "load": [round(x, 1) for x in os.getloadavg()],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(f"[{environment}] {method} seed {seed}: held-out success {result['success']:.3f} "
          f"({result['successes']}/{result['episodes']}) -> {path}", flush=True)
    return record


def run_directory(workdir: Path, environment: str, method: str, seed: int, key: str, rule: str | None) -> Path:
    """Where a run of these settings keeps its checkpoints: a folder of its own for each setting and rule, so that a
    run of other settings (another budget, an ablation) leaves the checkpoints of this one to evaluate again. Runs
    made before folders were named by setting (``<method>-seed<seed>``, their settings in ``setting.json``) keep
    theirs."""
    name = f"{method}-seed{seed}"
    earlier = workdir / "runs" / environment / name
    marker = earlier / "setting.json"
    if marker.is_file() and json.loads(marker.read_text()) == {"setting": key, "thinking_scale_rule": rule}:
        return earlier
    return workdir / "runs" / environment / "-".join([name, key, *([rule] if rule else [])])


def machine() -> str:
    """What a run ran on: the CPUs, and the GPU where there is one."""
    import torch

    cpus = f"{os.cpu_count()} CPUs ({platform.machine()})"
    return f"{torch.cuda.get_device_name()}, {cpus}" if torch.cuda.is_available() else cpus


def git_state() -> tuple[str, str]:
    """``(commit, dirty)``: HEAD's hash and the first uncommitted paths ('' when clean)."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.rstrip("\n")

    changed = [line[3:] for line in git("status", "--porcelain").splitlines()]
    return git("rev-parse", "HEAD") or "unknown", ", ".join(changed[:5]) + (" ..." if len(changed) > 5 else "")


# -- the table ------------------------------------------------------------------------------------------------------


def load_records(records: Path = RECORDS) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(records.glob("*/*.json"))]


def pooled(runs: list[dict]) -> dict:
    """Held-out success of a (method, environment) cell, its episodes pooled over seeds."""
    successes = sum(r["held_out"]["successes"] for r in runs)
    episodes = sum(r["held_out"]["episodes"] for r in runs)
    low, high = wilson(successes, episodes)
    return {"success": successes / episodes, "low": low, "high": high, "episodes": episodes,
            "seeds": sorted(r["seed"] for r in runs)}


def cells(records: list[dict]) -> dict[tuple[str, str], dict]:
    by_cell: dict[tuple[str, str], list[dict]] = {}
    for record in records:
        by_cell.setdefault((record["method"], record["environment"]), []).append(record)
    return {cell: pooled(runs) for cell, runs in by_cell.items()}


def percent(x: float) -> str:
    return f"{100 * x:.0f}"


def markdown(records: list[dict], folder: Path | None = None) -> str:
    """The generated part of docs/results.md: the table, the lift over SFT, per-run details and the curves.

    ``folder`` names another records folder than the main table's (an earlier sitting's, another budget's): the
    command shown and the curves' links are then that folder's.
    """
    table = cells(records)
    environments = list(COLUMNS)
    command = ("python benchmarks/learning.py --table   # this section, from benchmarks/learning_runs/*/*.json"
               if folder is None else f"python benchmarks/learning.py --table --records {display_path(folder)}")
    lines = [
        "```bash",
        command,
        "```",
        "",
        "Held-out success in % with its 95% Wilson interval, episodes pooled over seeds (seeds in parentheses);",
        "— where no run is recorded yet.",
        "",
        "| method | " + " | ".join(environments) + " |",
        "|---|" + "---:|" * len(environments),
    ]
    for method in METHODS:
        row = []
        for environment in environments:
            cell = table.get((method, environment))
            row.append("—" if cell is None else f"{percent(cell['success'])} [{percent(cell['low'])}–"
                       f"{percent(cell['high'])}] ({len(cell['seeds'])})")
        lines.append(f"| `{method}` | " + " | ".join(row) + " |")
    lines += ["", *lift_lines(records, environments), *paired_lines(records, environments), *rule_lines(records), ""]
    settings = {(r["environment"], r["setting"]) for r in records}
    mixed = sorted(e for e in environments if len({s for env, s in settings if env == e}) > 1)
    if mixed:
        lines += [f"Warning: the records of {', '.join(mixed)} come from different settings (see their `setting`).", ""]
    lines += precision_lines(records, environments)
    if records:
        lines += ["Per run (held-out successes / episodes; turns of training and updates or DPO rounds; recorded "
                  "at commit):", "", "| environment | method | seed | held-out | turns | updates | commit |",
                  "|---|---|---:|---:|---:|---:|---|"]
        for r in sorted(records, key=lambda r: (r["environment"], METHODS.index(r["method"]), r["seed"])):
            h = r["held_out"]
            lines.append(f"| {r['environment']} | `{r['method']}` | {r['seed']} | {h['successes']}/{h['episodes']} | "
                         f"{r['turns']} | {r['updates']} | `{r['commit'][:10]}` |")
        lines.append("")
    for environment in environments:
        if any(r["environment"] == environment and r["curve"] for r in records):
            lines.append(f"![training-rollout success against environment turns, {environment}]"
                         f"({curves_link(environment, folder)})")
    return "\n".join(lines).rstrip()


def matched(records: list[dict], method: str, other: str, environment: str) -> tuple[dict, dict] | None:
    """Two methods' cells pooled over the seeds both ran, so that a comparison pairs each seed with itself."""
    runs = {m: {r["seed"]: r for r in records if r["method"] == m and r["environment"] == environment}
            for m in (method, other)}
    seeds = sorted(runs[method].keys() & runs[other].keys())
    if not seeds:
        return None
    return pooled([runs[method][s] for s in seeds]), pooled([runs[other][s] for s in seeds])


def precision_lines(records: list[dict], environments: list[str]) -> list[str]:
    """A warning for each column whose rows played their held-out episodes in different precisions."""
    lines = []
    for environment in environments:
        methods_by_precision: dict[str, set] = {}
        for record in records:
            if record["environment"] == environment and record["method"] != "random":  # no model, no precision
                methods_by_precision.setdefault(eval_precision(record), set()).add(record["method"])
        if len(methods_by_precision) > 1:
            parts = "; ".join(f"{precision}: " + ", ".join(f"`{m}`" for m in sorted(methods, key=METHODS.index))
                              for precision, methods in sorted(methods_by_precision.items()))
            lines += [f"Warning: the rows of {environment} played their held-out episodes in different precisions "
                      f"({parts}).", ""]
    return lines


def paired(records: list[dict], method: str, other: str, environment: str) -> dict | None:
    """Two methods episode by episode: the episodes each solved where the other did not, on the same task with the
    same seed, and a test that takes the task as its unit. Every seed plays the same tasks, so a task's episodes are
    not independent draws; each task's net gain over the seeds is counted instead, and the exact sign test
    (``binomtest``) is applied to the tasks that gained and lost (with one seed, the exact McNemar test). Only seeds
    where both sides kept per-episode outcomes (records before 2026-12-04 have none) and played in the same
    precision count; None when there are none."""
    from scipy.stats import binomtest

    runs = {m: {r["seed"]: r for r in records if r["method"] == m and r["environment"] == environment}
            for m in (method, other)}
    net_by_task: dict[str, int] = {}
    seeds, episodes, alone, other_alone = [], 0, 0, 0
    for seed in sorted(runs[method].keys() & runs[other].keys()):
        mine, theirs = runs[method][seed], runs[other][seed]
        outcomes, other_outcomes = mine["held_out"].get("outcomes"), theirs["held_out"].get("outcomes")
        if not outcomes or not other_outcomes or eval_precision(mine) != eval_precision(theirs):
            continue
        shared = outcomes.keys() & other_outcomes.keys()
        if not shared:
            continue
        seeds.append(seed)
        episodes += len(shared)
        for task in shared:
            difference = outcomes[task] - other_outcomes[task]
            alone, other_alone = alone + (difference > 0), other_alone + (difference < 0)
            net_by_task[task] = net_by_task.get(task, 0) + difference
    if not seeds:
        return None
    gained, lost = sum(n > 0 for n in net_by_task.values()), sum(n < 0 for n in net_by_task.values())
    p_value = binomtest(gained, gained + lost).pvalue if gained + lost else 1.0
    return {"seeds": seeds, "episodes": episodes, "alone": alone, "other_alone": other_alone,
            "tasks_gained": gained, "tasks_lost": lost, "p": float(p_value)}


def paired_lines(records: list[dict], environments: list[str]) -> list[str]:
    """Each RL method against the SFT start, and GiGPO against StarPO-S, episode by episode, where the records keep
    per-episode outcomes."""
    lines = []
    comparisons = [*((method, "sft") for method in RL_METHODS), ("gigpo", "starpo-s")]
    for environment in environments:
        for method, other in comparisons:
            test = paired(records, method, other, environment)
            if test is None:
                continue
            seeds = f"seed{'s' if len(test['seeds']) > 1 else ''} {', '.join(map(str, test['seeds']))}"
            other_name, other_short = ("the SFT start", "the start") if other == "sft" else (f"`{other}`",) * 2
            lines.append(f"- {environment}: `{method}` against {other_name}, episode by episode on the same tasks "
                         f"({test['episodes']} episodes, {seeds}): "
                         f"{test['alone']} solved by `{method}` alone, {test['other_alone']} by {other_short} alone; "
                         f"by task over the seeds, {test['tasks_gained']} gained and {test['tasks_lost']} lost "
                         f"(exact sign test p = {test['p']:.2g}).")
    return lines


def seeds_note(cell: dict, *rows: dict) -> str:
    """Which seeds a matched comparison used, where a row of the table pools more."""
    if all(row["seeds"] == cell["seeds"] for row in rows):
        return ""
    return f"; seed{'s' if len(cell['seeds']) > 1 else ''} {', '.join(map(str, cell['seeds']))}"


def lift_lines(records: list[dict], environments: list[str]) -> list[str]:
    """Which RL methods beat the SFT start by at least 10 points with intervals that do not overlap, and how GiGPO
    compares with StarPO-S; each comparison pools only the seeds both sides ran."""
    table = cells(records)
    lines = []
    for environment in environments:
        if ("sft", environment) not in table or not any((m, environment) in table for m in RL_METHODS):
            continue
        lifted, unmatched = [], []
        for method in RL_METHODS:
            if (method, environment) not in table:
                continue
            pair = matched(records, method, "sft", environment)
            if pair is None:
                unmatched.append(f"`{method}`")
                continue
            cell, sft = pair
            if cell["success"] - sft["success"] >= 0.10 and cell["low"] > sft["high"]:
                note = seeds_note(cell, table[(method, environment)], table[("sft", environment)])
                lifted.append(f"`{method}` (+{percent(cell['success'] - sft['success'])} points{note})")
        verdict = ", ".join(lifted) if lifted else "no method"
        unmatched_note = f" ({', '.join(unmatched)}: no seed in common with it)" if unmatched else ""
        lines.append(f"- {environment}: {verdict} lifts success over the SFT start{unmatched_note} by at least 10 "
                     "points with non-overlapping intervals.")
    for environment in environments:
        if ("gigpo", environment) not in table or ("starpo-s", environment) not in table:
            continue
        pair = matched(records, "gigpo", "starpo-s", environment)
        if pair is None:
            lines.append(f"- {environment}: `gigpo` and `starpo-s` have no seed in common, so are not compared.")
            continue
        gigpo, starpo_s = pair
        overlap = gigpo["low"] <= starpo_s["high"] and starpo_s["low"] <= gigpo["high"]
        lines.append(f"- {environment}: `gigpo` {percent(gigpo['success'])}% against `starpo-s` "
                     f"{percent(starpo_s['success'])}% on the same budget "
                     f"({'intervals overlap' if overlap else 'intervals do not overlap'}"
                     f"{seeds_note(gigpo, table[('gigpo', environment)], table[('starpo-s', environment)])}).")
    return lines


def rule_lines(records: list[dict]) -> list[str]:
    """Where a preset's runs applied a thinking-scale rule other than the one the preset applies now."""
    lines = []
    for method, current in PRESET_THINKING_SCALE_RULES.items():
        by_rule: dict[str, set[str]] = {}
        for r in (r for r in records if r["method"] == method):
            rule = recorded_rule(r)
            if rule is not None and rule != current:
                by_rule.setdefault(rule, set()).add(r["environment"])
        for rule, environments in sorted(by_rule.items()):
            lines.append(f"- `{method}` on {', '.join(sorted(environments))}: these runs applied thinking_scale_rule "
                         f"`{rule}`; the preset applies `{current}`.")
    return lines


SMOOTHING = 5  # updates (or DPO rounds) in the trailing mean of a plotted curve


def trailing_mean(values: list[float], window: int = SMOOTHING) -> list[float]:
    return [sum(values[max(0, i - window + 1) : i + 1]) / (i + 1 - max(0, i - window + 1)) for i in range(len(values))]


def plot(records: list[dict], environment: str, path: Path) -> Path | None:
    runs = [r for r in records if r["environment"] == environment and r["curve"]]
    if not runs:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4))
    colors = dict(zip(METHODS, plt.rcParams["axes.prop_cycle"].by_key()["color"] * 2))
    labelled = set()
    for run in sorted(runs, key=lambda r: (METHODS.index(r["method"]), r["seed"])):
        turns, success = [p[0] for p in run["curve"]], trailing_mean([p[1] for p in run["curve"]])
        label = None if run["method"] in labelled else run["method"]
        labelled.add(run["method"])
        axis.plot(turns, success, color=colors[run["method"]], alpha=0.8, linewidth=1.2, label=label)
    axis.set_xlabel("environment turns spent")
    axis.set_ylabel(f"training-rollout success (trailing mean of {SMOOTHING})")
    axis.set_title(f"{environment}: learning curves (one line per seed)")
    axis.set_ylim(-0.02, 1.02)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def write_results(block: str, results_md: Path = RESULTS_MD) -> None:
    """Replace the generated block of docs/results.md (between its markers), leaving the rest as it is."""
    begin = "<!-- learning:begin (generated by benchmarks/learning.py --table) -->"
    end = "<!-- learning:end -->"
    text = results_md.read_text() if results_md.exists() else "# Results\n"
    if begin not in text or end not in text:
        text = text.rstrip() + f"\n\n{begin}\n{end}\n"
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    results_md.write_text(f"{head}{begin}\n{block}\n{end}{tail}")


def display_path(folder: Path) -> str:
    """``folder`` relative to the repository when it lies inside it, so that a printed command can be rerun."""
    try:
        return str(folder.resolve().relative_to(ROOT))
    except ValueError:
        return str(folder.resolve())


def curves_link(environment: str, folder: Path | None = None) -> str:
    """Where docs/results.md finds an environment's curves: beside it for the main table, else in ``folder``."""
    name = f"learning_{environment}.png"
    if folder is None:
        return name
    shown = display_path(folder)
    return f"../{shown}/{name}" if not Path(shown).is_absolute() else f"{shown}/{name}"


def regenerate(records_dir: Path = RECORDS, results_md: Path = RESULTS_MD) -> str:
    """The table and curves from the records alone."""
    records = load_records(records_dir)
    for environment in COLUMNS:
        plot(records, environment, results_md.parent / f"learning_{environment}.png")
    block = markdown(records)
    write_results(block, results_md)
    return block


def folder_table(records_dir: Path) -> str:
    """Another records folder's table, returned for printing, with its curves written into that folder.

    docs/results.md is left alone: its generated section is the main table's.
    """
    records = load_records(records_dir)
    for environment in COLUMNS:
        plot(records, environment, records_dir / f"learning_{environment}.png")
    return markdown(records, records_dir)


# -- main -----------------------------------------------------------------------------------------------------------


def run_processes(commands: dict[str, list[str]], jobs: int, logs: Path) -> list[str]:
    """Run each named command as its own process, ``jobs`` at a time, and return the names of those that failed.

    One at a time, a run prints to the terminal. Side by side, each appends its output to ``<logs>/<name>.log`` (the
    name's slashes made dashes, its spaces dropped) after a line with the time and the command, and a line says when
    it ends; an interrupt stops the runs under way (they resume from their checkpoints when started again). Runs of
    one column wait on each other only for its warm start, which the first builds under a file lock.
    """
    if jobs == 1:
        return [name for name, command in commands.items() if subprocess.run(command).returncode != 0]
    import shlex

    logs.mkdir(parents=True, exist_ok=True)
    waiting, running, failed = list(commands), {}, set()
    try:
        while waiting or running:
            while waiting and len(running) < jobs:
                name = waiting.pop(0)
                log = (logs / f"{name.replace('/', '-').replace(' ', '')}.log").open("a")
                log.write(f"# {datetime.datetime.now().isoformat(timespec='seconds')} {shlex.join(commands[name])}\n")
                log.flush()
                running[name] = subprocess.Popen(commands[name], stdout=log, stderr=subprocess.STDOUT), log
            time.sleep(1.0)
            for name, (process, log) in list(running.items()):
                if process.poll() is not None:
                    log.close()
                    del running[name]
                    if process.returncode != 0:
                        failed.add(name)
                    print(f"{name}: {'finished' if process.returncode == 0 else f'failed (exit {process.returncode})'}"
                          f"; log in {log.name}", flush=True)
    except KeyboardInterrupt:
        for process, log in running.values():
            process.terminate()
        for process, log in running.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            log.close()
        raise
    return [name for name in commands if name in failed]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", nargs="+", default=["minigrid"], help=f"Columns: {', '.join(COLUMNS)} or all.")
    parser.add_argument("--method", nargs="+", default=["all"], help=f"Rows: {', '.join(METHODS)} or all.")
    parser.add_argument("--seed", nargs="+", type=int, default=[0])
    parser.add_argument("--budget", type=int, help="Turns per training run (default: the column's).")
    parser.add_argument("--eval-episodes", type=int, default=Scale.eval_episodes)
    parser.add_argument("--num-iterations", type=int, default=Scale.num_iterations,
                        help="Optimizer passes over each rollout batch in the RL presets (GRPOConfig.num_iterations).")
    parser.add_argument("--learning-rate", type=float, default=Scale.learning_rate,
                        help="The RL presets' learning rate (the warm start's and DPO's keep their own).")
    parser.add_argument("--thinking-scale-rule", choices=THINKING_SCALE_RULES,
                        help="How the thinking critic scales advantages in the RL presets (StarPOConfig."
                             "thinking_scale_rule; default: the preset's). Records of another rule belong in their "
                             "own --records folder.")
    parser.add_argument("--advantage-estimator",
                        help="An ablation: the advantage estimator of the RL presets (StarPOConfig."
                             "advantage_estimator, e.g. gigpo with --method starpo-s; default: each preset's). Records "
                             "of an ablation belong in their own --records folder.")
    parser.add_argument("--model", help="The base model (default: the embedded SmolLM2-135M-Instruct).")
    parser.add_argument("--workdir", type=Path, default=WORKDIR, help="Checkpoints and warm starts.")
    parser.add_argument("--records", type=Path, help="Where run records go (default: benchmarks/learning_runs).")
    parser.add_argument("--threads", type=int,
                        help="Torch threads (default: torch's, all cores); 1 on a machine shared with other jobs.")
    parser.add_argument("--jobs", type=int, default=1,
                        help="Runs side by side, each its own process (default 1): on a GPU, several runs share it "
                             "well (five WebShop runs side by side took 11 minutes on one H200); each run's output "
                             "then goes to <workdir>/logs (<workdir>/smoke/logs with --smoke), and each gets its share "
                             "of the cores unless --threads says.")
    parser.add_argument("--table", action="store_true",
                        help="Only regenerate docs/results.md from the records (with --records: print their table and "
                             "write their curves into that folder).")
    parser.add_argument("--smoke", action="store_true",
                        help="Tiny budgets (8 turns, 2 episodes an update, 2 held-out episodes), records under "
                             "<workdir>/smoke: the pipeline end to end, not a result.")
    args = parser.parse_args(argv)
    if args.num_iterations < 1:
        parser.error(f"--num-iterations must be at least 1, got {args.num_iterations}")
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    if not args.learning_rate > 0:
        parser.error(f"--learning-rate must be positive, got {args.learning_rate}")
    if args.advantage_estimator and not args.table:
        from trl_starpo.config import ADVANTAGE_ESTIMATORS

        if args.advantage_estimator not in ADVANTAGE_ESTIMATORS:
            parser.error(f"--advantage-estimator must be one of {', '.join(ADVANTAGE_ESTIMATORS)}, got "
                         f"{args.advantage_estimator!r}")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    records = args.records or (args.workdir / "smoke" / "records" if args.smoke else RECORDS)
    if args.table:
        # another folder's records (an earlier sitting's) are printed with their curves, not written into results.md
        print(regenerate(records) if records.resolve() == RECORDS else folder_table(records))
        return
    environments = list(COLUMNS) if args.env == ["all"] else args.env
    methods = list(METHODS) if args.method == ["all"] else args.method
    for name in environments:
        if name not in COLUMNS:
            parser.error(f"unknown environment {name!r}; choose from {', '.join(COLUMNS)}")
    for name in methods:
        if name not in METHODS:
            parser.error(f"unknown method {name!r}; choose from {', '.join(METHODS)}")
    runs = [(e, m, s) for e in environments for s in args.seed for m in methods]
    if len(runs) == 1:
        environment, method, seed = runs[0]
        column = COLUMNS[environment]
        chosen = dict(num_iterations=args.num_iterations, thinking_scale_rule=args.thinking_scale_rule,
                      advantage_estimator=args.advantage_estimator, learning_rate=args.learning_rate)
        scale = dataclasses.replace(Scale(), eval_episodes=args.eval_episodes, **chosen)
        if args.smoke:
            column = dataclasses.replace(column, budget=8, sft_episodes=4, sft_epochs=1)
            scale = dataclasses.replace(SMOKE, **chosen)
        if args.budget:
            column = dataclasses.replace(column, budget=args.budget)
        workdir = args.workdir / "smoke" if args.smoke else args.workdir
        record = run_one(method, environment, seed, scale=scale, model=args.model, workdir=workdir, records=records,
                         column=column)
        print(f"{environment} {method} seed {seed}: {record['updates']} updates, {record['turns']} turns, held-out "
              f"{record['held_out']['successes']}/{record['held_out']['episodes']}", flush=True)
        return
    # One process per run: a run that fails or runs out of memory costs only itself, and frees all it held.
    forwarded = ["--workdir", str(args.workdir), "--records", str(records)]
    # side by side, the runs share the cores instead of each spinning as many threads as there are cores
    side_by_side = min(args.jobs, len(runs))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    threads = args.threads or (max(1, cores // side_by_side) if side_by_side > 1 else None)
    for flag, value in (("--budget", args.budget), ("--model", args.model), ("--threads", threads)):
        forwarded += [flag, str(value)] if value else []
    forwarded += ["--num-iterations", str(args.num_iterations), "--learning-rate", str(args.learning_rate)]
    forwarded += ["--thinking-scale-rule", args.thinking_scale_rule] if args.thinking_scale_rule else []
    forwarded += ["--advantage-estimator", args.advantage_estimator] if args.advantage_estimator else []
    forwarded += ["--smoke"] if args.smoke else ["--eval-episodes", str(args.eval_episodes)]
    commands = {f"{environment}/{method}/seed {seed}": [sys.executable, __file__, "--env", environment, "--method",
                                                        method, "--seed", str(seed), *forwarded]
                for environment, method, seed in runs}
    failed = run_processes(commands, args.jobs, (args.workdir / "smoke" if args.smoke else args.workdir) / "logs")
    if args.smoke:
        print(markdown(load_records(records)))
    if failed:
        sys.exit(f"Failed runs (rerun them to resume): {'; '.join(failed)}")


if __name__ == "__main__":
    main()
