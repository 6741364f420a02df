"""A recipe starting from an SFT warm start: the adapter merged once, the untrained model played beside it."""

import json

import pytest
import torch


def test_the_warm_start_is_merged_once_and_changes_the_model(adapter_dir, tiny_model_dir, tmp_path, monkeypatch):
    from peft import AutoPeftModelForCausalLM
    from transformers import AutoModelForCausalLM

    from trl_starpo.models import merged_warm_start

    monkeypatch.setenv("TRL_STARPO_CACHE", str(tmp_path / "cache"))
    merged = merged_warm_start(tiny_model_dir, str(adapter_dir))
    assert merged.startswith(str(tmp_path / "cache" / "warm_starts"))
    import peft

    def no_second_merge(*args, **kwargs):
        raise AssertionError("the warm start was merged again")

    monkeypatch.setattr(peft.PeftModel, "from_pretrained", no_second_merge)
    assert merged_warm_start(tiny_model_dir, str(adapter_dir)) == merged  # kept, not merged again
    monkeypatch.undo()
    monkeypatch.setenv("TRL_STARPO_CACHE", str(tmp_path / "cache"))
    ids = torch.tensor([[1, 5, 9, 3]])
    with torch.no_grad():
        expected = AutoPeftModelForCausalLM.from_pretrained(str(adapter_dir)).eval()(ids).logits
        got = AutoModelForCausalLM.from_pretrained(merged).eval()(ids).logits
        base = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()(ids).logits
    assert torch.allclose(got, expected, atol=1e-5) and not torch.allclose(got, base, atol=1e-3)
    with pytest.raises(ValueError, match="adapter_config.json and adapter_model.safetensors"):
        merged_warm_start(tiny_model_dir, str(tmp_path))
    pickled = tmp_path / "pickled"  # weights only as a pickle: refused, never loaded
    pickled.mkdir()
    (pickled / "adapter_config.json").write_text((adapter_dir / "adapter_config.json").read_text())
    (pickled / "adapter_model.bin").write_bytes(b"not loaded")
    with pytest.raises(ValueError, match="adapter_model.safetensors"):
        merged_warm_start(tiny_model_dir, str(pickled))
    other = tmp_path / "not-lora"
    other.mkdir()
    (other / "adapter_config.json").write_text(json.dumps({"peft_type": "PROMPT_TUNING"}))
    (other / "adapter_model.safetensors").write_bytes((adapter_dir / "adapter_model.safetensors").read_bytes())
    with pytest.raises(ValueError, match="not a plain LoRA adapter"):
        merged_warm_start(tiny_model_dir, str(other))
    wider = tmp_path / "wider"  # another model: the adapter does not fit it, and the error says what to pass
    config = AutoModelForCausalLM.from_pretrained(tiny_model_dir).config
    config.hidden_size, config.intermediate_size = 48, 96
    AutoModelForCausalLM.from_config(config).save_pretrained(wider)
    with pytest.raises(ValueError, match="does not fit .*--warm_start ''"):
        merged_warm_start(str(wider), str(adapter_dir))
    from transformers import GPT2Config, GPT2LMHeadModel  # other layer names: no q_proj to adapt

    gpt2 = tmp_path / "gpt2"
    GPT2LMHeadModel(GPT2Config(vocab_size=config.vocab_size, n_embd=16, n_layer=1, n_head=2)).save_pretrained(gpt2)
    with pytest.raises(ValueError, match="does not fit .*--warm_start ''"):
        merged_warm_start(str(gpt2), str(adapter_dir))


