"""The batched multi-turn rollout loop.

Each turn, every unfinished trajectory is generated in one batch; responses are parsed, their actions stepped in
the trajectory's own environment, and the next observation appended through the chat template as token ids.
Finished trajectories leave the batch. Model output never crashes the loop (it earns a format penalty) and an
environment that raises, breaks the protocol or overruns ``env_timeout`` ends only its own trajectory. With a
timeout, the actions of one turn are stepped in all of the batch's environments side by side, from worker threads.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any, Sequence

from ..envs import Environment
from ..trajectory import Segment, Trajectory, Turn
from .env_calls import (
    EnvironmentFault,
    check_env_timeout,
    environment_prompt,
    reset_environment,
    run_side_by_side,
    step_environment,
)
from .context import CONTEXT_POLICIES, EARLIER_TURNS_NOTE, HistoryWindow
from .generation import GenerationBackend
from .parsing import (
    ANSWER_CLOSE,
    ANSWER_OPEN,
    THINK_OPEN,
    ParsedResponse,
    format_instructions,
    parse_response,
    response_shape,
    thinking_end,
)
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


def _template_shows_tools(tokenizer) -> bool:
    """Whether the tokenizer's chat template renders tool definitions (``apply_chat_template(tools=...)``)."""
    tool = {"type": "function", "function": {"name": "starpo_probe_tool", "description": "d",
                                              "parameters": {"type": "object", "properties": {}}}}
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    try:
        shown = tokenizer.apply_chat_template(messages, tools=[tool], tokenize=False, add_generation_prompt=True)
    except Exception:  # a template that cannot take tools: they are described in the system prompt's text only
        return False
    return "starpo_probe_tool" in shown


def fail_trajectory(trajectory: Trajectory, fault: EnvironmentFault) -> None:
    """End ``trajectory`` because its environment failed (``fault.kind`` is the truncation, the message its error)."""
    logger.warning("%s for task %s: %s", fault.kind, trajectory.task_id, fault)
    trajectory.env_error = str(fault)
    trajectory.truncation = fault.kind
    trajectory.success = False


