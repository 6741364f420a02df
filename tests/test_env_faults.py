"""A broken, malformed or hanging environment ends its own trajectory, never the batch."""

import math
import threading
import time

import pytest
from conftest import CounterEnv, ScriptedGenerator

from trl_starpo.envs import EnvironmentPool
from trl_starpo.evaluation import RandomPolicy, evaluate
from trl_starpo.rollout.settings import RolloutSettings
from trl_starpo.rollout.collector import RolloutCollector
from trl_starpo.rollout.metrics import STAT_NAMES, trajectory_stats

GOOD_1 = "<think>up</think><answer>inc</answer>"
GOOD_2 = "<think>again</think><answer>inc</answer>"
TASK = {"task_id": "t", "seed": 0, "start": 0, "target": 2}
INFO = {"action_is_valid": True, "action_is_effective": True, "success": False}


class StepReturns(CounterEnv):
    """Returns ``result`` from every ``step``."""

    def __init__(self, result):
        self.result = result

    def step(self, action):
        return self.result


class ResetReturns(CounterEnv):
    def __init__(self, result):
        self.result = result

    def reset(self, *, seed=None, options=None):
        return self.result


class Sleepy(CounterEnv):
    """A step (or reset) that hangs until the test lets it go: a stand-in for an environment stuck in a loop."""

    def __init__(self, release: threading.Event, in_reset=False):
        self.release, self.in_reset = release, in_reset

    def reset(self, *, seed=None, options=None):
        if self.in_reset:
            self.release.wait(30)
        return super().reset(seed=seed, options=options)

    def step(self, action):
        self.release.wait(30)
        return super().step(action)


def play(tokenizer, environments, **settings):
    """Play ``environments`` on the same task; every trajectory answers GOOD_1, then GOOD_2."""
    collector = RolloutCollector(tokenizer, prefill_opening_tag=False, **settings)
    generator = ScriptedGenerator(tokenizer, {i: [GOOD_1] + [GOOD_2] * 4 for i in range(len(environments))})
    return collector.collect(environments, [TASK] * len(environments), generator)


@pytest.mark.parametrize(
    "result, reason",
    [
        (None, "step() returned None; it must return (observation, reward, terminated, truncated, info)"),
        (("obs", 0.0, False, False), "step() returned a tuple of 4 items"),
        ("obs", "step() returned a str"),
        (("obs", 0.0, False, False, None), "step() returned info of type NoneType; it must be a dict"),
        (("obs", None, False, False, INFO), "step() returned reward=None; it must be a finite number"),
        (("obs", math.nan, False, False, INFO), "reward=nan"),
        (("obs", math.inf, False, False, INFO), "reward=inf"),
        (("obs", "1.0", False, False, INFO), "reward='1.0'"),
        ((None, 0.0, False, False, INFO), "step() returned an observation of type NoneType; it must be a str"),
        ((b"obs", 0.0, False, False, INFO), "an observation of type bytes"),
        (("obs", 0.0, "no", False, INFO), "terminated='no'; it must be a bool"),
        (("obs", 0.0, False, False, {"success": [1, 2]}), None),  # a truthy list is still a truth value
    ],
)
def test_a_malformed_step_result_fails_only_its_trajectory(tiny_tokenizer, result, reason):
    broken, healthy = play(tiny_tokenizer, [StepReturns(result), CounterEnv()])
    assert healthy.success and healthy.truncation is None
    if reason is None:
        assert broken.env_error is None
        return
    assert broken.truncation == "env_error" and not broken.success
    assert broken.env_error.startswith("ProtocolError: ") and reason in broken.env_error
    assert len(broken.turns) == 1 and broken.turns[0].actions == ["inc"] and broken.turns[0].reward == 0.0


