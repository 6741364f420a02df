"""Batch diagnostics of a StarPO run that the trainer does not log itself, computed from its trajectories.

- ``trajectory_diagnostics(trajectories)``: in-group return spread, per-turn lengths, how diverse the thinking is
  across the batch (distinct word n-grams), how much one trajectory's turns repeat each other, and how many
  responses are copies of another.
- ``reasoning_probe(model, trajectories)``: the reasoning-collapse probe after RAGEN-2 (Wang et al. 2026,
  arXiv:2604.06268): does a trajectory's first thinking identify which start state it came from? The policy scores
  every sampled thinking under every sampled start state; the retrieval accuracy and an InfoNCE estimate of the
  mutual information between input and thinking fall when the reasoning becomes an input-agnostic template, even
  while its entropy stays high.

Every name returned is documented in docs/monitoring.md. Text is split into words and punctuation (never
re-tokenized, never evaluated); the probe reads the trajectories' own token ids.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence

from ..trajectory import Segment, Trajectory

PREFIX = "monitor/"
PROBE_PREFIX = "monitor/probe/"
_WORD = re.compile(r"\w+|[^\w\s]")


def words(text: str | None) -> list[str]:
    """``text`` split into lower-cased words and punctuation marks."""
    return _WORD.findall(text.lower()) if text else []


def ngrams(tokens: Sequence[str], n: int) -> list[tuple[str, ...]]:
    """The word n-grams of ``tokens`` (none when there are fewer than ``n`` tokens)."""
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def distinct_n(texts: Iterable[str | None], n: int) -> float:
    """Distinct word n-grams over all n-grams of ``texts`` pooled (Li et al. 2016's distinct-n); NaN without any."""
    pooled = [gram for text in texts for gram in ngrams(words(text), n)]
    return len(set(pooled)) / len(pooled) if pooled else float("nan")


def jaccard(a: set, b: set) -> float:
    """``|a & b| / |a | b|`` (1.0 for two empty sets)."""
    return len(a & b) / len(a | b) if a or b else 1.0


def _shingles(text: str | None) -> set:
    """Word bigrams of ``text``, or its single word when it has one."""
    tokens = words(text)
    return set(ngrams(tokens, 2)) if len(tokens) > 1 else set(ngrams(tokens, 1))


def turn_repetition(trajectory: Trajectory) -> float | None:
    """How much a trajectory's thinking repeats itself across turns, in [0, 1]; ``None`` with fewer than 2 thoughts.

    For every turn after the first with thinking, the largest Jaccard similarity of its word bigrams to those of an
    earlier turn's thinking; averaged over those turns. 1 means every turn re-thinks an earlier thought verbatim.
    """
    thoughts = [_shingles(turn.thinking) for turn in trajectory.turns if turn.thinking]
    if len(thoughts) < 2:
        return None
    scores = [max(jaccard(thoughts[k], earlier) for earlier in thoughts[:k]) for k in range(1, len(thoughts))]
    return sum(scores) / len(scores)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def _std(values: Sequence[float]) -> float:
    """Sample standard deviation (as ``torch.std``), 0 for a single value."""
    if len(values) < 2:
        return 0.0
    mean = _mean(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def _turn_lengths(trajectory: Trajectory) -> list[tuple[int, int]]:
    """``(thinking tokens, action tokens)`` of each turn."""
    lengths = []
    for turn in trajectory.turns:
        labels = trajectory.segments[turn.response_start : turn.response_end]
        thinking = sum(label == Segment.THINKING for label in labels)
        lengths.append((thinking, sum(label == Segment.ACTION for label in labels)))
    return lengths


def trajectory_diagnostics(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """The ``monitor/*`` statistics of one batch of trajectories (all processes' trajectories, gathered).

    Groups are read from ``Trajectory.group``. A statistic with nothing to measure (no thinking, no multi-turn
    trajectory) is NaN, which the trainer's logging skips.
    """
    groups: dict[int, list[float]] = defaultdict(list)
    for trajectory in trajectories:
        groups[trajectory.group].append(trajectory.episode_return)
    turns = [turn for trajectory in trajectories for turn in trajectory.turns]
    thoughts = [turn.thinking for turn in turns if turn.thinking]
    lengths = [pair for trajectory in trajectories for pair in _turn_lengths(trajectory)]
    repetition = [r for r in (turn_repetition(t) for t in trajectories) if r is not None]
    group_stds = [_std(returns) for returns in groups.values()]
    return {
        f"{PREFIX}group_return_std_max": max(group_stds) if group_stds else float("nan"),
        f"{PREFIX}group_return_max": _mean([max(returns) for returns in groups.values()]),
        f"{PREFIX}group_return_min": _mean([min(returns) for returns in groups.values()]),
        f"{PREFIX}thinking_tokens_per_turn": _mean([thinking for thinking, _ in lengths]),
        f"{PREFIX}action_tokens_per_turn": _mean([action for _, action in lengths]),
        f"{PREFIX}response_tokens_per_turn": _mean([thinking + action for thinking, action in lengths]),
        f"{PREFIX}empty_thinking_rate": _mean([float(not turn.thinking) for turn in turns]),
        f"{PREFIX}thinking_distinct_1": distinct_n(thoughts, 1),
        f"{PREFIX}thinking_distinct_2": distinct_n(thoughts, 2),
        f"{PREFIX}response_distinct_2": distinct_n([turn.response for turn in turns], 2),
        f"{PREFIX}unique_response_fraction": (
            len({turn.response for turn in turns}) / len(turns) if turns else float("nan")
        ),
        f"{PREFIX}thinking_repetition": _mean(repetition),
    }


# -- the reasoning-collapse probe ---------------------------------------------------------------------------------


def _first_thinking(trajectory: Trajectory) -> tuple[list[int], list[int]] | None:
    """``(context, thinking)`` token ids of the first turn: everything before its response, and its thinking tokens."""
    if not trajectory.turns:
        return None
    turn = trajectory.turns[0]
    labels = trajectory.segments[turn.response_start : turn.response_end]
    thinking = [t for t, label in zip(trajectory.token_ids[turn.response_start : turn.response_end], labels)
                if label == Segment.THINKING]
    if not thinking:
        return None
    return trajectory.token_ids[: turn.response_start], thinking


def probe_sample(trajectories: Sequence[Trajectory], size: int) -> list[tuple[list[int], list[int]]]:
    """One ``(context, thinking)`` pair per distinct start state (first prompt), in batch order, at most ``size``."""
    seen, sample = set(), []
    for trajectory in trajectories:
        key = tuple(trajectory.token_ids[: trajectory.prompt_length])
        pair = _first_thinking(trajectory)
        if pair is None or key in seen:
            continue
        seen.add(key)
        sample.append(pair)
        if len(sample) == size:
            break
    return sample


def _cross_log_likelihoods(model, sample, pad_token_id: int, batch_size: int):
    """``L[i, j] = log p(thinking_i | context_j)`` under ``model``, summed over thinking tokens; a (K, K) tensor."""
    import torch

    pairs = [(i, j) for i in range(len(sample)) for j in range(len(sample))]
    device = next(model.parameters()).device
    scores = torch.empty(len(sample), len(sample))
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start : start + batch_size]
        rows = [sample[j][0] + sample[i][1] for i, j in chunk]
        width = max(len(row) for row in rows)
        input_ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
        attention = torch.zeros((len(rows), width), dtype=torch.long)
        for r, row in enumerate(rows):
            input_ids[r, : len(row)] = torch.tensor(row)
            attention[r, : len(row)] = 1
        logits = model(input_ids=input_ids.to(device), attention_mask=attention.to(device)).logits.float()
        logps = torch.log_softmax(logits[:, :-1], dim=-1)
        for r, (i, j) in enumerate(chunk):
            context, thinking = len(sample[j][0]), len(sample[i][1])
            targets = torch.tensor(sample[i][1], device=logps.device)
            positions = torch.arange(context - 1, context - 1 + thinking, device=logps.device)
            scores[i, j] = logps[r, positions, targets].sum().item()
    return scores


def reasoning_probe(
    model, trajectories: Sequence[Trajectory], *, size: int = 8, pad_token_id: int = 0, batch_size: int = 16
) -> dict[str, float]:
    """RAGEN-2's reasoning-collapse probe on up to ``size`` start states of ``trajectories``.

    One trajectory per distinct start state is taken; ``model`` (the policy, without gradient) scores the first
    turn's thinking ``z_i`` of each under each sampled context ``x_j``: ``L[i, j] = log p(z_i | x_j)``, ``K^2``
    sequences in all. Returns

    - ``monitor/probe/retrieval_accuracy``: the fraction of thoughts whose own context scores highest (chance
      ``1 / K``);
    - ``monitor/probe/mutual_information``: the InfoNCE estimate ``mean_i [L[i, i] - logsumexp_j L[i, j]] + log K``
      of I(input; thinking) in nats, at most ``log K``; near 0 for an input-agnostic template;
    - ``monitor/probe/num_inputs``: ``K``.

    All three are NaN (``num_inputs`` excepted) with fewer than two distinct start states that have thinking.
    """
    import torch

    sample = probe_sample(trajectories, size)
    result = {
        f"{PROBE_PREFIX}retrieval_accuracy": float("nan"),
        f"{PROBE_PREFIX}mutual_information": float("nan"),
        f"{PROBE_PREFIX}num_inputs": float(len(sample)),
    }
    if len(sample) < 2:
        return result
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            scores = _cross_log_likelihoods(model, sample, pad_token_id, batch_size)
    finally:
        model.train(was_training)
    k = len(sample)
    diagonal = scores.diagonal()
    result[f"{PROBE_PREFIX}retrieval_accuracy"] = (scores.argmax(dim=1) == torch.arange(k)).float().mean().item()
    result[f"{PROBE_PREFIX}mutual_information"] = (diagonal - scores.logsumexp(dim=1)).mean().item() + math.log(k)
    return result
