import pytest
import torch
from conftest import CounterEnv, ScriptedGenerator
from datasets import Dataset

from trl_starpo import StarPOConfig, StarPOTrainer
from trl_starpo.trajectory import Segment

# The collector prefills "<think>", so scripted responses continue from inside it.
GOOD = "go</think><answer>inc</answer>"
BAD = "go</think><answer>dec</answer>"


def counter_tasks(n=4):
    return Dataset.from_list([{"task_id": f"t{i}", "seed": i, "start": 0, "target": 2} for i in range(n)])


def make_args(tmp_path, **overrides):
    settings = dict(
        output_dir=str(tmp_path),
        num_generations=4,
        per_device_train_batch_size=4,
        max_steps=2,
        max_turns=3,
        max_tokens_per_turn=16,
        max_context_length=512,
        learning_rate=1e-2,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        gradient_checkpointing=False,
        seed=0,
    )
    settings.update(overrides)
    return StarPOConfig(**settings)


def scripted(trainer, responses):
    """Make the trainer play fixed responses, so returns (and advantages) are known."""

    def collect(tasks, groups):
        generator = ScriptedGenerator(trainer._tokenizer, responses)
        return trainer.collector.collect([CounterEnv() for _ in tasks], tasks, generator, groups)

    trainer.collect_trajectories = collect


def capture_logps(trainer):
    """Keep the per-token log-probs the loss is computed from, with their gradient."""
    captured = []
    original = trainer._get_per_token_logps_and_entropies

    def wrapped(*args, **kwargs):
        logps, entropies, aux = original(*args, **kwargs)
        if logps.requires_grad:
            logps.retain_grad()
            captured.append(logps)
        return logps, entropies, aux

    trainer._get_per_token_logps_and_entropies = wrapped
    return captured


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(max_turns=0), "max_turns must be at least 1"),
        (dict(max_context_length=64, max_tokens_per_turn=64), "must exceed max_tokens_per_turn"),
        (dict(format_penalty=0.5), "format_penalty must be <= 0"),
        (dict(invalid_action_penalty=0.5), "invalid_action_penalty must be <= 0"),
        (dict(thinking_loss_weight=0.0, action_loss_weight=0.0), "nothing would be trained"),
        (dict(action_separator=""), "action_separator"),
        (dict(loss_type="sapo"), "not supported by StarPOTrainer"),
        (dict(use_vllm=True), "use_vllm"),
        (dict(num_generations=3), "divisible by num_generations"),
    ],
)
def test_config_refuses_what_cannot_work(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        make_args(tmp_path, **overrides)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(temperature=0.0), r"^temperature must be > 0, got 0.0: .*temperature=1.0"),
        (dict(temperature=-0.5), r"^temperature must be > 0"),
        (dict(per_device_train_batch_size=0), r"^per_device_train_batch_size must be at least 1, got 0\.$"),
        (dict(gradient_accumulation_steps=0), r"^gradient_accumulation_steps must be at least 1, got 0\.$"),
        (dict(num_generations=0), r"^num_generations must be at least 2, got 0"),
        (dict(num_generations=1), r"^num_generations must be at least 2, got 1"),
        (dict(num_iterations=0), r"^num_iterations must be at least 1, got 0\.$"),
        (dict(steps_per_generation=0), r"^steps_per_generation must be at least 1 \(or None\), got 0\.$"),
        (dict(max_tokens_per_turn=0), r"^max_tokens_per_turn must be at least 1, got 0\.$"),
    ],
)
def test_config_refuses_sampling_and_batch_values_in_one_line(tmp_path, overrides, message):
    # These failed deep inside TRL (a ZeroDivisionError), torch or transformers, or trained nothing and exited 0.
    with pytest.raises(ValueError, match=message) as refused:
        make_args(tmp_path, **overrides)
    assert "\n" not in str(refused.value)