def step_action(
    trajectory: Trajectory, env: Environment, turn: Turn, action: str, timeout: float | None = None
) -> tuple[str, bool]:
    """Step one ``action`` in ``env`` and record it on ``turn`` and ``trajectory``.

    Returns the observation and whether the episode is over: the environment terminated or truncated it, or failed
    (raised, returned something the protocol does not allow, or took longer than ``timeout`` seconds), which ends the
    trajectory (``truncation="env_error"`` or ``"env_timeout"``) and never the caller.
    """
    turn.actions.append(action)
    try:
        result = step_environment(env, action, timeout)
    except EnvironmentFault as fault:
        fail_trajectory(trajectory, fault)
        return "", True
    turn.reward += result.reward
    turn.action_rewards.append(result.reward)
    turn.next_state_key = result.state_key
    turn.num_valid_actions += result.valid
    turn.num_effective_actions += result.effective
    trajectory.success = result.success
    if result.terminated or result.truncated:
        trajectory.terminated = result.terminated
        if result.truncated and not result.terminated:
            trajectory.truncation = "env_truncated"
        return result.observation, True
    return result.observation, False


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
        max_context_length: Tokens per trajectory, prompt included (``"context"``); under ``window``, tokens of
            one turn's context and response.
        format_penalty: Added to a turn's reward when its response is malformed.
        invalid_action_penalty: Added (once) to a turn's reward when the environment reports an action of it invalid
            (``info["action_is_valid"]`` False); ``None`` means ``format_penalty``, as in RAGEN, so that a
            well-formed answer naming no action never beats trying one.
        action_separator: Separator between actions in one answer.
        prefill_opening_tag: Start every response with ``<think>`` (``<answer>`` without thinking) as template
            tokens, so the model continues inside the format; small models rarely open it on their own.
        env_timeout: Seconds one ``reset`` or ``step`` call may take before its trajectory ends as
            ``"env_timeout"`` (``None``: no limit). Its environment must then not be reused (see
            ``EnvironmentPool``). With a timeout, a turn's steps run in the batch's environments side by side, so
            they must not share mutable state across instances.
        context_policy: ``"full"``: every turn sees the whole episode so far; ``"window"``: the system prompt, the
            task and the last ``history_turns`` turns (``trl_starpo.rollout.context``), each turn recording the
            tokens it was given in ``Turn.context_ids``.
        history_turns: Turns a ``window`` context keeps (the last of them ends with the current observation).
        history_thinking: Keep earlier turns' thinking in a ``window`` context (else only their answers).
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
        invalid_action_penalty: float | None = None,
        action_separator: str = "||",
        prefill_opening_tag: bool = True,
        env_timeout: float | None = None,
        context_policy: str = "full",
        history_turns: int = 2,
        history_thinking: bool = False,
    ):
        check_env_timeout(env_timeout)
        if context_policy not in CONTEXT_POLICIES:
            raise ValueError(f"context_policy must be one of {CONTEXT_POLICIES}, got {context_policy!r}.")
        self.tokenizer = tokenizer
        self.enable_thinking = enable_thinking
        self.max_turns = max_turns
        self.max_actions_per_turn = max_actions_per_turn
        self.max_actions_per_trajectory = max_actions_per_trajectory or max_turns * max_actions_per_turn
        self.max_tokens_per_turn = max_tokens_per_turn
        self.max_context_length = max_context_length
        self.format_penalty = format_penalty
        self.invalid_action_penalty = format_penalty if invalid_action_penalty is None else invalid_action_penalty
        self.action_separator = action_separator
        self.env_timeout = env_timeout
        self.windowed = context_policy == "window"
        self.history_turns = history_turns
        self.history_thinking = history_thinking
        self.glue = ChatGlue.from_tokenizer(tokenizer)
        self.response_prefix = (THINK_OPEN if enable_thinking else ANSWER_OPEN) if prefill_opening_tag else ""
        self.response_prefix_ids = tokenizer(self.response_prefix, add_special_tokens=False)["input_ids"]
        self.eos_token_ids = {tokenizer.eos_token_id}
        self.template_shows_tools = _template_shows_tools(tokenizer)
        self.last_timing: dict[str, float] = {"generation": 0.0, "environment": 0.0}

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
        row so they share a start state. ``last_timing`` then holds the seconds spent generating and in the
        environments (``{"generation": ..., "environment": ...}``; the start's rendering counts with the resets).
        """
        groups = list(groups) if groups is not None else list(range(len(tasks)))
        generator.reset()
        self.last_timing = timing = {"generation": 0.0, "environment": 0.0}
        trajectories, last_observation, windows, actions_used = [], [], [], [0] * len(tasks)
        start = time.perf_counter()
        for env, task, group in zip(environments, tasks, groups, strict=True):
            trajectory, observation, window = self._start(env, task, group)
            trajectories.append(trajectory)
            last_observation.append(observation)
            windows.append(window)
        timing["environment"] += time.perf_counter() - start

        for _ in range(self.max_turns):
            contexts = {}
            for i, trajectory in enumerate(trajectories):
                if trajectory.done:
                    continue
                context = windows[i].context() if self.windowed else trajectory.token_ids
                # a turn squeezed below its token budget would end malformed and be penalized for the context
                if self.max_context_length - len(context) < self.max_tokens_per_turn:
                    trajectory.truncation = "context"
                    continue
                contexts[i] = context
            if not contexts:
                break
            start = time.perf_counter()
            responses = generator.generate(contexts, self.max_tokens_per_turn)
            timing["generation"] += time.perf_counter() - start
            logprobs = getattr(generator, "last_logprobs", None) or {}
            played = {
                i: self._record_response(trajectories[i], ids[: self.max_tokens_per_turn], last_observation[i],
                                         logprobs.get(i), contexts[i] if self.windowed else None)
                for i, ids in responses.items()
            }
            steps = {
                i: partial(self._step_actions, trajectories[i], environments[i], turn, actions, actions_used, i)
                for i, (turn, actions, _) in played.items()
                if turn.format_ok
            }
            start = time.perf_counter()
            observations = dict(zip(steps, run_side_by_side(list(steps.values()), self.env_timeout is not None)))
            timing["environment"] += time.perf_counter() - start
            for i, (turn, _, ended) in played.items():
                if not turn.format_ok:
                    observations[i] = f"Invalid response ({turn.format_error}). {self._format_hint()}\n"
                    observations[i] += _current_state(trajectories[i])
                if self._append_observation(trajectories[i], observations[i], ended, windows[i]):
                    last_observation[i] = observations[i]
        for trajectory in trajectories:
            if not trajectory.done:
                trajectory.truncation = "max_turns"
        return trajectories

    def _start(self, env: Environment, task: dict[str, Any], group: int) -> tuple[Trajectory, str, HistoryWindow | None]:
        trajectory = Trajectory(task_id=str(task.get("task_id", group)), group=group)
        observation, system_prompt, action_description = "", "", ""
        try:  # the prompt after the reset: an environment may take it from the task row (a TRL class's does)
            observation, trajectory.start_state_key = reset_environment(env, task, self.env_timeout)
            system_prompt, action_description = environment_prompt(env)
        except EnvironmentFault as fault:  # a broken environment fails its trajectory, never the run
            fail_trajectory(trajectory, fault)
        instructions = format_instructions(
            action_description,
            enable_thinking=self.enable_thinking,
            max_actions=self.max_actions_per_turn,
            separator=self.action_separator,
            example_action=getattr(env, "example_action", None),
        )
        messages = [
            {"role": "system", "content": f"{system_prompt}\n{instructions}".strip()},
            {"role": "user", "content": observation},
        ]
        # an environment with tools (a TRL environment_factory class) has them shown as its chat template shows tools
        tools = getattr(env, "chat_template_tools", None) if self.template_shows_tools else None
        prompt_ids = self._render(messages, tools)
        trajectory.append(prompt_ids, Segment.PROMPT)
        trajectory.prompt_length = len(trajectory.token_ids)
        trajectory.append(self.response_prefix_ids, Segment.TEMPLATE)
        window = None
        if self.windowed:
            note = EARLIER_TURNS_NOTE.format(count=self.history_turns)
            cut = [messages[0], {"role": "user", "content": f"{observation}\n\n{note}"}]
            window = HistoryWindow(prompt_ids, self._render(cut, tools), self.response_prefix_ids, self.history_turns)
        return trajectory, observation, window

    def _render(self, messages: list[dict[str, str]], tools: list[dict] | None = None) -> list[int]:
        prompt = self.tokenizer.apply_chat_template(messages, tools=tools or None, tokenize=False,
                                                    add_generation_prompt=True)
        return self.tokenizer(prompt, add_special_tokens=False)["input_ids"]

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

    def _record_response(
        self,
        trajectory: Trajectory,
        response_ids: list[int],
        last_observation: str,
        logprobs: list[float] | None = None,
        context: list[int] | None = None,
    ) -> tuple[Turn, list[str], bool]:
        """Append one response and open its turn (with the format penalty when it is malformed); ``context``: the
        tokens it was generated from, where they are not the trajectory's own (``window``).

        Returns the turn, the actions to step and whether the response ended with an end-of-turn token.
        """
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
            context_ids=list(context) if context is not None else None,
        )
        trajectory.turns.append(turn)
        if not parsed.format_ok:
            turn.reward += self.format_penalty
            turn.penalty += self.format_penalty
        ended = bool(response_ids) and response_ids[-1] in self.eos_token_ids
        return turn, parsed.actions, ended

    def _append_observation(
        self, trajectory: Trajectory, observation: str, ended: bool, window: HistoryWindow | None = None
    ) -> bool:
        """Append the template glue and the next observation unless the episode is over (and, under ``window``,
        the turn to the window); returns whether it went on."""
        if trajectory.done:
            return False
        if len(trajectory.turns) >= self.max_turns:
            trajectory.truncation = "max_turns"
            return False
        glue = self.glue.open_turn if ended else self.glue.close_turn
        observation_ids = self.tokenizer(observation, add_special_tokens=False)["input_ids"]
        opening = self.glue.to_response + self.response_prefix_ids
        if window is not None:
            piece = self._shown_response(trajectory, glue) + observation_ids + self.glue.to_response
            too_long = window.next_length(piece) + self.max_tokens_per_turn > self.max_context_length
        else:
            chunk = len(glue) + len(observation_ids) + len(opening)
            too_long = len(trajectory.token_ids) + chunk + self.max_tokens_per_turn > self.max_context_length
        if too_long:
            trajectory.truncation = "context"
            return False
        if window is not None:
            window.add_turn(piece)
        trajectory.append(glue, Segment.TEMPLATE)
        trajectory.append(observation_ids, Segment.OBSERVATION)
        trajectory.append(opening, Segment.TEMPLATE)
        return True

    def _shown_response(self, trajectory: Trajectory, glue: list[int]) -> list[int]:
        """The last turn as later ``window`` contexts show it, with the glue that closes it: the tokens sampled
        (after the prefilled opening tag), or without ``history_thinking`` only its answer, tokenized again (none
        when its thinking never closed)."""
        turn = trajectory.turns[-1]
        cut = 0
        if self.enable_thinking and not self.history_thinking:
            cut = thinking_end(turn.response)
            if not cut and turn.response.lstrip().startswith(THINK_OPEN):
                cut = len(turn.response)
        if not cut:
            sampled = trajectory.token_ids[turn.response_start : turn.response_end]
            return self.response_prefix_ids + sampled + glue
        answer = turn.response[cut:].strip()
        return self.tokenizer(answer, add_special_tokens=False)["input_ids"] + self.glue.close_turn

    def _step_actions(
        self, trajectory: Trajectory, env: Environment, turn: Turn, actions: list[str], used: list[int], index: int
    ) -> str:
        observation, invalid = "", False
        for action in actions:
            if used[index] >= self.max_actions_per_trajectory:
                trajectory.truncation = "action_budget"
                break
            used[index] += 1
            valid_before = turn.num_valid_actions
            observation, episode_over = step_action(trajectory, env, turn, action, self.env_timeout)
            invalid |= trajectory.env_error is None and turn.num_valid_actions == valid_before
            if episode_over:
                break
        if invalid:
            turn.reward += self.invalid_action_penalty
            turn.penalty += self.invalid_action_penalty
        if not trajectory.done and used[index] >= self.max_actions_per_trajectory:
            trajectory.truncation = "action_budget"
        return observation

    def _format_hint(self) -> str:
        return f"Reply in the format {response_shape(self.enable_thinking)}, with your action inside the answer tags."
