"""The learning signal of the update itself: filtered rows, KL early stopping's batches, the thinking critic's
scaling and the outlier filter on sparse rewards."""

import logging
import math

import pytest
import torch
from conftest import CounterEnv
from test_trainer import BAD, GOOD, counter_tasks, make_args, scripted

from trl_starpo import StarPOTrainer
from trl_starpo.algorithms.critics import relative_to_batch, scale_by_thinking, thinking_scale_metrics
from trl_starpo.algorithms.filtering import outlier_clip_weights, trajectory_filter_weights
from trl_starpo.config import SUPPORTED_LOSS_TYPES


def scored(trainer, rows):
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by `train()`
    return trainer._generate_and_score_completions([dict(trainer.train_dataset[0])] * rows)


def gradient(trainer, inputs):
    trainer.model.zero_grad(set_to_none=True)
    trainer._compute_loss(trainer.model, inputs).backward()
    return torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None])


def kept_rows_alone(inputs, kept):
    """The scored batch as if the dropped rows had never been collected."""
    alone = {key: value[kept] if torch.is_tensor(value) and value.dim() > 0 else value for key, value in inputs.items()}
    alone["num_items_in_batch"] = (alone["completion_mask"] * alone["tool_mask"]).sum()
    alone["kept_rows_scale"] = torch.tensor(1.0)
    return alone


@pytest.mark.parametrize("loss_type", SUPPORTED_LOSS_TYPES)
def test_kept_rows_get_the_update_they_would_get_alone(tmp_path, tiny_model_dir, loss_type):
    # Two groups of four; the variance filter keeps the one whose returns vary and drops the other.
    args = make_args(
        tmp_path, loss_type=loss_type, trajectory_filter="variance", filter_keep_fraction=0.5, per_device_train_batch_size=8
    )
    trainer = StarPOTrainer(tiny_model_dir, environment=CounterEnv, args=args, train_dataset=counter_tasks(2))
    script = {i: [GOOD, GOOD] for i in range(4)}  # group 0: all succeed, no spread
    script.update({4: [GOOD, GOOD], 5: [BAD, BAD, BAD], 6: [GOOD, GOOD], 7: [BAD, BAD, BAD]})
    scripted(trainer, script)
    inputs = scored(trainer, 8)
    kept = inputs["tool_mask"].sum(dim=1) > 0
    assert kept.tolist() == [False] * 4 + [True] * 4

    masked = gradient(trainer, inputs)
    alone = gradient(trainer, kept_rows_alone(inputs, kept))
    assert alone.norm() > 0
    assert torch.allclose(masked, alone, rtol=1e-4, atol=1e-7), (masked.norm() / alone.norm()).item()


def fake_generation(trainer, rows):
    """Make every collection return a batch whose rows are numbered: 0..rows-1, then 100.., 200.., ..."""
    batches = []

    def score(trajectories, group_size, offset, mode="train"):
        batch = torch.arange(rows) + 100 * len(batches)
        batches.append(batch)
        return {"row": batch}

    trainer.collect_trajectories = lambda tasks, groups: []
    trainer.score_trajectories = score
    return batches


def train_rows(trainer, steps, trigger_at=(), clear_buffer_at=()):
    """Drive `_prepare_inputs` as the training loop does; returns the rows trained at each micro-step."""
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by `train()`
    trained = []
    for _ in range(steps):
        if trainer._step in clear_buffer_at:
            trainer._buffered_inputs = None  # what `restore_checkpoint` (the monitor's rollback) does
        trained.append(trainer._prepare_inputs([{"seed": 0}] * 8)["row"].tolist())
        if trainer._step in trigger_at:
            trainer.kl_early_stopping.triggered = True  # as `observe` does when the measured KL exceeds the target
        trainer._step += 1
    return trained


@pytest.mark.parametrize("how", ["kl_early_stop", "rollback"])
def test_after_an_early_batch_every_row_trains_exactly_once(tmp_path, tiny_model_dir, how):
    args = make_args(tmp_path, per_device_train_batch_size=2, steps_per_generation=4, kl_early_stop=0.01)
    trainer = StarPOTrainer(tiny_model_dir, environment=CounterEnv, args=args, train_dataset=counter_tasks(2))
    batches = fake_generation(trainer, rows=8)
    if how == "kl_early_stop":
        trained = train_rows(trainer, steps=10, trigger_at={1})
    else:
        trained = train_rows(trainer, steps=10, clear_buffer_at={2})
    assert len(batches) == 3  # the first batch, cut short at step 2; the fresh one (steps 2-5); the next (6-9)
    assert sorted(sum(trained[2:6], [])) == list(range(100, 108))
    assert sorted(sum(trained[6:10], [])) == list(range(200, 208))
    if how == "kl_early_stop":
        assert trainer.kl_early_stops == [trainer.state.global_step]


