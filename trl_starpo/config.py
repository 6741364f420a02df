"""``StarPOConfig``: ``GRPOConfig`` plus the multi-turn rollout and loss-weighting fields of StarPO."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from trl import GRPOConfig

SUPPORTED_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")


@dataclass
class StarPOConfig(GRPOConfig):
    r"""
    Configuration for [`StarPOTrainer`]: every [`~trl.GRPOConfig`] field, plus the fields below.

    A trajectory is one episode of up to `max_turns` turns. Each turn the model answers
    `<think>…</think><answer>…</answer>`; the answer holds up to `max_actions_per_turn` actions separated by
    `action_separator`. `num_generations` trajectories are collected per task (the group), and each trajectory's
    return is normalized within its group (`scale_rewards` as in GRPO) to give its advantage, which is applied to
    every token the model generated in that trajectory. Environment and chat-template tokens are masked out of the
    loss and of the token count.

    `max_completion_length` is derived: it is set to `max_context_length`.
    """

    max_turns: int = field(default=5, metadata={"help": "Turns per episode before it is truncated."})
    max_actions_per_turn: int = field(
        default=2, metadata={"help": "Actions one answer may hold; extra actions are dropped and counted."}
    )
    max_actions_per_trajectory: int | None = field(
        default=10,
        metadata={"help": "Actions sent to the environment per episode; `None` means max_turns * max_actions_per_turn."},
    )
    max_tokens_per_turn: int = field(default=128, metadata={"help": "New tokens the model may generate per turn."})
    max_context_length: int = field(
        default=2048,
        metadata={"help": "Tokens per trajectory, prompt included; a trajectory that reaches it is truncated."},
    )
    enable_thinking: bool = field(
        default=True, metadata={"help": "Ask for <think>…</think> before <answer>…</answer>."}
    )
    prefill_opening_tag: bool = field(
        default=True,
        metadata={
            "help": "Start every response with <think> (<answer> without thinking) as prompt tokens; small models "
            "rarely open the format on their own."
        },
    )
    format_penalty: float = field(
        default=-0.1, metadata={"help": "Reward added to a turn whose response is malformed (should be <= 0)."}
    )
    action_separator: str = field(default="||", metadata={"help": "Separator between actions in one answer."})
    thinking_loss_weight: float = field(
        default=1.0, metadata={"help": "Weight of the loss on thinking tokens (generated up to </think>)."}
    )
    action_loss_weight: float = field(
        default=1.0, metadata={"help": "Weight of the loss on action tokens (every other generated token)."}
    )
    environment_kwargs: dict | str | None = field(
        default=None, metadata={"help": "Keyword arguments for the environment's `load_environment`."}
    )

    def __post_init__(self):
        self.max_completion_length = self.max_context_length
        if not torch.accelerator.is_available():
            # Without an accelerator, transformers only sets up the process group that `accelerate launch` started
            # (several CPU processes over gloo) when use_cpu is on; and it refuses TRL's default bf16 there.
            self.use_cpu = True
            if self.bf16 is None and not self.fp16:
                self.bf16 = False
        super().__post_init__()
        self._validate_starpo_fields()

    def _validate_starpo_fields(self) -> None:
        positive = ("max_turns", "max_actions_per_turn", "max_tokens_per_turn", "max_context_length")
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}.")
        if self.max_actions_per_trajectory is not None and self.max_actions_per_trajectory < 1:
            raise ValueError(
                f"max_actions_per_trajectory must be at least 1 (or None), got {self.max_actions_per_trajectory}."
            )
        if self.max_context_length <= self.max_tokens_per_turn:
            raise ValueError(
                f"max_context_length ({self.max_context_length}) must exceed max_tokens_per_turn "
                f"({self.max_tokens_per_turn}) to leave room for the prompt; raise max_context_length."
            )
        if self.format_penalty > 0:
            raise ValueError(f"format_penalty must be <= 0 (a penalty), got {self.format_penalty}.")
        if not self.action_separator:
            raise ValueError("action_separator must be a non-empty string, for example '||'.")
        if min(self.thinking_loss_weight, self.action_loss_weight) < 0:
            raise ValueError("thinking_loss_weight and action_loss_weight must be >= 0.")
        if self.thinking_loss_weight == 0 and self.action_loss_weight == 0:
            raise ValueError("thinking_loss_weight and action_loss_weight are both 0: nothing would be trained.")
        if self.loss_type not in SUPPORTED_LOSS_TYPES:
            raise ValueError(
                f"loss_type={self.loss_type!r} is not supported by StarPOTrainer; use one of {SUPPORTED_LOSS_TYPES}."
            )
        if self.use_vllm:
            raise ValueError("use_vllm=True is not supported by StarPOTrainer yet; set use_vllm=False.")
        if self.importance_sampling_level != "token":
            raise ValueError(
                "StarPOTrainer weights thinking and action tokens separately, which needs "
                "importance_sampling_level='token'."
            )