def test_an_info_flag_without_a_truth_value_is_a_protocol_error(tiny_tokenizer):
    class Ambiguous:
        def __bool__(self):
            raise ValueError("The truth value of an array with more than one element is ambiguous.")

    result = ("obs", 0.0, False, False, {"success": Ambiguous()})
    broken, healthy = play(tiny_tokenizer, [StepReturns(result), CounterEnv()])
    assert broken.truncation == "env_error" and "not a bool" in broken.env_error and healthy.success


@pytest.mark.parametrize(
    "result, reason",
    [
        (None, "reset() returned None; it must return (observation, info)"),
        ("The counter is at 0.", "reset() returned a str"),
        ((None, {}), "reset() returned an observation of type NoneType"),
        (("obs", None), "reset() returned info of type NoneType"),
    ],
)
def test_a_malformed_reset_result_fails_only_its_trajectory(tiny_tokenizer, result, reason):
    broken, healthy = play(tiny_tokenizer, [ResetReturns(result), CounterEnv()])
    assert broken.truncation == "env_error" and reason in broken.env_error
    assert broken.turns == [] and broken.completion_ids == [] and broken.prompt_length > 0
    assert healthy.success


def test_an_environment_without_prompts_fails_its_trajectory_with_what_to_add(tiny_tokenizer):
    class Gymnasium:  # reset and step, but none of the text StarPO shows the model
        reset, step = CounterEnv.reset, CounterEnv.step
        _observation = CounterEnv._observation

    broken, healthy = play(tiny_tokenizer, [Gymnasium(), CounterEnv()])
    assert broken.truncation == "env_error" and healthy.success
    assert "lacks system_prompt, action_description" in broken.env_error


def test_sys_exit_in_an_environment_does_not_end_the_run(tiny_tokenizer):
    class Exits(CounterEnv):
        def step(self, action):
            raise SystemExit(3)

    broken, healthy = play(tiny_tokenizer, [Exits(), CounterEnv()])
    assert broken.truncation == "env_error" and broken.env_error == "SystemExit: 3" and healthy.success


@pytest.mark.timeout(60)
def test_a_hanging_step_times_out_and_the_others_go_on(tiny_tokenizer):
    release = threading.Event()
    try:
        started = time.monotonic()
        first, second, healthy = play(tiny_tokenizer, [Sleepy(release), Sleepy(release), CounterEnv()], env_timeout=0.5)
        elapsed = time.monotonic() - started
    finally:
        release.set()
    for trajectory in (first, second):
        assert trajectory.truncation == "env_timeout" and not trajectory.success
        assert trajectory.env_error == "step() did not return within 0.5 s"
    assert healthy.success and healthy.truncation is None
    # Both hanging steps ran side by side (1 s one after the other) and nothing waited for the 30 s hang.
    assert elapsed < 10


@pytest.mark.timeout(60)
def test_a_hanging_reset_times_out(tiny_tokenizer):
    release = threading.Event()
    try:
        hung, healthy = play(tiny_tokenizer, [Sleepy(release, in_reset=True), CounterEnv()], env_timeout=0.5)
    finally:
        release.set()
    assert hung.truncation == "env_timeout" and hung.env_error == "reset() did not return within 0.5 s"
    assert hung.turns == [] and healthy.success


@pytest.mark.timeout(60)
def test_with_a_timeout_the_steps_of_a_turn_run_side_by_side(tiny_tokenizer):
    # Each step waits until all three environments are inside step(): one after the other, the barrier breaks.
    barrier = threading.Barrier(3, timeout=10)

    class Meeting(CounterEnv):
        def step(self, action):
            barrier.wait()
            return super().step(action)

    trajectories = play(tiny_tokenizer, [Meeting(), Meeting(), Meeting()], env_timeout=20)
    assert all(t.success and t.env_error is None for t in trajectories)


def test_without_a_timeout_steps_stay_in_the_calling_thread(tiny_tokenizer):
    threads = set()

    class Where(CounterEnv):
        def step(self, action):
            threads.add(threading.get_ident())
            return super().step(action)

    assert all(t.success for t in play(tiny_tokenizer, [Where(), Where()]))
    assert threads == {threading.get_ident()}


