"""Playing evaluation episodes with a trained agent or a model-free baseline, and averaging their statistics.

Three policies play the same tasks under the same limits:

- ``ModelPolicy``: a causal LM through ``RolloutCollector`` and ``CachedTransformersGenerator``, exactly as in
  training (same prompt, format, parsing and penalties).
- ``RandomPolicy``: each action drawn uniformly from ``env.admissible_actions()``.
- ``ExpertPolicy``: each action from ``env.expert_action()``.

The two baselines need no model; they use the optional protocol methods documented in ``trl_starpo.envs.base`` and
play up to ``max_actions_per_turn`` actions a turn within the same turn and action budgets as the model. Every
policy returns ``Trajectory`` records, so the statistics are ``rollout.metrics.trajectory_stats`` for all of them.

``trl-starpo eval`` is a thin shell around :func:`evaluate`.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .rollout.settings import RolloutSettings
from .statistics import success_interval
from .trajectory import Trajectory, Turn

POLICIES = ("model", "random", "expert")


# --------------------------------------------------------------------------------------------------- policies


class ModelPolicy:
    """A causal LM playing through the training collector (prompt, format, parsing and penalties as in training).

    Args:
        model: A loaded causal LM (see :func:`load_agent`).
        tokenizer: Its tokenizer, with a chat template.
        settings: Episode limits and answer format.
        temperature: Sampling temperature; ``0`` decodes greedily.
        top_p: Nucleus sampling threshold.
        batch_size: Episodes generated together.
        seed: Seeds torch's generator before each batch (with the batch's first episode index), so results do not
            depend on what ran before; ``None`` leaves it alone.
        bf16: Play under bf16 autocast on the model's device, the precision a run with ``bf16=True`` trains and
            collects in. A model loaded from disk or merged out of LoRA has no autocast of its own, so without this
            it plays in its weights' dtype (or under the caller's autocast); sampled success can differ between the
            two.
    """

    name = "model"

    def __init__(self, model, tokenizer, settings: RolloutSettings | None = None, *, temperature: float = 1.0,
                 top_p: float = 1.0, batch_size: int = 16, seed: int | None = 0, bf16: bool = False):
        from transformers import GenerationConfig

        from .rollout.collector import RolloutCollector

        if tokenizer.chat_template is None:
            raise ValueError("The tokenizer has no chat template; StarPO renders every turn through it.")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}.")
        self.model, self.tokenizer = model, tokenizer
        self.settings = settings or RolloutSettings()
        self.batch_size = batch_size
        self.seed = seed
        self.bf16 = bf16
        self.collector = RolloutCollector.from_config(tokenizer, self.settings)
        sampling = dict(do_sample=True, temperature=temperature, top_p=top_p, top_k=0) if temperature > 0 else {}
        self.generation_config = GenerationConfig(**(sampling or dict(do_sample=False)))

    def play(
        self, environments: Sequence[Any], tasks: Sequence[dict[str, Any]], groups: Sequence[int]
    ) -> list[Trajectory]:
        """Play one episode per (environment, task), all batched together."""
        import torch

        from .rollout.generation import CachedTransformersGenerator
        from .rollout.parsing import ANSWER_CLOSE
        from .rollout.precision import frozen_weights_in_autocast_dtype

        pad_id = self.tokenizer.pad_token_id
        if pad_id is None:
            pad_id = self.tokenizer.eos_token_id
        generator = CachedTransformersGenerator(
            self.model,
            pad_token_id=pad_id,
            eos_token_ids=[self.tokenizer.eos_token_id],
            generation_config=self.generation_config,
            stop_strings=[ANSWER_CLOSE],
            tokenizer=self.tokenizer,
        )
        if self.seed is not None:
            torch.manual_seed(self.seed + (min(groups) if groups else 0))
        was_training = self.model.training
        self.model.eval()
        try:
            # a disabled torch.autocast would switch off the caller's: only enter one when asked
            autocast = torch.autocast(self.model.device.type, dtype=torch.bfloat16) if self.bf16 else nullcontext()
            with torch.no_grad(), autocast, frozen_weights_in_autocast_dtype(self.model):
                trajectories = self.collector.collect(environments, tasks, generator, groups)
        finally:
            self.model.train(was_training)
        self._check_context(trajectories)
        return trajectories

    def _check_context(self, trajectories: Sequence[Trajectory]) -> None:
        """Refuse a ``max_context_length`` that leaves no episode's prompt room for a response of
        ``max_tokens_per_turn`` tokens."""
        unplayed = [t for t in trajectories if t.truncation == "context" and not t.turns]
        if trajectories and len(unplayed) == len(trajectories):
            shortest = min(len(t.token_ids) for t in unplayed)
            limit = self.settings.max_context_length
            raise ValueError(
                f"max_context_length ({limit}) leaves no room to answer: the prompts take {shortest} tokens or more; "
                f"raise it to at least {shortest + self.settings.max_tokens_per_turn}."
            )


class ScriptedPolicy:
    """A model-free policy that picks one action at a time from the environment's own methods.

    Subclasses implement :meth:`choose`; a turn holds up to ``max_actions_per_turn`` actions, episodes end on the
    same turn and action budgets as the model's. An environment that fails, or a policy with no action to offer,
    ends only its own episode (``truncation="env_error"``, ``"env_timeout"`` or ``"no_action"``).
    """

    name = "scripted"
    required_method = ""

    def __init__(self, settings: RolloutSettings | None = None, seed: int = 0):
        self.settings = settings or RolloutSettings()
        self.seed = seed

    def check(self, environment: Any) -> None:
        """Raise a clear ``ValueError`` when ``environment`` lacks the method this policy needs."""
        if not callable(getattr(environment, self.required_method, None)):
            raise ValueError(
                f"The {self.name} policy needs the environment to implement {self.required_method}() (an optional "
                f"method of the Environment protocol, see trl_starpo/envs/base.py); "
                f"{type(environment).__name__} does not."
            )

    def choose(self, environment: Any, rng: random.Random) -> str | None:
        raise NotImplementedError

    def play(
        self, environments: Sequence[Any], tasks: Sequence[dict[str, Any]], groups: Sequence[int]
    ) -> list[Trajectory]:
        """Play one episode per (environment, task), one after the other."""
        for environment in environments[:1]:
            self.check(environment)
        return [
            self._episode(env, task, group, random.Random(f"{self.seed}:{task.get('task_id', group)}:{group}"))
            for env, task, group in zip(environments, tasks, groups, strict=True)
        ]

    def _episode(self, env: Any, task: dict[str, Any], group: int, rng: random.Random) -> Trajectory:
        from .rollout.collector import fail_trajectory, step_action
        from .rollout.env_calls import EnvironmentFault, reset_environment

        settings = self.settings
        trajectory = Trajectory(task_id=str(task.get("task_id", group)), group=group)
        try:
            observation, trajectory.start_state_key = reset_environment(env, task, settings.env_timeout)
        except EnvironmentFault as fault:  # a broken environment fails its episode, never the evaluation
            fail_trajectory(trajectory, fault)
            return trajectory
        used = 0
        while not trajectory.done and len(trajectory.turns) < settings.max_turns:
            turn = Turn(observation=observation, response="", format_ok=True)
            trajectory.turns.append(turn)
            for _ in range(settings.max_actions_per_turn):
                if used >= settings.action_budget:
                    break
                try:
                    action = self.choose(env, rng)
                except Exception as error:  # the expert's planner is part of the environment
                    trajectory.env_error, trajectory.truncation = f"{type(error).__name__}: {error}", "env_error"
                    trajectory.success = False
                    break
                if action is None:
                    trajectory.truncation = "no_action"
                    break
                used += 1
                observation, episode_over = step_action(trajectory, env, turn, action, settings.env_timeout)
                if episode_over:
                    break
            turn.response = f" {settings.action_separator} ".join(turn.actions)
            if not trajectory.done and used >= settings.action_budget:
                trajectory.truncation = "action_budget"
        if not trajectory.done:
            trajectory.truncation = "max_turns"
        return trajectory


class RandomPolicy(ScriptedPolicy):
    """Uniformly random actions among ``env.admissible_actions()``, seeded per task."""

    name = "random"
    required_method = "admissible_actions"

    def choose(self, environment: Any, rng: random.Random) -> str | None:
        actions = list(environment.admissible_actions())
        return rng.choice(actions) if actions else None


class ExpertPolicy(ScriptedPolicy):
    """The environment's scripted expert, ``env.expert_action()``."""

    name = "expert"
    required_method = "expert_action"

    def choose(self, environment: Any, rng: random.Random) -> str | None:
        return environment.expert_action()


