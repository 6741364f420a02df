"""Expert demonstrations as supervised fine-tuning data: the warm start before StarPO.

An environment's scripted expert (``expert_action()``, and ``expert_thinking()`` for the thinking text) plays its
episodes through the training ``RolloutCollector``, so a demonstration is token for token what a rollout would be:
the same system prompt, answer format, chat-template glue between turns and segment labels. Each episode becomes
one row of ``input_ids`` with a ``completion_mask`` over the generated tokens (thinking and action; prompt,
observations and template tokens are not trained on), the pre-tokenized form TRL's ``SFTTrainer`` trains on with
``completion_only_loss=True``. One row per episode keeps the cost linear in the episode's length.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trl import SFTConfig

from .config import apply_cpu_defaults, carry_checkpointing_fields, parse_environment_kwargs
from .rollout.settings import RolloutArguments, RolloutSettings
from .rollout.parsing import ANSWER_CLOSE, ANSWER_OPEN, THINK_CLOSE, THINK_OPEN
from .samples import turn_samples
from .trajectory import Segment, Trajectory

logger = logging.getLogger(__name__)

ThinkingFunction = Callable[[Any, str], str]
"""``thinking(environment, action) -> text``: the thinking that leads to the expert's next ``action``."""


def expert_response(action: str, thinking: str | None = None) -> str:
    """The well-formed response carrying ``action``: ``<think>thinking</think><answer>action</answer>``, or only
    the answer when ``thinking`` is ``None``."""
    answer = f"{ANSWER_OPEN}{action}{ANSWER_CLOSE}"
    return answer if thinking is None else f"{THINK_OPEN}{thinking}{THINK_CLOSE}{answer}"


class ExpertResponder:
    """A generation backend that answers each turn with the expert's next actions in that trajectory's environment.

    It implements the ``GenerationBackend`` protocol of ``trl_starpo.rollout.generation``: ``generate`` returns
    the token ids of :func:`expert_response`, less the opening tag the collector prefills. A turn where the expert
    has no action, or raises, gets an empty response (the collector records a format error and the episode is left
    out). With ``actions_per_turn`` above 1 a turn carries up to that many actions (see :func:`expert_plan`), so the
    demonstrations use the turns the way the rollouts may.

    Args:
        environments: The collector's environments, indexed as its contexts are.
        tokenizer: The policy's tokenizer.
        response_prefix: The collector's prefilled opening tag (``RolloutCollector.response_prefix``).
        thinking: Thinking text for a turn's first action, or ``None`` for answer-only responses.
        actions_per_turn: Actions one response may carry (the rollouts' ``max_actions_per_turn``).
        separator: What joins them (the rollouts' ``action_separator``).
    """

    def __init__(self, environments: Sequence[Any], tokenizer, *, response_prefix: str,
                 thinking: ThinkingFunction | None, actions_per_turn: int = 1, separator: str = "||"):
        self.environments = environments
        self.tokenizer = tokenizer
        self.response_prefix = response_prefix
        self.thinking = thinking
        self.actions_per_turn = actions_per_turn
        self.separator = separator

    def reset(self) -> None:
        """Nothing is kept between collections."""

    def generate(self, contexts: dict[int, list[int]], max_new_tokens: int) -> dict[int, list[int]]:
        responses = {}
        for index in contexts:
            environment = self.environments[index]
            try:
                actions = expert_plan(environment, self.actions_per_turn)
                thinking = self.thinking(environment, actions[0]) if self.thinking and actions else None
            except Exception as error:  # a failing expert (its planner, say) loses its episode, not the dataset
                logger.warning("The expert failed on trajectory %d: %r", index, error)
                actions = []
            if not actions:
                responses[index] = []
                continue
            text = expert_response(f" {self.separator} ".join(actions), thinking)
            if not text.startswith(self.response_prefix):
                raise ValueError(f"An expert response must start with the prefilled {self.response_prefix!r}.")
            ids = self.tokenizer(text[len(self.response_prefix):], add_special_tokens=False)["input_ids"]
            if len(ids) > max_new_tokens:
                raise ValueError(
                    f"An expert response takes {len(ids)} tokens but a turn may generate {max_new_tokens} "
                    f"(max_tokens_per_turn): raise max_tokens_per_turn, or shorten the thinking.\n{text}"
                )
            responses[index] = ids
        return responses


