"""The trajectory store: lossless round trips, capacity, atomic saves that survive a kill, resume truncation."""

import dataclasses
import math
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from trl_starpo import store as store_module
from trl_starpo.store import POINTER, TrajectoryStore, from_dataset, to_dataset
from trl_starpo.trajectory import Segment, Trajectory, Turn


def make_trajectory(i: int, turns: int = 2) -> Trajectory:
    """A trajectory using every field, with unicode, markup and None values."""
    t = Trajectory(task_id=f"task-{i}", group=i // 2, prompt_length=3)
    t.append([1, 2, 3], Segment.PROMPT)
    for k in range(turns):
        start = len(t.token_ids)
        t.append([10 + k, 11 + k], [int(Segment.THINKING), int(Segment.ACTION)])
        t.turns.append(Turn(
            observation=f"état {k} <b>&</b>\n#__",
            response=f"<think>go {k}</think><answer>inc || dec</answer>" if k % 2 == 0 else "no format",
            thinking=f"go {k}" if k % 2 == 0 else None,
            actions=["inc", "dec"] if k % 2 == 0 else [],
            reward=0.5 * k - 0.1,
            format_ok=k % 2 == 0,
            format_error=None if k % 2 == 0 else "missing <answer>",
            num_valid_actions=k, num_effective_actions=k, num_dropped_actions=k % 2,
            response_start=start, response_end=start + 2,
        ))
        t.append([5000 + k], Segment.OBSERVATION)
    t.success, t.terminated = i % 2 == 0, i % 2 == 0
    t.truncation = None if i % 2 == 0 else "max_turns"
    t.env_error = "RuntimeError: boom" if i == 3 else None
    return t


def test_round_trip_through_a_dataset_is_lossless():
    trajectories = [make_trajectory(i) for i in range(5)] + [Trajectory(task_id="empty", group=9)]
    dataset = to_dataset(trajectories, step=7, environment="counter")
    assert dataset.num_rows == 6
    assert dataset.features["token_ids"].feature.dtype == "int32"
    assert dataset.features["segments"].feature.dtype == "int8"
    row = dataset[0]
    assert row["step"] == 7 and row["environment"] == "counter" and row["num_turns"] == 2
    assert row["rewards"] == [t.reward for t in trajectories[0].turns]
    assert row["episode_return"] == pytest.approx(trajectories[0].episode_return)
    assert row["logprobs"] is None and row["thinking_scores"] is None
    assert from_dataset(dataset) == trajectories


def test_round_trip_through_save_load_and_parquet(tmp_path):
    import pyarrow.parquet as pq
    from datasets import load_dataset

    store = TrajectoryStore()
    store.add([make_trajectory(i) for i in range(4)], step=1, environment="counter")
    store.save(tmp_path / "store")
    loaded = TrajectoryStore.load(tmp_path / "store")
    assert loaded.trajectories() == store.trajectories() and loaded.next_index == 4
    pq.write_table(store.table(), tmp_path / "train.parquet")  # the file a Hub push sends
    dataset = load_dataset("parquet", data_files=str(tmp_path / "train.parquet"), split="train")
    assert from_dataset(dataset) == store.trajectories()


def test_logprobs_and_thinking_scores_columns():
    t = make_trajectory(0)
    t.logprobs = [None] * 3 + [-0.5, -1.25, None] * 2  # float32-exact; None on tokens that were not sampled
    t.turns[0].thinking_score = 0.75  # the thinking critic scored the first turn only
    store = TrajectoryStore()
    store.add([t], step=1)
    row = store.to_dataset()[0]
    assert [x for x in row["logprobs"] if not math.isnan(x)] == [-0.5, -1.25, -0.5, -1.25]  # NaN in the column
    assert row["thinking_scores"][0] == 0.75 and math.isnan(row["thinking_scores"][1])
    assert all("thinking_score" not in (turn["extras"] or "") for turn in row["turns"])
    (back,) = store.trajectories()
    assert back == t
    with pytest.raises(ValueError, match="one per token"):
        store.add([t], step=2, logprobs=[[0.0]])


def test_unknown_turn_fields_survive_in_extras(monkeypatch):
    @dataclasses.dataclass
    class FutureTurn(Turn):
        critic_value: float | None = None
        notes: list[str] = dataclasses.field(default_factory=list)

    monkeypatch.setattr(store_module, "Turn", FutureTurn)
    monkeypatch.setattr(store_module, "_TURN_FIELDS", {f.name for f in dataclasses.fields(FutureTurn)})
    t = Trajectory(task_id="x", group=0, turns=[FutureTurn(observation="o", response="r", critic_value=0.25,
                                                           notes=["a", "é"])])
    dataset = to_dataset([t])
    assert dataset[0]["thinking_scores"] is None
    assert from_dataset(dataset) == [t]


def test_capacity_drops_the_oldest_and_keeps_indices():
    store = TrajectoryStore(capacity=5)
    for step in range(1, 4):
        store.add([make_trajectory(i) for i in range(3)], step=step, environment="counter")
    table = store.table()
    assert len(store) == 5 and store.next_index == 9
    assert table.column("index").to_pylist() == [4, 5, 6, 7, 8]
    assert table.column("step").to_pylist() == [2, 2, 3, 3, 3]
    summary = store.summary()
    assert summary["trajectories"] == 5 and summary["first_step"] == 2 and summary["last_step"] == 3
    assert summary["environments"]["counter"]["success"] == pytest.approx(3 / 5)
    with pytest.raises(ValueError, match="capacity"):
        TrajectoryStore(capacity=0)


def test_truncate_drops_later_steps_for_a_resume():
    store = TrajectoryStore()
    for step in (1, 2, 3):
        store.add([make_trajectory(i) for i in range(2)], step=step)
    assert store.truncate(after_step=2) == 2
    assert store.table().column("step").to_pylist() == [1, 1, 2, 2] and store.next_index == 4
    store.add([make_trajectory(0)], step=3)
    assert store.table().column("index").to_pylist() == [0, 1, 2, 3, 4]


def test_saves_replace_versions_and_loading_errors(tmp_path):
    store = TrajectoryStore()
    store.add([make_trajectory(0)], step=1)
    first = store.save(tmp_path / "s")
    store.add([make_trajectory(1)], step=2)
    second = store.save(tmp_path / "s")
    assert not first.exists() and second.is_dir()
    assert (tmp_path / "s" / POINTER).read_text().strip() == second.name
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == [POINTER, second.name]
    assert len(TrajectoryStore.load(tmp_path / "s")) == 2
    with pytest.raises(FileNotFoundError, match="No trajectory store"):
        TrajectoryStore.load(tmp_path / "missing")


@pytest.mark.parametrize("pointer", ["../other", "{absolute}", "", "  \n", "v-000001/../../other", "store.json"])
def test_the_pointer_names_only_the_stores_own_versions(tmp_path, pointer, capsys):
    from trl_starpo.cli import main

    store = TrajectoryStore()
    store.add([make_trajectory(0)], step=1)
    version = store.save(tmp_path / "s")
    store.add([make_trajectory(1)], step=2)
    other = store.save(tmp_path / "other")  # a readable store outside the folder: it must not be loaded
    (tmp_path / "s" / POINTER).write_text(pointer.format(absolute=other))
    expected = f"not the name of one of the store's versions .* Versions in .*: {version.name}"
    with pytest.raises(ValueError, match=expected):
        TrajectoryStore.load(tmp_path / "s")
    assert main(["html", str(tmp_path / "s"), "--output", str(tmp_path / "page.html")]) == 2
    assert not (tmp_path / "page.html").exists()
    assert "not the name of one of the store's versions" in capsys.readouterr().err


def test_a_version_folder_that_leads_outside_is_refused(tmp_path):
    store = TrajectoryStore()
    store.add([make_trajectory(0)], step=1)
    outside = store.save(tmp_path / "other")
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "v-000007").symlink_to(outside, target_is_directory=True)
    (tmp_path / "s" / POINTER).write_text("v-000007\n")
    with pytest.raises(FileNotFoundError, match="not a version folder in"):
        TrajectoryStore.load(tmp_path / "s")
    (tmp_path / "s" / POINTER).write_text("v-000008\n")
    with pytest.raises(FileNotFoundError, match="names v-000008, which is not a version folder"):
        TrajectoryStore.load(tmp_path / "s")


