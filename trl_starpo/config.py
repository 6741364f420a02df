"""``StarPOConfig``: ``GRPOConfig`` plus the multi-turn rollout and loss-weighting fields of StarPO."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field, fields

import torch
from trl import GRPOConfig

from .algorithms.critics import THINKING_SCALE_RULES
from .algorithms.estimators import CRITIC_ESTIMATORS, ESTIMATORS
from .algorithms.filtering import FILTERS
from .field_checks import check_field_values
from .rollout.settings import CONTEXT_POLICY_HELP, HISTORY_THINKING_HELP, HISTORY_TURNS_HELP, RolloutSettings
from .presets import PRESETS
from .store import DEFAULT_CAPACITY

SUPPORTED_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")
ADVANTAGE_ESTIMATORS = tuple(ESTIMATORS)
MONITOR_ACTIONS = ("off", "warn", "stop", "rollback")

logger = logging.getLogger(__name__)

_PARENT_FIELDS = {f.name: f for f in fields(GRPOConfig)}
# Values of the preset-controlled fields when neither the user nor a preset sets them.
_FALLBACKS = {
    **{
        name: _PARENT_FIELDS[name].default
        for name in (
            "beta", "epsilon", "epsilon_high", "entropy_coef", "max_grad_norm", "warmup_steps", "scale_rewards"
        )
    },
    "trajectory_filter": "none",
    "advantage_estimator": "group",
    "thinking_critic": False,
    "thinking_scale_rule": "multiplicative",
    "kl_early_stop": 0.0,
}


def cpu_computes_bf16() -> bool:
    """Whether this CPU does bfloat16 arithmetic in hardware (AVX512-BF16 or AMX, as oneDNN reports it).

    Without it torch emulates bf16: a 2048 x 2048 matmul ran at 0.3 GFLOP/s against fp32's 85 on a 2-core AVX2 EPYC,
    where the bf16-capable CPU of DESIGN.md runs bf16 at about twice its fp32 speed (400 against 190 GFLOP/s).
    """
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a torch built without oneDNN
        return False


def apply_cpu_defaults(config) -> None:
    """Make a TRL config usable without an accelerator; called before its ``TrainingArguments.__post_init__``.

    Without one, transformers only sets up the process group that ``accelerate launch`` started (several CPU
    processes over gloo) when ``use_cpu`` is on, and it refuses TRL's default bf16. ``bf16=True`` (bf16 autocast,
    which the CPU recipes ask for) is kept only where the CPU computes bf16 in hardware: elsewhere its matmuls are
    emulated (an SFT step of the HotPotQA warm start took 363 s against fp32's 30 s), so it falls back to fp32 with a
    warning.
    """
    if not torch.accelerator.is_available():
        config.use_cpu = True
        if config.bf16 is None and not config.fp16:
            config.bf16 = False
        if config.bf16 and not cpu_computes_bf16():
            logger.warning(
                "bf16=True, but this CPU has no bfloat16 arithmetic (no AVX512-BF16 or AMX), where torch emulates it "
                "hundreds of times slower than fp32: training in fp32 instead."
            )
            config.bf16 = False


def carry_checkpointing_fields(config) -> None:
    """Give ``activation_checkpointing(_kwargs)`` the values of ``gradient_checkpointing(_kwargs)`` where unset;
    called before ``TrainingArguments.__post_init__``.

    TRL's configs still set ``gradient_checkpointing`` (``True`` by default), the name transformers deprecated for
    ``activation_checkpointing``, so every config would warn about a field its user never touched.
    """
    for old, new in (("gradient_checkpointing", "activation_checkpointing"),
                     ("gradient_checkpointing_kwargs", "activation_checkpointing_kwargs")):
        if hasattr(config, new) and getattr(config, new) is None:
            setattr(config, new, getattr(config, old))


def parse_environment_kwargs(value: dict | str | None) -> dict | None:
    """``environment_kwargs`` as a dict: YAML gives one, the command line a JSON string."""
    if not isinstance(value, str):
        return value
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as error:
        raise ValueError(f"environment_kwargs must be a JSON object, got {value!r}: {error}") from error
    if not isinstance(parsed, dict):
        raise ValueError(f"environment_kwargs must be a JSON object, got {value!r}.")
    return parsed


def _preset_controlled(name: str):
    """Re-declare an inherited field with default ``None`` ("not set"), so a preset can tell it was not set."""
    parent = _PARENT_FIELDS[name]
    help_text = parent.metadata.get("help", "")
    return field(
        default=None, metadata={"help": f"{help_text} Default: the preset's value, else {parent.default!r}."}
    )


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

    `preset` names a set of values for the StarPO-S fields and for `beta`, `epsilon`, `epsilon_high`,
    `entropy_coef`, `max_grad_norm`, `warmup_steps` and `scale_rewards` (see `trl_starpo.presets.PRESETS` and
    docs/algorithms.md); any of these fields set explicitly wins over the preset. Without a preset they take TRL's defaults and the
    plain StarPO estimator.
    """

    preset: str | None = field(
        default=None, metadata={"help": f"A named set of field values: one of {sorted(PRESETS)}."}
    )
    beta: float | None = _preset_controlled("beta")
    epsilon: float | None = _preset_controlled("epsilon")
    epsilon_high: float | None = _preset_controlled("epsilon_high")
    entropy_coef: float | None = _preset_controlled("entropy_coef")
    max_grad_norm: float | None = _preset_controlled("max_grad_norm")
    warmup_steps: float | None = _preset_controlled("warmup_steps")
    scale_rewards: str | None = _preset_controlled("scale_rewards")

    trajectory_filter: str | None = field(
        default=None,
        metadata={
            "help": f"Which trajectories train: one of {FILTERS}. 'outlier_clip' keeps every trajectory but caps its "
            "weight at filter_num_std / |z|, z its return's distance from its group mean in group standard "
            "deviations (rare successes keep part of their credit); 'outlier' is the specification's filter as "
            "written: it drops returns beyond filter_num_std standard deviations of the batch mean (on sparse 0/1 "
            "rewards, every success while under about a fifth of the batch succeed); 'variance' keeps the "
            "filter_keep_fraction of task groups whose returns vary most (RAGEN). Default: the preset's, else 'none'."
        },
    )
    filter_num_std: float = field(
        default=2.0, metadata={"help": "Band of the 'outlier' and 'outlier_clip' filters, in standard deviations."}
    )
    filter_keep_fraction: float = field(
        default=0.25, metadata={"help": "Fraction of task groups the 'variance' filter keeps, in (0, 1]."}
    )
    filter_drop_zero_variance: bool = field(
        default=False, metadata={"help": "The 'variance' filter also drops groups whose returns are all equal."}
    )
    advantage_estimator: str | None = field(
        default=None,
        metadata={
            "help": f"One of {ADVANTAGE_ESTIMATORS}: 'group' is StarPO's group-relative return; 'gae' is token-level "
            "GAE over model tokens with a value critic; 'turn_gae' is GAE over turns (gae_gamma discounts turns), "
            "spread over each turn's tokens; 'gigpo' adds to the group-relative return a step-level advantage over "
            "the turns that start from the same state (GiGPO). Default: the preset's, else 'group'."
        },
    )
    gae_gamma: float = field(default=1.0, metadata={"help": "GAE discount (per token, or per turn for turn_gae)."})
    gae_lambda: float = field(default=1.0, metadata={"help": "GAE lambda."})
    gigpo_step_weight: float = field(
        default=1.0, metadata={"help": "GiGPO: weight of the step-level advantage added to the episode-level one."}
    )
    gigpo_gamma: float = field(
        default=0.95,
        metadata={"help": "GiGPO: discount per environment action of later rewards in a turn's step return."},
    )
    gigpo_step_std: bool = field(
        default=False,
        metadata={"help": "GiGPO: divide step advantages by their step group's std (verl-agent's mean_std_norm)."},
    )
    value_model: str | None = field(
        default=None,
        metadata={
            "help": "A separate critic backbone (model id or path) for GAE; by default the value head reads the "
            "policy's own hidden states."
        },
    )
    value_clip_range: float = field(default=0.5, metadata={"help": "Clip range of the value loss."})
    critic_learning_rate: float = field(
        default=1e-3,
        metadata={"help": "Adam learning rate of the critics (lower it, e.g. to 1e-5, with a separate value_model)."},
    )
    thinking_critic: bool | None = field(
        default=None,
        metadata={
            "help": "Scale each turn's advantages by s = sigmoid(score) of a learned thinking-quality critic "
            "(see thinking_scale_rule). Default: the preset's, else False."
        },
    )
    thinking_scale_rule: str | None = field(
        default=None,
        metadata={
            "help": f"How the thinking critic's scale s applies, one of {THINKING_SCALE_RULES}: 'multiplicative' is "
            "the specification's A * s; 'sign_aware' gives A * s to positive advantages and A * (2 - s) to negative "
            "ones (poor thinking shrinks credit and never shrinks blame); 'relative' is 'sign_aware' with s taken "
            "over the batch's mean scale, capped at 1. Default: the preset's, else 'multiplicative'."
        },
    )
    kl_early_stop: float | None = field(
        default=None,
        metadata={
            "help": "Stop the inner updates on a generation batch once KL(sampling policy || current policy) per "
            "token exceeds this, and collect fresh rollouts (0 disables; acts when num_iterations > 1 or "
            "steps_per_generation > gradient_accumulation_steps). Default: the preset's, else 0."
        },
    )

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
        metadata={
            "help": "Tokens per trajectory, prompt included (under context_policy='window', per turn: its context and "
            "response); a trajectory ends (truncation='context') before a turn that would not have max_tokens_per_turn "
            "tokens of room left, rather than play it cut short."
        },
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
    context_policy: str = field(default="full", metadata={"help": CONTEXT_POLICY_HELP})
    history_turns: int = field(default=2, metadata={"help": HISTORY_TURNS_HELP})
    history_thinking: bool = field(default=False, metadata={"help": HISTORY_THINKING_HELP})
    format_penalty: float = field(
        default=-0.1, metadata={"help": "Reward added to a turn whose response is malformed (should be <= 0)."}
    )
    invalid_action_penalty: float | None = field(
        default=None,
        metadata={
            "help": "Reward added to a turn in which the environment reports an action invalid (<= 0). Default: "
            "format_penalty, as in RAGEN, so that a well-formed answer naming no action never beats trying one; set "
            "it (e.g. 0) for an environment whose own reward already punishes invalid actions."
        },
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
    env_timeout: float | None = field(
        default=None,
        metadata={
            "help": "Seconds one environment reset or step may take; a call that takes longer ends its trajectory "
            "as 'env_timeout' and its environment is replaced. A turn's steps then run in the batch's environments "
            "side by side, in worker threads. None: no limit, steps run one after the other."
        },
    )

    save_trajectories: bool = field(
        default=True,
        metadata={
            "help": "Keep every step's trajectories in a store (a `datasets` dataset), saved into each checkpoint and "
            "into output_dir/trajectories at the end of training."
        },
    )
    trajectory_capacity: int = field(
        default=DEFAULT_CAPACITY, metadata={"help": "Trajectories the store keeps (the oldest are dropped first)."}
    )
    html_sample: int = field(
        default=16,
        metadata={
            "help": "About this many trajectories, whole task groups, sampled from the store into "
            "output_dir/trajectories.html at the end (0: none)."
        },
    )
    save_agent_files: bool = field(
        default=True,
        metadata={
            "help": "Write starpo_agent.json into each checkpoint and, at the end of training, starpo_agent.json, "
            "learning_curves.png, trainer_state.json and the agent's model card README.md into output_dir."
        },
    )
    monitor: str = field(
        default="off",
        metadata={
            "help": f"The echo-trap monitor, one of {MONITOR_ACTIONS}: 'warn' logs the monitor/* metrics and warns "
            "when a collapse is detected, 'stop' also stops training, 'rollback' restores the best checkpoint so far "
            "with a lower learning rate; 'off' adds nothing. The recipes default to 'warn' (docs/monitoring.md)."
        },
    )

    def __post_init__(self):
        if self.thinking_critic is True and self.enable_thinking is False:  # set by the user, not by a preset
            raise ValueError(
                "thinking_critic=True scores the <think> text, but enable_thinking=False asks for answers only: "
                "enable thinking or switch the thinking critic off."
            )
        self._apply_preset()
        check_field_values(self)
        if self.invalid_action_penalty is None:
            self.invalid_action_penalty = self.format_penalty
        if not self.enable_thinking:
            self.thinking_critic = False  # a preset's thinking critic has nothing to score in answer-only turns
        self.max_completion_length = self.max_context_length
        self.environment_kwargs = parse_environment_kwargs(self.environment_kwargs)
        self._validate_sampling_and_batch_fields()  # before GRPOConfig's, which divides by some of them
        apply_cpu_defaults(self)
        carry_checkpointing_fields(self)
        super().__post_init__()
        self._validate_starpo_fields()

    def _apply_preset(self) -> None:
        if self.preset is not None and self.preset not in PRESETS:
            raise ValueError(f"Unknown preset {self.preset!r}; choose one of {sorted(PRESETS)} or leave it unset.")
        values = {**_FALLBACKS, **PRESETS.get(self.preset, {})}
        self.preset_filled = set()  # the fields the user left to the preset (or the fallback): not their choice
        for name, value in values.items():
            if getattr(self, name) is None:
                setattr(self, name, value)
                self.preset_filled.add(name)

    def _validate_sampling_and_batch_fields(self) -> None:
        if self.temperature <= 0:
            raise ValueError(
                f"temperature must be > 0, got {self.temperature}: rollouts are sampled, and greedy ones make every "
                "trajectory of a group alike, with nothing to learn from; use e.g. temperature=1.0."
            )
        for name in ("per_device_train_batch_size", "gradient_accumulation_steps", "num_iterations"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}.")
        for name in ("steps_per_generation", "generation_batch_size", "num_generations_eval"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1 (or None), got {getattr(self, name)}.")
        if self.num_generations < 2:
            raise ValueError(
                f"num_generations must be at least 2, got {self.num_generations}: advantages compare the "
                "trajectories of a group."
            )

    def _validate_starpo_fields(self) -> None:
        RolloutSettings.from_config(self)  # validates the episode limits and the answer format
        if min(self.thinking_loss_weight, self.action_loss_weight) < 0:
            raise ValueError("thinking_loss_weight and action_loss_weight must be >= 0.")
        if self.thinking_loss_weight == 0 and self.action_loss_weight == 0:
            raise ValueError("thinking_loss_weight and action_loss_weight are both 0: nothing would be trained.")
        if self.loss_type not in SUPPORTED_LOSS_TYPES:
            raise ValueError(
                f"loss_type={self.loss_type!r} is not supported by StarPOTrainer; use one of {SUPPORTED_LOSS_TYPES}."
            )
        if self.monitor not in MONITOR_ACTIONS:
            raise ValueError(f"monitor must be one of {MONITOR_ACTIONS}, got {self.monitor!r}.")
        if self.trajectory_capacity < 1 or self.html_sample < 0:
            raise ValueError(
                f"trajectory_capacity must be >= 1 and html_sample >= 0, got {self.trajectory_capacity} and "
                f"{self.html_sample}; switch the store off with save_trajectories=False."
            )
        if self.use_vllm:
            raise ValueError("use_vllm=True is not supported by StarPOTrainer yet; set use_vllm=False.")
        self._validate_stabilization_fields()
        if self.importance_sampling_level != "token":
            raise ValueError(
                "StarPOTrainer weights thinking and action tokens separately, which needs "
                "importance_sampling_level='token'."
            )

    def _validate_stabilization_fields(self) -> None:
        if self.trajectory_filter not in FILTERS:
            raise ValueError(f"trajectory_filter must be one of {FILTERS}, got {self.trajectory_filter!r}.")
        if self.filter_num_std <= 0:
            raise ValueError(f"filter_num_std must be > 0, got {self.filter_num_std}.")
        if not 0 < self.filter_keep_fraction <= 1:
            raise ValueError(f"filter_keep_fraction must be in (0, 1], got {self.filter_keep_fraction}.")
        if self.advantage_estimator not in ADVANTAGE_ESTIMATORS:
            raise ValueError(
                f"advantage_estimator must be one of {ADVANTAGE_ESTIMATORS}, got {self.advantage_estimator!r}."
            )
        if self.use_adaptive_entropy and self.context_policy == "window":
            raise ValueError(
                "use_adaptive_entropy steps the entropy coefficient inside the loss, which context_policy='window' "
                "computes a few turn rows at a time: set a fixed entropy_coef, or use context_policy='full'."
            )
        if self.value_model is not None and self.context_policy == "window":
            raise ValueError(
                "value_model (a critic with its own backbone) reads whole trajectories, but context_policy='window' "
                "trains each turn from its own context: drop value_model (the value critic then reads the policy's "
                "hidden states of each turn) or use context_policy='full'."
            )
        if self.value_model is not None and self.advantage_estimator not in CRITIC_ESTIMATORS:
            raise ValueError(
                f"value_model is set but advantage_estimator={self.advantage_estimator!r} uses no value critic; set "
                "advantage_estimator='gae' (or 'turn_gae'), or drop value_model."
            )
        if self.gigpo_step_weight < 0:
            raise ValueError(f"gigpo_step_weight must be >= 0, got {self.gigpo_step_weight}.")
        for name in ("gae_gamma", "gae_lambda", "gigpo_gamma"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}.")
        if self.value_clip_range <= 0 or self.critic_learning_rate <= 0:
            raise ValueError("value_clip_range and critic_learning_rate must be > 0.")
        if self.thinking_scale_rule not in THINKING_SCALE_RULES:
            raise ValueError(
                f"thinking_scale_rule must be one of {THINKING_SCALE_RULES}, got {self.thinking_scale_rule!r}."
            )
        if self.kl_early_stop < 0:
            raise ValueError(f"kl_early_stop must be >= 0 (0 disables it), got {self.kl_early_stop}.")