def expert_plan(environment: Any, length: int) -> list[str]:
    """The expert's next ``length`` actions from the environment's current state (fewer where the episode ends or
    the expert has no plan), without changing that state.

    The first is ``environment.expert_action()``; the rest are planned on a deep copy of the environment, stepped
    with the plan so far (on a stochastic environment the plan assumes the copy's draws: a demonstration that goes
    wrong ends unwon and ``only_successes`` leaves it out). An environment that cannot be copied (one holding a
    process, a socket or a lock) gets its first action only, as does a plan whose look-ahead raises.
    """
    first = environment.expert_action()
    if first is None:
        return []
    plan = [first]
    if length <= 1:
        return plan
    try:
        shadow = copy.deepcopy(environment)
        while len(plan) < length:
            _, _, terminated, truncated, _ = shadow.step(plan[-1])
            if terminated or truncated:
                break
            action = shadow.expert_action()
            if action is None:
                break
            plan.append(action)
    except Exception as error:  # the look-ahead is an optimisation of the turn, not part of the episode
        logger.debug("Planning ahead on a copy of %r failed: %r", environment, error)
    return plan


def environment_thinking(environment: Any, action: str) -> str:
    """The default thinking: the environment's own ``expert_thinking()`` (see ``trl_starpo.envs.base``)."""
    return environment.expert_thinking()


def demonstration_rows(trajectory: Trajectory) -> list[dict[str, Any]]:
    """The SFT rows of an expert episode: its tokens, the mask of generated tokens, and what happened. One row per
    episode; under the ``window`` context policy one per turn (the context the turn was given, then its response),
    so that the warm start learns from the inputs its RL run will see."""
    generated = (int(Segment.THINKING), int(Segment.ACTION))
    about = {"task_id": trajectory.task_id, "success": trajectory.success, "turns": len(trajectory.turns)}
    if not any(turn.context_ids is not None for turn in trajectory.turns):
        return [{"input_ids": list(trajectory.token_ids),
                 "completion_mask": [int(segment in generated) for segment in trajectory.segments], **about}]
    return [
        {"input_ids": sample.prompt + sample.completion,
         "completion_mask": [0] * len(sample.prompt) + [int(segment in generated) for segment in sample.segments],
         **about, "turn": sample.turn}
        for sample in turn_samples([trajectory])
    ]


