"""Offline StarPO: training from logged trajectories, with their returns and logged log-probs, and no environment."""

import math

import pytest
import torch
from conftest import CounterEnv, ScriptedGenerator
from test_trainer import BAD, GOOD, make_args

from trl_starpo.offline import OfflineStarPOTrainer, logged_groups
from trl_starpo.rollout.collector import RolloutCollector
from trl_starpo.store import TrajectoryStore
from trl_starpo.trajectory import MODEL_SEGMENTS

SCRIPTS = {0: [GOOD, GOOD], 1: [BAD, BAD, BAD], 2: [GOOD, GOOD], 3: [BAD, GOOD, BAD]}  # returns 1, 0, 1, 0


def logged_store(tokenizer, steps=2, logprob=-0.7):
    """Two logged steps of one group of four CounterEnv episodes, with a log-prob on every sampled token."""
    collector = RolloutCollector(tokenizer, max_turns=3, max_actions_per_turn=2, max_tokens_per_turn=16,
                                 max_context_length=512)
    store = TrajectoryStore()
    for step in range(1, steps + 1):
        task = {"task_id": f"t{step}", "seed": step, "start": 0, "target": 2}
        trajectories = collector.collect([CounterEnv() for _ in range(4)], [task] * 4,
                                         ScriptedGenerator(tokenizer, SCRIPTS), [0] * 4)
        logprobs = [[logprob if s in MODEL_SEGMENTS else math.nan for s in t.segments] if logprob is not None else None
                    for t in trajectories]
        store.add(trajectories, step=step, environment="counter", logprobs=logprobs)
    return store


def test_logged_groups_need_the_configured_size(tiny_tokenizer):
    dataset = logged_store(tiny_tokenizer).to_dataset()
    assert logged_groups(dataset, 4) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    with pytest.raises(ValueError, match=r"No logged group has num_generations=2 trajectories \(the groups have \[4\]\)"):
        logged_groups(dataset, 2)


def test_offline_batch_uses_stored_returns_and_logged_logprobs(tmp_path, tiny_agent_dir, tiny_tokenizer):
    store = logged_store(tiny_tokenizer)
    trainer = OfflineStarPOTrainer(tiny_agent_dir, trajectories=store, args=make_args(tmp_path))
    rows = [dict(trainer.train_dataset[0])] * 4
    trainer.model.train()
    inputs = trainer._generate_and_score_completions(rows)
    returns = [t.episode_return for t in trainer.last_trajectories]
    assert returns == [1.0, 0.0, 1.0, 0.0]
    per_trajectory = [row[mask.bool()][-1].item() for row, mask in zip(inputs["advantages"], inputs["tool_mask"])]
    assert per_trajectory == pytest.approx([0.866, -0.866, 0.866, -0.866], abs=1e-3)
    mask = inputs["tool_mask"].bool()
    assert inputs["old_per_token_logps"][mask].tolist() == pytest.approx([-0.7] * int(mask.sum()))
    assert torch.isfinite(inputs["old_per_token_logps"]).all()
    # The same tokens as logged, never re-tokenized.
    assert [t.token_ids for t in trainer.last_trajectories] == [t.token_ids for t in store.trajectories()[:4]]
    with pytest.raises(RuntimeError, match="no environment"):
        trainer.evaluate_episodes([{"task_id": "x"}])


def test_offline_training_updates_the_policy(tmp_path, tiny_agent_dir, tiny_tokenizer):
    trainer = OfflineStarPOTrainer(tiny_agent_dir, trajectories=logged_store(tiny_tokenizer, logprob=None),
                                   args=make_args(tmp_path, max_steps=2))
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    assert any(not torch.equal(before[n], p.detach()) for n, p in trainer.model.named_parameters())
    logs = [e for e in trainer.state.log_history if "loss" in e]
    assert len(logs) == 2 and all(e["rollout/success"] == 0.5 for e in logs)


def test_offline_recipe_from_a_saved_store(tmp_path, tiny_agent_dir, tiny_tokenizer):
    import json

    from trl_starpo.recipes import run_offline

    logged_store(tiny_tokenizer).save(tmp_path / "logged")
    trainer = run_offline([
        "--trajectories", str(tmp_path / "logged"), "--model_name_or_path", tiny_agent_dir,
        "--output_dir", str(tmp_path / "out"), "--num_generations", "4", "--per_device_train_batch_size", "4",
        "--max_steps", "1", "--max_turns", "3", "--max_tokens_per_turn", "16", "--max_context_length", "512",
        "--report_to", "none", "--save_strategy", "no", "--learning_rate", "1e-2",
    ])
    assert trainer.state.global_step == 1
    assert (tmp_path / "out" / "model.safetensors").is_file()
    record = json.loads((tmp_path / "out" / "starpo_agent.json").read_text())
    assert record["environments"] == ["counter"]


def test_trajectories_from_another_tokenizer_are_refused(tmp_path, tiny_agent_dir, tiny_tokenizer):
    store = logged_store(tiny_tokenizer, steps=1)
    bad = store.trajectories()
    bad[0].token_ids[-1] = 10**6
    other = TrajectoryStore()
    other.add(bad, step=1, environment="counter")
    with pytest.raises(ValueError, match="token id 1000000"):
        OfflineStarPOTrainer(tiny_agent_dir, trajectories=other, args=make_args(tmp_path))
