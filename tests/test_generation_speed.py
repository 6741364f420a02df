"""The decode loop's fast paths give what the plain ones give: the growing KV cache the same keys and values as
transformers' DynamicLayer, the inverse-CDF sampler the softmax's distribution, and frozen weights held in bf16 under
autocast the very same tokens and log-probs."""

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, DynamicLayer, GenerationConfig

from trl_starpo.rollout.generation import CachedTransformersGenerator, GrowingLayer, sample_by_inverse_cdf
from trl_starpo.rollout.precision import frozen_weights_in_autocast_dtype


def test_growing_layer_holds_what_a_dynamic_layer_holds_through_growth_selection_and_cropping():
    rng = torch.Generator().manual_seed(0)
    growing, dynamic = GrowingLayer(), DynamicLayer()
    for width in (5, 1, 300, 1, 1, 40):  # the 300-token chunk outgrows the first buffer
        keys, values = torch.randn(3, 2, width, 4, generator=rng), torch.randn(3, 2, width, 4, generator=rng)
        got, want = growing.update(keys, values), dynamic.update(keys, values)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert growing.get_seq_length() == dynamic.get_seq_length() == 348
    assert growing._key_buffer.shape[-2] > 348  # spare room: the next tokens are written, not concatenated

    for layer in (growing, dynamic):
        layer.batch_select_indices(torch.tensor([2, 0, 1]))
        layer.reorder_cache(torch.tensor([1, 0, 2]))
        layer.batch_select_indices(torch.tensor([0, 2]))
        layer.crop(-8)
    keys, values = torch.randn(2, 2, 1, 4, generator=rng), torch.randn(2, 2, 1, 4, generator=rng)
    got, want = growing.update(keys, values), dynamic.update(keys, values)
    assert got[0].shape == (2, 2, 341, 4)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_inverse_cdf_sampling_draws_from_the_distribution_and_never_a_zero_probability_token():
    torch.manual_seed(0)
    probs = torch.tensor([0.5, 0.0, 0.2, 0.3, 0.0])
    draws = sample_by_inverse_cdf(probs.expand(40_000, -1))
    counts = torch.bincount(draws, minlength=5).float()
    expected = probs * len(draws)
    assert counts[1] == counts[4] == 0
    sigma = (expected * (1 - probs)).sqrt()
    assert ((counts - expected).abs() <= 4 * sigma + 1e-6).all(), counts


def test_inverse_cdf_sampling_keeps_tokens_a_float32_sum_would_absorb(monkeypatch):
    # Past 0.998 a float32 running sum no longer moves by 2e-8, so in float32 the tail's 0.2% would be unreachable.
    probs = torch.full((1, 100_001), 2e-8)
    probs[0, 0] = 1 - 2e-3
    monkeypatch.setattr(torch, "rand_like", lambda tensor: torch.full_like(tensor, 0.999))
    assert sample_by_inverse_cdf(probs).item() == pytest.approx(50_000, abs=2)  # halfway through the tail


def test_inverse_cdf_sampling_refuses_a_distribution_that_is_not_finite():
    with pytest.raises(ValueError, match="NaN or infinite logits"):
        sample_by_inverse_cdf(torch.tensor([[0.5, 0.5], [float("nan"), 1.0]]))


def test_inverse_cdf_sampling_stays_on_the_support_when_the_uniform_reaches_the_top(monkeypatch):
    monkeypatch.setattr(torch, "rand_like", lambda tensor: torch.ones_like(tensor))
    probs = torch.tensor([[0.25, 0.75, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    assert sample_by_inverse_cdf(probs).tolist() == [1, 0]


@pytest.fixture()
def lora_model(tiny_model_dir):
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "up_proj"],
                                             init_lora_weights=False))  # random B: the adapter changes the output
    return model.eval()


def sample(model, tokenizer, frozen_in_bf16: bool):
    generator = CachedTransformersGenerator(model, pad_token_id=tokenizer.pad_token_id,
                                            eos_token_ids=[tokenizer.eos_token_id],
                                            generation_config=GenerationConfig(do_sample=True, top_k=0))
    contexts = {0: [5, 6, 7, 8, 9], 1: [10, 11, 12]}
    torch.manual_seed(3)
    responses, logprobs = [], []
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        with frozen_weights_in_autocast_dtype(model) if frozen_in_bf16 else torch.autocast("cpu", dtype=torch.bfloat16):
            for _ in range(2):
                turn = generator.generate(contexts, 6)
                responses.append(turn)
                logprobs.append(generator.last_logprobs)
                contexts = {key: contexts[key] + turn[key] + [20 + key] for key in contexts}
    return responses, logprobs


def test_frozen_weights_in_bf16_sample_exactly_what_autocast_samples(lora_model, tiny_tokenizer):
    assert sample(lora_model, tiny_tokenizer, True) == sample(lora_model, tiny_tokenizer, False)


def test_dora_keeps_its_float32_base_weights_and_samples_what_autocast_samples(tiny_model_dir, tiny_tokenizer):
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "up_proj"], use_dora=True,
                                             init_lora_weights=False)).eval()
    base = model.base_model.model.model
    with torch.autocast("cpu", dtype=torch.bfloat16), frozen_weights_in_autocast_dtype(model):
        assert base.layers[0].self_attn.q_proj.base_layer.weight.dtype == torch.float32  # DoRA reads it in fp32
        assert base.layers[0].self_attn.k_proj.weight.dtype == torch.bfloat16  # no adapter there
    assert sample(model, tiny_tokenizer, True) == sample(model, tiny_tokenizer, False)


def test_frozen_weights_are_held_in_bf16_only_inside_and_restored_untouched(lora_model):
    before = {name: (parameter, parameter.detach().clone()) for name, parameter in lora_model.named_parameters()}
    base = lora_model.base_model.model
    q_proj = base.model.layers[0].self_attn.q_proj
    with torch.autocast("cpu", dtype=torch.bfloat16), frozen_weights_in_autocast_dtype(lora_model):
        assert q_proj.base_layer.weight.dtype == torch.bfloat16
        assert q_proj.lora_A["default"].weight.dtype == torch.float32  # trainable: autocast caches its cast
        assert base.model.embed_tokens.weight.dtype == torch.float32  # an embedding lookup is not a matmul
        assert base.lm_head.weight.dtype == torch.bfloat16
        assert base.lm_head.weight is not base.model.embed_tokens.weight
    for name, parameter in lora_model.named_parameters():
        original, values = before[name]
        assert parameter is original and torch.equal(parameter, values)
    if base.config.tie_word_embeddings:
        assert base.lm_head.weight is base.model.embed_tokens.weight


def test_frozen_weights_stay_as_they_are_without_autocast(lora_model):
    q_proj = lora_model.base_model.model.model.layers[0].self_attn.q_proj
    with frozen_weights_in_autocast_dtype(lora_model):
        assert q_proj.base_layer.weight.dtype == torch.float32