def test_an_evaluation_does_not_cancel_a_pending_kl_stop(tmp_path, tiny_model_dir):
    args = make_args(tmp_path, per_device_train_batch_size=2, steps_per_generation=4, kl_early_stop=0.01)
    trainer = StarPOTrainer(tiny_model_dir, environment=CounterEnv, args=args, train_dataset=counter_tasks(2))
    fake_generation(trainer, rows=8)
    trainer.kl_early_stopping.triggered = True
    trainer.model.eval()
    trainer._generate_and_score_completions([{"seed": 0}] * 8)
    assert trainer.kl_early_stopping.triggered
    trainer.model.train()
    trainer._generate_and_score_completions([{"seed": 0}] * 8)  # fresh training rollouts do reset it
    assert not trainer.kl_early_stopping.triggered


@pytest.mark.parametrize(
    "schedule, acts",
    [
        (dict(num_iterations=1), False),  # one optimizer step per batch: always on the sampling policy
        (dict(num_iterations=2), False),  # the second step can stop only the (nonexistent) third
        (dict(num_iterations=3), True),
        (dict(per_device_train_batch_size=2, steps_per_generation=4), True),
    ],
)
def test_the_kl_early_stop_warning_says_when_it_cannot_act(tmp_path, tiny_model_dir, caplog, schedule, acts):
    args = make_args(tmp_path, kl_early_stop=0.05, **schedule)
    with caplog.at_level(logging.WARNING):
        StarPOTrainer(tiny_model_dir, environment=CounterEnv, args=args, train_dataset=counter_tasks(2))
    warned = any("kl_early_stop can never act" in record.getMessage() for record in caplog.records)
    assert warned == (not acts)


def test_sign_aware_thinking_scale_never_shrinks_blame():
    # The audit's case: a group of returns 1, 0, 1, 0; the successes think well (s = 0.98), the failures poorly
    # (s = 0.38), and one failure's thinking is repeated and ungrounded (prior score 2 - 2 - 2: s = sigmoid(-2)).
    advantages = torch.tensor([0.866, -0.866, 0.866, -0.866])
    scales = torch.tensor([0.98, 0.38, 0.98, torch.sigmoid(torch.tensor(-2.0)).item()])

    literal = scale_by_thinking(advantages, scales, "multiplicative")
    assert literal.mean() > 0.2  # a zero-mean group now pushes every response up
    assert literal[3] / advantages[3] == pytest.approx(0.119, abs=1e-3)  # 12% of the penalty left

    fixed = scale_by_thinking(advantages, scales, "sign_aware")
    assert torch.all(fixed[advantages > 0] <= advantages[advantages > 0])  # poor thinking shrinks credit...
    assert torch.all(fixed[advantages < 0] <= advantages[advantages < 0])  # ...and never shrinks blame
    assert fixed[3] / advantages[3] == pytest.approx(1.881, abs=1e-3)
    assert fixed.mean() < 0
    # good thinking (s -> 1) leaves the advantage as it was, under both rules
    ones = torch.ones(4)
    assert torch.equal(scale_by_thinking(advantages, ones, "sign_aware"), advantages)


def test_the_thinking_scale_metrics_show_the_net_push_each_rule_adds():
    # two trajectories of three tokens; the last token of the second is the environment's (masked out)
    advantages = torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]])
    scales = torch.tensor([[0.5, 0.5, 1.0], [0.25, 0.25, 0.9]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])

    sign_aware = thinking_scale_metrics(advantages, scale_by_thinking(advantages, scales, "sign_aware"), scales, mask)
    assert sign_aware["critic/scale_on_credit"] == pytest.approx(2 / 3)
    assert sign_aware["critic/scale_on_blame"] == pytest.approx(0.25)
    # credit -0.5, -0.5, 0; blame -0.75, -0.75: five tokens
    assert sign_aware["critic/advantage_shift"] == pytest.approx(-2.5 / 5)

    literal = thinking_scale_metrics(advantages, scale_by_thinking(advantages, scales, "multiplicative"), scales, mask)
    assert literal["critic/advantage_shift"] == pytest.approx((-0.5 - 0.5 + 0 + 0.75 + 0.75) / 5)
    nothing_to_blame = thinking_scale_metrics(advantages[:1], advantages[:1], scales[:1], mask[:1])
    assert math.isnan(nothing_to_blame["critic/scale_on_blame"])
    assert nothing_to_blame["critic/advantage_shift"] == 0.0


