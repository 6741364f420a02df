"""The columns and their protocol: every number a run depends on, and the key that names a setting."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENTRY = ROOT / "benchmarks" / "learning.py"  # the command line every run and printed command uses
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
DPO_PAIRINGS = ("best_worst", "expert")  # trl_starpo.dpo.PAIRINGS (a test keeps the two equal)
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
    eval_temperature: float | None = None  # held-out episodes' temperature; None: the training temperature's
    # a LoRA adapter shipped in the repository (a folder relative to it), trained by the environment's SFT recipe on
    # the column's model, prompt and demonstrations, merged into the model as the warm start; None: a warm start of
    # ``sft_episodes`` x ``sft_epochs`` built here
    warm_start_adapter: str | None = None
    # the learning-rate schedule of a warm start built here ({"lr_scheduler_type": ..., "warmup_steps": ...}); None:
    # cosine without warmup. A column with a shipped adapter gives its recipe's (None where that is cosine), so that a
    # setting which cannot start from the adapter (answer-only turns, a longer horizon) builds its own warm start the
    # same way
    sft_schedule: dict | None = None


COLUMNS = {
    "alfworld": Column(
        held_out="valid_unseen", budget=2560, environment_kwargs={"max_steps": 50, "expert_search": 2},
        rollout=dict(max_turns=10, max_actions_per_turn=1, max_actions_per_trajectory=10, max_tokens_per_turn=64,
                     max_context_length=2048, enable_thinking=True),
        # every train game, with the searching expert and grounded thinking (48 planner-only games won 0 of 8
        # validation games, all 300 planner-only 7 of 60)
        sft_episodes=300, sft_epochs=1, gradient_checkpointing=True,
        # chosen on valid_seen: greedy decoding (the shipped warm start won 11 of 30 games, 4 of 30 sampled at
        # temperature 1), and make train's warm start (recipes/configs/alfworld_sft.yaml on those demonstrations)
        # over one built here (5 of those 30 games; one build each)
        eval_temperature=0.0,
        warm_start_adapter="recipes/warm_starts/alfworld",
        sft_schedule={"lr_scheduler_type": "constant_with_warmup", "warmup_steps": 4},  # alfworld_sft.yaml's
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
        # budget: 512 and 1,024 turns left the warm start where it was, 2,048 lifted it; chosen on the test split's
        # first draw, so its figures come from the split drawn anew (the generator's version 1.1)
        held_out="test", budget=2048, environment_kwargs={"reward": "f1", "max_steps": 7},
        rollout=dict(max_turns=4, max_actions_per_turn=1, max_actions_per_trajectory=4, max_tokens_per_turn=48,
                     max_context_length=1280, enable_thinking=False),
        # 64 expert episodes x 2 epochs left the warm start at chance (13/192, the records in archive/hotpotqa-sft64)
        sft_episodes=256, sft_epochs=1,
        # the warm start built here (256 x 1, cosine), shipped so that every seed starts from the same weights on any
        # machine (a rebuild on another CPU need not be bit-identical)
        warm_start_adapter="recipes/warm_starts/hotpotqa",
    ),
    "minigrid": Column(
        held_out="test", budget=1024,
        rollout=dict(max_turns=4, max_actions_per_turn=3, max_actions_per_trajectory=12, max_tokens_per_turn=96,
                     max_context_length=1536, enable_thinking=True),
        # 256 expert episodes x 1 left the warm start near chance (6/64, archive/minigrid-sft256), all 500 of train
        # too when the expert only answered (20/192, answer-only/minigrid); its thinking names the target,
        # where it lies and the plan to it (starpo_minigrid.thinking)
        sft_episodes=500, sft_epochs=1,
        # built by recipes/configs/minigrid_sft.yaml (500 x 1, cosine), shipped as HotPotQA's is
        warm_start_adapter="recipes/warm_starts/minigrid",
    ),
}


def shipped_adapter_fits(environment: str, column: Column, model: str | None) -> bool:
    """Whether ``column``'s shipped adapter can start a run of ``model`` (None: the default): it was trained on the
    column's own model, prompt, horizon and demonstrations, so a run that changes any of them builds its own."""
    from trl_starpo.models import DEFAULT_MODEL

    own = COLUMNS[environment]
    return model in (None, DEFAULT_MODEL) and all(
        getattr(column, name) == getattr(own, name)
        for name in ("rollout", "environment_kwargs", "sft_episodes", "sft_epochs"))


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
    thinking_critic: bool | None = None  # StarPOConfig.thinking_critic; None: the preset's (an ablation knob)
    lora_r: int = 16
    sft_learning_rate: float = 1e-3
    dpo_learning_rate: float = 5e-5
    dpo_beta: float = 0.1
    dpo_tasks_per_round: int = 8
    dpo_epochs: int = 2
    dpo_pairs: str = "best_worst"  # TrajectoryDPOConfig.pairs: the policy's best against its worst, or ETO's "expert"
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
                           ("advantage_estimator", (None,)), ("dpo_pairs", ("best_worst",)),
                           ("thinking_critic", (None,))):
        if scale_fields[name] in defaults:
            del scale_fields[name]  # added later: records made before it keep their key
    column_fields = dataclasses.asdict(column)
    for name in ("eval_temperature", "warm_start_adapter", "sft_schedule"):
        if column_fields[name] is None:
            del column_fields[name]  # added later: records made before it keep their key
    if column.warm_start_adapter:
        column_fields.pop("sft_schedule", None)  # nothing is built: how a warm start would be is no part of the setting
    blob = json.dumps([environment, column_fields, scale_fields, model], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:10]


def training_key(environment: str, column: Column, scale: Scale, model: str) -> str:
    """The part of :func:`setting_key` a run's checkpoints depend on: its setting less how it is evaluated (the
    held-out split, how many of its tasks, at what temperature), which no training reads. Runs that differ only there
    share their checkpoints, so a finished run is evaluated again on more tasks, or on `test` after `validation`,
    without training again. For an environment the benchmark does not list, the column given is the reference: its
    held-out split and temperature stay part of the key."""
    own = COLUMNS.get(environment, column)
    column = dataclasses.replace(column, held_out=own.held_out, eval_temperature=own.eval_temperature)
    return setting_key(environment, column, dataclasses.replace(scale, eval_episodes=Scale.eval_episodes), model)


def thinks(rollout: dict) -> bool:
    """Whether a column's turns think, and so a thinking critic has something to score (StarPOConfig turns it off)."""
    return bool(rollout.get("enable_thinking", True))  # RolloutSettings' default


def applied_rule(method: str, column: Column, scale: Scale) -> str | None:
    """The thinking-scale rule a run of ``method`` applies on ``column`` (None where no thinking critic acts)."""
    if method not in PRESET_THINKING_SCALE_RULES or not thinks(column.rollout) or scale.thinking_critic is False:
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


def eval_precision(record: dict) -> str:
    """The precision a record's held-out episodes were played in. Records made before they named it (2026-12-04)
    played a preset's model fresh from training under its trainer's autocast, where the run trained in bf16; the
    SFT and untrained rows' models, loaded from disk, and DPO's, merged out of the LoRA wrapper that carried the
    autocast, played in fp32 (as did a preset's run evaluated from its checkpoint, which no committed record
    without a named precision was)."""
    if "precision" in record["held_out"]:
        return record["held_out"]["precision"]
    return BF16_AUTOCAST if record.get("scale", {}).get("bf16") and record["method"] in PRESET_METHODS else FP32
