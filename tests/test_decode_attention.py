"""The decode-step attention used while the cached generator samples: what transformers' SDPA computes, faster on a
CPU in bf16, and only while the generator decodes."""

import pytest
import torch
from transformers import AutoModelForCausalLM, GenerationConfig
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from trl_starpo.rollout.attention import DECODE_ATTENTION, decode_attention, grouped_decode_attention
from trl_starpo.rollout.generation import CachedTransformersGenerator


class GroupedHeads(torch.nn.Module):
    num_key_value_groups = 3  # 6 query heads share 2 key/value heads
    is_causal = True


def decode_step(dtype, *, mask_dtype=torch.bool, kv_length=37):
    rng = torch.Generator().manual_seed(0)
    query = torch.randn(4, 6, 1, 16, generator=rng).to(dtype)
    key = torch.randn(4, 2, kv_length, 16, generator=rng).to(dtype)
    value = torch.randn(4, 2, kv_length, 16, generator=rng).to(dtype)
    attended = torch.ones(4, 1, 1, kv_length, dtype=torch.bool)
    attended[1, ..., :5] = False  # left padding
    attended[2, ..., 20:23] = False  # padding inside the sequence, as the cached generator's chunks leave
    if mask_dtype == torch.bool:
        return query, key, value, attended
    return query, key, value, torch.zeros(attended.shape, dtype=dtype).masked_fill(~attended, torch.finfo(dtype).min)


@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.bfloat16])
def test_one_query_token_in_bf16_matches_sdpa_in_float32(mask_dtype):
    query, key, value, mask = decode_step(torch.bfloat16, mask_dtype=mask_dtype)
    got, weights = grouped_decode_attention(GroupedHeads(), query, key, value, mask, scaling=0.25)
    exact, _ = sdpa_attention_forward(GroupedHeads(), query.float(), key.float(), value.float(),
                                      mask if mask.dtype == torch.bool else mask.float(), scaling=0.25)
    sdpa_bf16, _ = sdpa_attention_forward(GroupedHeads(), query, key, value, mask, scaling=0.25)
    assert weights is None and got.shape == exact.shape == (4, 1, 6, 16) and got.dtype == torch.bfloat16
    error, sdpa_error = (got.float() - exact).abs().max(), (sdpa_bf16.float() - exact).abs().max()
    assert error <= 2 ** -8  # the output's own bf16 rounding, and no more than SDPA's own bf16 kernel makes
    assert error <= sdpa_error + 1e-6
    # padded slots are not attended: changing what they hold changes nothing
    key[1, :, :5], value[2, :, 20:23] = 100.0, -100.0
    assert torch.equal(grouped_decode_attention(GroupedHeads(), query, key, value, mask, scaling=0.25)[0], got)


