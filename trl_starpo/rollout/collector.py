"""The batched multi-turn rollout loop.

Each turn, every unfinished trajectory is generated in one batch; responses are parsed, their actions stepped in
the trajectory's own environment, and the next observation appended through the chat template as token ids.
Finished trajectories leave the batch. Model output never crashes the loop (it earns a format penalty) and an
environment that raises ends only its own trajectory.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any, Sequence

from ..envs import Environment
from ..trajectory import Segment, Trajectory, Turn
from .generation import GenerationBackend
from .parsing import ANSWER_CLOSE, ANSWER_OPEN, THINK_OPEN, ParsedResponse, format_instructions, parse_response
from .settings import RolloutSettings

logger = logging.getLogger(__name__)

_ASSISTANT_SENTINEL = "<<starpo-assistant>>"
_OBSERVATION_SENTINEL = "<<starpo-observation>>"


@dataclass(frozen=True)
class ChatGlue:
    """The chat-template text between turns, cut around sentinels once so that turns append as token ids.

    ``close_turn`` follows a response that did not end with an end-of-turn token, ``open_turn`` one that did (the
    model already produced that token); ``to_response`` follows the observation and opens the next response.
    """

    close_turn: list[int]
    open_turn: list[int]
    to_response: list[int]

    @classmethod
    def from_tokenizer(cls, tokenizer) -> ChatGlue:
        messages = [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "u"},
            {"role": "assistant", "content": _ASSISTANT_SENTINEL},
            {"role": "user", "content": _OBSERVATION_SENTINEL},
        ]
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        if _ASSISTANT_SENTINEL not in text or _OBSERVATION_SENTINEL not in text:
            raise ValueError("The tokenizer's chat template does not render message contents verbatim.")
        between = text.split(_ASSISTANT_SENTINEL, 1)[1].split(_OBSERVATION_SENTINEL, 1)[0]
        after = text.split(_OBSERVATION_SENTINEL, 1)[1]
        eos = tokenizer.eos_token or ""
        opened = between[len(eos) :] if eos and between.startswith(eos) else between

        def encode(s: str) -> list[int]:
            return tokenizer(s, add_special_tokens=False)["input_ids"]

        return cls(close_turn=encode(between), open_turn=encode(opened), to_response=encode(after))


def step_action(trajectory: Trajectory, env: Environment, turn: Turn, action: str) -> tuple[str, bool]:
    """Step one ``action`` in ``env`` and record it on ``turn`` and ``trajectory``.

    Returns the observation and whether the episode is over: the environment terminated or truncated it, or raised,
    which fails the trajectory (``truncation="env_error"``) and never the caller.
    """
    turn.actions.append(action)
    try:
        observation, reward, terminated, truncated, info = env.step(action)
    except Exception as error:  # a broken environment fails its trajectory, never the run
        logger.warning("step failed for task %s: %r", trajectory.task_id, error)
        trajectory.env_error = f"{type(error).__name__}: {error}"
        trajectory.truncation = "env_error"
        trajectory.success = False
        return "", True
    turn.reward += float(reward)
    turn.num_valid_actions += bool(info.get("action_is_valid", True))
    turn.num_effective_actions += bool(info.get("action_is_effective", True))
    trajectory.success = bool(info.get("success", False))
    if terminated or truncated:
        trajectory.terminated = bool(terminated)
        if truncated and not terminated:
            trajectory.truncation = "env_truncated"
        return observation, True
    return observation, False


def _current_state(trajectory: Trajectory) -> str:
    """The environment's latest observation, without format hints: what the first turn of the trailing run of
    malformed turns saw (a malformed turn steps nothing, so the state has not changed since)."""
    first = trajectory.turns[-1]
    for turn in reversed(trajectory.turns[:-1]):
        if turn.format_ok:
            break
        first = turn
    return first.observation


class RolloutCollector:
    """Collects multi-turn trajectories, token-in/token-out.

    Args:
        tokenizer: The policy's tokenizer, with a chat template.
        enable_thinking: Ask for ``<think>…</think>`` before the answer.
        max_turns: Turns per episode; an unfinished episode is truncated with ``"max_turns"``.
        max_actions_per_turn: Actions one answer may hold (separated by ``action_separator``); extras are dropped.
        max_actions_per_trajectory: Actions sent to the environment per episode (``"action_budget"``).
        max_tokens_per_turn: New tokens per response.
        max_context_length: Tokens per trajectory, prompt included (``"context"``).
        format_penalty: Added to a turn's reward when its response is malformed.
        action_separator: Separator between actions in one answer.
        prefill_opening_tag: Start every response with ``<think>`` (``<answer>`` without thinking) as template
            tokens, so the model continues inside the format; small models rarely open it on their own.
    """

    def __init__(
        self,
        tokenizer,
        *,
        enable_thinking: bool = True,
        max_turns: int = 5,
        max_actions_per_turn: int = 1,
        max_actions_per_trajectory: int | None = None,
        max_tokens_per_turn: int = 128,
        max_context_length: int = 2048,
        format_penalty: float = -0.1,
        action_separator: str = "||",
        prefill_opening_tag: bool = True,
    ):
        self.tokenizer = tokenizer
        self.enable_thinking = enable_thinking
        self.max_turns = max_turns
        self.max_actions_per_turn = max_actions_per_turn
        self.max_actions_per_trajectory = max_actions_per_trajectory or max_turns * max_actions_per_turn
        self.max_tokens_per_turn = max_tokens_per_turn
        self.max_context_length = max_context_length
        self.format_penalty = format_penalty
        self.action_separator = action_separator
        self.glue = ChatGlue.from_tokenizer(tokenizer)
        self.response_prefix = (THINK_OPEN if enable_thinking else ANSWER_OPEN) if prefill_opening_tag else ""
        self.response_prefix_ids = tokenizer(self.response_prefix, add_special_tokens=False)["input_ids"]
        self.eos_token_ids = {tokenizer.eos_token_id}

    @classmethod
    def from_config(cls, tokenizer, args) -> RolloutCollector:
        """Build from a ``StarPOConfig`` or any object with the ``RolloutSettings`` fields."""
        return cls(tokenizer, **asdict(RolloutSettings.from_config(args)))

    def collect(
        self,
        environments: Sequence[Environment],
        tasks: Sequence[dict[str, Any]],
        generator: GenerationBackend,
        groups: Sequence[int] | None = None,
    ) -> list[Trajectory]:
        """Run one episode per (environment, task) pair, all batched together, and return the trajectories.

        ``environments[i]`` plays ``tasks[i]``; trajectories that share a task (a group) should get the same task
        row so they share a start state.
        """
        groups = list(groups) if groups is not None else list(range(len(tasks)))
        generator.reset()
        trajectories, last_observation, actions_used = [], [], [0] * len(tasks)
        for env, task, group in zip(environments, tasks, groups, strict=True):
            trajectory, observation = self._start(env, task, group)
            trajectories.append(trajectory)
            last_observation.append(observation)

        for _ in range(self.max_turns):
            contexts, budget = {}, {}
            for i, trajectory in enumerate(trajectories):
                if trajectory.done:
                    continue
                room = self.max_context_length - len(trajectory.token_ids)
                if room <= 0:
                    trajectory.truncation = "context"
                    continue
                contexts[i] = trajectory.token_ids
                budget[i] = min(self.max_tokens_per_turn, room)
            if not contexts:
                break
            responses = generator.generate(contexts, max(budget.values()))
            logprobs = getattr(generator, "last_logprobs", None) or {}
            for i, response_ids in responses.items():
                response_ids = response_ids[: budget[i]]
                observation = self._play_turn(
                    trajectories[i], environments[i], response_ids, last_observation[i], actions_used, i, logprobs.get(i)
                )
                if observation is not None:
                    last_observation[i] = observation
        for trajectory in trajectories:
            if not trajectory.done:
                trajectory.truncation = "max_turns"
        return trajectories

    def _start(self, env: Environment, task: dict[str, Any], group: int) -> tuple[Trajectory, str]:
        trajectory = Trajectory(task_id=str(task.get("task_id", group)), group=group)
        try:
            observation, _ = env.reset(seed=task.get("seed"), options={"task": task})
        except Exception as error:  # a broken environment fails its trajectory, never the run
            logger.warning("reset failed for task %s: %r", trajectory.task_id, error)
            observation = ""
            trajectory.env_error = f"{type(error).__name__}: {error}"
            trajectory.truncation = "env_error"
        instructions = format_instructions(
            env.action_description,
            enable_thinking=self.enable_thinking,
            max_actions=self.max_actions_per_turn,
            separator=self.action_separator,
        )
        messages = [
            {"role": "system", "content": f"{env.system_prompt}\n{instructions}".strip()},
            {"role": "user", "content": observation},
        ]
        prompt = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        trajectory.append(self.tokenizer(prompt, add_special_tokens=False)["input_ids"], Segment.PROMPT)
        trajectory.prompt_length = len(trajectory.token_ids)
        trajectory.append(self.response_prefix_ids, Segment.TEMPLATE)
        return trajectory, observation

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)

    def _tokens_covering(self, ids: list[int], num_chars: int) -> int:
        """The fewest leading tokens of ``ids`` whose decoded text is at least ``num_chars`` long."""
        lo, hi = 0, len(ids)
        while lo < hi:
            mid = (lo + hi) // 2
            if len(self._decode(ids[:mid])) >= num_chars:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def _read_response(self, response_ids: list[int]) -> tuple[list[int], str, ParsedResponse, list[int]]:
        """Cut the response after its first ``</answer>``, parse it, and label its tokens.

        Tokens before the one that completes ``</think>`` are thinking, the rest action. The prefilled opening tag
        is part of the parsed text but not of the response tokens.
        """
        prefix = self.response_prefix
        text = prefix + self._decode(response_ids)
        close = text.find(ANSWER_CLOSE)
        if close >= 0 and close + len(ANSWER_CLOSE) < len(text):
            response_ids = response_ids[: self._tokens_covering(response_ids, close + len(ANSWER_CLOSE) - len(prefix))]
            text = prefix + self._decode(response_ids)
        parsed = parse_response(
            text,
            enable_thinking=self.enable_thinking,
            max_actions=self.max_actions_per_turn,
            separator=self.action_separator,
        )
        thinking = self._tokens_covering(response_ids, parsed.thinking_end - len(prefix)) if parsed.thinking_end else 0
        labels = [int(Segment.THINKING)] * thinking + [int(Segment.ACTION)] * (len(response_ids) - thinking)
        return response_ids, text, parsed, labels

    def _play_turn(
        self,
        trajectory: Trajectory,
        env: Environment,
        response_ids: list[int],
        last_observation: str,
        actions_used: list[int],
        index: int,
        logprobs: list[float] | None = None,
    ) -> str | None:
        """Append one response, step its actions, and append the next observation; returns that observation."""
        response_ids, text, parsed, labels = self._read_response(response_ids)
        start = len(trajectory.token_ids)
        trajectory.append(response_ids, labels, logprobs[: len(response_ids)] if logprobs is not None else None)
        turn = Turn(
            observation=last_observation,
            response=text,
            thinking=parsed.thinking,
            format_ok=parsed.format_ok,
            format_error=parsed.error,
            num_dropped_actions=parsed.num_dropped_actions,
            response_start=start,
            response_end=len(trajectory.token_ids),
        )
        trajectory.turns.append(turn)
        if not parsed.format_ok:
            turn.reward += self.format_penalty
            observation = f"Invalid response ({parsed.error}). {self._format_hint()}\n{_current_state(trajectory)}"
        else:
            observation = self._step_actions(trajectory, env, turn, parsed.actions, actions_used, index)
        if trajectory.done:
            return None
        if len(trajectory.turns) >= self.max_turns:
            trajectory.truncation = "max_turns"
            return None
        ended = bool(response_ids) and response_ids[-1] in self.eos_token_ids
        glue = self.glue.open_turn if ended else self.glue.close_turn
        observation_ids = self.tokenizer(observation, add_special_tokens=False)["input_ids"]
        opening = self.glue.to_response + self.response_prefix_ids
        chunk = len(glue) + len(observation_ids) + len(opening)
        if len(trajectory.token_ids) + chunk >= self.max_context_length:
            trajectory.truncation = "context"
            return None
        trajectory.append(glue, Segment.TEMPLATE)
        trajectory.append(observation_ids, Segment.OBSERVATION)
        trajectory.append(opening, Segment.TEMPLATE)
        return observation

    def _step_actions(
        self, trajectory: Trajectory, env: Environment, turn: Turn, actions: list[str], used: list[int], index: int
    ) -> str:
        observation = ""
        for action in actions:
            if used[index] >= self.max_actions_per_trajectory:
                trajectory.truncation = "action_budget"
                break
            used[index] += 1
            observation, episode_over = step_action(trajectory, env, turn, action)
            if episode_over:
                break
        if not trajectory.done and used[index] >= self.max_actions_per_trajectory:
            trajectory.truncation = "action_budget"
        return observation

    def _format_hint(self) -> str:
        if self.enable_thinking:
            return "Reply as <think>...</think><answer>...</answer>."
        return "Reply as <answer>...</answer>."
