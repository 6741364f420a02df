"""``StarPOTrainer``: GRPOTrainer whose samples are whole multi-turn episodes.

GRPOTrainer supplies the clipped policy-gradient loss, the KL term, the inner iterations over one generation
batch, gradient accumulation, PEFT and distributed training. This class replaces how a generation batch is made:
it plays episodes in the environment with ``RolloutCollector``, scores each by its return, computes StarPO's
group-relative advantages across all processes, and hands GRPO's loss one "completion" per trajectory (everything
after the first prompt) in which only the model's own tokens are trained.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from accelerate.utils import gather_object
from trl import GRPOTrainer
from trl.models import unwrap_model_for_generation
from trl.trainer.utils import pad, use_adapter

from .algorithms.advantages import group_relative_advantages, token_advantages
from .config import StarPOConfig
from .envs import Environment, load_environment, load_tasks
from .rollout.collector import RolloutCollector
from .rollout.generation import CachedTransformersGenerator
from .rollout.parsing import ANSWER_CLOSE
from .rollout.metrics import STAT_NAMES, trajectory_stats
from .trajectory import MODEL_SEGMENTS, Segment, Trajectory


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


def episode_return(prompts=None, completions=None, *, episode_return: list[float], **kwargs) -> list[float]:
    """StarPO's reward: a trajectory's episode return, the sum of its turns' rewards (format penalties included).

    Registered as GRPOTrainer's reward function so that TRL's reward logging and completion tables name it; the
    returns themselves come from the rollout collector.
    """
    return list(episode_return)


class StarPOTrainer(GRPOTrainer):
    """Train an LLM agent on whole multi-turn trajectories with StarPO.

    Args:
        model: A model id or path, or a loaded causal LM (as for `GRPOTrainer`).
        environment: The name of an installed environment (see `trl_starpo.list_environments()`) or a
            zero-argument callable returning a new `Environment`.
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

    def __init__(
        self,
        model,
        environment: str | Callable[[], Environment],
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
        self.environment_factory = _environment_factory(environment, args.environment_kwargs)
        if train_dataset is None:
            if not isinstance(environment, str):
                raise ValueError("Pass train_dataset (the task instances) when environment is a factory.")
            train_dataset = load_tasks(environment, split="train")
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
        self._environments: list[Environment] = []
        self.last_trajectories: list[Trajectory] = []

    def _environment_pool(self, size: int) -> list[Environment]:
        """Environments are reused across batches; a batch of ``size`` episodes uses the first ``size``."""
        while len(self._environments) < size:
            self._environments.append(self.environment_factory())
        return self._environments[:size]

    def collect_trajectories(self, tasks: list[dict[str, Any]], groups: list[int]) -> list[Trajectory]:
        """Play one episode per task row with the current policy."""
        with (
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
                generation_config=self.generation_config,
                stop_strings=[ANSWER_CLOSE],  # nothing after </answer> is used, so it is not generated
                tokenizer=self._tokenizer,
            )
            return self.collector.collect(self._environment_pool(len(tasks)), tasks, generator, groups)

    def evaluate_episodes(self, tasks, num_episodes: int | None = None) -> dict[str, float]:
        """Play one episode per task (the first ``num_episodes`` rows of ``tasks``) and average the rollout stats.

        Episodes are shared out across processes and the statistics gathered, so every process returns the same
        figures (``success``, ``return``, ``format_error_rate``, ...; see ``rollout.metrics.STAT_NAMES``).
        """
        count = len(tasks) if num_episodes is None else min(num_episodes, len(tasks))
        rows = [dict(tasks[i]) for i in range(count)]
        local = list(range(self.accelerator.process_index, len(rows), self.accelerator.num_processes))
        was_training = self.model.training
        self.model.eval()
        trajectories = self.collect_trajectories([rows[i] for i in local], local) if local else []
        self.model.train(was_training)
        stats = gather_object([trajectory_stats(t) for t in trajectories])
        if not stats:
            return {name: float("nan") for name in STAT_NAMES}
        return {name: sum(column) / len(column) for name, column in zip(STAT_NAMES, zip(*stats))}

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        device = self.accelerator.device
        mode = "train" if self.model.training else "eval"
        group_size = self.num_generations if mode == "train" else self.num_generations_eval
        # The sampler repeats each task `group_size` times in a row across the global batch, which processes split
        # in order; a trajectory's group is its global position divided by the group size.
        offset = self.accelerator.process_index * len(inputs)
        groups = [(offset + i) // group_size for i in range(len(inputs))]
        trajectories = self.collect_trajectories(inputs, groups)
        self.last_trajectories = trajectories

        batch = self._trajectory_tensors(trajectories, device)
        returns = torch.tensor([t.episode_return for t in trajectories], dtype=torch.float32, device=device)
        all_returns = self.accelerator.gather(returns)
        all_advantages = group_relative_advantages(all_returns, group_size, scale=self.scale_rewards)
        local = slice(offset, offset + len(inputs))
        advantages = token_advantages(
            all_advantages[local],
            batch.pop("segments"),
            thinking_weight=self.args.thinking_loss_weight,
            action_weight=self.args.action_loss_weight,
        )
        loss_mask = batch["completion_mask"] * batch["tool_mask"]
        output = {**batch, "advantages": advantages, "num_items_in_batch": self.accelerator.gather(loss_mask.sum()).sum()}
        output.update(self._policy_logps(batch, mode))

        self._log_rollouts(trajectories, all_returns, all_advantages, group_size, mode)
        return output

    def _trajectory_tensors(self, trajectories: list[Trajectory], device) -> dict[str, torch.Tensor]:
        """Pad trajectories into GRPO's prompt / completion layout, with the model-token mask as ``tool_mask``."""
        pad_id = self._tokenizer.pad_token_id
        prompts = [torch.tensor(t.token_ids[: t.prompt_length], dtype=torch.long) for t in trajectories]
        # An episode whose environment failed at reset has no completion; one pad token keeps the shapes valid.
        completions = [torch.tensor(t.completion_ids or [pad_id], dtype=torch.long) for t in trajectories]
        segments = [
            torch.tensor(t.completion_segments or [int(Segment.TEMPLATE)], dtype=torch.long) for t in trajectories
        ]
        model_token = torch.tensor([int(s) for s in MODEL_SEGMENTS])
        multiple = self.pad_to_multiple_of
        tensors = {
            "prompt_ids": pad(prompts, padding_value=pad_id, padding_side="left", pad_to_multiple_of=multiple),
            "prompt_mask": pad(
                [torch.ones_like(p) for p in prompts], padding_value=0, padding_side="left", pad_to_multiple_of=multiple
            ),
            "completion_ids": pad(completions, padding_value=pad_id, padding_side="right", pad_to_multiple_of=multiple),
            "completion_mask": pad(
                [torch.ones_like(c) for c in completions], padding_value=0, padding_side="right", pad_to_multiple_of=multiple
            ),
            "segments": pad(
                segments, padding_value=int(Segment.TEMPLATE), padding_side="right", pad_to_multiple_of=multiple
            ),
        }
        tensors["tool_mask"] = torch.isin(tensors["segments"], model_token).long()
        return {key: value.to(device) for key, value in tensors.items()}

    def _policy_logps(self, batch: dict[str, torch.Tensor], mode: str) -> dict[str, torch.Tensor]:
        """The old-policy log-probs (when updates happen off the sampling policy) and reference log-probs (beta > 0)."""
        input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
        attention_mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        logits_to_keep = batch["completion_ids"].size(1)
        batch_size = self.args.per_device_train_batch_size if mode == "train" else self.args.per_device_eval_batch_size
        output = {}
        with torch.no_grad():
            # As in GRPOTrainer: when an optimizer step does not line up with a generation, later updates are off
            # the sampling policy and need its log-probs for the importance ratio.
            generate_every = self.args.steps_per_generation * self.num_iterations
            if self.args.gradient_accumulation_steps % generate_every != 0:
                output["old_per_token_logps"], _, _ = self._get_per_token_logps_and_entropies(
                    self.model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size
                )
            if self.beta != 0.0:
                if self.ref_model is not None:
                    ref, _, _ = self._get_per_token_logps_and_entropies(
                        self.ref_model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size
                    )
                else:  # a PEFT adapter: the base model (or the adapter's initial copy) is the reference
                    model = self.accelerator.unwrap_model(self.model)
                    with use_adapter(model, adapter_name="ref" if "ref" in model.peft_config else None):
                        ref, _, _ = self._get_per_token_logps_and_entropies(
                            self.model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size
                        )
                output["ref_per_token_logps"] = ref
        return output

    def _log_rollouts(self, trajectories, all_returns, all_advantages, group_size: int, mode: str) -> None:
        device = self.accelerator.device
        stats = torch.tensor([trajectory_stats(t) for t in trajectories], dtype=torch.float32, device=device)
        all_stats = self.accelerator.gather(stats)
        for name, column in zip(STAT_NAMES, all_stats.mean(dim=0).tolist()):
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