def test_under_autocast_float32_queries_stay_float32_and_come_back_in_bf16():
    # a rotary model's query and keys reach the attention in float32 under autocast; SDPA would cast them to bf16
    query, key, value, mask = decode_step(torch.float32)
    value = value.to(torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, _ = grouped_decode_attention(GroupedHeads(), query, key, value, mask)
        autocast_sdpa, _ = sdpa_attention_forward(GroupedHeads(), query, key, value, mask)
    exact, _ = sdpa_attention_forward(GroupedHeads(), query, key, value.float(), mask)
    assert got.dtype == autocast_sdpa.dtype == torch.bfloat16
    assert (got.float() - exact).abs().max() <= (autocast_sdpa.float() - exact).abs().max() + 1e-6
    assert (got.float() - exact).abs().max() <= 2 ** -8


def test_values_narrower_than_keys_keep_their_width():
    # DeepSeek-style attention: keys of 16 here, values of 8
    query, key, value, mask = decode_step(torch.bfloat16)
    value = value[..., :8].contiguous()
    got, _ = grouped_decode_attention(GroupedHeads(), query, key, value, mask, scaling=0.25)
    exact, _ = sdpa_attention_forward(GroupedHeads(), query.float(), key.float(), value.float(), mask, scaling=0.25)
    assert got.shape == exact.shape == (4, 1, 6, 8)
    assert (got.float() - exact).abs().max() <= 2 ** -8


def test_every_other_call_is_sdpa_itself(monkeypatch):
    calls = []

    def sdpa(*args, **kwargs):
        calls.append(args[1].shape)
        return "sdpa"

    monkeypatch.setattr("trl_starpo.rollout.attention.sdpa_attention_forward", sdpa)
    query, key, value, mask = decode_step(torch.bfloat16)
    prompt_chunk = torch.randn(4, 6, 5, 16).to(torch.bfloat16)
    for call in ((query.float(), key.float(), value.float(), mask), (prompt_chunk, key, value, None),
                 (query, key, value, mask.expand(4, 6, 1, -1))):  # a mask that differs by head
        assert grouped_decode_attention(GroupedHeads(), *call) == "sdpa"
    assert grouped_decode_attention(GroupedHeads(), query, key, value, mask, dropout=0.1) == "sdpa"
    assert grouped_decode_attention(GroupedHeads(), query, key, value, mask, s_aux=torch.zeros(6)) == "sdpa"
    assert len(calls) == 5
    assert grouped_decode_attention(GroupedHeads(), query, key, value, mask)[0].shape == (4, 1, 6, 16)
    assert len(calls) == 5


def test_the_generator_decodes_with_it_and_puts_sdpa_back(tiny_model_dir, tiny_tokenizer, monkeypatch):
    import trl_starpo.rollout.attention as attention

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, attn_implementation="sdpa").eval()
    seen, handed_to_sdpa = [], []
    original, sdpa = attention.grouped_decode_attention, attention.sdpa_attention_forward

    def spy(module, query, *args, **kwargs):
        seen.append(query.shape[2])
        return original(module, query, *args, **kwargs)

    def sdpa_spy(module, query, *args, **kwargs):
        handed_to_sdpa.append(query.shape[2])
        return sdpa(module, query, *args, **kwargs)

    monkeypatch.setitem(attention.AttentionInterface._global_mapping, DECODE_ATTENTION, spy)
    monkeypatch.setattr(attention, "sdpa_attention_forward", sdpa_spy)
    generator = CachedTransformersGenerator(model, pad_token_id=tiny_tokenizer.pad_token_id,
                                            eos_token_ids=[tiny_tokenizer.eos_token_id],
                                            generation_config=GenerationConfig(do_sample=True))
    torch.manual_seed(0)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        turn = generator.generate({0: [5, 6, 7, 8], 1: [9, 10]}, 4)
    assert model.config._attn_implementation == "sdpa"
    assert 1 in seen and 1 not in handed_to_sdpa  # the decode steps: computed here
    assert handed_to_sdpa and all(length > 1 for length in handed_to_sdpa)  # the prompt: SDPA's
    assert all(0 < len(tokens) <= 4 for tokens in turn.values())

    def fails(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setitem(attention.AttentionInterface._global_mapping, DECODE_ATTENTION, fails)
    with pytest.raises(RuntimeError, match="boom"), torch.no_grad():
        generator.generate({0: [5, 6, 7]}, 2)
    assert model.config._attn_implementation == "sdpa"


def test_the_generator_samples_what_it_sampled_with_sdpa(tiny_model_dir, tiny_tokenizer, monkeypatch):
    from contextlib import nullcontext

    import trl_starpo.rollout.generation as generation
    from trl_starpo.rollout.precision import frozen_weights_in_autocast_dtype

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, attn_implementation="sdpa").eval()

    def play():
        generator = CachedTransformersGenerator(model, pad_token_id=tiny_tokenizer.pad_token_id,
                                                eos_token_ids=[tiny_tokenizer.eos_token_id],
                                                generation_config=GenerationConfig(do_sample=False))
        contexts = {0: [5, 6, 7, 8, 9, 10, 11], 1: [12, 13], 2: [14, 15, 16, 17]}  # left padding in the batch
        turns = []
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16), frozen_weights_in_autocast_dtype(model):
            for observation in ([20], [21, 22, 23]):  # the second turn's chunk pads inside the sequence
                turn = generator.generate(contexts, 6)
                turns.append((turn, generator.last_logprobs))
                contexts = {key: contexts[key] + turn[key] + observation for key in contexts}
        return turns

    grouped = play()
    monkeypatch.setattr(generation, "decode_attention", lambda model: nullcontext())
    sdpa = play()
    for (tokens, logprobs), (sdpa_tokens, sdpa_logprobs) in zip(grouped, sdpa):
        assert tokens == sdpa_tokens
        for key in tokens:
            assert logprobs[key] == pytest.approx(sdpa_logprobs[key], abs=0.05)


def test_other_attention_implementations_are_left_alone(tiny_model_dir, monkeypatch):
    eager = AutoModelForCausalLM.from_pretrained(tiny_model_dir, attn_implementation="eager")
    with decode_attention(eager):
        assert eager.config._attn_implementation == "eager"
    with decode_attention(object()):  # no config at all
        pass
    composite = AutoModelForCausalLM.from_pretrained(tiny_model_dir, attn_implementation="sdpa")
    monkeypatch.setattr(type(composite.config), "sub_configs", {"text_config": type(composite.config)})
    with decode_attention(composite):  # a model with sub-models: their settings may differ, so nothing is swapped
        assert composite.config._attn_implementation == "sdpa"
