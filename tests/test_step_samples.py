"""Step-wise samples in the trainer: under ``context_policy="window"`` every turn is one loss row."""

import pytest
import torch
from conftest import CounterEnv
from test_trainer import BAD, GOOD, counter_tasks, make_args, scripted

from trl_starpo import StarPOTrainer
from trl_starpo.samples import padded_count, row_chunks, turn_samples

RESPONSES = {0: [BAD, GOOD, GOOD], 1: [GOOD, GOOD], 2: ["no format", GOOD, GOOD], 3: [BAD, BAD, BAD]}


def scored_batch(tmp_path, model_dir, **overrides):
    torch.manual_seed(0)  # the critics' heads start alike in every trainer
    args = make_args(tmp_path, max_turns=3, **overrides)
    trainer = StarPOTrainer(model_dir, environment=CounterEnv, args=args, train_dataset=counter_tasks(1))
    scripted(trainer, RESPONSES)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by train(), which these tests do not run
    inputs = trainer._generate_and_score_completions([dict(trainer.train_dataset[0])] * 4)
    return trainer, inputs


def loss_and_gradient(trainer, inputs):
    trainer.model.zero_grad()
    loss = trainer.compute_loss(trainer.model, inputs)
    loss.backward()
    grads = {name: p.grad.detach().clone() for name, p in trainer.model.named_parameters() if p.grad is not None}
    return loss.item(), grads


ESTIMATORS = [
    dict(advantage_estimator="group"),
    dict(advantage_estimator="gigpo", scale_rewards="none"),
    dict(advantage_estimator="turn_gae"),
    dict(advantage_estimator="gae", gae_gamma=0.9, gae_lambda=0.8),
    dict(advantage_estimator="group", thinking_critic=True, beta=0.05),
    dict(advantage_estimator="group", loss_type="bnpo"),
]


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=lambda e: "-".join(str(v) for v in e.values()))
def test_a_window_holding_every_turn_trains_exactly_as_full(tmp_path, tiny_agent_dir, estimator):
    full, full_inputs = scored_batch(tmp_path / "full", tiny_agent_dir, **estimator)
    windowed, inputs = scored_batch(tmp_path / "window", tiny_agent_dir, context_policy="window", history_turns=3,
                                    history_thinking=True, **estimator)
    assert len(inputs["prompt_ids"]) == sum(len(t.turns) for t in windowed.last_trajectories) == 11
    assert inputs["num_items_in_batch"].item() == full_inputs["num_items_in_batch"].item()
    full_loss, full_grads = loss_and_gradient(full, full_inputs)
    loss, grads = loss_and_gradient(windowed, inputs)
    assert loss == pytest.approx(full_loss, rel=1e-4, abs=1e-6)
    assert full_grads.keys() == grads.keys() and any(g.abs().sum() > 0 for g in grads.values())
    for name in grads:
        torch.testing.assert_close(grads[name], full_grads[name], rtol=1e-3, atol=1e-6)


@pytest.mark.parametrize("estimator", ESTIMATORS[:3], ids=lambda e: e["advantage_estimator"])
def test_each_turn_trains_on_its_own_context_with_its_episodes_advantage(tmp_path, tiny_agent_dir, estimator):
    full, full_inputs = scored_batch(tmp_path / "full", tiny_agent_dir, **estimator)
    trainer, inputs = scored_batch(tmp_path / "window", tiny_agent_dir, context_policy="window", history_turns=1,
                                   **estimator)
    trajectories = trainer.last_trajectories
    samples = turn_samples(trajectories)
    assert len(samples) == 11 and len(inputs["prompt_ids"]) == padded_count(11, trainer.args.steps_per_generation)
    full_advantages = full_inputs["advantages"]
    for row, sample in enumerate(samples):
        turn = trajectories[sample.row].turns[sample.turn]
        prompt = inputs["prompt_ids"][row][inputs["prompt_mask"][row].bool()].tolist()
        completion = inputs["completion_ids"][row][inputs["completion_mask"][row].bool()].tolist()
        assert prompt == turn.context_ids  # exactly the tokens the model was given...
        assert completion == trajectories[sample.row].token_ids[turn.response_start : turn.response_end]  # ...and sampled
        span = slice(sample.start, sample.start + len(completion))
        # the same episodes get the same per-token advantages whatever the turns were shown
        torch.testing.assert_close(inputs["advantages"][row, : len(completion)], full_advantages[sample.row, span])
    assert not inputs["tool_mask"][len(samples):].any()  # padding rows train nothing