def test_env_errors_and_timeouts_are_counted_in_the_metrics(tiny_tokenizer):
    release = threading.Event()
    try:
        timed_out, errored, healthy = play(
            tiny_tokenizer, [Sleepy(release), StepReturns(None), CounterEnv()], env_timeout=0.5
        )
    finally:
        release.set()
    stats = [dict(zip(STAT_NAMES, trajectory_stats(t))) for t in (timed_out, errored, healthy)]
    assert [(s["env_error"], s["env_timeout"], s["truncated"]) for s in stats] == [
        (0.0, 1.0, 1.0), (1.0, 0.0, 1.0), (0.0, 0.0, 0.0)
    ]


def test_env_timeout_is_validated():
    from trl_starpo import StarPOConfig

    for bad in (0, -1.0, math.inf, math.nan, "5"):
        with pytest.raises(ValueError, match="env_timeout must be a number of seconds above 0"):
            RolloutCollector.__init__(object.__new__(RolloutCollector), None, env_timeout=bad)
    with pytest.raises(ValueError, match="env_timeout"):
        StarPOConfig(output_dir="unused", env_timeout=0)
    assert StarPOConfig(output_dir="unused", env_timeout=2.5).env_timeout == 2.5
    assert RolloutSettings.from_config(StarPOConfig(output_dir="unused", env_timeout=2.5)).env_timeout == 2.5


def test_the_pool_replaces_an_environment_that_timed_out():
    built = []

    def factory():
        built.append(CounterEnv())
        return built[-1]

    class Played:
        def __init__(self, truncation):
            self.truncation = truncation

    pool = EnvironmentPool(factory)
    first = pool.take(3)
    assert pool.discard_timed_out([Played(None), Played("env_timeout"), Played("env_error")]) == 1
    second = pool.take(3)
    assert second[0] is first[0] and second[2] is first[2]
    assert second[1] is not first[1] and len(built) == 4


@pytest.mark.timeout(60)
def test_scripted_evaluation_uses_the_timeout_and_a_fresh_environment_afterwards():
    release = threading.Event()
    built = []

    class HangsOnce(CounterEnv):
        def admissible_actions(self):
            return ["inc"]

        def step(self, action):
            if len(built) == 1:  # only the first environment hangs
                release.wait(30)
            return super().step(action)

    def factory():
        built.append(HangsOnce())
        return built[-1]

    settings = RolloutSettings(max_turns=3, max_actions_per_turn=1, env_timeout=0.5)
    try:
        result = evaluate(RandomPolicy(settings), factory, [TASK] * 2, batch_size=1)
    finally:
        release.set()
    first, second = result.trajectories
    assert first.truncation == "env_timeout" and second.success
    assert len(built) == 2 and result.stats["env_timeout"] == 0.5


def test_hung_environment_calls_are_counted_and_bounded(monkeypatch):
    from trl_starpo.rollout import env_calls

    monkeypatch.setattr(env_calls, "_hung", set())  # calls other tests left hung end on their own schedule
    monkeypatch.setattr(env_calls, "MAX_HUNG_CALLS", 2)
    release = threading.Event()
    hung_before = 0
    for _ in range(2):
        with pytest.raises(env_calls.EnvironmentFault, match=r"step\(\) did not return within 0.05 s"):
            env_calls.call_with_timeout(release.wait, 0.05, "step")
    assert env_calls.hung_calls() == hung_before + 2
    threads = threading.active_count()
    with pytest.raises(env_calls.EnvironmentFault, match="not started: .* earlier environment calls hung"):
        env_calls.call_with_timeout(lambda: "never called", 0.05, "step")
    assert threading.active_count() == threads  # no thread started for it
    release.set()
    deadline = time.monotonic() + 5
    while env_calls.hung_calls() > hung_before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert env_calls.hung_calls() == hung_before
    assert env_calls.call_with_timeout(lambda: "ok", 0.05, "step") == "ok"
