"""A run killed with kill -9 mid-training and resumed from its last checkpoint ends exactly as the uninterrupted run
of the same seed: weights, optimizer and scheduler state, critics, RNG states, trajectory store, monitor state and
logged metrics (two processes under `accelerate launch`, on the CPU)."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from test_multiprocess import launch_two_processes

from trl_starpo.checkpoints import IncompleteCheckpointError, checkpoint_problem, resolve_resume
from trl_starpo.resume import EpochSeededSampler
from trl_starpo.store import TrajectoryStore

HERE = Path(__file__).parent
SCRIPT = HERE / "resume_train.py"


def assert_same(actual, expected, where=""):
    """Equal structures; tensors and floats equal within float tolerance."""
    if isinstance(expected, torch.Tensor):
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6, msg=lambda m: f"{where}: {m}")
    elif isinstance(expected, np.ndarray):
        assert np.array_equal(actual, expected), where
    elif isinstance(expected, dict):
        assert actual.keys() == expected.keys(), where
        for key in expected:
            assert_same(actual[key], expected[key], f"{where}/{key}")
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected), where
        for index, (a, e) in enumerate(zip(actual, expected)):
            assert_same(a, e, f"{where}[{index}]")
    elif isinstance(expected, float) and not isinstance(actual, bool):
        assert actual == pytest.approx(expected, rel=1e-5, abs=1e-6, nan_ok=True), where
    else:
        assert actual == expected, where


def logged_metrics(folder: Path) -> list[dict]:
    history = json.loads((folder / "trainer_state.json").read_text())["log_history"]
    return [{k: v for k, v in entry.items() if "time" not in k and "per_second" not in k} for entry in history]


def stored_rows(folder: Path) -> list[dict]:
    rows = TrajectoryStore.load(folder / "trajectories").table().to_pylist()
    for row in rows:  # log-probabilities of prompt tokens are NaN, which never equals itself
        row["logprobs"] = [None if v is not None and math.isnan(v) else v for v in row["logprobs"] or []]
    return rows


def test_the_task_order_of_an_epoch_does_not_depend_on_the_epochs_before():
    from trl.trainer.utils import RepeatSampler

    def sampler():
        return EpochSeededSampler(RepeatSampler(range(10), mini_repeat_count=2, shuffle=True, seed=7), seed=7)

    uninterrupted = sampler()
    orders = []
    for epoch in range(3):
        uninterrupted.set_epoch(epoch)
        orders.append(list(uninterrupted))
    resumed = sampler()  # a fresh process resuming in the third epoch
    resumed.set_epoch(2)
    assert list(resumed) == orders[2]
    assert orders[0] != orders[2] and sorted(orders[2]) == sorted(orders[0]) and len(resumed) == 20


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, tiny_agent_dir):
    full = tmp_path_factory.mktemp("full")
    done = launch_two_processes(SCRIPT, tiny_agent_dir, str(full), port=29519)
    assert done.returncode == 0, done.stderr[-4000:]
    return full


def assert_ends_as(actual: Path, expected: Path) -> None:
    """checkpoint-9 of a resumed run equals the uninterrupted run's, file by file and row by row."""
    expected, actual = expected / "checkpoint-9", actual / "checkpoint-9"
    for name in ("model.safetensors", "value_critic.safetensors", "thinking_critic.safetensors"):
        assert_same(load_file(actual / name), load_file(expected / name), name)
    for name in ("optimizer.pt", "scheduler.pt", "value_critic_optimizer.pt", "thinking_critic_optimizer.pt",
                 "rng_state_0.pth", "rng_state_1.pth"):
        assert_same(torch.load(actual / name, weights_only=False), torch.load(expected / name, weights_only=False), name)
    for name in ("echo_trap_state.json", "monitor_state.json"):
        assert_same(json.loads((actual / name).read_text()), json.loads((expected / name).read_text()), name)
    rows = stored_rows(expected)
    assert [row["step"] for row in rows] == [1] * 4 + [3] * 4 + [5] * 4 + [7] * 4 + [9] * 4
    assert stored_rows(actual) == rows
    assert_same(logged_metrics(actual), logged_metrics(expected), "log_history")
    assert checkpoint_problem(actual) is None


@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_run_killed_and_resumed_ends_as_the_uninterrupted_run(tmp_path, tiny_agent_dir, uninterrupted):
    killed = tmp_path / "killed"
    crashed = launch_two_processes(SCRIPT, tiny_agent_dir, str(killed), "--kill-at", "5", port=29520)
    assert crashed.returncode != 0
    assert (killed / "checkpoint-3").is_dir() and not (killed / "checkpoint-6").exists()
    resumed = launch_two_processes(
        SCRIPT, tiny_agent_dir, str(killed), "--resume", str(killed / "checkpoint-3"), port=29521
    )
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert_ends_as(killed, uninterrupted)


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("stage", ["weights", "trainer_state", "store", "seal"])
def test_a_run_killed_while_writing_a_checkpoint_resumes_from_the_last_whole_one(tmp_path, tiny_agent_dir,
                                                                               uninterrupted, stage):
    killed = tmp_path / "killed"
    crashed = launch_two_processes(SCRIPT, tiny_agent_dir, str(killed), "--kill-while-saving", stage, port=29522)
    assert crashed.returncode != 0
    assert (killed / "checkpoint-6").is_dir() and checkpoint_problem(killed / "checkpoint-6") is not None
    assert checkpoint_problem(killed / "checkpoint-3") is None
    with pytest.raises(IncompleteCheckpointError, match="cannot resume from .*checkpoint-6: checkpoint-6 has no"):
        resolve_resume(str(killed / "checkpoint-6"), killed)
    resumed = launch_two_processes(SCRIPT, tiny_agent_dir, str(killed), "--resume", "last", port=29523)
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert "Resuming from" in resumed.stderr and "checkpoint-3, the newest complete checkpoint" in resumed.stderr
    assert_ends_as(killed, uninterrupted)
