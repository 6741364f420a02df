"""Parsing model responses of the form ``<think>…</think><answer>…</answer>`` into thinking and actions.

Parsing never raises on model output: anything malformed comes back as a ``ParsedResponse`` with
``format_ok=False`` and an ``error`` naming what was wrong, which the collector turns into a format penalty. Its work
is linear in the length of the text: the tags are found in one scan, never by backtracking.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
_TAG = re.compile(r"</?(?:think|answer)>")


@dataclass(frozen=True)
class ParsedResponse:
    """One parsed turn.

    Attributes:
        thinking: The text inside ``<think>``, or ``None`` when absent or malformed.
        actions: The actions inside ``<answer>``, split on the separator, stripped, at most ``max_actions``.
        format_ok: Whether the response followed the format exactly.
        error: Why the format was rejected (``None`` when ``format_ok``).
        thinking_end: Character offset just past ``</think>`` (0 when there is no complete thinking span); the
            collector labels generated tokens before it as thinking and the rest as action.
        num_dropped_actions: Actions beyond ``max_actions`` that were dropped.
    """

    thinking: str | None
    actions: list[str] = field(default_factory=list)
    format_ok: bool = False
    error: str | None = None
    thinking_end: int = 0
    num_dropped_actions: int = 0


def thinking_end(text: str) -> int:
    """Offset just past the first ``</think>`` when the text opens with a thinking span, else 0."""
    stripped = text.lstrip()
    if not stripped.startswith(THINK_OPEN):
        return 0
    close = text.find(THINK_CLOSE)
    return close + len(THINK_CLOSE) if close >= 0 else 0


def split_actions(answer: str, separator: str = "||") -> list[str]:
    """Split an answer into its non-empty, stripped actions."""
    return [part.strip() for part in answer.split(separator) if part.strip()]


def parse_response(
    text: str, *, enable_thinking: bool = True, max_actions: int = 1, separator: str = "||"
) -> ParsedResponse:
    """Parse one response.

    The accepted format is exactly one ``<think>…</think>`` followed by exactly one ``<answer>…</answer>`` (only the
    answer when ``enable_thinking=False``), with nothing but whitespace around them, no nested or repeated tags and
    at least one non-empty action.
    """
    end = thinking_end(text) if enable_thinking else 0
    body = text.strip()
    tags = [(m.group(), m.start(), m.end()) for m in _TAG.finditer(body)]
    expected = [THINK_OPEN, THINK_CLOSE, ANSWER_OPEN, ANSWER_CLOSE] if enable_thinking else [ANSWER_OPEN, ANSWER_CLOSE]
    if not _spans_the_body(body, tags, enable_thinking):
        return ParsedResponse(thinking=None, error=_diagnose(text, enable_thinking), thinking_end=end)
    if [tag for tag, _, _ in tags] != expected:
        return ParsedResponse(thinking=None, error="nested or repeated tags", thinking_end=end)
    thinking = body[tags[0][2] : tags[1][1]].strip() if enable_thinking else None
    actions = split_actions(body[tags[-2][2] : tags[-1][1]], separator)
    if not actions:
        return ParsedResponse(thinking=thinking, error="empty answer", thinking_end=end)
    return ParsedResponse(
        thinking=thinking,
        actions=actions[:max_actions],
        format_ok=True,
        thinking_end=end,
        num_dropped_actions=max(0, len(actions) - max_actions),
    )


def _spans_the_body(body: str, tags: list[tuple[str, int, int]], enable_thinking: bool) -> bool:
    """Whether ``body`` reads ``<think>…</think>`` (whitespace) ``<answer>…</answer>`` for some choice of its tags,
    whatever the text between them holds: then a response that is not exactly that has nested or repeated tags."""
    first = THINK_OPEN if enable_thinking else ANSWER_OPEN
    if len(tags) < 2 or tags[0][:2] != (first, 0) or tags[-1][0] != ANSWER_CLOSE or tags[-1][2] != len(body):
        return False
    if not enable_thinking:
        return True
    return any(
        (close, opening) == (THINK_CLOSE, ANSWER_OPEN) and not body[close_end:open_start].strip()
        for (close, _, close_end), (opening, open_start, _) in zip(tags[1:-2], tags[2:-1])
    )


def _diagnose(text: str, enable_thinking: bool) -> str:
    if not text.strip():
        return "empty response"
    if ANSWER_OPEN not in text:
        return "no <answer> tag"
    if ANSWER_CLOSE not in text:
        return "unclosed <answer> tag"
    if enable_thinking and THINK_OPEN not in text:
        return "no <think> tag"
    if enable_thinking and THINK_CLOSE not in text:
        return "unclosed <think> tag"
    if not enable_thinking and THINK_OPEN in text:
        return "<think> given while thinking is disabled"
    return "text outside the tags or tags out of order"


def response_shape(enable_thinking: bool) -> str:
    """The response format with an empty answer: an example that is never a well-formed answer itself, so copying it
    earns the format penalty rather than passing for an action."""
    answer = ANSWER_OPEN + ANSWER_CLOSE
    return f"{THINK_OPEN}your reasoning{THINK_CLOSE}{answer}" if enable_thinking else answer


def format_instructions(
    action_description: str,
    *,
    enable_thinking: bool,
    max_actions: int,
    separator: str,
    example_action: str | None = None,
) -> str:
    """The response-format paragraph appended to every environment's system prompt.

    Its only filled-in answer is ``example_action``, a real action of the environment (see the ``Environment``
    protocol), when there is one: a placeholder such as ``<answer>your action</answer>`` would be a well-formed answer
    naming no action, which a model learns to copy.
    """
    text = f"Always reply in the format {response_shape(enable_thinking)}, with your action inside the answer tags"
    if example_action:
        text += f", for example {ANSWER_OPEN}{example_action}{ANSWER_CLOSE}"
    text += f". Valid actions: {action_description}."
    if max_actions > 1:
        text += f" You may give up to {max_actions} actions in one answer, separated by '{separator}'."
    return text