def expert_trajectories(
    environment: str | Callable[[], Any],
    tasks,
    tokenizer,
    settings: RolloutSettings | None = None,
    *,
    episodes: int | None = None,
    thinking: ThinkingFunction | None = None,
    environment_kwargs: dict[str, Any] | None = None,
    batch_size: int = 16,
) -> list[Trajectory]:
    """Play the expert on ``tasks`` (the first ``episodes`` rows) with the collector, one episode per row, and return
    its trajectories: token for token what the collector would have recorded had the policy answered as the expert
    did. The arguments are :func:`expert_demonstrations`', except that ``environment`` may also be a zero-argument
    factory of environments."""
    from .envs import EnvironmentPool, load_environment
    from .rollout.collector import RolloutCollector

    settings = settings or RolloutSettings()
    collector = RolloutCollector.from_config(tokenizer, settings)
    if isinstance(environment, str):
        name, factory = environment, lambda: load_environment(environment, **(environment_kwargs or {}))
    else:
        name, factory = getattr(environment, "__name__", "environment"), environment
    environments = EnvironmentPool(factory)
    first = environments.take(1)[0]
    if not callable(getattr(first, "expert_action", None)):
        environments.close()
        raise ValueError(f"Environment {name!r} has no expert_action(): it cannot provide demonstrations.")
    if settings.enable_thinking:
        thinking = thinking or environment_thinking
        if thinking is environment_thinking and not callable(getattr(first, "expert_thinking", None)):
            environments.close()
            raise ValueError(
                f"Environment {name!r} has no expert_thinking(): pass thinking=..., or demonstrate "
                "answer-only responses with enable_thinking=False."
            )
    else:
        thinking = None
    responder = ExpertResponder([], tokenizer, response_prefix=collector.response_prefix, thinking=thinking,
                                actions_per_turn=settings.max_actions_per_turn, separator=settings.action_separator)
    count = len(tasks) if episodes is None else min(int(episodes), len(tasks))
    trajectories = []
    try:
        for start in range(0, count, batch_size):
            indices = list(range(start, min(start + batch_size, count)))
            batch = [dict(tasks[i]) for i in indices]
            responder.environments = environments.take(len(indices))
            played = collector.collect(responder.environments, batch, responder, indices)
            environments.discard_timed_out(played)
            trajectories.extend(played)
    finally:
        environments.close()
    return trajectories


def usable_demonstration(trajectory: Trajectory, only_successes: bool = True) -> bool:
    """An expert episode fit to learn from: no malformed turn (the expert had no action), no environment error, and
    won unless ``only_successes`` is off."""
    usable = trajectory.env_error is None and all(turn.format_ok for turn in trajectory.turns)
    return usable and (trajectory.success or not only_successes)


def expert_demonstrations(
    environment: str,
    tasks,
    tokenizer,
    settings: RolloutSettings | None = None,
    *,
    episodes: int | None = None,
    thinking: ThinkingFunction | None = None,
    environment_kwargs: dict[str, Any] | None = None,
    batch_size: int = 16,
    only_successes: bool = True,
) -> Any:
    """Play the expert on ``tasks`` and return its episodes as a ``datasets.Dataset`` for TRL's ``SFTTrainer``.

    Args:
        environment: An installed environment's name; it must implement ``expert_action()``.
        tasks: Task rows (a ``datasets.Dataset`` or a list of dicts); one episode is played per row.
        tokenizer: The tokenizer of the model to fine-tune (with a chat template).
        settings: The rollout settings of the StarPO run that follows (turns, tokens per turn, thinking, format),
            so the demonstrations look exactly like its rollouts.
        episodes: How many rows of ``tasks`` to play (all by default).
        thinking: Thinking text for each expert action; by default the environment's ``expert_thinking()``.
            Ignored when ``settings.enable_thinking`` is false.
        environment_kwargs: Keyword arguments of the environment's ``load_environment``.
        batch_size: Environments played side by side.
        only_successes: Keep only episodes the expert won within the turn budget. Episodes with a malformed turn
            (the expert had no action) or an environment error are always left out.

    Returns:
        A ``Dataset`` with columns ``input_ids``, ``completion_mask``, ``task_id``, ``success`` and ``turns`` (and
        ``turn`` under the ``window`` context policy, where every turn is a row).
    """
    from datasets import Dataset

    played = expert_trajectories(environment, tasks, tokenizer, settings, episodes=episodes, thinking=thinking,
                                 environment_kwargs=environment_kwargs, batch_size=batch_size)
    kept = [t for t in played if usable_demonstration(t, only_successes)]
    if len(kept) < len(played):
        logger.warning("%d of %d expert episodes were left out (not won, malformed or failed).",
                       len(played) - len(kept), len(played))
    if not kept:
        raise ValueError(
            f"None of the {len(played)} expert episodes on {environment!r} is usable: raise max_turns or "
            "max_actions_per_trajectory so the expert can finish, or pass only_successes=False."
        )
    return Dataset.from_list([row for trajectory in kept for row in demonstration_rows(trajectory)])