def test_relative_scales_undo_a_critic_that_learnt_only_its_base_rate():
    # MiniGrid's case: the critic scores every turn near its labels' base rate, on credit and blame alike
    advantages = torch.tensor([[1.0, 1.0], [-1.0, -1.0]])
    turn_scales = torch.tensor([0.35, 0.35, 0.35, 0.175])  # one failing turn judged half as good as the rest
    mask = torch.ones(2, 2)

    raw = scale_by_thinking(advantages, turn_scales.view(2, 2), "sign_aware")
    assert thinking_scale_metrics(advantages, raw, turn_scales.view(2, 2), mask)["critic/advantage_shift"] == (
        pytest.approx((2 * -0.65 + -0.65 + -0.825) / 4)  # every token pushed down: credit x0.35, blame x1.65
    )
    relative = relative_to_batch(turn_scales, turn_scales.mean().item())  # batch mean 0.30625
    assert relative.tolist() == pytest.approx([1.0, 1.0, 1.0, 0.175 / 0.30625])
    scaled = scale_by_thinking(advantages, relative.view(2, 2), "relative")
    assert scaled[0].tolist() == [1.0, 1.0]  # judged as well as the batch: credit kept
    assert scaled[1].tolist() == pytest.approx([-1.0, -(2 - 0.175 / 0.30625)])  # only the worse turn gains blame
    assert relative_to_batch(torch.tensor([0.2, 0.2]), 0.2).tolist() == [1.0, 1.0]  # an even batch is untouched


@pytest.mark.parametrize("successes, literal_kept", [(1, 0), (2, 0), (3, 0), (4, 4)])
def test_rare_successes_survive_the_outlier_clip(successes, literal_kept):
    returns = torch.tensor([1.0] * successes + [0.0] * (16 - successes))
    literal = trajectory_filter_weights("outlier", returns, group_size=16)
    assert int((literal[:successes] > 0).sum()) == literal_kept  # the specification's filter, as written

    weights = outlier_clip_weights(returns, group_size=16, num_std=2.0)
    p = successes / 16
    z_success = (1 - p) / (p * (1 - p)) ** 0.5
    assert torch.allclose(weights[:successes], torch.tensor(min(1.0, 2.0 / z_success)))
    assert torch.all(weights[successes:] == 1)  # the common failures are far from outliers
    assert torch.all(weights > 0)  # nothing dropped


def test_weights_of_the_outlier_clip_are_per_group():
    returns = torch.tensor([1.0, 0, 0, 0, 0, 0, 0, 0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0])
    weights = outlier_clip_weights(returns, group_size=8)
    assert weights[0].item() == pytest.approx(2 / 7**0.5)  # 1 of 8: z = sqrt(7)
    assert torch.all(weights[1:] == 1)  # the second group has no spread: untouched


def test_a_warning_when_the_literal_filter_drops_every_success(tmp_path, tiny_model_dir, caplog):
    args = make_args(tmp_path, trajectory_filter="outlier", num_generations=8, per_device_train_batch_size=8)
    trainer = StarPOTrainer(tiny_model_dir, environment=CounterEnv, args=args, train_dataset=counter_tasks(1))
    scripted(trainer, {0: [GOOD, GOOD], **{i: [BAD, BAD, BAD] for i in range(1, 8)}})  # 1 success of 8: z = 2.65
    with caplog.at_level(logging.WARNING):
        inputs = scored(trainer, 8)
    assert inputs["tool_mask"][0].sum() == 0
    assert trainer._metrics["train"]["filter/dropped_every_success"] == [1.0]
    assert any("dropped all 1 successful" in record.getMessage() for record in caplog.records)

    trainer = StarPOTrainer(
        tiny_model_dir, environment=CounterEnv, args=make_args(tmp_path, trajectory_filter="outlier_clip",
        num_generations=8, per_device_train_batch_size=8), train_dataset=counter_tasks(1)
    )
    scripted(trainer, {0: [GOOD, GOOD], **{i: [BAD, BAD, BAD] for i in range(1, 8)}})
    inputs = scored(trainer, 8)
    assert inputs["tool_mask"][0].sum() > 0 and inputs["advantages"][0].max() > 0  # the success trains
    assert trainer._metrics["train"]["filter/dropped_every_success"] == [0.0]


def test_a_preset_does_not_warn_about_its_own_kl_early_stop(tmp_path, tiny_model_dir, caplog):
    args = make_args(tmp_path, preset="starpo-s", num_iterations=1)  # the preset's 0.05 cannot act on-policy
    assert args.kl_early_stop == 0.05 and "kl_early_stop" in args.preset_filled
    with caplog.at_level(logging.WARNING):
        StarPOTrainer(tiny_model_dir, environment=CounterEnv, args=args, train_dataset=counter_tasks(2))
    assert not any("kl_early_stop can never act" in record.getMessage() for record in caplog.records)
