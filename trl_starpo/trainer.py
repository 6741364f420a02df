"""``StarPOTrainer``: GRPOTrainer whose samples are whole multi-turn episodes.

GRPOTrainer supplies the clipped policy-gradient loss, the KL term, the inner iterations over one generation
batch, gradient accumulation, PEFT and distributed training. This class replaces how a generation batch is made:
it plays episodes in the environment with ``RolloutCollector``, scores each by its return, computes StarPO's
group-relative advantages across all processes, and hands GRPO's loss one "completion" per trajectory (everything
after the first prompt) in which only the model's own tokens are trained.
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Callable, Mapping
from contextlib import contextmanager, nullcontext
from typing import Any

import torch
from accelerate.logging import get_logger
from accelerate.utils import gather_object
from trl import GRPOTrainer
from trl.models import unwrap_model_for_generation
from transformers import Trainer
from transformers.trainer import TRAINING_ARGS_NAME
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl.trainer.utils import use_adapter

from .algorithms.advantages import group_relative_advantages, token_advantages
from .algorithms.estimators import CRITIC_ESTIMATORS, ESTIMATORS, AdvantageBatch, EstimatorSettings
from .algorithms.critics import (
    ThinkingCritic,
    ValueCritic,
    explained_variance,
    load_critics,
    save_critics,
    thinking_critic_advantages,
)
from .algorithms.filtering import trajectory_filter_weights
from .algorithms.kl_control import KLEarlyStopping, sampling_kl
from .monitor.callbacks import attach_agent_callbacks
from .config import StarPOConfig
from .envs import (
    Environment, EnvironmentPool, MixedEnvironmentPool, check_environment, load_environment, load_tasks,
)
from .hub.cards import check_environment_name
from .hub.push import StarPOHubMixin
from .logprobs import last_hidden_states, scored_logps
from .memory import ReleaseFreeMemory, release_free_memory
from .nonfinite import NonFiniteGuard
from .checkpoints import CheckpointSeal, clear_checkpoint_folder, resolve_resume
from .timing import UpdateTimer
from .resume import EpochSeededSampler, load_rollout_state, save_rollout_state
from .monitor import add_echo_trap_monitor
from .models import quiet_checkpointing_rename
from .rollout.collector import RolloutCollector
from .rollout.env_calls import hung_calls
from .rollout.generation import CachedTransformersGenerator
from .rollout.precision import frozen_weights_in_autocast_dtype
from .rollout.parsing import ANSWER_CLOSE
from .rollout.metrics import PER_ACTION, STAT_NAMES, mean_stats, trajectory_stats
from .samples import (
    padded_count, padded_rows, per_row, per_sample, row_chunks, sample_tensors, states_in_trajectory_layout,
    turn_samples,
)
from .trajectory import Trajectory


logger = get_logger(__name__)

# the metrics GRPOTrainer logs as a mean over a micro-batch's trained tokens
TOKEN_MEAN_METRICS = ("kl", "entropy", "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean",
                      "cispo_clip_ratio", "vespo/phi_seq_mean")


def _environment_factory(environment, kwargs: dict | None) -> Callable[[], Environment]:
    if isinstance(environment, str):
        return lambda: load_environment(environment, **(kwargs or {}))
    if not isinstance(environment, type) and isinstance(environment, Environment):
        raise TypeError(
            "Pass the environment's name or a zero-argument factory (e.g. `lambda: MyEnv()`), not an instance: "
            "StarPOTrainer plays many episodes at once and needs one environment per episode."
        )
    if callable(environment):
        return environment
    raise TypeError(f"environment must be a registered name or a factory, got {type(environment).__name__}.")


def _mixed_pool(environments: Mapping, kwargs: dict | None) -> MixedEnvironmentPool:
    """The pool of a run on several environments: ``{name: registered name or factory}``."""
    if not environments:
        raise ValueError("environment is an empty dict; name at least one environment.")
    if kwargs:
        raise ValueError(
            "environment_kwargs configures one environment; with several, give each its own factory, e.g. "
            "{'sokoban': lambda: load_environment('sokoban', dim_room=(6, 6)), 'frozenlake': 'frozenlake'}."
        )
    for name in environments:  # they name trajectories, store rows and the model card
        check_environment_name(name)
    return MixedEnvironmentPool({name: _environment_factory(value, None) for name, value in environments.items()})


def _check_rows_name_environments(dataset, pool: MixedEnvironmentPool) -> None:
    """Refuse, before any training, task rows that do not name one of the run's environments."""
    key = MixedEnvironmentPool.KEY
    if key not in (getattr(dataset, "column_names", None) or []):
        raise ValueError(f"With several environments, every task row needs an `{key}` column naming one of "
                         f"{', '.join(map(repr, pool.pools))}.")
    for name in set(dataset[key]):
        pool.name_of({key: name})


def episode_return(prompts=None, completions=None, *, episode_return: list[float], **kwargs) -> list[float]:
    """StarPO's reward: a trajectory's episode return, the sum of its turns' rewards (format penalties included).

    Registered as GRPOTrainer's reward function so that TRL's reward logging and completion tables name it; the
    returns themselves come from the rollout collector.
    """
    return list(episode_return)


