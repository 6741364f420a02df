"""StarPO-S presets, and each stabilization mechanism wired into StarPOTrainer."""

import math

import pytest
import torch
from conftest import CounterEnv
from test_trainer import BAD, GOOD, counter_tasks, make_args, scripted

from trl_starpo import StarPOTrainer
from trl_starpo.presets import PRESETS
from trl_starpo.trajectory import Segment

SCRIPT = {0: [GOOD, GOOD], 1: [BAD, BAD, BAD], 2: [GOOD, GOOD], 3: [BAD, GOOD, BAD]}  # returns 1, 0, 1, 0


def test_presets_set_their_values_and_explicit_fields_win(tmp_path):
    spec = make_args(tmp_path, preset="starpo-s")
    assert (spec.trajectory_filter, spec.filter_num_std, spec.thinking_critic) == ("outlier_clip", 2.0, True)
    assert spec.thinking_scale_rule == "multiplicative"
    assert (spec.max_grad_norm, spec.kl_early_stop, spec.warmup_steps, spec.beta) == (0.5, 0.05, 0.1, 0.1)
    assert spec.epsilon == spec.epsilon_high == 0.2
    ragen = make_args(tmp_path, preset="starpo-s-ragen")
    assert (ragen.trajectory_filter, ragen.filter_keep_fraction, ragen.advantage_estimator) == ("variance", 0.25, "gae")
    assert (ragen.gae_gamma, ragen.gae_lambda, ragen.beta, ragen.entropy_coef) == (1.0, 1.0, 0.0, 0.001)
    assert (ragen.epsilon, ragen.epsilon_high, ragen.max_grad_norm) == (0.2, 0.28, 1.0)
    vanilla = make_args(tmp_path, preset="starpo")
    assert (vanilla.trajectory_filter, vanilla.advantage_estimator, vanilla.beta) == ("none", "group", 0.001)
    # explicit values, even ones equal to TRL's defaults, win over the preset
    mine = make_args(tmp_path, preset="starpo-s", beta=0.0, max_grad_norm=1.0, trajectory_filter="none")
    assert (mine.beta, mine.max_grad_norm, mine.trajectory_filter, mine.thinking_critic) == (0.0, 1.0, "none", True)
    # no preset: TRL's defaults and plain StarPO
    plain = make_args(tmp_path)
    assert (plain.beta, plain.max_grad_norm, plain.trajectory_filter, plain.advantage_estimator) == (0.0, 1.0, "none", "group")
    assert plain.scale_rewards == "group"
    assert make_args(tmp_path, thinking_critic=True).thinking_scale_rule == "multiplicative"  # the formula as written
    ppo = make_args(tmp_path, preset="ppo")
    assert (ppo.advantage_estimator, ppo.trajectory_filter, ppo.thinking_critic) == ("gae", "none", False)
    assert (ppo.gae_gamma, ppo.gae_lambda, ppo.beta, ppo.epsilon, ppo.max_grad_norm) == (1.0, 1.0, 0.001, 0.2, 1.0)
    gigpo = make_args(tmp_path, preset="gigpo")
    assert (gigpo.advantage_estimator, gigpo.scale_rewards, gigpo.trajectory_filter) == ("gigpo", "none", "none")
    assert (gigpo.gigpo_step_weight, gigpo.gigpo_gamma, gigpo.gigpo_step_std) == (1.0, 0.95, False)
    assert (gigpo.beta, gigpo.entropy_coef, gigpo.epsilon, gigpo.epsilon_high) == (0.01, 0.001, 0.2, 0.2)
    assert make_args(tmp_path, preset="gigpo", scale_rewards="group").scale_rewards == "group"
    assert set(PRESETS) == {"starpo", "starpo-s", "starpo-s-ragen", "ppo", "gigpo"}
    # answer-only turns leave the preset's thinking critic nothing to score; asking for it explicitly is refused
    assert make_args(tmp_path, preset="starpo-s", enable_thinking=False).thinking_critic is False
    with pytest.raises(ValueError, match="enable thinking or switch the thinking critic off"):
        make_args(tmp_path, preset="starpo-s", enable_thinking=False, thinking_critic=True)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(preset="starpo-x"), "Unknown preset"),
        (dict(trajectory_filter="median"), "trajectory_filter must be one of"),
        (dict(filter_keep_fraction=0.0), "filter_keep_fraction"),
        (dict(advantage_estimator="vtrace"), "advantage_estimator must be one of"),
        (dict(value_model="some/model"), "uses no value critic"),
        (dict(value_model="some/model", advantage_estimator="gigpo"), "'gigpo' uses no value critic"),
        (dict(gigpo_gamma=1.5), "gigpo_gamma must be in"),
        (dict(gigpo_step_weight=-1.0), "gigpo_step_weight must be >= 0"),
        (dict(gae_lambda=1.5), "gae_lambda must be in"),
        (dict(kl_early_stop=-1.0), "kl_early_stop must be >= 0"),
        (dict(thinking_scale_rule="halve"), "thinking_scale_rule must be one of"),
    ],
)
def test_stabilization_config_refuses_what_cannot_work(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        make_args(tmp_path, **overrides)


def scored(trainer):
    trainer.model.train()  # as during training: the filter and the critics' updates apply
    return trainer._generate_and_score_completions([dict(trainer.train_dataset[0])] * 4)


def test_filtered_trajectories_keep_their_rows_but_train_nothing(tmp_path, tiny_model_dir):
    args = make_args(tmp_path, trajectory_filter="variance", filter_keep_fraction=0.5, num_generations=2)
    trainer = StarPOTrainer(tiny_model_dir, environment=CounterEnv, args=args, train_dataset=counter_tasks(2))
    # groups: (1, 1) has no spread, (1, 0) has -> only the second group is kept
    scripted(trainer, {0: [GOOD, GOOD], 1: [GOOD, GOOD], 2: [GOOD, GOOD], 3: [BAD, BAD, BAD]})
    inputs = scored(trainer)
    assert inputs["completion_ids"].size(0) == 4
    kept = inputs["tool_mask"].sum(dim=1) > 0
    assert kept.tolist() == [False, False, True, True]
    assert torch.all(inputs["advantages"][:2] == 0)
    assert inputs["num_items_in_batch"] == inputs["tool_mask"][2:].sum()
    assert trainer._metrics["train"]["filter/kept_fraction"] == [0.5]


def test_a_micro_batch_of_filtered_rows_leaves_the_token_means_out_of_the_log(tmp_path, tiny_model_dir):
    args = make_args(tmp_path, trajectory_filter="variance", filter_keep_fraction=0.5, num_generations=2, beta=0.1,
                     kl_early_stop=10.0)
    trainer = StarPOTrainer(tiny_model_dir, environment=CounterEnv, args=args, train_dataset=counter_tasks(2))
    scripted(trainer, {0: [GOOD, GOOD], 1: [GOOD, GOOD], 2: [GOOD, GOOD], 3: [BAD, BAD, BAD]})
    inputs = scored(trainer)  # the first group is filtered out: its two rows train nothing

    inputs["old_per_token_logps"] = torch.zeros(inputs["completion_ids"].shape)  # as when updates are off-policy

    def rows(kept):
        return {name: value[kept] if torch.is_tensor(value) and value.dim() and value.size(0) == 4 else value
                for name, value in inputs.items()}

    trainer._metrics["train"].clear()
    trainer.current_gradient_accumulation_steps = 1  # set by train()
    for kept in (slice(0, 2), slice(2, 4)):
        trainer.compute_loss(trainer.model, rows(kept))
    # TRL logs 0 for the empty micro-batch; it is NaN, which TRL's log leaves out of the step's mean
    for name in ("entropy", "kl", "clip_ratio/region_mean"):
        empty, trained = trainer._metrics["train"][name]
        assert math.isnan(empty) and not math.isnan(trained), name
    assert trainer._metrics["train"]["entropy"][1] > 0
    assert len(trainer._metrics["train"]["kl_early_stop/sampling_kl"]) == 1  # the trained micro-batch's only
    assert "cispo_clip_ratio" not in trainer._metrics["train"]  # no entry made for what TRL did not log


@pytest.mark.parametrize("estimator", ["gae", "turn_gae"])
def test_gae_advantages_come_from_the_value_critic(tmp_path, tiny_model_dir, estimator):
    args = make_args(tmp_path, advantage_estimator=estimator)
    trainer = StarPOTrainer(tiny_model_dir, environment=CounterEnv, args=args, train_dataset=counter_tasks(1))
    scripted(trainer, SCRIPT)
    head_before = trainer.value_critic.head.weight.detach().clone()
    inputs = scored(trainer)
    mask = inputs["tool_mask"].bool()
    advantages = inputs["advantages"][mask]
    # whitened over the model tokens, and the successful trajectories' tokens end up above the failed ones'
    assert advantages.mean().item() == pytest.approx(0.0, abs=1e-4)
    assert advantages.std(unbiased=False).item() == pytest.approx(1.0, abs=1e-3)
    row_means = [row[m].mean().item() for row, m in zip(inputs["advantages"], mask)]
    assert min(row_means[0], row_means[2]) > max(row_means[1], row_means[3])
    if estimator == "turn_gae":  # one advantage per turn: constant over each turn's tokens
        trajectory = trainer.last_trajectories[0]
        start, end = trajectory.turns[0].response_start, trajectory.turns[0].response_end
        turn = inputs["advantages"][0, start - trajectory.prompt_length : end - trajectory.prompt_length]
        assert torch.allclose(turn, turn[0].expand_as(turn))
    assert not torch.equal(head_before, trainer.value_critic.head.weight)  # the critic trained on the batch
    assert len(trainer._metrics["train"]["critic/value_loss"]) == 1


@pytest.mark.parametrize("rule", ["sign_aware", "multiplicative", "relative"])
def test_thinking_critic_scales_each_turns_advantages(tmp_path, tiny_model_dir, rule):
    args = make_args(tmp_path, thinking_critic=True, thinking_scale_rule=rule)
    trainer = StarPOTrainer(tiny_model_dir, environment=CounterEnv, args=args, train_dataset=counter_tasks(1))
    scripted(trainer, SCRIPT)
    inputs = scored(trainer)
    base = torch.tensor([0.866, -0.866, 0.866, -0.866])  # group-relative advantages of returns 1, 0, 1, 0
    raw = [torch.sigmoid(torch.tensor(turn.thinking_score)) for t in trainer.last_trajectories for turn in t.turns]
    batch_mean = torch.stack(raw).mean()  # 4 first turns at sigmoid(0), 6 later ones at sigmoid(-2): 0.2715
    for row, trajectory in enumerate(trainer.last_trajectories):
        for turn in trajectory.turns:
            # "go" then "inc"/"dec": thinking present, not repeated... except from the second turn on, and the
            # action never shares a word with "go": the prior score is 2 - 2 (ungrounded) - 2 (repeated)
            assert turn.thinking_score is not None
            start, end = turn.response_start - trajectory.prompt_length, turn.response_end - trajectory.prompt_length
            scale = torch.sigmoid(torch.tensor(turn.thinking_score))
            if rule == "relative":
                scale = min(scale / batch_mean, torch.tensor(1.0))  # first turns 1, later ones 0.1192 / 0.2715
            if rule in ("sign_aware", "relative") and base[row] < 0:
                scale = 2 - scale  # blame grows as the thinking gets worse
            expected = base[row] * scale
            assert torch.allclose(inputs["advantages"][row, start:end], expected, atol=2e-3)
    assert [t.turns[0].thinking_score for t in trainer.last_trajectories] == pytest.approx([0.0] * 4)
    assert [t.turns[1].thinking_score for t in trainer.last_trajectories] == pytest.approx([-2.0] * 4)
    assert trainer._metrics["train"]["critic/ungrounded_action"] == [1.0]


def test_kl_early_stopping_cuts_inner_updates_short(tmp_path, tiny_agent_dir):
    args = make_args(tmp_path, num_iterations=4, max_steps=4, learning_rate=5e-2, kl_early_stop=1e-6)
    trainer = StarPOTrainer(tiny_agent_dir, environment=CounterEnv, args=args, train_dataset=counter_tasks())
    collections = []
    collect = trainer.collect_trajectories
    trainer.collect_trajectories = lambda tasks, groups: collections.append(len(tasks)) or collect(tasks, groups)
    trainer.train()
    # without early stopping, 4 steps at num_iterations=4 collect rollouts once; each stop collects afresh
    assert trainer.kl_early_stops and trainer.kl_early_stops[0] >= 1
    assert len(collections) == 1 + len(trainer.kl_early_stops)
    logs = [e for e in trainer.state.log_history if "kl_early_stop/sampling_kl" in e]
    assert logs and max(e["kl_early_stop/sampling_kl"] for e in logs) > 1e-6


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_a_short_run_with_each_preset_on_sokoban(tmp_path, tiny_model_dir, preset):
    args = make_args(
        tmp_path, preset=preset, max_steps=2, max_turns=2, max_tokens_per_turn=8, max_context_length=4096,
        num_iterations=2,
    )
    trainer = StarPOTrainer(tiny_model_dir, environment="sokoban", args=args)
    trainer.train()
    logs = [e for e in trainer.state.log_history if "loss" in e]
    assert len(logs) == 2 and all(torch.isfinite(torch.tensor(e["loss"])) for e in logs)
    for trajectory in trainer.last_trajectories:  # sampling log-probs on exactly the generated tokens
        sampled = [lp is not None for lp in trajectory.logprobs]
        assert sampled == [s in (Segment.THINKING, Segment.ACTION) for s in trajectory.segments]
    first = logs[0]  # rollouts are collected at the first step and reused by the second (num_iterations=2)
    assert 0 < first["filter/kept_fraction"] <= 1
    if preset == "starpo-s-ragen":
        assert "critic/value_loss" in first and "critic/explained_variance" in first
    if preset == "starpo-s":
        assert 0 < first["critic/thinking_scale"] < 1
        assert "critic/advantage_shift" in first and "critic/scale_on_credit" in first
        assert all(t.turns[0].thinking_score is not None for t in trainer.last_trajectories)


def test_critics_are_saved_with_checkpoints_and_restored_on_resume(tmp_path, tiny_model_dir):
    args = make_args(tmp_path, advantage_estimator="gae", thinking_critic=True, save_strategy="steps", save_steps=2)
    trainer = StarPOTrainer(tiny_model_dir, environment=CounterEnv, args=args, train_dataset=counter_tasks())
    trainer.train()
    checkpoint = tmp_path / "checkpoint-2"
    assert (checkpoint / "value_critic.safetensors").exists() and (checkpoint / "thinking_critic_optimizer.pt").exists()
    saved = {k: v.clone() for k, v in trainer.value_critic.state_dict().items()}

    resumed = StarPOTrainer(tiny_model_dir, environment=CounterEnv, args=args, train_dataset=counter_tasks())
    assert not torch.equal(resumed.value_critic.head.weight, saved["head.weight"])
    resumed._load_from_checkpoint(str(checkpoint))
    for key, value in resumed.value_critic.state_dict().items():
        assert torch.equal(value, saved[key])
    assert resumed.thinking_critic.optimizer.state_dict()["state"]  # Adam moments came back too
