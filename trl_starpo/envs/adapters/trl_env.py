"""A TRL ``environment_factory`` class as a StarPO text environment.

TRL's ``GRPOTrainer(environment_factory=MyEnv)`` creates one ``MyEnv()`` per rollout, calls ``reset(**row)`` with
the dataset row (its string result is appended to the prompt's last message), exposes every other public method as
a tool the model calls through its chat template, and scores the finished rollout with ``get_reward()`` and the
reward functions, which receive the environments. ``TRLEnvironmentAdapter`` plays the same class under StarPO: the
model writes one tool call per action inside ``<answer>``, either as a call (``guess(word="crane")``) or in the JSON
that chat templates use for tool calls (``{"name": "guess", "arguments": {"word": "crane"}}``, optionally inside
``<tool_call>…</tool_call>``); the tool's result is the next observation, and an answer that is not a tool call ends
the episode, as a reply without a tool call ends TRL's.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from ..base import TextEnvironment

MAX_CALL_CHARS = 4000
"""Longer answers are refused without being parsed."""

_CALL_START = re.compile(r"\s*([A-Za-z_]\w*)\s*(\(|$)")
_TOOL_CALL_TAGS = re.compile(r"\s*<tool_call>(.*)</tool_call>\s*", re.DOTALL)
_JSON_NAME = re.compile(r'\s*\{\s*"name"\s*:\s*"([A-Za-z_]\w*)"')
_RESERVED = ("reset", "get_reward")


class InvalidToolCall(ValueError):
    """An answer that names a tool but is not a call this adapter can make."""


class TRLEnvironmentAdapter(TextEnvironment):
    """Play an environment class written for TRL's ``environment_factory`` under StarPO.

    Each turn's action is either a tool call, ``name(arg=value, ...)`` with Python literals as arguments (positional
    arguments and bare words, read as strings, are accepted) or a chat template's JSON tool call,
    ``{"name": ..., "arguments": {...}}`` whose name, its first key, is a tool's (arguments may also be a JSON string,
    and the whole may sit inside ``<tool_call>…</tool_call>``), or any other text (other JSON included), the final
    answer, which ends the episode. A call that does not parse or does not fit the tool's signature is an invalid action (the episode goes
    on, the error is the observation); a tool that raises returns its error to the model as TRL does, and the action
    counts as invalid. After a tool call the episode also ends when the environment's ``done`` attribute is true.

    Rewards follow TRL's reward sources: ``get_reward()`` when the class defines it, plus each reward function with
    its weight, called as TRL calls them with ``environments=[env]``, ``prompts`` and ``completions`` (the episode so
    far as chat messages, tool calls included) and the task row's other columns, each as a one-element list. They
    are evaluated after every step and each step is rewarded with the change, so an episode's return is the rollout
    reward TRL would compute wherever the episode stops.

    Args:
        environment: An instance of the TRL environment class (one per episode played at once).
        reward_funcs: Reward functions as passed to ``GRPOTrainer(reward_funcs=...)`` (callables only).
        reward_weights: One weight per reward function (1.0 each by default).
        system_prompt: Used when the task row's ``prompt`` has no system message.
        success_threshold: An episode succeeds when its reward reaches this value.
    """

    def __init__(
        self,
        environment: Any,
        *,
        reward_funcs: Callable | Sequence[Callable] | None = None,
        reward_weights: Sequence[float] | None = None,
        system_prompt: str = "",
        success_threshold: float = 1.0,
    ):
        from transformers.utils import get_json_schema

        cls = type(environment)
        if not callable(getattr(environment, "reset", None)):
            raise ValueError(f"{cls.__name__} has no reset method; a TRL environment class must define reset(**kwargs).")
        members = dict(inspect.getmembers(cls, predicate=inspect.isfunction))
        self.environment = environment
        self.tools = {name: getattr(environment, name) for name in members
                      if name not in _RESERVED and not name.startswith("_")}
        # the tools as apply_chat_template(tools=...) takes them: the collector shows them where the template does
        self.chat_template_tools = [get_json_schema(tool) for tool in self.tools.values()]
        self.tool_schemas = [schema["function"] for schema in self.chat_template_tools]
        self.reward_funcs = [reward_funcs] if callable(reward_funcs) else list(reward_funcs or [])
        self.reward_weights = list(reward_weights) if reward_weights is not None else [1.0] * len(self.reward_funcs)
        if len(self.reward_weights) != len(self.reward_funcs):
            raise ValueError(f"{len(self.reward_weights)} reward_weights for {len(self.reward_funcs)} reward_funcs.")
        self._get_reward = getattr(environment, "get_reward") if "get_reward" in members else None
        if self._get_reward is None and not self.reward_funcs:
            raise ValueError(f"No reward source: pass reward_funcs, or give {cls.__name__} a get_reward method.")
        self.default_system_prompt = self.system_prompt = system_prompt
        self.action_description = self._describe_tools()
        self.success_threshold = success_threshold
        self._task: dict[str, Any] = {}
        self._prompt: list[dict[str, Any]] = []
        self._completion: list[dict[str, Any]] = []
        self._reward = 0.0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """``environment.reset(**row)`` with the task row, as TRL calls it; the first observation is the row's
        prompt (its last message) with the reset's text appended."""
        self._task = dict((options or {}).get("task") or {})
        observation = _text(self.environment.reset(**self._task))
        prompt = self._task.get("prompt") or ""
        messages = [dict(m) for m in prompt] if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
        system = [m["content"] for m in messages if m.get("role") == "system"]
        self.system_prompt = system[0] if system else self.default_system_prompt
        if not messages or messages[-1].get("role") == "system":
            messages.append({"role": "user", "content": ""})
        messages[-1]["content"] = _text(messages[-1]["content"]) + observation
        self._prompt, self._completion, self._reward = messages, [], 0.0
        return messages[-1]["content"], {key: self._task[key] for key in ("task_id", "seed") if key in self._task}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Make the tool call in ``action``, or take it as the final answer."""
        try:
            call = self._parse(action)
        except InvalidToolCall as error:
            observation = f"Invalid tool call: {error}. Tools: {self.action_description}"
            return observation, 0.0, False, False, self.step_info(valid=False, effective=False, success=False)
        if call is None:
            self._completion.append({"role": "assistant", "content": action.strip()})
            reward, success = self._rescore()
            return "Episode finished.", reward, True, False, self.step_info(valid=True, effective=True, success=success)
        name, arguments = call
        try:
            observation, valid = _text(_run(self.tools[name](**arguments))), True
        except Exception as error:  # TRL hands a failing tool's error back to the model; so does StarPO
            observation, valid = str({"error": str(error)}), False
        self._completion += [
            {"role": "assistant", "content": "",
             "tool_calls": [{"type": "function", "function": {"name": name, "arguments": arguments}}]},
            {"role": "tool", "name": name, "content": observation},
        ]
        reward, success = self._rescore()
        terminated = bool(getattr(self.environment, "done", False))
        return observation, reward, terminated, False, self.step_info(valid=valid, effective=valid, success=success)

    def _parse(self, text: str) -> tuple[str, dict[str, Any]] | None:
        """``(tool, arguments)`` for a tool call, ``None`` for a final answer; raises ``InvalidToolCall``."""
        if text.lstrip().startswith("<tool_call>"):  # tagged: meant as a call, so held to being one
            if len(text) > MAX_CALL_CHARS:
                raise InvalidToolCall(f"longer than {MAX_CALL_CHARS} characters")
            tagged = _TOOL_CALL_TAGS.fullmatch(text)
            if tagged is None:
                raise InvalidToolCall("write <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>")
            return self._parse_json(tagged.group(1))
        if text.lstrip().startswith("{"):  # a call only where it names a tool; other JSON is an answer
            named = _JSON_NAME.match(text)
            if named is None or named.group(1) not in self.tools:
                return None
            if len(text) > MAX_CALL_CHARS:
                raise InvalidToolCall(f"longer than {MAX_CALL_CHARS} characters")
            return self._parse_json(text)
        start = _CALL_START.match(text)
        if start is None or start.group(1) not in self.tools:
            return None
        name = start.group(1)
        if len(text) > MAX_CALL_CHARS:
            raise InvalidToolCall(f"longer than {MAX_CALL_CHARS} characters")
        if not start.group(2):
            args, kwargs = [], {}
        else:
            try:
                node = ast.parse(text.strip(), mode="eval").body
            except (SyntaxError, ValueError, RecursionError, MemoryError) as error:
                raise InvalidToolCall(f"{name}(...) is not a call: {error}") from None
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name) or node.func.id != name:
                raise InvalidToolCall(f"write one call, {name}(argument=value, ...)")
            if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
                raise InvalidToolCall("* and ** arguments are not accepted")
            args = [_literal(a) for a in node.args]
            kwargs = {keyword.arg: _literal(keyword.value) for keyword in node.keywords}
        return name, self._bind(name, args, kwargs)

    def _parse_json(self, text: str) -> tuple[str, dict[str, Any]]:
        """A chat template's tool call, ``{"name": ..., "arguments": {...}}``; raises ``InvalidToolCall``."""
        try:
            call = json.loads(text, parse_constant=_no_constant)
        except (ValueError, RecursionError) as error:
            raise InvalidToolCall(f"not a JSON tool call: {error}") from None
        if not isinstance(call, dict) or "name" not in call:
            raise InvalidToolCall('write {"name": ..., "arguments": {...}}')
        name, arguments = call["name"], call.get("arguments", call.get("parameters", {}))
        if not isinstance(name, str) or name not in self.tools:
            raise InvalidToolCall(f"no tool named {str(name)[:60]!r}; the tools are {', '.join(self.tools)}")
        if isinstance(arguments, str):  # OpenAI's form: the arguments as a JSON string
            try:
                arguments = json.loads(arguments, parse_constant=_no_constant) if arguments.strip() else {}
            except (ValueError, RecursionError) as error:
                raise InvalidToolCall(f"{name}: the arguments are not JSON: {error}") from None
        if not isinstance(arguments, dict):
            raise InvalidToolCall(f"{name}: the arguments must be a JSON object")
        return name, self._bind(name, [], arguments)

    def _bind(self, name: str, args: list, kwargs: dict) -> dict[str, Any]:
        try:
            bound = inspect.signature(self.tools[name]).bind(*args, **kwargs)
        except TypeError as error:
            raise InvalidToolCall(f"{name}: {error}") from None
        return dict(bound.arguments)

    def _rescore(self) -> tuple[float, bool]:
        """The reward of the episode so far; returns the change since the last step and whether it succeeds."""
        total = float(_run(self._get_reward())) if self._get_reward is not None else 0.0
        columns = {key: [value] for key, value in self._task.items() if key != "prompt"}
        for function, weight in zip(self.reward_funcs, self.reward_weights):
            (value,) = _run(function(prompts=[self._prompt], completions=[list(self._completion)],
                                     environments=[self.environment], **columns))
            total += weight * float(value) if value is not None else 0.0
        change, self._reward = total - self._reward, total
        return change, total >= self.success_threshold

    def _describe_tools(self) -> str:
        calls = []
        for schema in self.tool_schemas:
            properties = schema.get("parameters", {}).get("properties", {})
            arguments = ", ".join(f"{name}: {spec.get('type', 'any')}" for name, spec in properties.items())
            calls.append(f"{schema['name']}({arguments}) - {schema.get('description', '').strip().rstrip('.')}")
        return ("one tool call, written name(argument=value, ...) or as JSON {\"name\": ..., \"arguments\": {...}}: "
                + "; ".join(calls) + ". Any other answer is your final answer and ends the episode")