def test_unknown_environment_lists_installed_ones(tmp_path, tiny_model_dir):
    with pytest.raises(ValueError, match="Unknown environment 'nope'. Installed environments: .*sokoban"):
        StarPOTrainer(tiny_model_dir, environment="nope", args=make_args(tmp_path))


def test_environment_instance_is_refused_with_advice(tmp_path, tiny_model_dir):
    with pytest.raises(TypeError, match="factory"):
        StarPOTrainer(tiny_model_dir, environment=CounterEnv(), args=make_args(tmp_path), train_dataset=counter_tasks())


def _no_model_loading(self, *args, **kwargs):
    raise AssertionError("GRPOTrainer.__init__ (which loads the model) ran before the environment was checked")


def test_an_environment_kwargs_typo_fails_before_the_model_loads(tmp_path, monkeypatch):
    from trl import GRPOTrainer

    monkeypatch.setattr(GRPOTrainer, "__init__", _no_model_loading)
    args = make_args(tmp_path, environment_kwargs={"high_probabilty": 0.5})
    with pytest.raises(TypeError, match="high_probabilty"):
        StarPOTrainer("no/model-needed", environment="bandit", args=args)


def test_an_environment_without_prompts_is_refused_with_what_to_add(tmp_path, monkeypatch):
    from trl import GRPOTrainer

    class GymnasiumStyle:
        def reset(self, *, seed=None, options=None):
            return "start", {}

        def step(self, action):
            return "next", 0.0, False, False, {}

    monkeypatch.setattr(GRPOTrainer, "__init__", _no_model_loading)
    args, tasks = make_args(tmp_path), counter_tasks()
    with pytest.raises(TypeError, match="GymnasiumStyle lacks system_prompt, action_description .* Add string attributes"):
        StarPOTrainer("no/model-needed", environment=GymnasiumStyle, args=args, train_dataset=tasks)


def test_the_environment_built_at_construction_is_the_first_one_played(tmp_path, tiny_model_dir):
    built = []

    def factory():
        built.append(CounterEnv())
        return built[-1]

    trainer = StarPOTrainer(tiny_model_dir, environment=factory, args=make_args(tmp_path), train_dataset=counter_tasks())
    assert len(built) == 1
    trajectories = trainer.collect_trajectories([dict(trainer.train_dataset[0])] * 4, [0] * 4)
    assert len(trajectories) == 4 and len(built) == 4
    assert trainer.environment_pool.take(4) == built


@pytest.mark.parametrize("thinking_weight", [1.0, 0.0])
def test_only_model_tokens_receive_gradient(tmp_path, tiny_model_dir, thinking_weight):
    args = make_args(tmp_path, thinking_loss_weight=thinking_weight)
    trainer = StarPOTrainer(tiny_model_dir, environment=CounterEnv, args=args, train_dataset=counter_tasks(1))
    # Two trajectories succeed in two turns, two never do: group advantages are +-0.866.
    scripted(trainer, {0: [GOOD, GOOD], 1: [BAD, BAD, BAD], 2: [GOOD, GOOD], 3: [BAD, GOOD, BAD]})
    rows = [dict(trainer.train_dataset[0]) for _ in range(4)]
    inputs = trainer._generate_and_score_completions(rows)
    segments = torch.tensor(
        [t.completion_segments + [-1] * (inputs["completion_ids"].shape[1] - len(t.completion_segments))
         for t in trainer.last_trajectories], device=inputs["completion_ids"].device
    )
    model_tokens = (segments == Segment.THINKING) | (segments == Segment.ACTION)
    assert inputs["tool_mask"].bool().equal(model_tokens)
    assert inputs["num_items_in_batch"].item() == model_tokens.sum().item()

    captured = capture_logps(trainer)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by train(), which this test does not run
    loss = trainer.compute_loss(trainer.model, inputs)
    loss.backward()
    grad = captured[0].grad
    environment_side = (segments == Segment.OBSERVATION) | (segments == Segment.TEMPLATE) | (segments == -1)
    assert environment_side.any()
    assert torch.all(grad[environment_side] == 0)
    trained = (segments == Segment.ACTION) | ((segments == Segment.THINKING) if thinking_weight else False)
    assert torch.all(grad[trained] != 0)
    if not thinking_weight:
        assert torch.all(grad[segments == Segment.THINKING] == 0)
    # dapo: the loss is normalized by the number of model tokens only.
    advantages = inputs["advantages"]
    expected = -(advantages * inputs["tool_mask"]).sum() / inputs["num_items_in_batch"]
    assert loss.item() == pytest.approx(expected.item(), abs=1e-5)


