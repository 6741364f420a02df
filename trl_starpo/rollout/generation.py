"""Generation backends: given the token contexts of the active trajectories, sample each one's next turn.

A backend is any object with ``generate(contexts, max_new_tokens) -> dict`` mapping trajectory index to the new
token ids (ending with an end-of-turn token unless the budget ran out). Contexts are keyed by trajectory index so
that a backend may keep per-trajectory state, such as a KV cache, across the turns of one collection; ``reset()``
is called before each collection.
"""

from __future__ import annotations

import copy
from typing import Protocol

import torch
from transformers import GenerationConfig


class GenerationBackend(Protocol):
    def reset(self) -> None: ...

    def generate(self, contexts: dict[int, list[int]], max_new_tokens: int) -> dict[int, list[int]]: ...


class TransformersGenerator:
    """Batched sampling with ``model.generate``; each turn prefills every active context in full.

    Args:
        model: A causal LM (already unwrapped from any distributed wrapper).
        pad_token_id: Used for left padding.
        eos_token_ids: Tokens that end a turn.
        generation_config: Sampling settings (temperature, top_p, ...); ``max_new_tokens`` is set per call.
    """

    def __init__(self, model, *, pad_token_id: int, eos_token_ids: list[int], generation_config=None):
        self.model = model
        self.eos_token_ids = list(eos_token_ids)
        self.pad_token_id = pad_token_id
        self.generation_config = copy.deepcopy(generation_config) if generation_config else GenerationConfig(do_sample=True)
        self.generation_config.eos_token_id = self.eos_token_ids
        self.generation_config.pad_token_id = pad_token_id

    def reset(self) -> None:
        """Nothing is kept between turns."""

    @torch.no_grad()
    def generate(self, contexts: dict[int, list[int]], max_new_tokens: int) -> dict[int, list[int]]:
        if not contexts:
            return {}
        keys = list(contexts)
        device = self.model.device
        width = max(len(contexts[k]) for k in keys)
        input_ids = torch.full((len(keys), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(keys), width), dtype=torch.long)
        for row, key in enumerate(keys):
            ids = contexts[key]
            input_ids[row, width - len(ids) :] = torch.tensor(ids)
            attention_mask[row, width - len(ids) :] = 1
        self.generation_config.max_new_tokens = max_new_tokens
        output = self.model.generate(
            input_ids=input_ids.to(device),
            attention_mask=attention_mask.to(device),
            generation_config=self.generation_config,
        )
        new_tokens = output[:, width:].tolist()
        return {key: cut_at_eos(tokens, self.eos_token_ids) for key, tokens in zip(keys, new_tokens)}


def cut_at_eos(tokens: list[int], eos_token_ids: list[int]) -> list[int]:
    """Keep tokens up to and including the first end-of-turn token (dropping the padding after it)."""
    eos = set(eos_token_ids)
    for i, token in enumerate(tokens):
        if token in eos:
            return tokens[: i + 1]
    return tokens
