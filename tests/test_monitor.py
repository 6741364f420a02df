"""Echo-trap monitoring: diagnostics, each detector on synthetic metric streams, and the callback's actions."""

import copy
import json
import math
import random
from types import SimpleNamespace

import pytest
import torch
from conftest import CounterEnv, ScriptedGenerator
from datasets import Dataset
from test_trainer import BAD, GOOD, make_args, scripted
from transformers import TrainerCallback

from trl_starpo import StarPOTrainer
from trl_starpo.monitor.detectors import (
    AnswerCollapse,
    Detector,
    DiversityCollapse,
    EntropyCollapse,
    GradNormSpike,
    RewardStdCollapse,
    SuccessDrop,
    default_detectors,
)
from trl_starpo.monitor.diagnostics import distinct_n, reasoning_probe, top_answer, trajectory_diagnostics, turn_repetition
from trl_starpo.monitor import STATE_FILE, EchoTrapCallback, MonitorCallback, add_echo_trap_monitor
from trl_starpo.rollout.collector import RolloutCollector
from trl_starpo.rollout.metrics import STAT_NAMES, trajectory_stats
from trl_starpo.trajectory import Segment, Trajectory, Turn


@pytest.fixture(autouse=True)
def one_thread():
    """The tiny models gain nothing from more threads, and lose much when another process shares the cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# -- synthetic metric streams -------------------------------------------------------------------------------------

STEPS = 120


def healthy_run(seed: int) -> list[dict]:
    """A noisy but healthy run: success climbs from 0.2 to 0.7 (batches of 16 episodes), in-group spread, entropy and
    thinking diversity drift down slowly with noise, gradient norms scatter log-normally (sigma 0.3)."""
    rng = random.Random(seed)
    logs = []
    for step in range(STEPS):
        progress = min(step / 60, 1.0)
        p = 0.2 + 0.5 * progress
        logs.append({
            "rollout/success": sum(rng.random() < p for _ in range(16)) / 16,
            "rollout/group_return_std": max(0.0, 0.4 - 0.1 * progress + rng.gauss(0, 0.08)),
            "entropy": (1.0 - 0.3 * progress) * math.exp(rng.gauss(0, 0.1)),
            "grad_norm": math.exp(rng.gauss(0, 0.3)),
            "monitor/thinking_distinct_2": min(1.0, max(0.0, 0.5 - 0.1 * progress + rng.gauss(0, 0.05))),
        })
    return logs


def collapsing_run(seed: int, at: int = 70, **collapsed) -> list[dict]:
    """``healthy_run`` until step ``at``; from then on the named metrics take the given values (with a little noise)."""
    rng = random.Random(seed + 1000)
    logs = healthy_run(seed)
    for entry in logs[at:]:
        for name, value in collapsed.items():
            entry[name] = value * math.exp(rng.gauss(0, 0.05)) if value else 0.0
    return logs


def fired_steps(detector: Detector, logs: list[dict]) -> list[int]:
    return [step for step, entry in enumerate(logs) if detector.observe(entry) is not None]


DETECTORS = [SuccessDrop, RewardStdCollapse, EntropyCollapse, GradNormSpike, DiversityCollapse]


@pytest.mark.parametrize("detector", DETECTORS)
def test_detectors_stay_quiet_on_noisy_healthy_runs(detector):
    for seed in range(300):
        assert fired_steps(detector(), healthy_run(seed)) == [], f"false alarm on seed {seed}"


@pytest.mark.parametrize(
    "detector, collapse, latest",
    [
        # success falls from ~0.7 to ~0.05; the 5-step mean crosses half the peak within a few steps, then patience 2
        (SuccessDrop, {"rollout/success": 0.05}, 7),
        # the policy answers alike in every group (success also collapsed, so it is not "solved")
        (RewardStdCollapse, {"rollout/group_return_std": 0.01, "rollout/success": 0.05}, 8),
        (EntropyCollapse, {"entropy": 0.02}, 8),
        (EntropyCollapse, {"entropy": 6.0}, 8),  # blown up: near-uniform over the vocabulary
        (DiversityCollapse, {"monitor/thinking_distinct_2": 0.02}, 8),
    ],
)
def test_detectors_fire_on_a_collapse(detector, collapse, latest):
    for seed in range(5):
        steps = fired_steps(detector(), collapsing_run(seed, at=70, **collapse))
        assert steps, f"missed the collapse on seed {seed}"
        assert 70 <= steps[0] <= 70 + latest


def answer_logs(fraction=1.0, spread=0.0, unchanged=1.0, success=0.0):
    return {"monitor/top_answer_fraction": fraction, "monitor/group_return_std_max": spread,
            "monitor/top_answer_unchanged": unchanged, "rollout/success": success}


def test_answer_collapse_needs_one_unchanged_answer_and_no_spread_for_three_batches():
    assert fired_steps(AnswerCollapse(), [answer_logs()] * 6) == [2]
    assert fired_steps(AnswerCollapse(), [answer_logs(unchanged=0.0)] + [answer_logs()] * 5) == [3]
    quiet = {
        "returns still differ": answer_logs(spread=0.05),
        "answers differ": answer_logs(fraction=0.6),
        "the answer changes every batch": answer_logs(unchanged=0.0),
        "the task is solved": answer_logs(success=1.0),
    }
    for why, entry in quiet.items():
        assert fired_steps(AnswerCollapse(), [entry] * 10) == [], why
    # The trainer's own entries (without the monitor's metrics) are skipped, not counted.
    assert fired_steps(AnswerCollapse(), [answer_logs(), {"loss": 1.0}] * 3) == [4]


def test_grad_norm_spike_fires_on_the_spike_step_only():
    for seed in range(5):
        logs = healthy_run(seed)
        logs[50]["grad_norm"] = 30.0
        logs[90]["grad_norm"] = 25.0
        assert fired_steps(GradNormSpike(), logs) == [50, 90]


def test_grad_norm_spike_robust_z_score():
    detector = GradNormSpike(window=10, min_history=10)
    for value in [1.0, 2.0] * 5:  # log-norms 0 and log 2: median log(2)/2, MAD log(2)/2
        detector.observe({"grad_norm": value})
    expected = (math.log(16.0) - math.log(2) / 2) / (1.4826 * math.log(2) / 2)
    assert detector.robust_z(16.0) == pytest.approx(expected)
    assert detector.observe({"grad_norm": 1.5}) is None


def test_collapse_detectors_hold_fire_when_the_task_is_solved():
    logs = collapsing_run(0, at=70, **{"rollout/success": 1.0, "rollout/group_return_std": 0.0, "entropy": 0.02})
    for detector in (RewardStdCollapse(), EntropyCollapse()):
        assert fired_steps(detector, logs) == []
    assert fired_steps(RewardStdCollapse(solved_success=None), logs)


def test_a_detector_fires_once_per_excursion_and_again_after_recovery():
    logs = [{"rollout/success": 0.8}] * 10 + [{"rollout/success": 0.0}] * 10
    logs += [{"rollout/success": 0.8}] * 10 + [{"rollout/success": 0.0}] * 10
    steps = fired_steps(SuccessDrop(), logs)
    assert len(steps) == 2 and 10 < steps[0] < 20 and 30 < steps[1] < 40


def test_detector_state_round_trips_through_json():
    logs = healthy_run(3)
    for detector_type in DETECTORS:
        first, second = detector_type(), detector_type()
        for entry in logs[:60]:
            first.observe(entry)
        second.load_state_dict(json.loads(json.dumps(first.state_dict())))
        assert fired_steps(first, logs[60:]) == fired_steps(second, logs[60:])


# -- diagnostics --------------------------------------------------------------------------------------------------


def make_trajectory(thoughts, group=0, returns=0.0, responses=None):
    """A trajectory of one turn per thought (thinking tokens 3, action tokens 4 labelled per turn)."""
    trajectory = Trajectory(task_id=f"g{group}", group=group, token_ids=[0], segments=[int(Segment.PROMPT)],
                            prompt_length=1)
    for k, thought in enumerate(thoughts):
        start = len(trajectory.token_ids)
        trajectory.append([1, 2], Segment.THINKING)
        trajectory.append([3], Segment.ACTION)
        response = responses[k] if responses else f"<think>{thought}</think><answer>a</answer>"
        trajectory.turns.append(Turn(observation="o", response=response, thinking=thought, format_ok=True,
                                     response_start=start, response_end=len(trajectory.token_ids)))
    trajectory.turns[-1].reward = returns
    return trajectory


def test_distinct_n_and_turn_repetition():
    assert distinct_n(["the box is left", "the box is right"], 1) == pytest.approx(5 / 8)
    assert distinct_n(["the box is left", "the box is right"], 2) == pytest.approx(4 / 6)
    assert math.isnan(distinct_n(["one"], 2))
    assert turn_repetition(make_trajectory(["go left now", "go left now", "push the box"])) == pytest.approx(0.5)
    assert turn_repetition(make_trajectory(["only one"])) is None


def test_trajectory_diagnostics():
    batch = [
        make_trajectory(["move up", "move up"], group=0, returns=1.0),
        make_trajectory(["move down", "wait"], group=0, returns=0.0),
        make_trajectory(["push box", "push box"], group=1, returns=1.0),
        make_trajectory(["push box", "push box"], group=1, returns=1.0),
    ]
    stats = trajectory_diagnostics(batch)
    assert stats["monitor/group_return_std_max"] == pytest.approx(math.sqrt(0.5))
    assert stats["monitor/group_return_max"] == 1.0 and stats["monitor/group_return_min"] == 0.5
    assert stats["monitor/thinking_tokens_per_turn"] == 2 and stats["monitor/action_tokens_per_turn"] == 1
    assert stats["monitor/response_tokens_per_turn"] == 3
    assert stats["monitor/thinking_distinct_2"] == pytest.approx(3 / 7)  # move up, move down, push box ("wait": none)
    assert stats["monitor/thinking_repetition"] == pytest.approx((1 + 0 + 1 + 1) / 4)
    assert stats["monitor/unique_response_fraction"] == pytest.approx(4 / 8)
    assert stats["monitor/empty_thinking_rate"] == 0.0
    assert stats["monitor/top_answer_fraction"] == 0.5  # no actions taken: the responses, "push box" in 4 of 8


def test_top_answer_reads_actions_else_the_response():
    batch = [make_trajectory(["x", "y"], responses=["<answer>up</answer>", "nonsense"]),
             make_trajectory(["z"], responses=["<answer>up</answer>"])]
    batch[0].turns[0].actions = ["up"]
    batch[1].turns[0].actions = ["up"]
    assert top_answer(batch) == ("up", pytest.approx(2 / 3))
    assert top_answer([]) == (None, pytest.approx(float("nan"), nan_ok=True))


class EchoModel(torch.nn.Module):
    """A fake causal LM that predicts its current input token again (log-prob ~0 for it, ~-20 for others)."""

    def __init__(self, vocab=8):
        super().__init__()
        self.vocab = vocab
        self.anchor = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, attention_mask=None):
        logits = torch.nn.functional.one_hot(input_ids, self.vocab).float() * 20.0
        return type("Output", (), {"logits": logits})()


def probe_trajectory(state_token, thought_tokens):
    trajectory = Trajectory(task_id=str(state_token), group=state_token)
    trajectory.append([7, state_token], Segment.PROMPT)
    trajectory.prompt_length = 2
    start = len(trajectory.token_ids)
    trajectory.append(thought_tokens, Segment.THINKING)
    trajectory.append([6], Segment.ACTION)
    trajectory.turns.append(Turn(observation="o", response="r", thinking="t", response_start=start,
                                 response_end=len(trajectory.token_ids)))
    return trajectory


def test_reasoning_probe_separates_input_dependent_thinking_from_a_template():
    # thinking that restates the state: each thought is likeliest under its own state -> MI close to log K
    grounded = [probe_trajectory(s, [s, s]) for s in range(1, 5)]
    result = reasoning_probe(EchoModel(), grounded, size=8)
    assert result["monitor/probe/num_inputs"] == 4
    assert result["monitor/probe/retrieval_accuracy"] == 1.0
    assert result["monitor/probe/mutual_information"] == pytest.approx(math.log(4), abs=1e-3)
    # the same thought whatever the state: nothing identifies the input
    template = [probe_trajectory(s, [5, 5]) for s in range(1, 5)]
    result = reasoning_probe(EchoModel(), template, size=8)
    assert result["monitor/probe/mutual_information"] == pytest.approx(0.0, abs=1e-3)
    assert result["monitor/probe/retrieval_accuracy"] == pytest.approx(0.25)
    # one start state only (a group of rollouts of one task): nothing to tell apart
    same = [probe_trajectory(1, [1, 1]) for _ in range(4)]
    assert math.isnan(reasoning_probe(EchoModel(), same)["monitor/probe/mutual_information"])


# -- the callback -------------------------------------------------------------------------------------------------


class FireAt(Detector):
    """A detector that fires at the given log observations (1-based), on any entry with a loss."""

    name = "fire_at"

    def __init__(self, *steps):
        super().__init__("loss", window=1)
        self.steps, self.seen = set(steps), 0

    def _check(self, value, logs):
        self.seen += 1
        return self._signal(value, 0.0, 0.0, "scripted") if self.seen in self.steps else None

    def state_dict(self):
        return {**super().state_dict(), "seen": self.seen}

    def load_state_dict(self, state):
        super().load_state_dict(state)
        self.seen = state["seen"]


class Control:
    should_training_stop = False
    should_save = False


class State:
    def __init__(self):
        self.global_step, self.log_history, self.best_model_checkpoint = 0, [], None
        self.is_world_process_zero = True


class Args:
    output_dir = "unused"
    metric_for_best_model = None


def replay(callback, logs):
    state, control = State(), Control()
    for step, entry in enumerate(logs, start=1):
        state.global_step = step
        state.log_history.append({**entry, "step": step})
        callback.on_log(Args(), state, control, logs=dict(entry))
        if control.should_training_stop:
            break
    return state, control


def test_stop_action_stops_training_and_logs_the_detection(caplog):
    callback = EchoTrapCallback(action="stop")
    logs = collapsing_run(1, at=70, **{"rollout/success": 0.0})
    with caplog.at_level("WARNING", logger="trl_starpo.monitor"):
        state, control = replay(callback, logs)
    assert control.should_training_stop
    (detection,) = callback.detections
    step = detection["step"]
    assert 70 < step <= 78 and state.global_step == step
    assert detection["detectors"] == ["success_drop"] and detection["action"] == "stop"
    assert detection["signals"][0]["metric"] == "rollout/success"
    assert state.log_history[-1]["echo_trap/detected"] == 1.0 and state.log_history[-1]["echo_trap/success_drop"] == 1.0
    assert f"Echo trap at step {step} (stop): success_drop" in caplog.text


def test_warn_action_goes_on_and_cools_down():
    callback = EchoTrapCallback(action="warn", detectors=[FireAt(3, 5, 20)], cooldown_steps=10)
    state, control = replay(callback, [{"loss": 1.0}] * 25)
    assert not control.should_training_stop and state.global_step == 25
    assert [(d["step"], d["action"]) for d in callback.detections] == [(3, "warn"), (5, "cooldown"), (20, "warn")]


def test_callback_refuses_what_cannot_work():
    with pytest.raises(ValueError, match="action must be one of"):
        EchoTrapCallback(action="panic")
    with pytest.raises(ValueError, match="needs the trainer"):
        EchoTrapCallback(action="rollback")
    with pytest.raises(ValueError, match="unique"):
        EchoTrapCallback(detectors=[SuccessDrop(), SuccessDrop()])
    assert [d.name for d in default_detectors()] == [
        "success_drop", "reward_std_collapse", "entropy_collapse", "grad_norm_spike", "diversity_collapse",
        "answer_collapse"]


def bandit_batch(tokenizer, responses):
    """One batch as the SmolLM2 Bandit run played it: answer-only, two groups of four rollouts, invalid actions
    unpenalized (as before ``invalid_action_penalty``); ``responses`` continue the prefilled ``<answer>``."""
    import trl_starpo

    rows = [dict(row) for row in trl_starpo.load_tasks("bandit", "validation").select(range(2))]
    tasks, groups = [rows[i // 4] for i in range(8)], [i // 4 for i in range(8)]
    collector = RolloutCollector(tokenizer, enable_thinking=False, max_turns=1, max_actions_per_turn=1,
                                 invalid_action_penalty=0.0)
    generator = ScriptedGenerator(tokenizer, {i: [response] for i, response in enumerate(responses)})
    return collector.collect([trl_starpo.load_environment("bandit") for _ in tasks], tasks, generator, groups)


def test_warn_mode_flags_the_bandit_collapse_onto_the_format_placeholder(tiny_tokenizer, caplog):
    """Three batches of malformed turns and placeholders, then every response `<answer>your action</answer>` and
    every return 0, as SmolLM2 played Bandit (success 0 throughout). The monitor warns within three batches of the
    collapse; the other detectors alone never do (no success to drop from, a spread too small to have a peak)."""
    mixed = ["pull one", "your action</answer>", "the first arm", "your action</answer>"] * 2
    collapsed = bandit_batch(tiny_tokenizer, ["your action</answer>"] * 8)
    batches = [bandit_batch(tiny_tokenizer, mixed)] * 3 + [collapsed] * 6
    assert {t.episode_return for t in batches[-1]} == {0.0}
    assert len({t.episode_return for t in batches[0][:4]}) > 1

    trainer = SimpleNamespace(last_trajectories=None, accelerator=SimpleNamespace(num_processes=1), logged={})
    trainer.log_metric = trainer.logged.__setitem__
    monitor = MonitorCallback(trainer, probe_every=0)
    warn = EchoTrapCallback(action="warn")
    blind = EchoTrapCallback(action="warn", detectors=[d for d in default_detectors() if d.name != "answer_collapse"])
    state, control = State(), Control()
    with caplog.at_level("WARNING", logger="trl_starpo.monitor"):
        for step, batch in enumerate(batches, start=1):
            state.global_step = step
            trainer.last_trajectories = list(batch)
            monitor.on_step_end(Args(), state, control)
            stats = [sum(column) / len(column) for column in zip(*(trajectory_stats(t) for t in batch))]
            entry = {**{f"rollout/{name}": value for name, value in zip(STAT_NAMES, stats)}, **trainer.logged}
            state.log_history.append({**entry, "step": step})
            warn.on_log(Args(), state, control, logs=dict(entry))
            blind.on_log(Args(), state, control, logs=dict(entry))
    # Collapsed from step 4 on, where the placeholder was already the most common answer: patience 3 ends at step 6.
    assert [(d["step"], d["detectors"], d["action"]) for d in warn.detections] == [(6, ["answer_collapse"], "warn")]
    assert not control.should_training_stop
    assert "Echo trap at step 6 (warn): answer_collapse: 100% of the turns give the same answer" in caplog.text
    assert blind.detections == []


def test_a_resumed_monitor_remembers_the_top_answer_before_its_checkpoint(tiny_tokenizer, tmp_path):
    batch = bandit_batch(tiny_tokenizer, ["your action</answer>"] * 8)

    def monitor_at(step):
        trainer = SimpleNamespace(last_trajectories=None, accelerator=SimpleNamespace(num_processes=1), logged={})
        trainer.log_metric = trainer.logged.__setitem__
        state = State()
        state.global_step = step
        return MonitorCallback(trainer, probe_every=0), trainer, state

    before, trainer, state = monitor_at(1)
    trainer.last_trajectories = list(batch)
    before.on_step_end(Args(), state, Control())
    args = Args()
    args.output_dir = str(tmp_path)
    before.on_save(args, state, Control())

    resumed, trainer, state = monitor_at(1)
    resumed.on_train_begin(args, state, Control())
    trainer.last_trajectories = list(batch)
    resumed.on_step_end(args, state, Control())
    assert resumed.batches == 2 and trainer.logged["monitor/top_answer_unchanged"] == 1.0


# -- on a real trainer --------------------------------------------------------------------------------------------


def counter_tasks(n=8):
    """Tasks with different start states, so the reasoning probe has inputs to tell apart."""
    return Dataset.from_list([{"task_id": f"t{i}", "seed": i, "start": i % 3, "target": i % 3 + 2} for i in range(n)])


class Snapshot(TrainerCallback):
    """Records the model and optimizer right after each rollback (a callback placed after EchoTrapCallback)."""

    def __init__(self, trainer, echo):
        self.trainer, self.echo, self.taken = trainer, echo, []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs.get("echo_trap/rollback_to") is not None:
            model = {k: v.detach().clone() for k, v in self.trainer.model.state_dict().items()}
            optimizer = copy.deepcopy(self.trainer.optimizer.state_dict())  # later steps update it in place
            lrs = [group["lr"] for group in self.trainer.optimizer.param_groups]
            self.taken.append((state.global_step, model, optimizer, lrs))


def test_rollback_restores_weights_and_optimizer_exactly_and_training_goes_on(tmp_path, tiny_agent_dir):
    from safetensors.torch import load_file

    args = make_args(tmp_path, max_steps=5, num_generations=2, learning_rate=1e-2, lr_scheduler_type="constant",
                     max_turns=2, max_tokens_per_turn=12)
    trainer = StarPOTrainer(tiny_agent_dir, environment=CounterEnv, args=args, train_dataset=counter_tasks())
    scripted(trainer, {0: [GOOD, GOOD], 1: [BAD, BAD], 2: [GOOD, GOOD], 3: [BAD, BAD]})  # every step has a spread
    echo = add_echo_trap_monitor(trainer, action="rollback", detectors=[FireAt(4)], success_window=1,
                                 peak_min_delta=0.0, probe_every=2, probe_size=4)
    snapshot = Snapshot(trainer, echo)
    trainer.add_callback(snapshot)
    trainer.train()

    (detection,) = echo.detections
    assert detection["action"] == "rollback" and detection["step"] == 4
    target = detection["rollback_to"]
    assert target < 4 and (tmp_path / f"checkpoint-{target}").is_dir()
    saved = {c.step: c.success for c in echo.checkpoints.values()}
    assert saved[target] == max(saved[s] for s in saved if s < 4)

    ((step, model, optimizer, lrs),) = snapshot.taken
    weights = load_file(str(tmp_path / f"checkpoint-{target}" / "model.safetensors"))
    assert weights.keys() == model.keys()
    for name, tensor in weights.items():
        assert torch.equal(tensor, model[name]), name
    expected = torch.load(tmp_path / f"checkpoint-{target}" / "optimizer.pt", weights_only=True)
    assert expected["state"].keys() == optimizer["state"].keys()
    for index, moments in expected["state"].items():
        for key, value in moments.items():
            assert torch.equal(value, optimizer["state"][index][key]), (index, key)
    assert lrs == pytest.approx([1e-2 * 0.5] * len(lrs))  # the constant schedule, scaled by lr_factor

    # training went on from the restored state with the lower learning rate
    assert trainer.state.global_step == 5
    assert [e["step"] for e in trainer.state.log_history if "loss" in e] == [1, 2, 3, 4, 5]
    assert trainer.state.log_history[-2]["learning_rate"] == pytest.approx(5e-3)
    assert not all(torch.equal(model[n], p) for n, p in trainer.model.state_dict().items())
    # the monitor's statistics and the probe were logged with the rollout metrics
    first = trainer.state.log_history[0]
    assert 0 <= first["monitor/unique_response_fraction"] <= 1
    assert first["monitor/probe/num_inputs"] == 2 and 0 <= first["monitor/probe/retrieval_accuracy"] <= 1
    assert json.loads((tmp_path / STATE_FILE).read_text())["rollbacks"] == 1


def test_state_is_saved_in_checkpoints_and_restored_on_resume(tmp_path, tiny_agent_dir):
    args = make_args(tmp_path, max_steps=3, save_strategy="steps", save_steps=2, num_generations=2, max_turns=2,
                     max_tokens_per_turn=12)
    trainer = StarPOTrainer(tiny_agent_dir, environment=CounterEnv, args=args, train_dataset=counter_tasks())
    echo = EchoTrapCallback(trainer, action="warn", detectors=[FireAt(1, 3), SuccessDrop(window=2)])
    trainer.add_callback(echo)
    trainer.train()
    assert [d["step"] for d in echo.detections] == [1, 3]
    saved = json.loads((tmp_path / "checkpoint-2" / STATE_FILE).read_text())
    assert [d["step"] for d in saved["detections"]] == [1]
    assert saved["detectors"]["fire_at"]["seen"] == 2

    resumed_trainer = StarPOTrainer(tiny_agent_dir, environment=CounterEnv, args=args, train_dataset=counter_tasks())
    resumed = EchoTrapCallback(resumed_trainer, action="warn", detectors=[FireAt(1, 3), SuccessDrop(window=2)])
    resumed_trainer.add_callback(resumed)
    resumed_trainer.train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))
    assert [d["step"] for d in resumed.detections] == [1, 3]  # the first restored, the second found again
    assert resumed.detectors[1].state_dict()["values"][0] == saved["detectors"]["success_drop"]["values"][-1]
    assert sorted(resumed.checkpoints) == [2, 3]  # the final step is saved too


def test_the_monitor_is_a_config_field(tmp_path, tiny_agent_dir):
    from trl_starpo.monitor import MonitorCallback

    with pytest.raises(ValueError, match="monitor must be one of"):
        make_args(tmp_path, monitor="loud")

    def monitors(trainer):
        return [c for c in trainer.callback_handler.callbacks if isinstance(c, (MonitorCallback, EchoTrapCallback))]

    off = StarPOTrainer(tiny_agent_dir, environment=CounterEnv, args=make_args(tmp_path / "off"),
                        train_dataset=counter_tasks())
    assert monitors(off) == []  # StarPOConfig's default; the recipes default to "warn"
    trainer = StarPOTrainer(tiny_agent_dir, environment=CounterEnv, train_dataset=counter_tasks(),
                            args=make_args(tmp_path / "stop", monitor="stop", max_steps=1, num_generations=2,
                                           max_turns=2, max_tokens_per_turn=8))
    probe, echo = monitors(trainer)
    assert isinstance(probe, MonitorCallback) and echo.action == "stop" and echo.trainer is trainer
    trainer.train()
    assert "monitor/thinking_distinct_2" in trainer.state.log_history[0]
    again = add_echo_trap_monitor(trainer, action="warn")
    assert monitors(trainer)[1] is again  # replaced, not doubled
    assert len(monitors(trainer)) == 2
