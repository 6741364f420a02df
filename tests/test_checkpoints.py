"""A checkpoint is whole (sealed last, every file at its sealed size) or not resumed from. The kill -9 at each stage
of a real write is tests/test_resume.py's (slow); these check the rules in-process."""

import json

import pytest
from conftest import CounterEnv
from test_trainer import counter_tasks, make_args
from transformers import TrainerCallback

from trl_starpo import StarPOTrainer
from trl_starpo.checkpoints import (
    SEAL_FILE,
    CheckpointSeal,
    IncompleteCheckpointError,
    checkpoint_problem,
    last_complete_checkpoint,
    resolve_resume,
    rotate_complete_checkpoints,
    seal_checkpoint,
)


def write_checkpoint(output_dir, step, *, sealed=True):
    folder = output_dir / f"checkpoint-{step}"
    (folder / "trajectories").mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"w" * 100)
    (folder / "trajectories" / "rows.arrow").write_bytes(b"r" * 10)
    if sealed:
        seal_checkpoint(folder)
    return folder


def test_a_sealed_checkpoint_is_whole_until_a_file_goes_missing_or_changes_size(tmp_path):
    folder = write_checkpoint(tmp_path, 2)
    assert json.loads((folder / SEAL_FILE).read_text())["files"] == {
        "model.safetensors": 100, "trajectories/rows.arrow": 10}
    assert checkpoint_problem(folder) is None
    (folder / "model.safetensors").write_bytes(b"w" * 40)  # truncated by a crash after the seal was written
    assert checkpoint_problem(folder) == "checkpoint-2/model.safetensors has 40 bytes where 100 were written"
    (folder / "model.safetensors").unlink()
    assert checkpoint_problem(folder) == "checkpoint-2/model.safetensors is missing"
    (folder / SEAL_FILE).write_text("[1, 2")
    assert checkpoint_problem(folder) == f"checkpoint-2/{SEAL_FILE} is damaged"
    unsealed = write_checkpoint(tmp_path, 4, sealed=False)
    assert checkpoint_problem(unsealed) == f"checkpoint-4 has no {SEAL_FILE}: the run stopped while writing it"


def test_resuming_takes_the_newest_whole_checkpoint_and_says_why_it_passed_over_newer_ones(tmp_path, caplog):
    write_checkpoint(tmp_path, 2)
    write_checkpoint(tmp_path, 10)
    write_checkpoint(tmp_path, 12, sealed=False)
    (tmp_path / "checkpoint-10" / "model.safetensors").unlink()
    with caplog.at_level("WARNING", logger="trl_starpo.checkpoints"):
        assert last_complete_checkpoint(tmp_path) == str(tmp_path / "checkpoint-2")  # by step, not by name
    assert "checkpoint-12 has no checkpoint_complete.json" in caplog.text
    assert "checkpoint-10/model.safetensors is missing" in caplog.text
    for value in (True, "true", "last"):
        assert resolve_resume(value, tmp_path) == str(tmp_path / "checkpoint-2")
    for value in (None, False, "false", "none", ""):
        assert resolve_resume(value, tmp_path) is None
    with pytest.raises(IncompleteCheckpointError, match=r"^cannot resume from .*checkpoint-12: checkpoint-12 has no"):
        resolve_resume(str(tmp_path / "checkpoint-12"), tmp_path)
    with pytest.raises(IncompleteCheckpointError, match=r"holds no complete checkpoint-\* folder to resume from\.$"):
        last_complete_checkpoint(tmp_path / "empty")


def test_rotation_keeps_the_last_sealed_whole_checkpoints_and_the_best_and_leaves_unsealed_folders(tmp_path):
    import os

    for step in (1, 2, 3, 4):
        write_checkpoint(tmp_path, step, sealed=step != 2)
    write_checkpoint(tmp_path, 5, sealed=False)
    rotate_complete_checkpoints(tmp_path, limit=1, keep=(tmp_path / "checkpoint-1",))
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "checkpoint-1", "checkpoint-2", "checkpoint-4", "checkpoint-5"]
    # resumed from an older checkpoint, the step just saved is the newest by time, not by number
    for step in (300, 400, 500):
        write_checkpoint(tmp_path / "resumed", step)
    just_saved = write_checkpoint(tmp_path / "resumed", 350)
    later = (just_saved / SEAL_FILE).stat().st_mtime_ns + 10**9
    os.utime(just_saved / SEAL_FILE, ns=(later, later))
    rotate_complete_checkpoints(tmp_path / "resumed", limit=2, keep=(just_saved,))
    assert sorted(path.name for path in (tmp_path / "resumed").iterdir()) == ["checkpoint-350", "checkpoint-500"]


def test_checkpoints_written_before_sealing_are_resumed_as_they_are(tmp_path, caplog):
    for step in (2, 4):
        folder = write_checkpoint(tmp_path, step, sealed=False)
        (folder / "trainer_state.json").write_text("{}")
    with caplog.at_level("WARNING", logger="trl_starpo.checkpoints"):
        assert last_complete_checkpoint(tmp_path) == str(tmp_path / "checkpoint-4")
        assert resolve_resume(str(tmp_path / "checkpoint-2"), tmp_path) == str(tmp_path / "checkpoint-2")
    assert "No checkpoint in" in caplog.text and "is not sealed" in caplog.text


def test_training_seals_each_checkpoint_last_clears_leftovers_and_rotates_after_sealing(tmp_path, tiny_agent_dir):
    leftover = tmp_path / "checkpoint-2"
    leftover.mkdir()
    (leftover / "stale_from_a_killed_run.bin").write_bytes(b"from a killed run")
    args = make_args(tmp_path, max_turns=2, save_strategy="steps", save_steps=1, save_total_limit=1)
    trainer = StarPOTrainer(tiny_agent_dir, environment=CounterEnv, args=args, train_dataset=counter_tasks())
    late = TrainerCallback()
    trainer.add_callback(late)  # a callback added later still writes its part before the seal
    assert trainer.callback_handler.callbacks[-2:] == [late, trainer.checkpoint_seal]
    trainer.train()
    assert sorted(path.name for path in tmp_path.glob("checkpoint-*")) == ["checkpoint-2"]  # limit 1
    assert checkpoint_problem(leftover) is None and not (leftover / "stale_from_a_killed_run.bin").exists()
    sealed = json.loads((leftover / SEAL_FILE).read_text())["files"]
    for name in ("trainer_state.json", "optimizer.pt", "starpo_agent.json", "trajectories/CURRENT"):
        assert name in sealed, name
    assert isinstance(trainer.checkpoint_seal, CheckpointSeal)
    assert trainer.nonfinite_guard.steps == 2