def test_advantages_are_group_relative_returns(tmp_path, tiny_model_dir):
    trainer = StarPOTrainer(tiny_model_dir, environment=CounterEnv, args=make_args(tmp_path), train_dataset=counter_tasks(1))
    scripted(trainer, {0: [GOOD, GOOD], 1: [BAD, BAD, BAD], 2: [GOOD, GOOD], 3: [BAD, GOOD, BAD]})
    inputs = trainer._generate_and_score_completions([dict(trainer.train_dataset[0])] * 4)
    returns = [t.episode_return for t in trainer.last_trajectories]
    assert returns == [1.0, 0.0, 1.0, 0.0]
    per_trajectory = [row[mask.bool()][-1].item() for row, mask in zip(inputs["advantages"], inputs["tool_mask"])]
    assert per_trajectory == pytest.approx([0.866, -0.866, 0.866, -0.866], abs=1e-3)
    # Each trajectory carries its advantage and the filter's verdict into the store and the HTML view.
    assert [t.advantage for t in trainer.last_trajectories] == pytest.approx(per_trajectory, abs=1e-6)
    assert [t.kept for t in trainer.last_trajectories] == [True] * 4


def train_counter(tmp_path, model_dir, **overrides):
    trainer = StarPOTrainer(model_dir, environment=CounterEnv, args=make_args(tmp_path, **overrides), train_dataset=counter_tasks())
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    trainer.train()
    after = dict(trainer.model.named_parameters())
    changed = sum(not torch.equal(before[n], after[n].detach()) for n in before)
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    return trainer, changed, logs


def test_training_updates_the_policy_and_logs_rollout_metrics(tmp_path, tiny_agent_dir):
    # Adam's first step moves every weight by about the learning rate; at 1e-2 that is half the scale of this tiny
    # model's weights, which can break its format by chance (it did when the format instructions were reworded).
    trainer, changed, logs = train_counter(tmp_path, tiny_agent_dir, learning_rate=1e-3)
    assert changed > 0
    assert len(logs) == 2
    for entry in logs:
        assert 0.0 <= entry["rollout/success"] <= 1.0
        assert entry["rollout/format_error_rate"] < 0.5  # the tiny agent learned the format
        assert 1.0 <= entry["rollout/turns"] <= 3.0
        assert entry["rollout/response_tokens"] == entry["rollout/thinking_tokens"] + entry["rollout/action_tokens"]
        assert torch.isfinite(torch.tensor(entry["loss"]))


def test_kl_penalty_with_reference_model_and_several_iterations(tmp_path, tiny_agent_dir):
    trainer, changed, logs = train_counter(tmp_path, tiny_agent_dir, beta=0.1, num_iterations=2, max_steps=4)
    assert changed > 0
    assert all("kl" in entry for entry in logs)
    assert logs[0]["kl"] == pytest.approx(0.0, abs=1e-6)  # the first update starts at the reference
    assert any(entry["kl"] > 0 for entry in logs[1:])


