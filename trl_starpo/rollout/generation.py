"""Generation backends: given the token contexts of the active trajectories, sample each one's next turn.

A backend is any object with ``generate(contexts, max_new_tokens) -> dict`` mapping trajectory index to the new
token ids: exactly the tokens sampled for that trajectory, ending with the one that stopped it (an end-of-turn token,
or the end of a stop string) unless the budget ran out, and never the padding a batched decode feeds a row that
stopped early, since every returned token is trained as the model's own. A backend that knows the sampling
log-probabilities exposes them as ``last_logprobs`` (key to one float per returned token). Contexts are keyed by
trajectory index so that a backend may keep per-trajectory state, such as a KV cache, across the turns of one
collection; ``reset()`` is called before each collection.
"""

from __future__ import annotations

import copy
from typing import Protocol

import torch
from transformers import (
    DynamicCache,
    DynamicLayer,
    GenerationConfig,
    LogitsProcessorList,
    MinNewTokensLengthLogitsProcessor,
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from .attention import decode_attention


class GenerationBackend(Protocol):
    def reset(self) -> None: ...

    def generate(self, contexts: dict[int, list[int]], max_new_tokens: int) -> dict[int, list[int]]: ...


class TransformersGenerator:
    """Batched sampling with ``model.generate``; each turn prefills every active context in full.

    The simple reference backend (tests and benchmarks compare against it); ``CachedTransformersGenerator`` does the
    same work without re-reading the history every turn and is what the trainer uses.

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
        # model.generate stops a row only at an end-of-turn token (it has no tokenizer for stop strings, and refuses
        # a generation config that names some) or at the budget, so all padding follows an end-of-turn token.
        return {key: cut_at_eos(tokens, self.eos_token_ids) for key, tokens in zip(keys, new_tokens)}


class CachedTransformersGenerator:
    """Batched sampling that keeps every trajectory's KV cache across the turns of one collection.

    The first call after :meth:`reset` left-pads the contexts and prefills them once. Each later call checks that
    every context extends what its cache row already holds (its earlier context and the tokens fed back while
    decoding) and feeds only the rest: typically the end of the last response and the appended observation. These
    suffixes differ in length, so they go in as one right-aligned chunk whose padding sits inside the sequence,
    masked out by the 2-D attention mask, with position ids that count only attended tokens; each row thus sees
    exactly the sequence a fresh forward pass over its context would. Rows missing from a call are dropped from the
    cache. A context that departs from its cached row (under ``context_policy="window"``, once earlier turns are
    dropped) keeps the part it shares with it, the system prompt and the task: the cache is cut back to the shortest
    such part over the rows and each row is fed the rest. A key the cache has not seen, or a context that shares
    nothing, makes the whole batch re-prefill from scratch, so the result never depends on the cache being
    reusable.

    Decoding is a token-by-token loop honouring ``do_sample``, ``temperature``, ``top_k``, ``top_p``, ``min_p``,
    ``repetition_penalty`` and ``min_new_tokens`` of the generation config; other logits processors are not
    applied. A row stops at an end-of-turn token, once its new tokens contain one of ``stop_strings``, or after
    ``max_new_tokens``; a row that stopped is fed masked-out padding until the whole batch is done, and that padding
    is never returned: each row's response is exactly the tokens sampled for it, up to and including its stop.
    A model that attends with ``sdpa`` decodes its one-token steps with ``rollout.attention.grouped_decode_attention``
    (float32 matmuls on a CPU in bf16 or fp16, where torch's kernel is slow; SDPA itself everywhere else).

    Padding inside the sequence shifts cache slots against positions, so models with sliding-window attention
    (which windows over slots) are only exact while no padding falls inside a window; full-attention models are exact.

    Args:
        model: A causal LM (already unwrapped from any distributed wrapper) whose forward accepts a ``cache``.
        pad_token_id: Fills padding; it is never attended to.
        eos_token_ids: Tokens that end a turn.
        generation_config: Sampling settings (temperature, top_p, ...); ``max_new_tokens`` is set per call.
        stop_strings: Texts that end a turn as soon as they are generated (the stop text is kept).
        tokenizer: Decodes new tokens to look for ``stop_strings``; required with them.
    """

    def __init__(
        self,
        model,
        *,
        pad_token_id: int,
        eos_token_ids: list[int],
        generation_config=None,
        stop_strings: list[str] | tuple[str, ...] = (),
        tokenizer=None,
    ):
        self.model = model
        self.pad_token_id = pad_token_id
        self.eos_token_ids = list(eos_token_ids)
        self.generation_config = copy.deepcopy(generation_config or GenerationConfig(do_sample=True))
        if (self.generation_config.num_beams or 1) > 1:
            raise ValueError("CachedTransformersGenerator samples one sequence per context; set num_beams=1.")
        if stop_strings and tokenizer is None:
            raise ValueError("stop_strings need the tokenizer to decode new tokens.")
        self.stop_strings = tuple(stop_strings)
        self.tokenizer = tokenizer
        # A stop string spans at most one token per character, plus one for a token that straddles its start.
        self._stop_window = max((len(stop) for stop in self.stop_strings), default=0) + 1
        self.reset()

    def reset(self) -> None:
        """Forget every cached row; the next call prefills its contexts from scratch."""
        self._cache: DynamicCache | None = None
        self._keys: list[int] = []
        # One row per cached trajectory, one column per cache slot: the token fed there, and whether it is part of
        # the row's sequence (0 for padding).
        self._ids: torch.Tensor | None = None
        self._mask: torch.Tensor | None = None
        self.last_logprobs: dict[int, list[float]] = {}

    @torch.no_grad()
    def generate(self, contexts: dict[int, list[int]], max_new_tokens: int) -> dict[int, list[int]]:
        """Sample the next turn of every context; returns each key's sampled tokens, up to and including the one that
        stopped it (an end-of-turn token, or the token completing a stop string), or ``max_new_tokens`` of them.

        ``last_logprobs`` then holds, per key, the log-probability of each returned token under the distribution it
        was sampled from (after temperature, top-k / top-p and the other processors), one per token.
        """
        self.last_logprobs = {}
        if not contexts or max_new_tokens < 1:
            return {key: [] for key in contexts}
        suffixes = self._reuse_cache(contexts)
        if suffixes is None:
            self.reset()
            suffixes = [contexts[key] for key in contexts]
        self._keys = list(contexts)
        try:
            with decode_attention(self.model):
                new_tokens, logprobs = self._decode(suffixes, max_new_tokens)
        except BaseException:
            self.reset()  # the cache may hold tokens that were never recorded
            raise
        self.last_logprobs = dict(zip(self._keys, logprobs))
        return dict(zip(self._keys, new_tokens))

    def _reuse_cache(self, contexts: dict[int, list[int]]) -> list[list[int]] | None:
        """Keep the cache rows of ``contexts``, in their order, and return what each context adds to its row.

        A context that extends its row keeps the whole row. One that departs from it (a ``window`` context once
        earlier turns are dropped) keeps what it shares with the row, its system prompt and task, say: the cache is
        cut back, for every row, to the first slot after the shortest shared part, and each row is fed the rest of its
        context. Returns ``None``, leaving the cache untouched, when nothing can be kept (a key the cache has not
        seen, a context sharing nothing, a cache layer that cannot be cut back).
        """
        if self._cache is None or any(key not in self._keys for key in contexts):
            return None
        rows = [self._keys.index(key) for key in contexts]
        keep = self._ids.shape[1]  # slots every row keeps
        for row, key in zip(rows, contexts):
            slots = self._mask[row].nonzero().squeeze(1)
            held, context = self._ids[row, slots].tolist(), contexts[key]
            # at least the context's last token is fed again: its logits start the turn
            shared = shared_prefix_length(held, context[:-1])
            if shared < len(held):
                keep = min(keep, int(slots[shared - 1]) + 1 if shared else 0)
        if keep == 0 or (keep < self._ids.shape[1] and not cut_back(self._cache, keep)):
            return None
        if rows != list(range(len(self._keys))):
            index = torch.tensor(rows, device=self._ids.device)
            self._cache.batch_select_indices(index)
            self._ids, self._mask = self._ids[index], self._mask[index]
        self._ids, self._mask = self._ids[:, :keep], self._mask[:, :keep]
        kept = self._mask.sum(dim=1).tolist()
        return [contexts[key][count:] for key, count in zip(contexts, kept)]

    def _decode(self, suffixes: list[list[int]], max_new_tokens: int) -> tuple[list[list[int]], list[list[float]]]:
        """Feed each row its suffix, then sample up to ``max_new_tokens`` tokens per row; returns each row's sampled
        tokens (through its stop, without the padding fed to it afterwards) and their sampling log-probs."""
        device = self.model.device
        width = max(len(suffix) for suffix in suffixes)
        chunk = torch.full((len(suffixes), width), self.pad_token_id, dtype=torch.long)
        chunk_mask = torch.zeros((len(suffixes), width), dtype=torch.long)
        for row, suffix in enumerate(suffixes):
            chunk[row, width - len(suffix) :] = torch.tensor(suffix)
            chunk_mask[row, width - len(suffix) :] = 1
        chunk, chunk_mask = chunk.to(device), chunk_mask.to(device)
        if self._cache is None:
            self._cache = growing_cache(self.model.config)
            ids, mask = chunk, chunk_mask
        else:
            ids, mask = torch.cat([self._ids, chunk], dim=1), torch.cat([self._mask, chunk_mask], dim=1)
        positions = (mask.cumsum(dim=1)[:, -width:] - 1).clamp(min=0)
        logits = self._forward(chunk, mask, positions)
        if self._cache.get_seq_length() != ids.shape[1]:
            raise RuntimeError(
                "The model did not fill the KV cache passed as `cache`; CachedTransformersGenerator needs a model "
                "(and transformers version) whose forward takes `cache=` and `use_cache=True`."
            )

        processors = self._logits_processors(prompt_width=ids.shape[1], device=device)
        eos = torch.tensor(self.eos_token_ids, device=device)
        lengths = mask.sum(dim=1)
        finished = torch.zeros(len(suffixes), dtype=torch.bool, device=device)
        num_sampled = torch.zeros(len(suffixes), dtype=torch.long, device=device)
        sampled, sampled_logprobs = [], []
        penalized = any(isinstance(p, RepetitionPenaltyLogitsProcessor) for p in processors)
        for step in range(max_new_tokens):
            # Repeating a row's last token over its padding keeps the padding out of the repetition penalty.
            seen = torch.where(mask.bool(), ids, ids[:, -1:]) if penalized else ids
            scores = processors(seen, logits)
            next_tokens = self._pick(scores).masked_fill(finished, self.pad_token_id)
            sampled.append(next_tokens)
            sampled_logprobs.append(scores.log_softmax(dim=-1).gather(1, next_tokens[:, None]).squeeze(1))
            real = ~finished
            num_sampled += real
            finished = finished | torch.isin(next_tokens, eos)
            if self.stop_strings:
                finished = finished | self._stopped(sampled, real)
            if finished.all() or step == max_new_tokens - 1:
                break
            ids = torch.cat([ids, next_tokens[:, None]], dim=1)
            mask = torch.cat([mask, real[:, None].long()], dim=1)
            logits = self._forward(next_tokens[:, None], mask, lengths[:, None])
            lengths = lengths + real
        self._ids, self._mask = ids, mask
        counts = num_sampled.tolist()
        tokens = [row[:n] for row, n in zip(torch.stack(sampled, dim=1).tolist(), counts)]
        logprobs = [row[:n] for row, n in zip(torch.stack(sampled_logprobs, dim=1).tolist(), counts)]
        return tokens, logprobs

    def _forward(self, input_ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Run ``input_ids`` through the model on top of the cache; returns the last position's logits in float32."""
        output = self.model(
            input_ids=input_ids,
            attention_mask=mask,
            position_ids=positions,
            cache=self._cache,
            use_cache=True,
            logits_to_keep=1,
        )
        return output.logits[:, -1, :].float()

    def _logits_processors(self, prompt_width: int, device) -> LogitsProcessorList:
        """The processors ``model.generate`` would build from the supported settings, in the same order."""
        config = self.generation_config
        processors = LogitsProcessorList()
        if config.repetition_penalty is not None and config.repetition_penalty != 1.0:
            processors.append(RepetitionPenaltyLogitsProcessor(config.repetition_penalty))
        if config.min_new_tokens:
            processors.append(
                MinNewTokensLengthLogitsProcessor(
                    prompt_width, config.min_new_tokens, self.eos_token_ids, device=device
                )
            )
        if config.do_sample:
            if config.temperature is not None and config.temperature != 1.0:
                processors.append(TemperatureLogitsWarper(config.temperature))
            if config.top_k:
                processors.append(TopKLogitsWarper(config.top_k))
            if config.top_p is not None and config.top_p < 1.0:
                processors.append(TopPLogitsWarper(config.top_p))
            if config.min_p is not None:
                processors.append(MinPLogitsWarper(config.min_p))
        return processors

    def _stopped(self, sampled: list[torch.Tensor], live: torch.Tensor) -> torch.Tensor:
        """Which live rows' latest tokens complete a stop string."""
        tails = torch.stack(sampled[-self._stop_window :], dim=1).tolist()
        hits = [
            is_live and any(stop in self.tokenizer.decode(tail) for stop in self.stop_strings)
            for tail, is_live in zip(tails, live.tolist())
        ]
        return torch.tensor(hits, device=live.device)

    def _pick(self, scores: torch.Tensor) -> torch.Tensor:
        if self.generation_config.do_sample:
            return sample_by_inverse_cdf(scores.softmax(dim=-1))
        return scores.argmax(dim=-1)


def sample_by_inverse_cdf(probs: torch.Tensor) -> torch.Tensor:
    """One token per row of ``probs`` (non-negative rows, each with some mass), drawn from that row's distribution.

    ``torch.multinomial`` draws one exponential variate per vocabulary entry, which costs more than a small model's
    whole decode step on a CPU; one uniform per row placed on the cumulative distribution draws from the same
    distribution. The running sum is taken in float64, so that even tokens a float32 sum would absorb keep their
    share. A token of zero probability is never returned: should rounding (the uniform at the very top, or a parallel
    scan's order of additions) land a draw on one, the nearest token to its left with probability above zero is
    taken instead.
    """
    cdf = probs.double().cumsum(dim=-1)
    total = cdf[:, -1:].contiguous()
    if not (torch.isfinite(total).all() and (total > 0).all()):
        raise ValueError("Cannot sample a next token: a row of the model's next-token distribution is not finite or "
                         "has no mass (the model produced NaN or infinite logits).")
    picks = torch.searchsorted(cdf, torch.rand_like(total) * total, right=True).clamp(max=probs.shape[-1] - 1)
    impossible = probs.gather(1, picks) == 0
    if impossible.any():
        positive = probs > 0
        index = torch.arange(probs.shape[-1], device=probs.device)
        left = torch.where(positive & (index <= picks), index, -1).amax(dim=-1, keepdim=True)
        right = torch.where(positive & (index > picks), index, probs.shape[-1]).amin(dim=-1, keepdim=True)
        picks = torch.where(impossible, torch.where(left >= 0, left, right), picks)
    return picks.squeeze(1)


class GrowingLayer(DynamicLayer):
    """A full-attention KV cache layer that writes new tokens into spare capacity instead of concatenating.

    ``DynamicLayer`` copies its whole cache at every decoded token; this layer keeps a buffer with room to spare
    (half as much again as it holds, at least ``SPARE`` slots) and exposes the filled part as a view, so a decode step
    only writes its own token and the cache is copied once per reallocation. Rows can be selected or reordered, not
    repeated, and the layer is never offloaded.
    """

    SPARE = 256

    def __init__(self):
        super().__init__()
        self._key_buffer: torch.Tensor | None = None
        self._value_buffer: torch.Tensor | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        filled = self.get_seq_length()
        needed = filled + key_states.shape[-2]
        if self._key_buffer is None or needed > self._key_buffer.shape[-2]:
            capacity = needed + max(self.SPARE, needed // 2)
            self._key_buffer = self._grown(self._key_buffer, key_states, filled, capacity)
            self._value_buffer = self._grown(self._value_buffer, value_states, filled, capacity)
        self._key_buffer[:, :, filled:needed] = key_states
        self._value_buffer[:, :, filled:needed] = value_states
        self.keys, self.values = self._key_buffer[:, :, :needed], self._value_buffer[:, :, :needed]
        return self.keys, self.values

    @staticmethod
    def _grown(buffer, states: torch.Tensor, filled: int, capacity: int) -> torch.Tensor:
        batch, heads, _, dim = states.shape
        grown = states.new_empty((batch, heads, capacity, dim))
        if filled:
            grown[:, :, :filled] = buffer[:, :, :filled]
        return grown

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self._key_buffer is not None:
            filled = self.get_seq_length()
            indices = indices.to(self._key_buffer.device)
            self._key_buffer, self._value_buffer = self._key_buffer[indices], self._value_buffer[indices]
            self.keys, self.values = self._key_buffer[:, :, :filled], self._value_buffer[:, :, :filled]

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        self.batch_select_indices(beam_idx)

    def keep_first(self, slots: int) -> None:
        """Drop every slot from ``slots`` on; later tokens are written from there."""
        if self._key_buffer is not None:
            self.keys, self.values = self._key_buffer[:, :, :slots], self._value_buffer[:, :, :slots]

    def batch_repeat_interleave(self, repeats: int) -> None:
        raise NotImplementedError("GrowingLayer rows are selected or reordered, never repeated.")

    def offload(self) -> None:
        raise NotImplementedError("GrowingLayer is not offloaded; build the cache without offloading.")

    def reset(self) -> None:
        self._key_buffer = self._value_buffer = None
        super().reset()


def shared_prefix_length(first: list[int], second: list[int]) -> int:
    """How many leading tokens the two sequences share."""
    for index, (a, b) in enumerate(zip(first, second)):
        if a != b:
            return index
    return min(len(first), len(second))


def cut_back(cache: DynamicCache, slots: int) -> bool:
    """Keep the first ``slots`` slots of every layer of a :func:`growing_cache`; ``False``, leaving the cache as it
    was, when a layer is not a :class:`GrowingLayer` (a sliding window's, say) and so cannot be cut back."""
    if not all(isinstance(layer, GrowingLayer) for layer in cache.layers):
        return False
    for layer in cache.layers:
        layer.keep_first(slots)
    return True


def growing_cache(config) -> DynamicCache:
    """The cache ``DynamicCache(config=config)`` builds, its full-attention layers replaced by :class:`GrowingLayer`
    (sliding-window and other special layers are kept as transformers makes them)."""
    cache = DynamicCache(config=config)
    cache.layers = [GrowingLayer() if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache


def cut_at_eos(tokens: list[int], eos_token_ids: list[int]) -> list[int]:
    """Keep tokens up to and including the first end-of-turn token (dropping the padding after it)."""
    eos = set(eos_token_ids)
    for i, token in enumerate(tokens):
        if token in eos:
            return tokens[: i + 1]
    return tokens