CHILD = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, {tests!r})
    from test_store import make_trajectory
    from trl_starpo import store as store_module
    from trl_starpo.store import TrajectoryStore

    path, mode = sys.argv[1], sys.argv[2]
    store = TrajectoryStore()
    store.add([make_trajectory(i) for i in range(3)], step=1)
    store.save(path)
    print("saved", flush=True)
    store.add([make_trajectory(i, turns=20) for i in range(200)], step=2)

    def hang(*args, **kwargs):
        print("inside", flush=True)
        time.sleep(600)

    if mode == "staging":  # killed with the new version written but not renamed into place
        store_module._write_synced = hang
    elif mode == "pointer":  # killed with the new version in place but CURRENT not switched
        store_module._replace_atomically = hang
    while True:  # "loop": killed at whatever moment of a save
        store.save(path)
        print("saved", flush=True)
        if mode != "loop":
            break
    """
)


def _start_child(tmp_path, mode):
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(tests=os.path.dirname(__file__)))
    return subprocess.Popen([sys.executable, str(script), str(tmp_path / "store"), mode],
                            stdout=subprocess.PIPE, text=True)


@pytest.mark.parametrize("mode", ["staging", "pointer"])
def test_a_kill_during_a_save_leaves_the_previous_store(tmp_path, mode):
    child = _start_child(tmp_path, mode)
    try:
        assert child.stdout.readline().strip() == "saved"
        assert child.stdout.readline().strip() == "inside"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert len(TrajectoryStore.load(tmp_path / "store")) == 3
    # The next save cleans up what the killed one left.
    store = TrajectoryStore.load(tmp_path / "store")
    store.save(tmp_path / "store")
    assert len(list((tmp_path / "store").iterdir())) == 2


@pytest.mark.slow
def test_kills_at_random_moments_always_leave_a_readable_store(tmp_path):
    import random

    rng = random.Random(0)
    for attempt in range(3):
        child = _start_child(tmp_path, "loop")
        try:
            assert child.stdout.readline().strip() == "saved"
            time.sleep(rng.uniform(0.0, 1.5))
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
        assert len(TrajectoryStore.load(tmp_path / "store")) in (3, 203)


def _saved_version(tmp_path):
    store = TrajectoryStore(capacity=8)
    store.add([make_trajectory(i) for i in range(3)], step=1)
    return store.save(tmp_path / "store")


@pytest.mark.parametrize(
    "tamper, message",
    [
        (lambda v: (v / "store.json").write_text('{"capacity": "lots"}'), "capacity must be an integer >= 1, got 'lots'"),
        (lambda v: (v / "store.json").write_text("[1, 2]"), "it holds a list, not a mapping"),
        (lambda v: (v / "store.json").write_text('{"schema_version": 999}'), "has schema_version 999; this trl_starpo"),
        (lambda v: (v / "store.json").write_text('{"next_index": -5}'), "next_index must be an integer >= 0, got -5"),
        (lambda v: (v / "store.json").write_text("{not json"), "is damaged: not JSON"),
        (lambda v: (v / "state.json").write_text(
            '{"_data_files": [{"filename": "/etc/outside.arrow"}], "_fingerprint": "x"}'),
         "names the data file '/etc/outside.arrow', which is not a file of"),
        (lambda v: (v / "state.json").write_text('{"_data_files": [{"filename": "../v-000000/data.arrow"}]}'),
         "which is not a file of"),
        (lambda v: [path.write_bytes(path.read_bytes()[:200]) for path in v.glob("*.arrow")], "is damaged: "),
    ],
)
def test_a_tampered_store_is_refused_in_one_line(tmp_path, tamper, message):
    version = _saved_version(tmp_path)
    tamper(version)
    with pytest.raises(ValueError) as refused:
        TrajectoryStore.load(tmp_path / "store")
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_html_of_a_tampered_store_is_one_line(tmp_path, capsys):
    from trl_starpo.cli import main

    version = _saved_version(tmp_path)
    (version / "store.json").write_text('{"capacity": "lots"}')
    assert main(["html", str(tmp_path / "store"), "-o", str(tmp_path / "page.html")]) != 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "capacity must be an integer" in lines[0]