def test_old_logps_are_computed_when_updates_run_off_policy(tmp_path, tiny_agent_dir):
    trainer = StarPOTrainer(
        tiny_agent_dir, environment=CounterEnv, args=make_args(tmp_path, num_iterations=2), train_dataset=counter_tasks()
    )
    inputs = trainer._generate_and_score_completions([dict(trainer.train_dataset[0])] * 4)
    assert inputs["old_per_token_logps"].shape == inputs["completion_ids"].shape


def test_gradient_accumulation(tmp_path, tiny_agent_dir):
    trainer, changed, logs = train_counter(
        tmp_path, tiny_agent_dir, per_device_train_batch_size=2, gradient_accumulation_steps=2, max_steps=2
    )
    assert changed > 0 and len(logs) == 2


def test_lora_trains_only_the_adapter(tmp_path, tiny_agent_dir):
    from peft import LoraConfig

    trainer = StarPOTrainer(
        tiny_agent_dir,
        environment=CounterEnv,
        args=make_args(tmp_path, learning_rate=5e-2),
        train_dataset=counter_tasks(),
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
    )
    trainable = {n for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    changed = {n for n, p in trainer.model.named_parameters() if not torch.equal(before[n], p.detach())}
    assert changed and changed <= trainable


def test_a_bf16_lora_run_rolls_out_on_bf16_frozen_weights_and_trains_the_originals(tmp_path, tiny_agent_dir,
                                                                                   monkeypatch):
    from peft import LoraConfig

    from trl_starpo import config as config_module

    monkeypatch.setattr(config_module, "cpu_computes_bf16", lambda: True)  # keep bf16 on a CPU without bf16 units
    trainer = StarPOTrainer(
        tiny_agent_dir,
        environment=CounterEnv,
        args=make_args(tmp_path, bf16=True, max_steps=1, learning_rate=5e-2),
        train_dataset=counter_tasks(),
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
    )
    q_proj = trainer.model.base_model.model.model.layers[0].self_attn.q_proj
    original = q_proj.base_layer.weight
    seen = []
    q_proj.register_forward_pre_hook(lambda module, args: seen.append((torch.is_grad_enabled(),
                                                                        module.base_layer.weight.dtype)))
    trainer.train()
    assert (False, torch.bfloat16) in seen  # the rollout's forwards
    assert (True, torch.float32) in seen  # the loss's forward, on the parameter the optimizer holds
    assert q_proj.base_layer.weight is original and original.dtype == torch.float32


@pytest.mark.parametrize("name", ["bandit", "countdown", "frozenlake", "sokoban"])
def test_a_training_step_on_every_environment(tmp_path, tiny_model_dir, name):
    trainer = StarPOTrainer(
        tiny_model_dir, environment=name, args=make_args(tmp_path, max_steps=1, max_turns=2, max_tokens_per_turn=8, max_context_length=4096),
    )
    trainer.train()
    (entry,) = [e for e in trainer.state.log_history if "loss" in e]
    assert entry["rollout/turns"] >= 1
    assert entry["rollout/env_error"] == 0.0
    assert len({t.task_id for t in trainer.last_trajectories}) == 1  # one task, four rollouts from one start state
    first_observations = {t.turns[0].observation for t in trainer.last_trajectories}
    assert len(first_observations) == 1


def test_evaluate_episodes_averages_the_first_tasks(tmp_path, tiny_model_dir):
    trainer = StarPOTrainer(tiny_model_dir, environment=CounterEnv, args=make_args(tmp_path), train_dataset=counter_tasks())
    scripted(trainer, {0: [GOOD, GOOD], 1: [BAD, BAD, BAD], 2: ["no format", GOOD, GOOD]})
    trainer.model.train()
    stats = trainer.evaluate_episodes(counter_tasks(6), num_episodes=3)
    assert stats["success"] == pytest.approx(2 / 3)
    assert stats["return"] == pytest.approx((1.0 + 0.0 + 0.9) / 3)
    assert stats["format_error_rate"] == pytest.approx((0 + 0 + 1 / 3) / 3)
    assert trainer.model.training  # restored after evaluation


@pytest.mark.parametrize("bf16", [True, False])
def test_episodes_play_in_the_training_precision_before_training_as_after(tmp_path, tiny_model_dir, bf16,
                                                                          monkeypatch):
    from trl_starpo import config as config_module

    monkeypatch.setattr(config_module, "cpu_computes_bf16", lambda: True)  # keep bf16 on a CPU without bf16 units
    trainer = StarPOTrainer(tiny_model_dir, environment=CounterEnv, args=make_args(tmp_path, bf16=bf16, max_steps=1),
                            train_dataset=counter_tasks())
    assert trainer.args.bf16 == bf16
    device, autocast_seen = trainer.accelerator.device.type, []
    forward = trainer.model.forward
    trainer.model.forward = lambda *args, **kwargs: autocast_seen.append(torch.is_autocast_enabled(device)) or forward(
        *args, **kwargs)
    trainer.evaluate_episodes(counter_tasks(2))  # before train(): the model has no autocast of its own yet
    assert autocast_seen and set(autocast_seen) == {bf16}
    trainer.train()
    autocast_seen.clear()
    trainer.evaluate_episodes(counter_tasks(2))
    assert autocast_seen and set(autocast_seen) == {bf16}


@pytest.mark.parametrize("fault", ["nan_advantage", "inf_gradient"])
def test_a_non_finite_loss_or_gradient_skips_its_step_and_training_goes_on(tmp_path, tiny_agent_dir, fault, caplog):
    from transformers import TrainerCallback

    trainer = StarPOTrainer(tiny_agent_dir, environment=CounterEnv, args=make_args(tmp_path, max_turns=2),
                            train_dataset=counter_tasks())
    scripted(trainer, {0: [GOOD, GOOD], 1: [BAD, BAD], 2: [GOOD, GOOD], 3: [BAD, BAD]})  # every step has a spread
    if fault == "nan_advantage":  # a NaN reaches the loss (as a NaN reward from an environment would)
        score = trainer.score_trajectories

        def poisoned(*args, **kwargs):
            output = score(*args, **kwargs)
            if trainer.state.global_step == 0:  # the rollouts of step 1
                output["advantages"][0] = float("nan")
            return output

        trainer.score_trajectories = poisoned
    else:  # the loss is finite, one gradient is not (an overflow)
        weight = trainer.model.get_input_embeddings().weight
        weight.register_hook(lambda grad: torch.full_like(grad, float("inf")) if trainer.state.global_step == 0 else None)

    weights = []

    class Snapshot(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            self.on_step_end(args, state, control)

        def on_step_end(self, args, state, control, **kwargs):
            weights.append(torch.cat([p.detach().flatten().clone() for p in trainer.model.parameters()]))

    trainer.add_callback(Snapshot())
    with caplog.at_level("WARNING", logger="trl_starpo.nonfinite"):
        trainer.train()
    assert trainer.nonfinite_guard.skipped_steps == [1]
    assert "Step 1: the loss or the gradients are not finite" in caplog.text
    assert torch.equal(weights[1], weights[0])  # step 1 changed nothing ...
    assert not torch.equal(weights[2], weights[1]) and torch.isfinite(weights[2]).all()  # ... and step 2 trained
    assert {state["step"].item() for state in trainer.optimizer.state_dict()["state"].values()} == {1.0}
    logged = [entry["nonfinite/skipped"] for entry in trainer.state.log_history if "nonfinite/skipped" in entry]
    assert logged == [1.0, 0.0]


@pytest.mark.parametrize("fault", ["every_gradient_infinite", "every_advantage_zero"])
def test_a_run_that_never_changed_the_model_says_why_writes_no_agent_and_fails_the_recipe(
        tmp_path, tiny_agent_dir, fault, caplog):
    from trl_starpo.nonfinite import NothingTrainedError
    from trl_starpo.recipes import refuse_untrained

    trainer = StarPOTrainer(tiny_agent_dir, environment=CounterEnv, args=make_args(tmp_path, max_turns=2),
                            train_dataset=counter_tasks())
    if fault == "every_gradient_infinite":
        trainer.model.get_input_embeddings().weight.register_hook(lambda grad: torch.full_like(grad, float("inf")))
        expected = "all 2 optimizer steps were skipped because the loss or the gradients were not finite"
    else:  # every group's returns alike, as an untrained model's all-malformed answers make them
        score = trainer.score_trajectories

        def tied(*args, **kwargs):
            output = score(*args, **kwargs)
            output["advantages"] = torch.zeros_like(output["advantages"])
            return output

        trainer.score_trajectories = tied
        expected = "none of the 2 optimizer steps carried a gradient: every group's returns were equal"
    before = torch.cat([p.detach().flatten().clone() for p in trainer.model.parameters()])
    with caplog.at_level("WARNING"):
        trainer.train()
    assert torch.equal(torch.cat([p.detach().flatten() for p in trainer.model.parameters()]), before)
    assert trainer.nonfinite_guard.nothing_trained_reason().startswith(expected)
    assert f"This run did not change the model: {expected}" in caplog.text
    assert not (tmp_path / "starpo_agent.json").exists() and not (tmp_path / "README.md").exists()
    with pytest.raises(NothingTrainedError, match=f"training ended without changing the model: {expected}"):
        refuse_untrained(trainer)


def test_a_run_that_trained_counts_its_steps_with_a_gradient(tmp_path, tiny_agent_dir):
    from trl_starpo.recipes import refuse_untrained

    trainer = StarPOTrainer(tiny_agent_dir, environment=CounterEnv, args=make_args(tmp_path, max_turns=2),
                            train_dataset=counter_tasks())
    trainer.train()
    assert trainer.nonfinite_guard.steps == 2 and 1 <= trainer.nonfinite_guard.steps_with_gradient <= 2
    refuse_untrained(trainer)  # no error
    assert (tmp_path / "starpo_agent.json").exists() and (tmp_path / "README.md").exists()


def closing_counters(close_raises=False):
    """A CounterEnv class that records every instance built and every close() call."""
    built, closed = [], []

    class ClosingCounter(CounterEnv):
        def __init__(self):
            super().__init__()
            built.append(self)

        def close(self):
            closed.append(self)
            if close_raises:
                raise RuntimeError("a broken close() is logged, not raised")

    return ClosingCounter, built, closed


def test_training_and_evaluation_close_every_environment_they_built(tmp_path, tiny_agent_dir):
    environment, built, closed = closing_counters()
    trainer = StarPOTrainer(tiny_agent_dir, environment=environment, args=make_args(tmp_path, max_turns=2),
                            train_dataset=counter_tasks())
    trainer.train()
    assert len(built) > 1 and closed == built  # the first one checked the protocol; each closed once
    trainer.evaluate_episodes(counter_tasks(2))  # builds again after training ...
    trainer.environment_pool.close()  # ... and the recipes close them at the end
    assert sorted(map(id, closed)) == sorted(map(id, built))


def test_a_failing_run_still_closes_its_environments(tmp_path, tiny_agent_dir):
    environment, built, closed = closing_counters(close_raises=True)
    trainer = StarPOTrainer(tiny_agent_dir, environment=environment, args=make_args(tmp_path, max_turns=2),
                            train_dataset=counter_tasks())

    def broken(*args, **kwargs):
        raise KeyError("a bug in scoring")

    trainer.score_trajectories = broken
    with pytest.raises(KeyError, match="a bug in scoring"):
        trainer.train()
    assert built and sorted(map(id, closed)) == sorted(map(id, built))


def test_evaluation_can_decode_greedily_while_training_samples(tmp_path, tiny_agent_dir):
    trainer = StarPOTrainer(tiny_agent_dir, environment=CounterEnv, args=make_args(tmp_path, max_turns=3),
                            train_dataset=counter_tasks())
    trainer.args.seed = 0
    played = []
    collect = trainer.collect_trajectories

    def recording(*args, **kwargs):
        trajectories = collect(*args, **kwargs)
        played.append([list(t.token_ids) for t in trajectories])
        return trajectories

    trainer.collect_trajectories = recording
    for seed in (1, 2):  # greedy decoding ignores the RNG
        torch.manual_seed(seed)
        trainer.evaluate_episodes(counter_tasks(4), temperature=0.0)
    assert played[0] == played[1]
    assert trainer.generation_config.do_sample and trainer.generation_config.temperature == 1.0  # training's kept
    with pytest.raises(ValueError, match=r"temperature must be >= 0 \(0 decodes greedily\), got -1.0"):
        trainer.evaluate_episodes(counter_tasks(2), temperature=-1.0)


def test_each_update_logs_where_its_wall_time_went(tmp_path, tiny_agent_dir):
    from trl_starpo.timing import PHASES

    trainer = StarPOTrainer(tiny_agent_dir, environment=CounterEnv, args=make_args(tmp_path, max_turns=2),
                            train_dataset=counter_tasks())
    trainer.train()
    logged = [entry for entry in trainer.state.log_history if "time/step" in entry]
    assert len(logged) == 2
    for entry in logged:
        phases = {name: entry[f"time/{name}"] for name in PHASES}
        assert all(seconds >= 0 for seconds in phases.values())
        assert sum(phases.values()) == pytest.approx(entry["time/step"], rel=1e-6, abs=1e-6)
        # the rollouts were generated and played, scored, and trained on, inside the step
        for name in ("generation", "environment", "scoring", "loss_forward", "backward", "optimizer"):
            assert phases[name] > 0, name


@pytest.mark.parametrize("beta", [0.0, 0.05])
def test_the_critics_read_the_reference_states_from_the_forward_that_scores_the_reference(
    tmp_path, tiny_agent_dir, beta
):
    from peft import LoraConfig

    trainer = StarPOTrainer(
        tiny_agent_dir,
        environment=CounterEnv,
        args=make_args(tmp_path, thinking_critic=True, beta=beta),
        train_dataset=counter_tasks(),
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False),
    )
    scripted(trainer, {0: [BAD, GOOD, GOOD], 1: [GOOD, GOOD], 2: ["no format", GOOD, GOOD], 3: [BAD, BAD, BAD]})
    trajectories = trainer.collect_trajectories([dict(row) for row in counter_tasks()], [0, 0, 0, 0])
    batch = trainer._trajectory_tensors(trajectories, trainer.accelerator.device)
    batch.pop("segments")
    model = trainer.accelerator.unwrap_model(trainer.model)
    decoder = model.get_base_model().get_decoder()
    calls = []
    handle = decoder.register_forward_hook(lambda module, args, output: calls.append(args))
    try:
        logps, hidden = trainer._scoring_forwards(batch, "train", critic_features=True)
    finally:
        handle.remove()
    assert len(calls) == 1  # one pass of the 4 rows: the reference log-probs (beta > 0) and the critic's states
    assert ("ref_per_token_logps" in logps) == (beta != 0.0)

    # the states are the frozen reference's (the adapter off), not the policy's: the adapter starts non-zero here
    input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attention_mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    start = batch["prompt_ids"].size(1) - 1
    with torch.no_grad():
        with model.disable_adapter():
            reference = model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
        policy = model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
    assert hidden.shape == (4, batch["completion_ids"].size(1) + 1, reference.hidden_states[-1].size(-1))
    torch.testing.assert_close(hidden, reference.hidden_states[-1][:, start:].float(), atol=1e-4, rtol=1e-4)
    assert not torch.allclose(hidden, policy.hidden_states[-1][:, start:].float(), atol=1e-3)
