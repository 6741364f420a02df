"""Trajectories as one self-contained HTML page, to read what an agent saw, thought and did.

Trajectories are shown by task group, side by side, each with its return, its advantage and whether the trajectory
filter kept it for the update (as the trainer recorded them), then every turn: under the ``window`` context policy
what the model was given (collapsed), the observation (long ones collapse),
the thinking, the actions (those the environment rejected are marked) and the reward. Given the tokenizer, a
trajectory also shows its prompt (the system prompt and first observation) and every token coloured by segment, the
tokens in the loss underlined; tokens that only together make a character (a multi-byte character split by byte-level
BPE) are shown as one. Controls on the page filter by outcome, by the filter's verdict and by text, and sort groups.

The page is rendered from ``templates/trajectories.html.jinja`` with autoescaping: model output, environment text,
task ids, groups and steps are shown, never run.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..trajectory import MODEL_SEGMENTS, Segment, Trajectory

TEMPLATES = Path(__file__).parent / "templates"
LONG_OBSERVATION_LINES = 12
LONG_OBSERVATION_CHARS = 1200
"""An observation longer than this (lines or characters) is collapsed to its first line."""
_MAX_CHARACTER_TOKENS = 4  # a UTF-8 character has at most 4 bytes, so at most 4 byte-level tokens


def token_spans(tokenizer, token_ids: Sequence[int], segments: Sequence[int], trained: Sequence[bool]) -> list[dict]:
    """The tokens as spans of whole characters: ``{"text", "segment", "trained", "title"}`` each.

    A token that decodes to an incomplete character (U+FFFD, a multi-byte character split across tokens) is joined
    with the next ones of the same segment until the character is complete, so no glyph is broken.
    """
    def decode(ids: Sequence[int]) -> str:
        return tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)

    spans, start = [], 0
    while start < len(token_ids):
        end = start + 1
        text = decode(token_ids[start:end])
        while (text.endswith("\ufffd") and end < len(token_ids) and end - start < _MAX_CHARACTER_TOKENS
               and segments[end] == segments[start]):
            end += 1
            text = decode(token_ids[start:end])
        ids = ", ".join(str(i) for i in token_ids[start:end])
        spans.append({"text": text, "segment": int(segments[start]), "trained": bool(trained[start]),
                      "title": f"{Segment(segments[start]).name.lower()} · id {ids}"})
        start = end
    return spans


def _reward_class(reward: float) -> str:
    return "positive" if reward > 0 else "negative" if reward < 0 else ""


def _decode(tokenizer, ids: Sequence[int]) -> str:
    return tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)


def _turn_context(turn, tokenizer=None) -> dict[str, Any]:
    lines = turn.observation.splitlines() or [""]
    collapsed = len(lines) > LONG_OBSERVATION_LINES or len(turn.observation) > LONG_OBSERVATION_CHARS
    invalid = len(turn.actions) - turn.num_valid_actions if turn.format_ok else 0
    label = "action" if not invalid else (
        "invalid action" if invalid == len(turn.actions) else f"action ({invalid} of {len(turn.actions)} invalid)")
    return {
        "observation": turn.observation, "collapsed": collapsed, "observation_head": lines[0][:120],
        "observation_size": f"{len(lines)} line{'s' if len(lines) > 1 else ''}, {len(turn.observation)} characters",
        "thinking": turn.thinking.strip() if turn.thinking is not None else None,
        "format_ok": turn.format_ok, "format_error": turn.format_error, "response": turn.response,
        "actions": list(turn.actions), "invalid": invalid > 0, "action_label": label,
        "reward": turn.reward, "reward_class": _reward_class(turn.reward),
        # under the window context policy, the tokens this turn was generated from
        "context": _decode(tokenizer, turn.context_ids) if tokenizer is not None and turn.context_ids else None,
        "context_tokens": len(turn.context_ids or []),
    }


def _trajectory_context(trajectory: Trajectory, tokenizer) -> dict[str, Any]:
    context = {
        "outcome": "success" if trajectory.success else "failure", "success": trajectory.success,
        "episode_return": trajectory.episode_return, "return_class": _reward_class(trajectory.episode_return),
        "advantage": getattr(trajectory, "advantage", None), "kept": getattr(trajectory, "kept", None),
        "ended": trajectory.truncation or ("terminated" if trajectory.terminated else ""),
        "env_error": trajectory.env_error, "turns": [_turn_context(turn, tokenizer) for turn in trajectory.turns],
        "prompt": None, "prompt_tokens": trajectory.prompt_length, "tokens": None,
        "token_count": len(trajectory.token_ids),
    }
    if tokenizer is not None:
        context["prompt"] = _decode(tokenizer, trajectory.token_ids[: trajectory.prompt_length])
        model = {int(s) for s in MODEL_SEGMENTS}
        in_loss = context["kept"] is not False
        trained = [in_loss and i >= trajectory.prompt_length and s in model for i, s in enumerate(trajectory.segments)]
        context["tokens"] = token_spans(tokenizer, trajectory.token_ids, trajectory.segments, trained)
    return context


def _groups(trajectories, environments, steps) -> list[list[int]]:
    """Indices of ``trajectories`` by task group (environment, step, group), in order of first appearance."""
    groups: dict[tuple, list[int]] = {}
    for i, trajectory in enumerate(trajectories):
        groups.setdefault((environments[i], steps[i], trajectory.group), []).append(i)
    return list(groups.values())


def trajectories_html(
    trajectories: Sequence[Trajectory],
    *,
    title: str = "StarPO trajectories",
    environments: Sequence[str | None] | None = None,
    steps: Sequence[int | None] | None = None,
    tokenizer=None,
) -> str:
    """A complete HTML page showing ``trajectories`` by task group (optionally labelled with their environment and
    step); with ``tokenizer``, each also shows its prompt and its tokens by segment."""
    from jinja2 import Environment, FileSystemLoader, StrictUndefined

    from ..statistics import success_interval

    n = len(trajectories)
    environments = list(environments or [None] * n)
    steps = list(steps or [None] * n)
    groups = []
    for members in _groups(trajectories, environments, steps):
        returns = [trajectories[i].episode_return for i in members]
        verdicts = [getattr(trajectories[i], "kept", None) for i in members]
        first = trajectories[members[0]]
        groups.append({
            "environment": environments[members[0]], "step": steps[members[0]], "group": first.group,
            "task_id": first.task_id, "size": len(members), "returns": ", ".join(f"{r:+.3f}" for r in returns),
            "mean_return": statistics.fmean(returns), "spread": statistics.pstdev(returns),
            "kept": None if all(v is None for v in verdicts) else sum(bool(v) for v in verdicts),
            "trajectories": [_trajectory_context(trajectories[i], tokenizer) for i in members],
        })
    successes = sum(t.success for t in trajectories)
    summary = f"{n} trajectories in {len(groups)} task groups"
    if n:
        low, high = success_interval(successes / n, n)
        mean_return = sum(t.episode_return for t in trajectories) / n
        summary += f" · success {successes}/{n} (95% interval {low:.2f}–{high:.2f})"
        summary += f" · mean return {mean_return:+.3f}"
    if tokenizer is None and n:
        summary += " · no tokenizer given: prompts and tokens not shown"
    jinja = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=True, undefined=StrictUndefined)
    return jinja.get_template("trajectories.html.jinja").render(
        title=title, summary=summary, groups=groups, segments=list(Segment)
    )


def sample_groups(trajectories, sample: int | None, seed: int = 0, environments=None, steps=None) -> list[int]:
    """Indices of a seeded random sample of whole task groups, about ``sample`` trajectories (at least one group),
    in their original order; every index when ``sample`` is ``None``."""
    n = len(trajectories)
    if sample is None or sample >= n:
        return list(range(n))
    groups = _groups(trajectories, list(environments or [None] * n), list(steps or [None] * n))
    chosen, count = [], 0
    for members in random.Random(seed).sample(groups, len(groups)):
        if chosen and count + len(members) > sample:
            continue
        chosen.append(members)
        count += len(members)
    return sorted(i for members in chosen for i in members)


def write_html(
    trajectories: Sequence[Trajectory],
    path: str | Path,
    *,
    sample: int | None = None,
    seed: int = 0,
    title: str = "StarPO trajectories",
    environments: Sequence[str | None] | None = None,
    steps: Sequence[int | None] | None = None,
    tokenizer=None,
) -> Path:
    """Write an HTML page of ``trajectories`` to ``path``: all of them, or a seeded random sample of whole task
    groups holding about ``sample`` trajectories."""
    keep = sample_groups(trajectories, sample, seed, environments, steps)
    page = trajectories_html(
        [trajectories[i] for i in keep],
        title=title,
        environments=[environments[i] for i in keep] if environments else None,
        steps=[steps[i] for i in keep] if steps else None,
        tokenizer=tokenizer,
    )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
    return path


def write_store_html(store, path: str | Path, **kwargs) -> Path:
    """``write_html`` for a ``TrajectoryStore``, labelling each trajectory with its environment and step."""
    table = store.table()
    return write_html(
        store.trajectories(),
        path,
        environments=table.column("environment").to_pylist(),
        steps=table.column("step").to_pylist(),
        **kwargs,
    )
