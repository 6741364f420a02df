"""Step-wise training samples: under the ``window`` context policy, every turn is its own sample.

A sample is exactly the context the turn was generated from (``Turn.context_ids``) followed by the tokens it
sampled. The trajectory keeps its turns together: returns, groups, advantages, the critics and the store all work on
the episode's own layout (``Trajectory.token_ids``, where column ``j`` of the completion is token
``prompt_length + j``), and these helpers move per-token quantities between that layout and the samples.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .trajectory import MODEL_SEGMENTS, Segment, Trajectory


@dataclass(frozen=True)
class TurnSample:
    """One turn as a training sample.

    Attributes:
        row: The trajectory's row in the batch.
        turn: The turn's index in its trajectory.
        start: The turn's first completion column in the trajectory's layout.
        prompt: The tokens the turn was generated from.
        completion: The tokens it sampled.
        segments: Their segment labels (thinking or action).
    """

    row: int
    turn: int
    start: int
    prompt: list[int]
    completion: list[int]
    segments: list[int]


def turn_samples(trajectories: list[Trajectory]) -> list[TurnSample]:
    """One sample per turn that generated tokens, in trajectory then turn order (turns without a recorded context,
    played under ``full``, are refused)."""
    samples = []
    for row, trajectory in enumerate(trajectories):
        for index, turn in enumerate(trajectory.turns):
            if turn.response_end <= turn.response_start:
                continue
            if turn.context_ids is None:
                raise ValueError(
                    f"Turn {index} of task {trajectory.task_id} has no recorded context: it was not played under "
                    "context_policy='window'."
                )
            span = slice(turn.response_start, turn.response_end)
            samples.append(TurnSample(row, index, turn.response_start - trajectory.prompt_length,
                                      list(turn.context_ids), trajectory.token_ids[span], trajectory.segments[span]))
    return samples


def padded_count(count: int, multiple: int, counts_elsewhere: list[int] | None = None) -> int:
    """Rows a process feeds the loss: the most samples any process has (``counts_elsewhere`` holds every
    process's), rounded up to a multiple of ``multiple`` (GRPOTrainer splits a batch into that many equal parts)."""
    most = max([count, *(counts_elsewhere or [])], default=count)
    return max(multiple, -(-most // multiple) * multiple)


def padded_rows(prompts: list[list[int]], completions: list[list[int]], segments: list[list[int]], pad_id: int,
                multiple: int | None = None) -> dict:
    """GRPO's prompt / completion layout: prompts left-padded, completions and their segment labels right-padded,
    ``tool_mask`` 1 on the model's tokens. An empty completion becomes one pad token (a template token), so every
    row's shapes and attention stay valid."""
    from trl.trainer.utils import pad

    prompt_rows = [torch.tensor(p, dtype=torch.long) for p in prompts]
    completion_rows = [torch.tensor(c or [pad_id], dtype=torch.long) for c in completions]
    label_rows = [torch.tensor(s or [int(Segment.TEMPLATE)], dtype=torch.long) for s in segments]
    tensors = {
        "prompt_ids": pad(prompt_rows, padding_value=pad_id, padding_side="left", pad_to_multiple_of=multiple),
        "prompt_mask": pad([torch.ones_like(p) for p in prompt_rows], padding_value=0, padding_side="left",
                           pad_to_multiple_of=multiple),
        "completion_ids": pad(completion_rows, padding_value=pad_id, padding_side="right",
                              pad_to_multiple_of=multiple),
        "completion_mask": pad([torch.ones_like(c) for c in completion_rows], padding_value=0, padding_side="right",
                               pad_to_multiple_of=multiple),
        "segments": pad(label_rows, padding_value=int(Segment.TEMPLATE), padding_side="right",
                        pad_to_multiple_of=multiple),
    }
    tensors["tool_mask"] = torch.isin(tensors["segments"], torch.tensor([int(s) for s in MODEL_SEGMENTS])).long()
    return tensors


def sample_tensors(samples: list[TurnSample], rows: int, pad_id: int, multiple: int | None = None) -> dict:
    """:func:`padded_rows` of ``samples``, plus ``rows - len(samples)`` padding rows (one pad token of prompt and of
    completion, attended to so that every row's attention is well defined, with nothing to train)."""
    filler = rows - len(samples)
    if filler < 0:
        raise ValueError(f"{len(samples)} samples do not fit {rows} rows.")
    return padded_rows([s.prompt for s in samples] + [[pad_id]] * filler,
                       [s.completion for s in samples] + [[pad_id]] * filler,
                       [s.segments for s in samples] + [[int(Segment.TEMPLATE)]] * filler, pad_id, multiple)


def per_sample(values: torch.Tensor, samples: list[TurnSample], rows: int, width: int) -> torch.Tensor:
    """``(rows, width)``: each sample's columns of the trajectories' ``(B, T)`` ``values`` (0 on padding)."""
    out = torch.zeros(rows, width, dtype=values.dtype, device=values.device)
    for index, sample in enumerate(samples):
        length = len(sample.completion)
        out[index, :length] = values[sample.row, sample.start : sample.start + length]
    return out


def per_row(values: torch.Tensor, samples: list[TurnSample], rows: int) -> torch.Tensor:
    """``(rows,)``: each sample's trajectory's entry of the per-trajectory ``values`` (``False``/0 on padding)."""
    out = torch.zeros(rows, dtype=values.dtype, device=values.device)
    if samples:
        out[: len(samples)] = values[torch.tensor([s.row for s in samples], device=values.device)]
    return out


def states_in_trajectory_layout(states: torch.Tensor, samples: list[TurnSample], num_trajectories: int,
                                length: int) -> torch.Tensor:
    """Hidden states of the samples ``(S, W + 1, H)`` (``[:, j]`` precedes completion token ``j``; ``[:, len]``
    follows the last) moved to the trajectories' layout ``(B, length, H)``: a turn's states at its own columns and
    the one after its last token at the column that follows (a template token). Other columns are 0."""
    out = states.new_zeros(num_trajectories, length, states.size(-1))
    for index, sample in enumerate(samples):
        count = len(sample.completion) + 1
        out[sample.row, sample.start : sample.start + count] = states[index, :count]
    return out


_PROMPT_KEYS = ("prompt_ids", "prompt_mask")


def row_chunks(batch: dict, size: int, loss_type: str) -> list[dict]:
    """Split one micro-batch of turn rows into chunks of ``size`` rows, each trimmed to its own longest prompt and
    completion, so that a turn's training cost does not depend on how many turns the episodes had.

    Back-propagating every chunk's loss gives the micro-batch's gradient: each chunk carries ``chunk_share``, the
    weight of its policy loss in the micro-batch's (its share of the rows for the row-averaged ``grpo`` and
    ``dr_grpo`` losses, of the model tokens for ``bnpo``, 1 for ``dapo``, which already divides by the whole batch's
    tokens), and ``token_share``, its share of the model tokens, the weight of the per-token means TRL adds to the
    loss (the entropy bonus, a mixture-of-experts router's auxiliary loss).
    """
    rows = batch["prompt_ids"].size(0)
    width = batch["completion_ids"].size(1)
    loss_mask = batch["completion_mask"] * batch["tool_mask"]
    chunks = []
    for start in range(0, rows, size):
        part = slice(start, start + size)
        prompt_from = int(batch["prompt_mask"][part].any(dim=0).int().argmax())
        completion_to = int(batch["completion_mask"][part].any(dim=0).nonzero().max()) + 1
        chunk = {}
        for key, value in batch.items():
            if not isinstance(value, torch.Tensor) or value.dim() == 0:
                chunk[key] = value
            elif key in _PROMPT_KEYS:
                chunk[key] = value[part, prompt_from:]
            elif value.dim() >= 2 and value.size(1) == width:
                chunk[key] = value[part, :completion_to]
            else:
                chunk[key] = value[part]
        token_share = (loss_mask[part].sum() / loss_mask.sum().clamp(min=1)).item()
        if loss_type in ("grpo", "dr_grpo"):
            share = chunk["prompt_ids"].size(0) / rows
        elif loss_type == "bnpo":
            share = token_share
        else:
            share = 1.0
        chunk["chunk_share"], chunk["token_share"] = share, token_share
        chunks.append(chunk)
    return chunks