def from_environment_factory(environment_factory: Callable[[], Any], **kwargs: Any) -> Callable[[], TRLEnvironmentAdapter]:
    """The StarPO environment factory of a TRL one: ``StarPOTrainer(environment=from_environment_factory(MyEnv,
    reward_funcs=...))`` where TRL took ``GRPOTrainer(environment_factory=MyEnv, reward_funcs=...)``. ``kwargs``
    go to ``TRLEnvironmentAdapter``."""

    def factory() -> TRLEnvironmentAdapter:
        return TRLEnvironmentAdapter(environment_factory(), **kwargs)

    factory.__name__ = getattr(environment_factory, "__name__", "trl_environment")
    return factory


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _literal(node: ast.AST) -> Any:
    if isinstance(node, ast.Name):  # a bare word: small models often leave strings unquoted
        return node.id
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError) as error:
        raise InvalidToolCall(f"arguments must be literals (strings, numbers, lists, ...): {error}") from None


def _run(value: Any) -> Any:
    """Await ``value`` when a tool, ``get_reward`` or reward function was async, as TRL does."""
    return asyncio.run(value) if inspect.iscoroutine(value) else value


def _text(value: Any) -> str:
    """A tool result or reset observation as text: TRL's multimodal content blocks keep their text parts."""
    if value is None:
        return ""
    if isinstance(value, list):
        return "".join(part.get("text", "") for part in value if isinstance(part, dict) and part.get("type") == "text")
    return str(value)