class StarPOTrainer(StarPOHubMixin, GRPOTrainer):
    """Train an LLM agent on whole multi-turn trajectories with StarPO.

    Args:
        model: A model id or path, or a loaded causal LM (as for `GRPOTrainer`).
        environment: The name of an installed environment (see `trl_starpo.list_environments()`), a
            zero-argument callable returning a new `Environment`, or a dict of either to train one run on several
            environments: each task row then names its own in an `environment` column (a key of the dict), and a
            group of rollouts never mixes environments.
        args: A `StarPOConfig`.
        train_dataset: The task instances, one row per task, each with at least a `seed` (and usually a `task_id`
            and the fields the environment reads from `options["task"]`). Defaults to the environment's own
            `train` split when `environment` is a name.
        eval_dataset: Task instances for evaluation.
        processing_class: The tokenizer; it needs a chat template.
        callbacks, optimizers, peft_config: As for `GRPOTrainer`.

    Example:
    ```python
    from trl_starpo import StarPOConfig, StarPOTrainer

    trainer = StarPOTrainer(
        model="HuggingFaceTB/SmolLM2-135M-Instruct",
        environment="sokoban",
        args=StarPOConfig(output_dir="sokoban-starpo", num_generations=4, max_turns=5),
    )
    trainer.train()
    ```
    """

    _tag_names = ["trl", "starpo", "agent"]
    _name = "StarPO"

    @quiet_checkpointing_rename()
    def __init__(
        self,
        model,
        environment: str | Callable[[], Environment] | Mapping[str, str | Callable[[], Environment]],
        args: StarPOConfig | None = None,
        train_dataset=None,
        eval_dataset=None,
        processing_class=None,
        callbacks=None,
        optimizers=(None, None),
        peft_config=None,
    ):
        if args is None:
            args = StarPOConfig(output_dir="starpo-output")
        if not isinstance(args, StarPOConfig):
            raise TypeError(f"args must be a StarPOConfig, got {type(args).__name__}.")
        self.environment_name = environment if isinstance(environment, str) else None
        if isinstance(environment, Mapping):
            self.environment_pool = _mixed_pool(environment, args.environment_kwargs)
            self.environment_names = list(self.environment_pool.pools)
        else:
            self.environment_pool = EnvironmentPool(_environment_factory(environment, args.environment_kwargs))
            self.environment_names = [self.environment_name] if self.environment_name else []
        self._check_environment()  # before the model loads: a wrong environment or kwarg fails here
        if train_dataset is None:
            if not isinstance(environment, str):
                raise ValueError("Pass train_dataset (the task instances) when environment is a factory or a dict.")
            train_dataset = load_tasks(environment, split="train")
        if isinstance(self.environment_pool, MixedEnvironmentPool):
            for dataset in (train_dataset, *(eval_dataset.values() if isinstance(eval_dataset, dict) else
                                             [eval_dataset] if eval_dataset is not None else [])):
                _check_rows_name_environments(dataset, self.environment_pool)
        super().__init__(
            model=model,
            reward_funcs=[episode_return],
            args=args,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            callbacks=callbacks,
            optimizers=optimizers,
            peft_config=peft_config,
        )
        if self._tokenizer.chat_template is None:
            raise ValueError("The tokenizer has no chat template; StarPO renders every turn through it.")
        self.collector = RolloutCollector.from_config(self._tokenizer, args)
        self.estimator_settings = EstimatorSettings.from_config(args)
        self.last_trajectories: list[Trajectory] = []
        self.value_critic, self.thinking_critic = self._build_critics(args)
        self.kl_early_stopping = KLEarlyStopping(args.kl_early_stop)
        self.kl_early_stops: list[int] = []  # global steps at which KL early stopping cut a batch's updates short
        self._inputs_seconds = self._loss_seconds = 0.0  # of the current micro-step, for the update timer
        self._prepared_chunk = None  # a chunk of turn rows the next _prepare_inputs hands over as it is
        self.update_timer = UpdateTimer(self)  # time/<phase> of every step; before the guard, which it times
        self.add_callback(self.update_timer)
        self.nonfinite_guard = NonFiniteGuard(self)  # a NaN / inf loss or gradient skips its optimizer step
        self.add_callback(self.nonfinite_guard)
        self.add_callback(ReleaseFreeMemory())
        self._capture_loss_logps = False
        self._scored_positions: torch.Tensor | None = None  # the positions log-probs are read at, while scoring
        self._generation_start = 0  # the micro-step at which the buffered generation batch was collected
        optimizer_steps_per_batch = args.steps_per_generation * self.num_iterations / args.gradient_accumulation_steps
        if args.kl_early_stop > 0 and optimizer_steps_per_batch <= 2:
            # A preset's value that cannot act here is no mistake of the user's: said at info level
            say = logger.info if "kl_early_stop" in getattr(args, "preset_filled", ()) else logger.warning
            say(
                f"kl_early_stop can never act here: each rollout batch serves {optimizer_steps_per_batch:g} optimizer "
                "step(s). The first step runs on the sampling policy itself (KL 0) and a stop acts only at the next "
                "optimizer step of the same batch, so there must be at least 3: steps_per_generation * "
                "num_iterations >= 3 * gradient_accumulation_steps."
            )
        self.resumed_from: str | None = None  # the checkpoint folder train() resumes from, for the callbacks
        attach_agent_callbacks(self)  # the trajectory store, agent files, curves, card and HTML the config asks for
        if args.monitor != "off":
            add_echo_trap_monitor(self, action=args.monitor)
        self.checkpoint_seal = CheckpointSeal(self)
        self.add_callback(self.checkpoint_seal)

    def train(self, resume_from_checkpoint: str | bool | None = None, *args, **kwargs):
        """``Trainer.train``; a checkpoint folder resumed from is kept as ``resumed_from``, where the trajectory store
        and the echo-trap monitor restore their own state from. A run in which no optimizer step changed the model
        warns why and writes no agent files (``nonfinite_guard.nothing_trained_reason()``; the recipes fail).
        ``resume_from_checkpoint=True`` takes output_dir's newest whole checkpoint, passing over one a killed run left
        half-written; a folder named explicitly must be whole (``trl_starpo.checkpoints``)."""
        resume_from_checkpoint = resolve_resume(resume_from_checkpoint, self.args.output_dir)
        if resume_from_checkpoint is not None:
            self.resumed_from = resume_from_checkpoint
        try:
            output = super().train(resume_from_checkpoint, *args, **kwargs)
        finally:  # evaluate_episodes builds them again when asked
            self.environment_pool.close()
        reason = self.nonfinite_guard.nothing_trained_reason()
        if reason:
            logger.warning(f"This run did not change the model: {reason}.")
        return output

    def _build_critics(self, args: StarPOConfig) -> tuple[ValueCritic | None, ThinkingCritic | None]:
        hidden_size = self.accelerator.unwrap_model(self.model).config.get_text_config().hidden_size
        value_critic = thinking_critic = None
        if args.advantage_estimator in CRITIC_ESTIMATORS:
            backbone = None
            if args.value_model is not None:
                from transformers import AutoModel

                from .models import resolve_model_path

                backbone = AutoModel.from_pretrained(resolve_model_path(args.value_model), dtype=torch.float32)
                hidden_size = backbone.config.get_text_config().hidden_size
            value_critic = ValueCritic(hidden_size, args.critic_learning_rate, args.value_clip_range, backbone)
        if args.thinking_critic:
            policy_hidden = self.accelerator.unwrap_model(self.model).config.get_text_config().hidden_size
            thinking_critic = ThinkingCritic(policy_hidden, args.critic_learning_rate)
        device = self.accelerator.device
        return (
            value_critic.to(device) if value_critic is not None else None,
            thinking_critic.to(device) if thinking_critic is not None else None,
        )

    def _check_environment(self) -> None:
        """Build one environment of each kind and check it has what the rollout reads."""
        for environment in self.environment_pool.samples():
            check_environment(environment)

    @quiet_checkpointing_rename()
    def collect_trajectories(self, tasks: list[dict[str, Any]], groups: list[int],
                             generation_config=None) -> list[Trajectory]:
        """Play one episode per task row with the current policy, in the training's mixed precision, sampling as
        ``generation_config`` says (the training's by default).

        The accelerator puts its autocast on the model's forward only once training has prepared the model, so an
        evaluation before ``train()`` would otherwise play in fp32 and one after it in bf16: a before/after
        comparison must not change precision.
        """
        with (
            self.accelerator.autocast(),
            unwrap_model_for_generation(
                self.model_wrapped,
                self.accelerator,
                gather_deepspeed3_params=self.args.ds3_gather_for_generation,
                generation_kwargs=self.generation_kwargs,
                gradient_checkpointing_kwargs=self.args.gradient_checkpointing_kwargs,
            ) as unwrapped_model,
            torch.no_grad(),
            self._dist.summon_full_params(self.model_wrapped, recurse=False),
        ):
            generator = CachedTransformersGenerator(
                unwrapped_model,
                pad_token_id=self._tokenizer.pad_token_id,
                eos_token_ids=self.eos_token_ids,
                generation_config=generation_config or self.generation_config,
                stop_strings=[ANSWER_CLOSE],  # nothing after </answer> is used, so it is not generated
                tokenizer=self._tokenizer,
            )
            # Sharded parameters (DeepSpeed, FSDP) belong to their engine's hooks and are left as they are.
            sharded = self.is_deepspeed_enabled or self.is_fsdp_enabled
            with nullcontext() if sharded else frozen_weights_in_autocast_dtype(unwrapped_model):
                trajectories = self.collector.collect(self.environment_pool.take_for(tasks), tasks, generator, groups)
        if isinstance(self.environment_pool, MixedEnvironmentPool):
            for trajectory, task in zip(trajectories, tasks):
                trajectory.environment = task[MixedEnvironmentPool.KEY]
        if self.model.training:
            for phase, seconds in self.collector.last_timing.items():
                self.update_timer.add(phase, seconds)
        self.environment_pool.discard_timed_out(trajectories)
        if self.args.env_timeout is not None:
            self.log_metric("rollout/hung_env_calls", float(hung_calls()), "train" if self.model.training else "eval")
        return trajectories

    def evaluate_episodes(self, tasks, num_episodes: int | None = None, *,
                          temperature: float | None = None) -> dict[str, float]:
        """Play one episode per task (the first ``num_episodes`` rows of ``tasks``) and average the rollout stats.

        Episodes are shared out across processes and the statistics gathered, so every process returns the same
        figures (``success``, ``return``, ``format_error_rate``, ...; see ``rollout.metrics.STAT_NAMES``).
        ``temperature`` samples at another temperature than training's (``0``: greedy decoding).
        """
        count = len(tasks) if num_episodes is None else min(num_episodes, len(tasks))
        rows = [dict(tasks[i]) for i in range(count)]
        local = list(range(self.accelerator.process_index, len(rows), self.accelerator.num_processes))
        sampling = {}
        if temperature is not None:
            if not temperature >= 0:
                raise ValueError(f"temperature must be >= 0 (0 decodes greedily), got {temperature}.")
            config = sampling["generation_config"] = copy.deepcopy(self.generation_config)
            config.do_sample = temperature > 0
            config.temperature = temperature if temperature > 0 else None
        was_training = self.model.training
        self.model.eval()
        trajectories = self.collect_trajectories([rows[i] for i in local], local, **sampling) if local else []
        self.model.train(was_training)
        stats = gather_object([trajectory_stats(t) for t in trajectories])
        if not stats:
            return {name: float("nan") for name in STAT_NAMES}
        return mean_stats(stats)

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        mode = "train" if self.model.training else "eval"
        group_size = self.num_generations if mode == "train" else self.num_generations_eval
        # The sampler repeats each task `group_size` times in a row across the global batch, which processes split
        # in order; a trajectory's group is its global position divided by the group size.
        offset = self.accelerator.process_index * len(inputs)
        groups = [(offset + i) // group_size for i in range(len(inputs))]
        trajectories = self.collect_trajectories(inputs, groups)
        self.last_trajectories = trajectories
        release_free_memory()  # the rollout's KV caches and logits, before the scoring forwards
        if mode == "train":  # fresh rollouts; an evaluation in between must not cancel a pending stop
            self.kl_early_stopping.reset()
            with self.update_timer.phase("scoring"):
                return self.score_trajectories(trajectories, group_size, offset, mode)
        return self.score_trajectories(trajectories, group_size, offset, mode)

    def score_trajectories(
        self, trajectories: list[Trajectory], group_size: int, offset: int, mode: str = "train"
    ) -> dict[str, Any]:
        """Turn this process's trajectories into GRPO's loss inputs: token advantages, masks, old / ref log-probs.

        Returns are gathered from all processes (``offset`` is this process's first global row) for the group
        statistics and the trajectory filter; the critics are applied and, in training, updated here. Under
        ``context_policy="window"`` the loss inputs are one row per turn (``trl_starpo.samples``), while returns,
        advantages and critics keep working on the trajectories' own layout.
        """
        device = self.accelerator.device
        batch = self._trajectory_tensors(trajectories, device)
        segments = batch.pop("segments")
        samples = turn_samples(trajectories) if self.args.context_policy == "window" else None
        if samples is None and any(turn.context_ids is not None for t in trajectories for turn in t.turns):
            raise ValueError("These trajectories were played under context_policy='window' (each turn saw its own "
                             "context); train them with context_policy='window' and the same history_turns.")
        scored = batch if samples is None else self._turn_sample_tensors(samples, mode, device)
        returns = torch.tensor([t.episode_return for t in trajectories], dtype=torch.float32, device=device)
        all_returns = self.accelerator.gather(returns)
        local = slice(offset, offset + len(trajectories))
        weights = torch.ones_like(all_returns)
        if mode == "train":
            weights = trajectory_filter_weights(
                self.args.trajectory_filter,
                all_returns,
                group_size,
                num_std=self.args.filter_num_std,
                keep_fraction=self.args.filter_keep_fraction,
                drop_zero_variance=self.args.filter_drop_zero_variance,
            )
            self._check_filter_kept_successes(trajectories, weights > 0)
        local_weights = weights[local]
        local_keep = local_weights > 0
        model_mask = batch["completion_mask"] * batch["tool_mask"]

        needs_features = self.thinking_critic is not None or (
            self.value_critic is not None and self.value_critic.backbone is None
        )
        logps, hidden = self._scoring_forwards(scored, mode, critic_features=needs_features)
        if samples is not None and hidden is not None:
            hidden = states_in_trajectory_layout(hidden, samples, len(trajectories), batch["completion_ids"].size(1) + 1)
        output = {**scored, **logps}
        all_advantages = group_relative_advantages(all_returns, group_size, scale=self.scale_rewards)
        estimator_batch = AdvantageBatch(
            trajectories, model_mask, all_returns, offset, group_size, keep=local_keep,
            reduce=lambda t: self.accelerator.reduce(t, reduction="sum"), gather=gather_object,
        )
        if self.value_critic is None:
            estimate = ESTIMATORS[self.args.advantage_estimator](estimator_batch, self.estimator_settings)
        else:
            estimate = self._gae_advantages(estimator_batch, batch, hidden, mode)
        for name, value in estimate.metrics.items():
            self._metrics[mode][name].append(value)
        self._record_advantages(trajectories, estimate.advantages, model_mask, local_keep)
        advantages = token_advantages(
            estimate.advantages, segments, thinking_weight=self.args.thinking_loss_weight,
            action_weight=self.args.action_loss_weight,
        )
        if self.thinking_critic is not None:
            thought = thinking_critic_advantages(self.thinking_critic, estimator_batch, hidden, advantages,
                                                 rule=self.args.thinking_scale_rule, train=mode == "train")
            for name, value in thought.metrics.items():
                self._metrics[mode][name].append(value)
            advantages = thought.advantages

        # Filtered-out trajectories keep their rows (equal shapes on every process) but train nothing; a weight
        # between 0 and 1 scales a kept trajectory's advantages.
        advantages = advantages * local_weights.unsqueeze(1)
        row_keep, row_count = local_keep, weights.numel()
        if samples is not None:  # each turn's row takes its trajectory's advantages, weight and filter verdict
            rows, width = scored["completion_ids"].shape
            advantages = per_sample(advantages, samples, rows, width)
            row_keep = per_row(local_keep, samples, rows)
            row_count = self.accelerator.gather(torch.tensor([rows], device=device)).sum()
        output["tool_mask"] = scored["tool_mask"] * row_keep.unsqueeze(1)
        loss_mask = scored["completion_mask"] * output["tool_mask"]
        output["advantages"] = advantages
        output["num_items_in_batch"] = self.accelerator.gather(loss_mask.sum()).sum()
        # TRL's `grpo` and `dr_grpo` losses average over every row of a micro-batch, dropped ones included; this
        # factor (all rows / kept rows) gives the kept rows the update they would get alone.
        num_kept = self.accelerator.gather(row_keep.sum().reshape(1)).sum().clamp(min=1)
        output["kept_rows_scale"] = (row_count / num_kept).to(torch.float32)

        self._metrics[mode]["filter/kept_fraction"].append((weights > 0).float().mean().item())
        self._metrics[mode]["filter/mean_weight"].append(weights.mean().item())
        self._log_rollouts(trajectories, all_returns, all_advantages, group_size, mode)
        return output

    def _check_filter_kept_successes(self, trajectories: list[Trajectory], keep: torch.Tensor) -> None:
        """Warn when a filter dropped every successful trajectory of a batch that had some (the specification's
        batch outlier filter does so on sparse rewards while fewer than ~20% of the rollouts succeed)."""
        success = torch.tensor([bool(t.success) for t in trajectories], device=keep.device)
        all_success = self.accelerator.gather(success)
        dropped_all = bool(all_success.any() and not (all_success & keep).any())
        self._metrics["train"]["filter/dropped_every_success"].append(float(dropped_all))
        if dropped_all:
            logger.warning(
                f"trajectory_filter={self.args.trajectory_filter!r} dropped all {int(all_success.sum())} successful "
                "trajectories of this batch: on sparse rewards a rare success is a statistical outlier. "
                "trajectory_filter='outlier_clip' keeps them with a bounded weight."
            )

    @staticmethod
    def _record_advantages(trajectories, advantages, model_mask, keep) -> None:
        """Note on each trajectory its advantage (per trajectory, or the mean over its model tokens) and whether the
        filter kept it, for the trajectory store and its HTML view."""
        if advantages.dim() == 2:
            advantages = (advantages * model_mask).sum(dim=1) / model_mask.sum(dim=1).clamp(min=1)
        for trajectory, advantage, kept in zip(trajectories, advantages.tolist(), keep.tolist()):
            trajectory.advantage, trajectory.kept = advantage, bool(kept)

    def _gae_advantages(self, estimator_batch: AdvantageBatch, batch, hidden, mode):
        """The critic estimator's advantages from the value critic's estimates; trains the critic on the same batch
        in training mode."""
        critic = self.value_critic
        model_mask = estimator_batch.mask
        features = {
            "shared_hidden": hidden[:, :-1] if hidden is not None else None,
            "input_ids": torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1),
            "attention_mask": torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1),
            "start": batch["prompt_ids"].size(1),
        }
        with torch.no_grad():
            old_values = critic(critic.hidden_states(**features)) * model_mask
        estimator_batch.values = old_values
        estimate = ESTIMATORS[self.args.advantage_estimator](estimator_batch, self.estimator_settings)
        value_targets, trained = estimate.value_targets, estimator_batch.trained

        if mode == "train":
            self._metrics[mode]["critic/value_loss"].append(critic.update(features, old_values, value_targets, trained))
        self._metrics[mode]["critic/explained_variance"].append(explained_variance(old_values, value_targets, trained))
        self._metrics[mode]["critic/value_mean"].append(
            ((old_values * trained).sum() / trained.sum().clamp(min=1)).item()
        )
        return estimate

    def _trajectory_tensors(self, trajectories: list[Trajectory], device) -> dict[str, torch.Tensor]:
        """Pad trajectories into GRPO's prompt / completion layout, with the model-token mask as ``tool_mask`` (an
        episode whose environment failed at reset has no completion: it gets one pad token)."""
        tensors = padded_rows([t.token_ids[: t.prompt_length] for t in trajectories],
                              [t.completion_ids for t in trajectories],
                              [t.completion_segments for t in trajectories],
                              self._tokenizer.pad_token_id, self.pad_to_multiple_of)
        return {key: value.to(device) for key, value in tensors.items()}

    def _turn_sample_tensors(self, samples, mode: str, device) -> dict[str, torch.Tensor]:
        """The turns' loss rows, as many on every process (padding rows train nothing), in training a multiple of
        the micro-batches one generation batch is split into."""
        counts = self.accelerator.gather(torch.tensor([len(samples)], device=device)).tolist()
        multiple = self.args.steps_per_generation if mode == "train" else 1
        tensors = sample_tensors(samples, padded_count(len(samples), multiple, counts), self._tokenizer.pad_token_id,
                                 self.pad_to_multiple_of)
        tensors.pop("segments")
        return {key: value.to(device) for key, value in tensors.items()}

    def _scoring_forwards(
        self, batch: dict[str, torch.Tensor], mode: str, critic_features: bool
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor | None]:
        """The no-grad forwards that score a batch before its update, each run once.

        Returns the old-policy log-probs (when updates happen off the sampling policy) and the reference log-probs
        (``beta > 0``), as GRPO's loss inputs, and, with ``critic_features``, the critics' features: the reference
        model's last hidden states ``(B, T + 1, H)`` from the state before the first completion token to the last
        (``[:, j]`` precedes completion token ``j``). The reference is the policy with its adapter disabled (or its
        ``"ref"`` adapter), or ``ref_model``; its features are read from the reference log-probs' own forward when
        ``beta > 0``, from a forward of their own otherwise, and from the policy when there is no frozen reference
        (full fine-tuning without ``ref_model``). Frozen features also keep a critic's inputs from drifting as the
        policy trains.
        """
        input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
        attention_mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        logits_to_keep = batch["completion_ids"].size(1)
        batch_size = self.args.per_device_train_batch_size if mode == "train" else self.args.per_device_eval_batch_size
        output = {}
        with torch.no_grad(), self._scoring(batch["completion_mask"] * batch["tool_mask"]):
            # As in GRPOTrainer: when an optimizer step does not line up with a generation, later updates are off
            # the sampling policy and need its log-probs for the importance ratio.
            generate_every = self.args.steps_per_generation * self.num_iterations
            if self.args.gradient_accumulation_steps % generate_every != 0:
                output["old_per_token_logps"], _, _ = self._get_per_token_logps_and_entropies(
                    self.model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size
                )
            reference, reference_context = self._reference_model()
            states: list[torch.Tensor] = []
            if self.beta != 0.0 or (critic_features and reference is not None):
                capture = (last_hidden_states(self.accelerator.unwrap_model(reference)) if critic_features
                           else nullcontext(states))
                with reference_context(), capture as states:
                    if self.beta != 0.0:
                        output["ref_per_token_logps"], _, _ = self._get_per_token_logps_and_entropies(
                            reference, input_ids, attention_mask, logits_to_keep, batch_size=batch_size
                        )
                    else:
                        self._forward_for_states(reference, input_ids, attention_mask, batch_size)
            elif critic_features:  # no frozen reference: the policy's own states
                with last_hidden_states(self.accelerator.unwrap_model(self.model)) as states:
                    self._forward_for_states(self.model, input_ids, attention_mask, batch_size)
        hidden = torch.cat(states).float() if critic_features else None
        start = batch["prompt_ids"].size(1) - 1
        return output, (hidden[:, start:] if hidden is not None else None)

    def _reference_model(self):
        """``(model, context)``: the frozen reference to score under ``context()``, or ``(None, ...)`` when there is
        none (full fine-tuning without ``ref_model``)."""
        if self.ref_model is not None:
            return self.ref_model, nullcontext
        model = self.accelerator.unwrap_model(self.model)
        if not hasattr(model, "peft_config"):
            return None, nullcontext
        adapter = "ref" if "ref" in model.peft_config else None
        return self.model, lambda: use_adapter(model, adapter_name=adapter)

    def _forward_for_states(self, model, input_ids, attention_mask, batch_size) -> None:
        """Run ``model`` over the batch for a hook to read its hidden states; its LM head projects only the last
        position."""
        with self.accelerator.autocast():
            for i in range(0, input_ids.size(0), batch_size):
                model(input_ids=input_ids[i : i + batch_size], attention_mask=attention_mask[i : i + batch_size],
                      logits_to_keep=1)

    @contextmanager
    def _scoring(self, positions: torch.Tensor):
        """Within this block, log-probs are computed at ``positions`` (the model tokens) only."""
        self._scored_positions = positions
        try:
            yield
        finally:
            self._scored_positions = None

    def _compute_loss(self, model, inputs):
        start = time.perf_counter()
        try:
            return self._starpo_loss(model, inputs)
        finally:
            if self.model.training:
                self._loss_seconds += time.perf_counter() - start
                self.update_timer.add("loss_forward", time.perf_counter() - start)

    def _starpo_loss(self, model, inputs):
        self._capture_loss_logps = True
        coefficients = self.entropy_coef, self.router_aux_loss_coef
        if "chunk_share" in inputs:  # a chunk of turn rows: TRL's per-token means count with its share of the tokens
            factor = inputs["token_share"] / inputs["chunk_share"] if inputs["chunk_share"] else 0.0
            self.entropy_coef, self.router_aux_loss_coef = (coefficient * factor for coefficient in coefficients)
        mode = "train" if self.model.training else "eval"
        logged = {name: len(self._metrics[mode].get(name, ())) for name in TOKEN_MEAN_METRICS}
        mask = inputs["completion_mask"] * inputs["tool_mask"]
        try:
            with self._scoring(mask):
                loss = super()._compute_loss(model, inputs)
        finally:
            self._capture_loss_logps = False
            self.entropy_coef, self.router_aux_loss_coef = coefficients
        trains_a_token = self.accelerator.reduce(mask.sum().float(), reduction="sum").item() > 0
        if not trains_a_token:
            self._drop_token_means(mode, logged)
        if self.loss_type in ("grpo", "dr_grpo") and "kept_rows_scale" in inputs:
            loss = loss * inputs["kept_rows_scale"]
        if "chunk_share" in inputs:
            loss = loss * inputs["chunk_share"]
        watches_sampling_kl = "old_per_token_logps" in inputs and self.kl_early_stopping.target > 0
        if self.model.training and watches_sampling_kl and trains_a_token:
            kl = sampling_kl(
                self._loss_logps, inputs["old_per_token_logps"], mask, lambda t: self.accelerator.reduce(t, "sum")
            )
            self._metrics["train"]["kl_early_stop/sampling_kl"].append(kl)
            self.kl_early_stopping.observe(kl)
        return loss

    def _drop_token_means(self, mode: str, logged: dict[str, int]) -> None:
        """TRL logs its per-token means (KL, entropy, clip ratios) as 0 for a micro-batch with no trained token (rows
        the trajectory filter dropped, a chunk of padding turn rows); they are made NaN, which its log leaves out, so
        that such a batch does not pull the logged means (and the entropy-collapse detector) towards 0. ``logged``:
        how many values each metric had before the micro-batch."""
        for name, count in logged.items():
            values = self._metrics[mode].get(name, [])
            if len(values) > count:
                values[-1] = float("nan")

    def training_step(self, model, inputs, num_items_in_batch=None):
        start, self._inputs_seconds, self._loss_seconds = time.perf_counter(), 0.0, 0.0
        if self.args.context_policy == "window":
            loss = self._training_step_by_turn_chunks(model, inputs, num_items_in_batch)
        else:
            loss = super().training_step(model, inputs, num_items_in_batch)
        # what is neither making the inputs (rollouts, scoring) nor the forward and loss is the backward pass
        self.update_timer.add("backward", time.perf_counter() - start - self._inputs_seconds - self._loss_seconds)
        self.nonfinite_guard.observe_loss(loss)
        return loss

    def _training_step_by_turn_chunks(self, model, inputs, num_items_in_batch=None):
        """One micro-step on turn rows, ``per_device_train_batch_size`` rows at a time (a backward each), so that its
        memory stays that of a few turns however many turns the episodes had; every process has as many rows, so
        as many chunks."""
        start = time.perf_counter()
        model.train()  # as transformers' training_step does before it prepares the inputs (they depend on the mode)
        if hasattr(self.optimizer, "train") and callable(self.optimizer.train):
            self.optimizer.train()
        batch = self._prepare_inputs(inputs)
        chunks = row_chunks(batch, self.args.per_device_train_batch_size, self.loss_type)
        sync, state, total = self.accelerator.sync_gradients, self.accelerator.gradient_state, None
        for index, chunk in enumerate(chunks):
            last = index == len(chunks) - 1
            # gradients are reduced (and DeepSpeed steps) once, after the last chunk, as after the last micro-step
            state._set_sync_gradients(sync and last)
            self._prepared_chunk = chunk
            try:  # transformers' step (forward, backward) on the chunk; GRPOTrainer's counts micro-steps, below
                with nullcontext() if last else self.accelerator.no_sync(model):
                    loss = Trainer.training_step(self, model, inputs, num_items_in_batch)
            finally:
                self._prepared_chunk = None
                state._set_sync_gradients(sync)
            total = loss if total is None else total + loss
        self._step += 1  # as GRPOTrainer.training_step does once per micro-step
        self._current_train_step_time += time.perf_counter() - start
        if self._step % self.current_gradient_accumulation_steps == 0:
            self._metrics["train"]["step_time"].append(self._current_train_step_time)
            self._current_train_step_time = 0.0
        return total

    def _get_per_token_logps_and_entropies(
        self, model, input_ids, attention_mask, logits_to_keep, batch_size=None, compute_entropy=False,
        compute_aux_loss=False, **multimodal,
    ):
        scored = self._scored_positions
        if scored is None or compute_aux_loss or any(value is not None for value in multimodal.values()):
            logps, entropies, aux_loss = super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, compute_aux_loss,
                **multimodal,
            )
        else:  # observation and template tokens never need a distribution over the vocabulary
            logps, entropies = scored_logps(
                model, input_ids, attention_mask, scored, batch_size=batch_size, compute_entropy=compute_entropy,
                autocast=self.accelerator.autocast,
            )
            aux_loss = None
        if self._capture_loss_logps:
            self._loss_logps = logps.detach()
        return logps, entropies, aux_loss

    def _prepare_inputs(self, generation_batch):
        if self._prepared_chunk is not None:
            return self._prepared_chunk
        if not self.model.training:
            return super()._prepare_inputs(generation_batch)
        # KL early stopping acts between optimizer steps: the rest of the batch's inner updates are skipped and
        # fresh rollouts collected, so no optimizer step is ever taken with an empty gradient.
        window_start = self._step % self.current_gradient_accumulation_steps == 0
        if self.kl_early_stopping.triggered and window_start:
            self.kl_early_stops.append(self.state.global_step)
            self._metrics["train"]["kl_early_stop/stopped"].append(1.0)
            logger.info(
                f"KL early stop at step {self.state.global_step}: sampling KL {self.kl_early_stopping.last_kl:.4f} > "
                f"{self.kl_early_stopping.target}; collecting fresh rollouts."
            )
            self._buffered_inputs = None
        # GRPOTrainer picks a buffered chunk by the global micro-step, which assumes every generation batch started
        # on a multiple of its length. A batch collected early (KL early stop, a monitor rollback, a resume) starts
        # elsewhere, so the micro-step is counted from where the current batch started: its every chunk trains once.
        if self._buffered_inputs is None:
            self._generation_start = self._step
        step = self._step
        self._step = step - self._generation_start
        start = time.perf_counter()
        try:
            return super()._prepare_inputs(generation_batch)
        finally:
            self._step = step
            self._inputs_seconds += time.perf_counter() - start

    def log_metric(self, name: str, value: float, mode: str = "train") -> None:
        """Add ``value`` to the metrics of the next log, averaged with the other values of ``name`` as TRL averages
        its own; for callbacks with statistics of their own (the echo-trap monitor's, for one)."""
        self._metrics[mode][name].append(float(value))

    def restore_checkpoint(self, folder: str, *, lr_factor: float = 1.0) -> None:
        """Restore the policy's weights, the critics and the optimizer state from a checkpoint, mid-training.

        The learning-rate scheduler keeps its position (the current step); its base learning rates and the
        optimizer's current ones are multiplied by ``lr_factor``. Rollouts buffered for later steps are dropped so
        that the restored policy collects its own. A checkpoint without optimizer state keeps the current one.
        """
        optimizer = self.optimizer
        scheduler = getattr(self.lr_scheduler, "scheduler", self.lr_scheduler)  # accelerate may wrap it
        current = [group["lr"] for group in optimizer.param_groups]
        position = scheduler.state_dict() if scheduler is not None else None
        self._load_from_checkpoint(folder)
        if os.path.isfile(os.path.join(folder, "optimizer.pt")):
            self._load_optimizer_and_scheduler(folder)
        else:
            logger.warning(f"{folder} has no optimizer state (save_only_model?); the optimizer state is kept.")
        if scheduler is not None:
            scheduler.load_state_dict(position)
            scheduler.base_lrs = [lr * lr_factor for lr in scheduler.base_lrs]
            if hasattr(scheduler, "_last_lr"):
                scheduler._last_lr = [lr * lr_factor for lr in current]
        for group, lr in zip(optimizer.param_groups, current):
            group["lr"] = lr * lr_factor
        self._buffered_inputs = None
        self.kl_early_stopping.reset()

    def _critics(self) -> dict[str, torch.nn.Module]:
        return {name: critic for name, critic in (("value_critic", self.value_critic), ("thinking_critic", self.thinking_critic)) if critic is not None}

    def _save_checkpoint(self, model, trial):
        # Whole or ignored (trl_starpo/checkpoints.py): a folder an interrupted run left at this step goes first, and
        # older checkpoints are rotated out only once this one is sealed.
        folder = os.path.join(self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
        self.last_checkpoint_folder = folder  # what the seal marks whole
        if self.accelerator.is_main_process:
            clear_checkpoint_folder(folder)
        self.accelerator.wait_for_everyone()
        limit, self.args.save_total_limit = self.args.save_total_limit, None
        try:
            super()._save_checkpoint(model, trial)
        finally:
            self.args.save_total_limit = limit
        if self.accelerator.is_main_process:
            if os.path.isfile(os.path.join(folder, TRAINING_ARGS_NAME)):  # written while the limit was lifted
                torch.save(self.args, os.path.join(folder, TRAINING_ARGS_NAME))
            if self._critics():
                save_critics(self._critics(), folder)

    def add_callback(self, callback):
        """``Trainer.add_callback``, keeping the checkpoint seal last: it marks a checkpoint whole once every other
        callback has written its part."""
        super().add_callback(callback)
        seal = getattr(self, "checkpoint_seal", None)
        if seal is not None and callback is not seal and seal in self.callback_handler.callbacks:
            self.callback_handler.remove_callback(seal)
            self.callback_handler.add_callback(seal)

    def _load_from_checkpoint(self, resume_from_checkpoint, model=None):
        super()._load_from_checkpoint(resume_from_checkpoint, model)
        load_critics(self._critics(), resume_from_checkpoint)

    # A resumed run continues exactly as the uninterrupted one: see trl_starpo/resume.py.
    def _get_train_sampler(self, dataset=None):
        return EpochSeededSampler(super()._get_train_sampler(dataset), seed=self.args.seed)

    def _save_rng_state(self, output_dir):
        super()._save_rng_state(output_dir)
        save_rollout_state(self, output_dir)

    def _load_rng_state(self, checkpoint):
        super()._load_rng_state(checkpoint)
        if checkpoint is not None:
            load_rollout_state(self, checkpoint)

    def _log_rollouts(self, trajectories, all_returns, all_advantages, group_size: int, mode: str) -> None:
        device = self.accelerator.device
        stats = torch.tensor([trajectory_stats(t) for t in trajectories], dtype=torch.float32, device=device)
        all_stats = self.accelerator.gather(stats)
        means = [(all_stats[:, i].nanmean() if name in PER_ACTION else all_stats[:, i].mean()).item()
                 for i, name in enumerate(STAT_NAMES)]  # a trajectory that sent no action has no validity
        for name, column in zip(STAT_NAMES, means):
            self._metrics[mode][f"rollout/{name}"].append(column)
        group_std = all_returns.view(-1, group_size).std(dim=1) if group_size > 1 else torch.zeros(1)
        self._metrics[mode]["reward"].append(all_returns.mean().item())
        self._metrics[mode]["reward_std"].append(all_returns.std().item() if all_returns.numel() > 1 else 0.0)
        self._metrics[mode]["rollout/group_return_std"].append(group_std.mean().item())
        self._metrics[mode]["frac_reward_zero_std"].append((group_std < 1e-6).float().mean().item())

        if self.log_completions:
            tokenizer = self._tokenizer
            prompts = [tokenizer.decode(t.token_ids[: t.prompt_length]) for t in trajectories]
            completions = [tokenizer.decode(t.completion_ids) for t in trajectories]
            self._logs["prompt"].extend(gather_object(prompts))
            self._logs["completion"].extend(gather_object(completions))
            self._logs["rewards"]["episode_return"].extend(all_returns.tolist())
            self._logs["advantages"].extend(all_advantages.tolist())