@pytest.mark.parametrize("entropy_coef", [0.0, 0.5])
@pytest.mark.parametrize("loss_type", ["dapo", "grpo", "bnpo", "dr_grpo"])
def test_turn_rows_trained_a_few_at_a_time_give_the_whole_batchs_gradient(tmp_path, tiny_agent_dir, loss_type,
                                                                          entropy_coef):
    trainer, inputs = scored_batch(tmp_path, tiny_agent_dir, context_policy="window", history_turns=1,
                                   loss_type=loss_type, trajectory_filter="variance", filter_keep_fraction=0.5,
                                   entropy_coef=entropy_coef)
    whole_loss, whole = loss_and_gradient(trainer, inputs)
    trainer.model.zero_grad()
    chunks = row_chunks(inputs, 3, loss_type)
    assert len(chunks) == 4 and max(c["prompt_ids"].size(1) for c in chunks) == inputs["prompt_ids"].size(1)
    assert min(c["prompt_ids"].size(1) for c in chunks) < inputs["prompt_ids"].size(1)  # each trimmed to its own
    total = 0.0
    for chunk in chunks:
        loss = trainer.compute_loss(trainer.model, chunk)
        loss.backward()
        total += loss.item()
    assert total == pytest.approx(whole_loss, rel=1e-4, abs=1e-6)
    for name, grad in whole.items():
        torch.testing.assert_close(dict(trainer.model.named_parameters())[name].grad, grad, rtol=1e-3, atol=1e-6)


def test_filtered_trajectories_train_none_of_their_turns(tmp_path, tiny_agent_dir):
    trainer, inputs = scored_batch(tmp_path, tiny_agent_dir, context_policy="window", trajectory_filter="variance",
                                   filter_keep_fraction=0.5)
    trajectories = trainer.last_trajectories
    for row, sample in enumerate(turn_samples(trajectories)):
        assert bool(inputs["tool_mask"][row].any()) == trajectories[sample.row].kept


def test_window_training_updates_the_policy(tmp_path, tiny_agent_dir):
    args = make_args(tmp_path, context_policy="window", history_turns=1, learning_rate=1e-3,
                     gradient_accumulation_steps=2, per_device_train_batch_size=2, max_steps=2)
    trainer = StarPOTrainer(tiny_agent_dir, environment=CounterEnv, args=args, train_dataset=counter_tasks())
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    trainer.train()
    changed = sum(not torch.equal(before[n], p.detach()) for n, p in trainer.model.named_parameters() if n in before)
    assert changed > 0
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert len(logs) == 2 and all("filter/kept_fraction" in entry for entry in logs)  # training rollouts, each step
    stored = trainer.last_trajectories
    assert all(turn.context_ids for t in stored for turn in t.turns if turn.response_end > turn.response_start)


def test_gradients_are_reduced_once_per_micro_step_after_its_last_chunk(tmp_path, tiny_agent_dir):
    args = make_args(tmp_path, context_policy="window", history_turns=1, max_steps=1, learning_rate=1e-3)
    trainer = StarPOTrainer(tiny_agent_dir, environment=CounterEnv, args=args, train_dataset=counter_tasks())
    backward, synced = trainer.accelerator.backward, []

    def recording(loss, **kwargs):
        synced.append(trainer.accelerator.sync_gradients)  # DeepSpeed steps its optimizer on every synced backward
        return backward(loss, **kwargs)

    trainer.accelerator.backward = recording
    trainer.train()
    assert len(synced) > 1 and synced == [False] * (len(synced) - 1) + [True]


@pytest.mark.parametrize("overrides, field", [
    (dict(advantage_estimator="gae", value_model="some/critic"), "value_model"),
    (dict(use_adaptive_entropy=True), "use_adaptive_entropy"),
])
def test_what_cannot_work_under_window_is_refused(tmp_path, overrides, field):
    with pytest.raises(ValueError, match=field):
        make_args(tmp_path, context_policy="window", **overrides)


def test_windowed_trajectories_are_not_trained_as_whole_episodes(tmp_path, tiny_agent_dir):
    windowed, _ = scored_batch(tmp_path / "window", tiny_agent_dir, context_policy="window", history_turns=1)
    full, _ = scored_batch(tmp_path / "full", tiny_agent_dir)
    with pytest.raises(ValueError, match="context_policy='window'"):
        full.score_trajectories(windowed.last_trajectories, group_size=4, offset=0)


def test_trajectory_dpo_refuses_windowed_episodes(tmp_path, tiny_agent_dir):
    from trl_starpo.dpo import TrajectoryDPOConfig, preference_pairs

    windowed, _ = scored_batch(tmp_path, tiny_agent_dir, context_policy="window", history_turns=1)
    with pytest.raises(ValueError, match="context_policy='full'"):
        preference_pairs(windowed.last_trajectories)
    with pytest.raises(ValueError, match="context_policy='full'"):
        TrajectoryDPOConfig(output_dir=str(tmp_path / "dpo"), context_policy="window")
