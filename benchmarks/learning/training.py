"""Training one row: the shared SFT warm start, a preset's RL run under a turn budget, online DPO."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import statistics
from pathlib import Path

from .evaluation import load_model, tasks_digest
from .protocol import Column, LORA_TARGETS, PROGRESS_FILE, ROOT, Scale


def rollout_flags(column: Column) -> list[str]:
    flags = []
    for name, value in column.rollout.items():
        flags += [f"--{name}", str(value).lower() if isinstance(value, bool) else str(value)]
    return flags + ["--environment_kwargs", json.dumps(column.environment_kwargs)]


def warm_start(environment: str, column: Column, scale: Scale, model: str, workdir: Path) -> Path:
    """The SFT warm start of ``environment`` (made once, then reused by every method, seed and budget): the column's
    shipped adapter merged into ``model``, or a warm start trained here."""
    if column.warm_start_adapter:
        return shipped_warm_start(environment, column.warm_start_adapter, model, workdir)
    from filelock import FileLock
    from transformers.trainer_utils import get_last_checkpoint

    from trl_starpo.recipes import run_sft

    from trl_starpo import load_tasks

    train = tasks_digest([dict(row) for row in load_tasks(environment, split="train")])  # a regenerated split: anew
    what = [environment, model, column.rollout, column.environment_kwargs, column.sft_episodes, column.sft_epochs,
            column.gradient_checkpointing, scale.lora_r, scale.sft_learning_rate, scale.bf16, train]
    schedule = column.sft_schedule or {"lr_scheduler_type": "cosine", "warmup_steps": 0}
    if column.sft_schedule:
        what.append(column.sft_schedule)  # builds before the field keep their key
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
            # 4 rows a step, one at a time: the same update (TRL averages over the step's tokens) at a third of the
            # memory, as recipes/configs/alfworld_sft.yaml; a row is an episode, or under `window` one turn
            "--per_device_train_batch_size", "1", "--gradient_accumulation_steps", "4",
            "--learning_rate", str(scale.sft_learning_rate),
            "--lr_scheduler_type", schedule["lr_scheduler_type"], "--warmup_steps", str(schedule["warmup_steps"]),
            "--logging_steps", "1", "--save_strategy", "steps",
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


def shipped_warm_start_name(environment: str, adapter: str, model: str) -> str:
    """The name of ``environment``'s warm start made from the shipped ``adapter`` (a folder relative to the
    repository) and ``model``: a hash of both, so that a rebuilt adapter is another warm start."""
    from trl_starpo.models import warm_start_digest

    return f"{environment}-shipped-{warm_start_digest(model, str(ROOT / adapter))[:10]}"


def shipped_warm_start(environment: str, adapter: str, model: str, workdir: Path) -> Path:
    """``model`` with the shipped LoRA ``adapter`` merged in (``merged_warm_start``, kept in the package's cache), linked
    under ``workdir``'s warm starts by the name its runs' records carry."""
    from trl_starpo.models import merged_warm_start

    merged = Path(merged_warm_start(model, str(ROOT / adapter)))
    folder = workdir / "sft" / shipped_warm_start_name(environment, adapter, model)
    if not folder.exists():  # absent, or a link whose merged folder was removed from the cache
        folder.parent.mkdir(parents=True, exist_ok=True)
        link = folder.with_name(f"{folder.name}.{os.getpid()}.link")  # one per process: runs side by side race
        link.unlink(missing_ok=True)
        link.symlink_to(merged, target_is_directory=True)
        os.replace(link, folder)
    return folder


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
        **({"thinking_critic": scale.thinking_critic} if scale.thinking_critic is not None else {}),
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
    return trainer.accelerator.unwrap_model(trainer.model), trainer.processing_class, progress.curve, \
        trainer.state.log_history


def load_checkpoint(start: Path, checkpoint: Path):
    """An RL run's model at one of its checkpoints (the checkpoint's LoRA adapter on the warm start ``start``), with
    the run's curve and training log up to it."""
    from peft import PeftModel
    from transformers.trainer import TRAINER_STATE_NAME

    model, tokenizer = load_model(str(start))
    model = PeftModel.from_pretrained(model, str(checkpoint))
    curve = json.loads((checkpoint / PROGRESS_FILE).read_text())
    log_history = json.loads((checkpoint / TRAINER_STATE_NAME).read_text())["log_history"]
    return model, tokenizer, curve, log_history


TRAINING_SERIES = (
    "frac_reward_zero_std", "rollout/group_return_std", "rollout/action_validity", "rollout/format_error_rate",
    "rollout/turns", "rollout/truncated", "rollout/context_truncated", "grad_norm", "kl", "entropy",
    "filter/mean_weight", "gigpo/grouped_turn_fraction", "gigpo/step_group_size", "critic/thinking_scale",
    "critic/scale_on_credit", "critic/scale_on_blame", "critic/advantage_shift",
)
# where an update's wall time went (trl_starpo/timing.py): seconds per update
TIME_SERIES = ("time/generation", "time/environment", "time/scoring", "time/loss_forward", "time/backward",
               "time/optimizer", "time/other", "time/step")


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
    return _averages(log_history, TRAINING_SERIES, statistics.fmean)


def time_split(log_history: list[dict]) -> dict[str, float]:
    """The median seconds per update of each phase (``time/*``): an update during which the process was stopped or
    the machine busy would outweigh all the others in a mean. Medians of the phases need not add up to the median
    step."""
    return _averages(log_history, TIME_SERIES, statistics.median)


def _averages(log_history: list[dict], series, average) -> dict[str, float]:
    averages = {}
    for name in series:
        values = [float(entry[name]) for entry in log_history if isinstance(entry.get(name), (int, float))]
        if values:
            averages[name] = round(average(values), 4)
    return averages


def train_dpo(environment, column, scale, seed, start: Path, run_dir: Path):
    """Online trajectory DPO from the warm start until the turn budget is spent; resumes after its last round.

    Returns the model, its tokenizer, the curve (turns, training success and return after each round) and the rounds'
    own records (pairs formed, the DPO metrics of each round's last step: ``train_online``'s ``rounds.json``)."""
    from peft import LoraConfig

    from trl_starpo import load_tasks
    from trl_starpo.dpo import TrajectoryDPOConfig, train_online

    model, tokenizer = load_model(str(start))
    # ETO explores each task once: its rounds play as many episodes, each of another task
    tasks_per_round, generations = scale.dpo_tasks_per_round, scale.num_generations
    if scale.dpo_pairs == "expert":
        tasks_per_round, generations = tasks_per_round * generations, 1
    args = TrajectoryDPOConfig(
        output_dir=str(run_dir), seed=seed, rounds=10**6, turn_budget=column.budget,
        tasks_per_round=tasks_per_round, num_generations=generations,
        temperature=scale.temperature, beta=scale.dpo_beta, learning_rate=scale.dpo_learning_rate,
        num_train_epochs=scale.dpo_epochs, pairs=scale.dpo_pairs, per_device_train_batch_size=scale.micro_batch,
        logging_steps=1,
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
    return model, tokenizer, curve, rounds
