"""Evaluation policies (model, random, expert) and the shared statistics."""

import dataclasses
import json
import math
import warnings

import pytest
import torch
from conftest import CounterEnv
from starpo_testenv import task_rows

from trl_starpo.evaluation import (
    ExpertPolicy,
    ModelPolicy,
    RandomPolicy,
    evaluate,
    load_agent,
    make_policy,
    summarize,
)
from trl_starpo.rollout.metrics import STAT_NAMES, trajectory_stats
from trl_starpo.rollout.settings import AGENT_FILE, RolloutSettings


def test_settings_defaults_are_starpo_config_defaults():
    from trl_starpo.config import StarPOConfig

    defaults = {f.name: f.default for f in dataclasses.fields(StarPOConfig)}
    for f in dataclasses.fields(RolloutSettings):
        assert f.default == defaults[f.name], f.name


def test_settings_from_agent_file(tmp_path):
    (tmp_path / AGENT_FILE).write_text(json.dumps({"rollout": {"max_turns": 7, "unknown": 1}}))
    settings = RolloutSettings.from_pretrained(tmp_path)
    assert settings.max_turns == 7 and settings.max_tokens_per_turn == RolloutSettings().max_tokens_per_turn
    assert settings.updated(max_turns=None, max_tokens_per_turn=9).max_tokens_per_turn == 9
    assert RolloutSettings.from_pretrained(tmp_path / "nothing") == RolloutSettings()


def test_invalid_action_penalty_is_carried_from_the_config_and_read_back(tmp_path, tiny_tokenizer):
    from trl_starpo.config import StarPOConfig
    from trl_starpo.rollout.collector import RolloutCollector

    args = StarPOConfig(output_dir=str(tmp_path), format_penalty=-0.3, report_to="none")
    assert args.invalid_action_penalty == -0.3  # defaults to the format penalty
    settings = RolloutSettings.from_config(args)
    assert settings.invalid_action_penalty == -0.3
    assert RolloutCollector.from_config(tiny_tokenizer, settings).invalid_action_penalty == -0.3
    defaulted = RolloutCollector.from_config(tiny_tokenizer, RolloutSettings(format_penalty=-0.2))
    assert defaulted.invalid_action_penalty == -0.2
    (tmp_path / AGENT_FILE).write_text(json.dumps({"rollout": dataclasses.asdict(settings)}))
    assert RolloutSettings.from_pretrained(tmp_path).invalid_action_penalty == -0.3
    # An agent recorded before the field existed was trained with invalid actions unpenalized.
    (tmp_path / AGENT_FILE).write_text(json.dumps({"rollout": {"max_turns": 3, "format_penalty": -0.3}}))
    assert RolloutSettings.from_pretrained(tmp_path).invalid_action_penalty == 0.0


def test_expert_solves_every_task(counter_env):
    from trl_starpo import load_tasks

    result = evaluate(ExpertPolicy(), counter_env, load_tasks(counter_env, "validation"), split="validation")
    assert result.episodes == 6
    assert result.stats["success"] == 1.0
    # 6/6 is not a certainty: the 95% Wilson interval reaches down to 0.61 (a Wald error would say ±0).
    assert result.stats["success_high"] == 1.0 and result.stats["success_low"] == pytest.approx(0.6097, abs=1e-4)
    # targets 1, 2, 3: ceil(target / 2) turns of two actions each
    assert [len(t.turns) for t in result.trajectories] == [1, 1, 2, 1, 1, 2]
    assert result.stats["action_validity"] == 1.0 and result.stats["format_error_rate"] == 0.0
    assert result.to_dict()["policy"] == "expert" and result.to_dict()["split"] == "validation"


def test_random_policy_is_seeded_and_within_budgets(counter_env):
    tasks = task_rows("validation", 6)
    settings = RolloutSettings(max_turns=3, max_actions_per_turn=2, max_actions_per_trajectory=5)
    first = evaluate(RandomPolicy(settings, seed=1), counter_env, tasks, batch_size=4)
    again = evaluate(RandomPolicy(settings, seed=1), counter_env, tasks, batch_size=2)
    other = evaluate(RandomPolicy(settings, seed=2), counter_env, tasks)
    actions = lambda r: [[turn.actions for turn in t.turns] for t in r.trajectories]  # noqa: E731
    assert actions(first) == actions(again)
    assert actions(first) != actions(other)
    for trajectory in first.trajectories:
        assert sum(len(turn.actions) for turn in trajectory.turns) <= 5
        assert len(trajectory.turns) <= 3
        assert trajectory.success or trajectory.truncation in ("max_turns", "action_budget")
    assert first.stats == summarize(first.trajectories)


def test_expert_without_an_action_ends_its_episode(counter_env):
    result = evaluate(ExpertPolicy(), counter_env, task_rows("validation", 2), environment_kwargs={"expert_gives_up": True})
    assert [t.truncation for t in result.trajectories] == ["no_action", "no_action"]
    assert result.stats["success"] == 0.0


def test_baselines_need_the_optional_methods():
    with pytest.raises(ValueError, match=r"random policy needs the environment to implement admissible_actions\(\)"):
        evaluate(RandomPolicy(), CounterEnv, task_rows("validation", 1))
    with pytest.raises(ValueError, match=r"expert_action\(\)"):
        evaluate(ExpertPolicy(), CounterEnv, task_rows("validation", 1))
    with pytest.raises(ValueError, match="Unknown policy"):
        make_policy("oracle")


def test_summary_averages_trajectory_stats(counter_env):
    result = evaluate(RandomPolicy(seed=3), counter_env, task_rows("validation", 5))
    rows = [trajectory_stats(t) for t in result.trajectories]
    for i, name in enumerate(STAT_NAMES):
        assert result.stats[name] == pytest.approx(sum(r[i] for r in rows) / len(rows))
    assert summarize([])["success"] != summarize([])["success"]  # NaN