DEMONSTRATIONS = "_demonstrations"
"""The folder of a warm start's ``output_dir`` where its demonstrations are kept (a ``datasets`` dataset); its
leading underscore keeps it out of what is pushed to the Hub, by this library and by ``transformers``."""


def resumable_demonstrations(folder: str | Path, settings: dict[str, Any], play: Callable[[], Any], *,
                             resuming: bool, save: bool = True) -> Any:
    """A warm start's demonstrations, kept in ``folder/_demonstrations`` so that a resumed run does not play the
    expert again.

    Resuming, the demonstrations an earlier start of the run saved are loaded when they were played with the same
    ``settings`` (a JSON-able description: environment, tasks, rollout settings, ...); otherwise ``play()`` makes them
    and, with ``save`` (the main process), they are saved for a later resume, replacing any saved before.
    """
    from datasets import load_from_disk

    folder = Path(folder)
    saved, marker = folder / DEMONSTRATIONS, folder / f"{DEMONSTRATIONS}.json"
    fingerprint = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()
    if resuming:
        if saved.is_dir() and _marked(marker) == fingerprint:
            # in memory: the trainer's map and filter steps would otherwise write cache files into the folder
            demonstrations = load_from_disk(str(saved), keep_in_memory=True)
            logger.info("Resuming with the %d demonstration rows saved in %s (the expert does not play again).",
                        len(demonstrations), saved)
            return demonstrations
        logger.warning("No demonstrations played with these settings are saved in %s: the expert plays again.",
                       folder)
    demonstrations = play()
    if save:
        marker.unlink(missing_ok=True)  # the marker goes last: a save cut short is never taken for a whole one
        shutil.rmtree(saved, ignore_errors=True)
        demonstrations.save_to_disk(str(saved))
        written = marker.with_suffix(".json.tmp")
        written.write_text(json.dumps({"settings": fingerprint, "rows": len(demonstrations)}))
        os.replace(written, marker)
    return demonstrations


def _marked(marker: Path) -> str | None:
    """The settings fingerprint a demonstrations marker names (None when there is none or it cannot be read)."""
    try:
        return json.loads(marker.read_text())["settings"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


@dataclass
class ExpertSFTConfig(SFTConfig, RolloutArguments):
    r"""
    Configuration of the SFT warm start (``recipes/<env>_sft.py``): every [`~trl.SFTConfig`] field, plus the
    demonstrations to play and the rollout settings of the StarPO run that follows. Give both runs the same rollout
    settings (the recipes' YAML files do), so that the demonstrations look exactly like the rollouts.

    Loss is on the generated tokens only (``completion_only_loss`` is always on).
    """

    max_length: int | None = field(
        default=None, metadata={"help": "Tokens per demonstration; default: max_context_length (nothing is cut)."}
    )
    expert_episodes: int | None = field(
        default=None, metadata={"help": "Expert episodes played on the train split (all of its tasks by default)."}
    )
    only_successes: bool = field(default=True, metadata={"help": "Train only on episodes the expert won."})
    environment_kwargs: dict | str | None = field(
        default=None, metadata={"help": "Keyword arguments for the environment's `load_environment`."}
    )

    def __post_init__(self):
        if self.completion_only_loss is False:
            raise ValueError(
                "ExpertSFTConfig trains on the generated tokens of the demonstrations only: leave "
                "completion_only_loss unset (training on prompts and observations would teach the model to write them)."
            )
        self.completion_only_loss = True
        if self.max_length is None:
            self.max_length = self.max_context_length
        self.environment_kwargs = parse_environment_kwargs(self.environment_kwargs)
        apply_cpu_defaults(self)
        carry_checkpointing_fields(self)
        super().__post_init__()
        if self.max_length is not None and self.max_length < self.max_context_length:
            raise ValueError(
                f"max_length={self.max_length} would cut demonstrations of up to max_context_length="
                f"{self.max_context_length} tokens: raise max_length or leave it unset."
            )