# ------------------------------------------------------------------------------------------------- evaluation


@dataclass
class EvaluationResult:
    """The outcome of :func:`evaluate`: averaged statistics and the episodes they came from.

    ``stats`` holds the mean of every ``rollout.metrics.STAT_NAMES`` entry over the episodes, plus ``success_low``
    and ``success_high``, the 95% Wilson interval of the success rate. ``env_errors`` counts the episodes whose
    environment failed (at reset or at a step), ``first_env_error`` is the first one's error.
    """

    environment: str
    split: str | None
    policy: str
    model: str | None
    episodes: int
    stats: dict[str, float]
    trajectories: list[Trajectory] = field(default_factory=list, repr=False)
    env_errors: int = 0
    first_env_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary (without the trajectories)."""
        return {"environment": self.environment, "split": self.split, "policy": self.policy, "model": self.model,
                "episodes": self.episodes, **self.stats, "env_errors": self.env_errors,
                "first_env_error": self.first_env_error}


def summarize(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """Mean of each rollout statistic over ``trajectories``, plus the 95% Wilson interval of the success rate
    (``success_low``, ``success_high``); NaN when there are none."""
    from .rollout.metrics import STAT_NAMES, mean_stats, trajectory_stats

    if not trajectories:
        return {**{name: float("nan") for name in STAT_NAMES}, "success_low": float("nan"),
                "success_high": float("nan")}
    stats = mean_stats([trajectory_stats(t) for t in trajectories])
    stats["success_low"], stats["success_high"] = success_interval(stats["success"], len(trajectories))
    return stats


def evaluate(
    policy: ModelPolicy | ScriptedPolicy,
    environment: str | Callable[[], Any],
    tasks,
    episodes: int | None = None,
    *,
    batch_size: int | None = None,
    environment_kwargs: dict[str, Any] | None = None,
    split: str | None = None,
    model_name: str | None = None,
    progress: bool = False,
) -> EvaluationResult:
    """Play one episode on each of the first ``episodes`` rows of ``tasks`` and average the statistics.

    Args:
        policy: A ``ModelPolicy``, ``RandomPolicy`` or ``ExpertPolicy``.
        environment: An installed environment's name or a zero-argument factory.
        tasks: The task rows (a ``datasets.Dataset`` or a list of dicts).
        episodes: How many rows to play (all when ``None``; at most ``len(tasks)``).
        batch_size: Episodes played at once (the policy's own batch size by default).
        environment_kwargs: Keyword arguments of the environment's ``load_environment``.
        split, model_name: Recorded in the result.
        progress: Show a progress bar over episodes.
    """
    from .envs import EnvironmentPool, load_environment

    if isinstance(environment, str):
        name = environment
        factory = lambda: load_environment(environment, **(environment_kwargs or {}))  # noqa: E731
    else:
        name, factory = getattr(environment, "__name__", type(environment).__name__), environment
    count = len(tasks) if episodes is None else min(int(episodes), len(tasks))
    if count < 1:
        raise ValueError(f"Nothing to evaluate: {len(tasks)} tasks, episodes={episodes}.")
    batch_size = batch_size or getattr(policy, "batch_size", 16)
    environments = EnvironmentPool(factory)
    trajectories: list[Trajectory] = []
    bar = _progress_bar(count, f"{name} ({policy.name})", enabled=progress)
    try:
        for start in range(0, count, batch_size):
            indices = list(range(start, min(start + batch_size, count)))
            rows = [dict(tasks[i]) for i in indices]
            played = policy.play(environments.take(len(indices)), rows, indices)
            environments.discard_timed_out(played)
            trajectories.extend(played)
            bar.update(len(indices))
    finally:
        bar.close()
        environments.close()
    errors = [t.env_error for t in trajectories if t.env_error is not None]
    return EvaluationResult(
        environment=name, split=split, policy=policy.name, model=model_name, episodes=count,
        stats=summarize(trajectories), trajectories=trajectories, env_errors=len(errors),
        first_env_error=errors[0] if errors else None,
    )


def _progress_bar(total: int, description: str, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=description, unit="episode", disable=not enabled, leave=False)


# ------------------------------------------------------------------------------------------------ loading


def load_agent(model: str | None = None, *, device: str | None = None, dtype: str | None = None):
    """Load ``(model, tokenizer)`` from a local folder or Hub id, a full model or a LoRA adapter, for playing.

    An adapter folder (``adapter_config.json``) is loaded on its base model and merged. ``None`` or the default
    model id resolves to the embedded SmolLM2 (see ``trl_starpo.models``). Raises ``ValueError`` with the reason
    when nothing loadable is found (offline, a wrong path or id).
    """
    import torch
    from transformers import AutoModelForCausalLM

    from .models import quiet_checkpointing_rename, resolve_model_path

    path = resolve_model_path(model)
    kwargs = {"dtype": getattr(torch, dtype) if dtype and dtype != "auto" else ("auto" if dtype else None)}
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    try:
        if _is_adapter(path):
            from peft import AutoPeftModelForCausalLM

            with quiet_checkpointing_rename():
                loaded = AutoPeftModelForCausalLM.from_pretrained(path, **kwargs).merge_and_unload()
        else:
            loaded = AutoModelForCausalLM.from_pretrained(path, **kwargs)
        tokenizer = _load_tokenizer(path, loaded)
    except (OSError, ValueError) as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        if Path(path).exists():
            raise ValueError(f"Cannot load model {model!r} from the folder {path!r}: {reason}") from error
        raise ValueError(
            f"Cannot load model {model!r}: there is no folder {path!r} in {Path.cwd()}, and it is not a Hub model "
            f"that can be loaded (offline, it must already be in the cache): {reason}"
        ) from error
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    return loaded.to(device).eval(), tokenizer


def device_computes_bf16(device) -> bool:
    """Whether ``device`` (a ``torch.device``) computes bf16 natively: a GPU that supports it, or a CPU with bf16
    matrix units (``trl_starpo.config.cpu_computes_bf16``)."""
    import torch

    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        from .config import cpu_computes_bf16

        return cpu_computes_bf16()
    return False


def _is_adapter(path: str) -> bool:
    if Path(path).is_dir():
        return Path(path, "adapter_config.json").is_file()
    try:
        from huggingface_hub import hf_hub_download

        hf_hub_download(path, "adapter_config.json")
        return True
    except Exception:  # no such file, offline, or not a repo: load as a full model and let that error speak
        return False


def _load_tokenizer(path: str, model):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError):
        base = getattr(model.config, "_name_or_path", None)
        if not base or base == path:
            raise
        return AutoTokenizer.from_pretrained(base)


def make_policy(
    kind: str,
    *,
    model: str | None = None,
    settings: RolloutSettings | None = None,
    seed: int = 0,
    temperature: float = 1.0,
    top_p: float = 1.0,
    batch_size: int = 16,
    device: str | None = None,
    dtype: str | None = None,
    bf16: bool | None = None,
) -> ModelPolicy | ScriptedPolicy:
    """Build a policy by name (``model``, ``random`` or ``expert``); only ``model`` loads weights.

    ``bf16`` (``ModelPolicy``'s): ``None`` plays in the precision the agent trained in (``bf16`` of its
    ``starpo_agent.json``) where the device computes bf16, else in its weights' dtype.
    """
    if kind not in POLICIES:
        raise ValueError(f"Unknown policy {kind!r}; choose one of {', '.join(POLICIES)}.")
    if kind == "random":
        return RandomPolicy(settings, seed=seed)
    if kind == "expert":
        return ExpertPolicy(settings, seed=seed)
    loaded, tokenizer = load_agent(model, device=device, dtype=dtype)
    computes_bf16 = device_computes_bf16(loaded.device)
    if bf16 is None:
        from .models import resolve_model_path
        from .rollout.settings import read_agent_info

        bf16 = computes_bf16 and read_agent_info(resolve_model_path(model)).get("training", {}).get("bf16") is True
    elif bf16 and not computes_bf16:
        warnings.warn(f"bf16 on {loaded.device}, which does not compute it natively: emulated, it can be many times "
                      "slower than fp32.", stacklevel=2)
    return ModelPolicy(
        loaded, tokenizer, settings, temperature=temperature, top_p=top_p, batch_size=batch_size, seed=seed, bf16=bf16
    )
