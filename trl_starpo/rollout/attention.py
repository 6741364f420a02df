"""Decode-step attention for generation on a CPU in bf16 or fp16.

torch's CPU kernels for ``scaled_dot_product_attention`` are slow for a single query token in a half-precision
dtype: on 2 AMD EPYC cores, one decode step's attention over 600 cached tokens (8 rows, 9 query heads sharing 3
key/value heads, bf16) took 5-8 ms a layer, as long as all of the layer's matrix products, against 0.7 ms for the same
attention done as two float32 matrix products. While :class:`~trl_starpo.rollout.generation.CachedTransformersGenerator`
decodes, :func:`decode_attention` swaps a model's ``sdpa`` attention for :func:`grouped_decode_attention`, which
computes a one-token query that way, each key/value head with the query heads that share it, and hands every other
call (prompt chunks, GPUs, float32, dropout, attention sinks) to transformers' SDPA unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

DECODE_ATTENTION = "trl_starpo_decode_sdpa"
"""The name :func:`grouped_decode_attention` is registered under with transformers' attention interfaces."""


def grouped_decode_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """transformers' SDPA attention, except for one query token on a CPU in bf16 or fp16 (the tensors' dtype, or an
    active autocast's): then float32 matmuls.

    Same arguments and return value as ``transformers.integrations.sdpa_attention.sdpa_attention_forward``: ``query``
    is ``(batch, heads, query_length, head_dim)``, ``key`` and ``value`` ``(batch, kv_heads, kv_length, head_dim)``,
    ``attention_mask`` SDPA's (boolean, True where attended, or additive) or ``None``; returns ``(output, None)`` with
    the output as ``(batch, query_length, heads, head_dim)`` in the dtype SDPA would return.
    """
    mask_per_head = attention_mask is not None and attention_mask.shape[1] != 1
    special = dropout or mask_per_head or any(kwargs.get(name) is not None for name in ("softcap", "s_aux",
                                                                                          "position_bias"))
    dtype = _half_precision(query)
    if query.shape[2] != 1 or query.device.type != "cpu" or dtype is None or special:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    batch, heads, _, head_dim = query.shape
    kv_heads, kv_length = key.shape[1], key.shape[2]
    with torch.autocast("cpu", enabled=False):
        # query head h reads key/value head h // (heads / kv_heads), as transformers' repeat_kv lays them out
        grouped = query.float().reshape(batch, kv_heads, heads // kv_heads, head_dim)
        scores = grouped @ key.float().transpose(-1, -2)
        scores *= head_dim**-0.5 if scaling is None else scaling
        if attention_mask is not None:
            mask = attention_mask[..., :kv_length]  # (batch, 1, 1, kv_length): the same for every head
            scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
        output = scores.softmax(dim=-1) @ value.float()
    return output.reshape(batch, 1, heads, value.shape[-1]).to(dtype), None  # values may be narrower than keys


def _half_precision(query: torch.Tensor) -> torch.dtype | None:
    """The half-precision dtype SDPA would compute ``query`` in (its own, or an active autocast's), else None.

    Under autocast a rotary model's query and keys arrive in float32 (the rotation is computed in float32) and SDPA
    casts them down; this attention keeps them in float32 and returns the dtype SDPA would."""
    if query.dtype in (torch.bfloat16, torch.float16):
        return query.dtype
    device = query.device.type
    if query.dtype == torch.float32 and torch.is_autocast_enabled(device):
        dtype = torch.get_autocast_dtype(device)
        return dtype if dtype in (torch.bfloat16, torch.float16) else None
    return None


AttentionInterface.register(DECODE_ATTENTION, grouped_decode_attention)
AttentionMaskInterface.register(DECODE_ATTENTION, sdpa_mask)


@contextmanager
def decode_attention(model) -> Iterator[None]:
    """While inside, ``model`` (a transformers model, or a PEFT model around one) attends with
    :func:`grouped_decode_attention` if it attends with ``sdpa``; its setting is put back on exit. Models with another
    attention implementation, or with sub-models (whose settings may differ), are left as they are."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "_attn_implementation", None) != "sdpa" or getattr(config, "sub_configs", {}):
        yield
        return
    config._attn_implementation = DECODE_ATTENTION
    try:
        yield
    finally:
        config._attn_implementation = "sdpa"