def test_model_policy_plays_like_training_and_is_reproducible(counter_env, tiny_agent_dir):
    settings = RolloutSettings(max_turns=2, max_tokens_per_turn=16, max_context_length=512)
    model, tokenizer = load_agent(tiny_agent_dir, device="cpu")
    policy = ModelPolicy(model, tokenizer, settings, batch_size=3, seed=0)
    tasks = task_rows("validation", 4)
    first = evaluate(policy, counter_env, tasks)
    second = evaluate(policy, counter_env, tasks)
    assert [t.token_ids for t in first.trajectories] == [t.token_ids for t in second.trajectories]
    assert first.stats["format_error_rate"] < 0.5  # the tiny agent learned the format
    assert all(1 <= len(t.turns) <= 2 for t in first.trajectories)
    assert all(t.token_ids[: t.prompt_length] for t in first.trajectories)
    greedy = ModelPolicy(model, tokenizer, settings, temperature=0.0)
    assert not greedy.generation_config.do_sample


def test_model_policy_plays_in_the_precision_asked(counter_env, tiny_agent_dir):
    # a model loaded from disk has no autocast of its own: bf16=True gives it the one a bf16 run collects under
    model, tokenizer = load_agent(tiny_agent_dir, device="cpu")
    forward, autocast_seen = model.forward, []
    model.forward = lambda *args, **kwargs: autocast_seen.append(torch.is_autocast_enabled("cpu")) or forward(
        *args, **kwargs)
    settings = RolloutSettings(max_turns=1, max_tokens_per_turn=4, max_context_length=512)
    for bf16 in (True, False):
        autocast_seen.clear()
        evaluate(ModelPolicy(model, tokenizer, settings, bf16=bf16), counter_env, task_rows("validation", 2))
        assert autocast_seen and set(autocast_seen) == {bf16}
    dtypes = []
    model.forward = lambda *args, **kwargs: dtypes.append(torch.get_autocast_dtype("cpu")) or forward(*args, **kwargs)
    evaluate(ModelPolicy(model, tokenizer, settings, bf16=True), counter_env, task_rows("validation", 1))
    assert set(dtypes) == {torch.bfloat16}
    autocast_seen.clear()
    model.forward = lambda *args, **kwargs: autocast_seen.append(torch.is_autocast_enabled("cpu")) or forward(
        *args, **kwargs)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # bf16=False leaves the caller's autocast alone
        evaluate(ModelPolicy(model, tokenizer, settings), counter_env, task_rows("validation", 1))
    assert autocast_seen and set(autocast_seen) == {True}


def test_make_policy_plays_in_the_agents_training_precision(tmp_path, tiny_agent_dir, monkeypatch):
    import shutil

    from trl_starpo import evaluation

    agent = tmp_path / "agent"
    shutil.copytree(tiny_agent_dir, agent)
    record = json.loads((agent / AGENT_FILE).read_text()) if (agent / AGENT_FILE).is_file() else {}
    (agent / AGENT_FILE).write_text(json.dumps({**record, "training": {**record.get("training", {}), "bf16": True}}))
    for computes in (True, False):
        monkeypatch.setattr(evaluation, "device_computes_bf16", lambda device: computes)
        assert make_policy("model", model=str(agent), device="cpu").bf16 is computes  # never emulated unasked
        assert make_policy("model", model=str(agent), device="cpu", bf16=False).bf16 is False
    assert make_policy("model", model=tiny_agent_dir, device="cpu").bf16 is False  # no bf16 in its record
    with pytest.warns(UserWarning, match="does not compute it natively"):
        assert make_policy("model", model=str(agent), device="cpu", bf16=True).bf16 is True


def test_load_agent_errors_and_adapters(tmp_path, tiny_agent_dir):
    with pytest.raises(ValueError, match="No model folder at .*missing.* does not exist"):
        load_agent(str(tmp_path / "missing"))  # a path, reported as a missing folder rather than a bad Hub id
    with pytest.raises(ValueError, match="Cannot load model 'missing-agent': there is no folder 'missing-agent'"):
        load_agent("missing-agent")
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from trl_starpo.models import quiet_checkpointing_rename

    base = AutoModelForCausalLM.from_pretrained(tiny_agent_dir)
    with quiet_checkpointing_rename():  # the same warning, from making the adapter here: not what is tested
        adapter = get_peft_model(base, LoraConfig(r=2, target_modules=["q_proj"], init_lora_weights=False))
    adapter.save_pretrained(tmp_path / "adapter")  # no tokenizer: it comes from the base model
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model, tokenizer = load_agent(str(tmp_path / "adapter"), device="cpu")
    # PEFT still calls transformers' deprecated is_gradient_checkpointing: `eval/play --model <adapter>` must not
    # print that FutureWarning, which is not the user's to act on.
    assert not [w for w in caught if "gradient_checkpointing" in str(w.message)], [str(w.message) for w in caught]
    assert not hasattr(model, "peft_config")  # merged
    assert tokenizer.chat_template is not None


def test_success_intervals_are_wilson_intervals():
    from trl_starpo.evaluation import success_interval

    assert success_interval(0.0, 4) == (0.0, pytest.approx(0.4899, abs=1e-4))  # 0/4 is not "0.000 ± 0.000"
    low, high = success_interval(0.5, 16)
    assert (low, high) == (pytest.approx(0.2800, abs=1e-4), pytest.approx(0.7200, abs=1e-4))
    assert all(math.isnan(x) for x in success_interval(0.5, 0))