def test_a_recipe_from_a_warm_start_reports_untrained_warm_start_and_trained(
    adapter_dir, tiny_model_dir, tmp_path, monkeypatch, capsys, counter_env
):
    from trl_starpo.recipes import run

    monkeypatch.setenv("TRL_STARPO_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out"
    results = run(counter_env, [
        "--model_name_or_path", tiny_model_dir, "--warm_start", str(adapter_dir), "--output_dir", str(out),
        "--num_generations", "2", "--per_device_train_batch_size", "2", "--max_steps", "1", "--max_turns", "2",
        "--max_tokens_per_turn", "16", "--max_context_length", "512", "--eval_episodes", "2", "--report_to", "none",
        "--save_strategy", "no", "--beta", "0.0", "--use_peft", "--lora_r", "4", "--lora_target_modules", "all-linear",
        "--entropy_coef", "0.01",  # two tiny-model rollouts often tie: the entropy term makes the update nonzero
    ])
    stages = results["splits"]["validation"]
    assert list(stages) == ["untrained", "before", "after"]
    assert all(stats["episodes"] == 2 for stats in stages.values())
    table = capsys.readouterr().out
    assert "| validation | untrained | " in table and "| validation | warm start | " in table
    assert "| validation | after StarPO | " in table
    adapter = json.loads((out / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"].startswith(str(tmp_path / "cache" / "warm_starts"))
    record = json.loads((out / "starpo_agent.json").read_text())
    assert record["training"]["warm_start"] == str(adapter_dir)


def dpo_arguments(model_dir, out, counter_env):
    return ["--environment", counter_env, "--model_name_or_path", model_dir, "--output_dir", str(out),
            "--rounds", "1", "--tasks_per_round", "2", "--num_generations", "2", "--max_turns", "2",
            "--max_tokens_per_turn", "16", "--max_context_length", "512", "--eval_episodes", "0", "--report_to", "none"]


def test_the_dpo_recipe_starts_from_the_warm_start(adapter_dir, tiny_model_dir, tmp_path, monkeypatch, counter_env):
    from transformers import AutoModelForCausalLM

    import trl_starpo.dpo
    from trl_starpo.models import merged_warm_start
    from trl_starpo.recipes import run_dpo

    monkeypatch.setenv("TRL_STARPO_CACHE", str(tmp_path / "cache"))
    started_from = []

    def one_round(model, tokenizer, environment, tasks, args, peft_config=None):
        started_from.append({k: v.clone() for k, v in model.state_dict().items()})
        return model, [{"round": 1, "pairs": 2, "success": 0.5}]

    monkeypatch.setattr(trl_starpo.dpo, "train_online", one_round)
    out = tmp_path / "dpo"
    run_dpo(dpo_arguments(tiny_model_dir, out, counter_env) + ["--warm_start", str(adapter_dir)])
    merged = AutoModelForCausalLM.from_pretrained(merged_warm_start(tiny_model_dir, str(adapter_dir))).state_dict()
    assert all(torch.equal(started_from[0][name], merged[name]) for name in merged)
    record = json.loads((out / "starpo_agent.json").read_text())
    assert record["training"]["warm_start"] == str(adapter_dir)


def test_a_dpo_run_whose_rounds_formed_no_pair_fails_and_saves_nothing(tiny_model_dir, tmp_path, monkeypatch,
                                                                      counter_env):
    import trl_starpo.dpo
    from trl_starpo.recipes import run_dpo

    monkeypatch.setattr(trl_starpo.dpo, "preference_pairs", lambda trajectories: [])  # every group tied
    out = tmp_path / "dpo"
    with pytest.raises(SystemExit, match="No DPO round formed a preference pair"):
        run_dpo(dpo_arguments(tiny_model_dir, out, counter_env) + ["--rounds", "2"])
    assert not out.exists() or not any(out.iterdir())  # no round's model, rounds.json, model or record


def test_an_sft_run_with_lora_leaves_its_adapter_in_bf16_as_a_warm_start(counter_env, tiny_model_dir, tmp_path,
                                                                         monkeypatch):
    from peft import AutoPeftModelForCausalLM
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    from trl_starpo.models import merged_warm_start
    from trl_starpo.recipes import run_sft

    monkeypatch.setenv("TRL_STARPO_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "sft"
    run_sft(counter_env, [
        "--model_name_or_path", tiny_model_dir, "--output_dir", str(out), "--max_turns", "4",
        "--max_actions_per_turn", "1", "--max_tokens_per_turn", "24", "--max_context_length", "512",
        "--max_steps", "3", "--per_device_train_batch_size", "4", "--learning_rate", "1e-2", "--save_strategy", "no",
        "--report_to", "none", "--eval_episodes", "0", "--use_peft", "--lora_r", "4",
        "--lora_target_modules", "all-linear",
    ])
    adapter = out / "adapter"
    with safe_open(str(adapter / "adapter_model.safetensors"), "pt") as weights:
        assert {str(weights.get_tensor(name).dtype) for name in weights.keys()} == {"torch.bfloat16"}
    ids = torch.tensor([[1, 5, 9, 3]])
    with torch.no_grad():
        saved = AutoModelForCausalLM.from_pretrained(out).eval()(ids).logits  # the merged fp32 model of the run
        warm = AutoModelForCausalLM.from_pretrained(merged_warm_start(tiny_model_dir, str(adapter))).eval()(ids).logits
        reloaded = AutoPeftModelForCausalLM.from_pretrained(str(adapter)).eval()(ids).logits
    assert json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"] == tiny_model_dir
    assert torch.allclose(warm, saved, atol=2e-2) and torch.allclose(warm, reloaded, atol=1e-5)
