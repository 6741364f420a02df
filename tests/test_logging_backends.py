"""report_to wandb and trackio receive the StarPO metrics, offline (TensorBoard: tests/test_run_artifacts.py).

Each backend runs in its own process (they read their folders from the environment at import) and what it wrote
locally is read back: wandb's offline run log, trackio's local SQLite database.
"""

import json
import os
import sqlite3
import struct
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("report_to_run.py")
METRICS = ("train/rollout/success", "train/rollout/return", "train/rollout/group_return_std", "train/entropy")


def train_reporting_to(backend, tmp_path, model_dir, **env):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), model_dir, str(tmp_path / "out"), backend],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
        env={**os.environ, "HF_HUB_OFFLINE": "1", **env},
    )
    assert done.returncode == 0 and "trained 2" in done.stdout, done.stderr[-3000:]


def wandb_history(run_file: Path) -> list[dict]:
    """History rows of a wandb offline run file (LevelDB-style log of protobuf records after a 7-byte header)."""
    from wandb.proto import wandb_internal_pb2

    data, block, pos, chunks, rows = run_file.read_bytes(), 32768, 7, [], []
    while pos + 7 <= len(data):
        if block - pos % block < 7:
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0 and length == 0:
            break
        chunks.append(data[pos + 7 : pos + 7 + length])
        pos += 7 + length
        if kind in (1, 4):  # a full record, or the last chunk of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(b"".join(chunks))
            chunks = []
            if record.WhichOneof("record_type") == "history":
                rows.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item})
    return rows


@pytest.mark.slow
def test_wandb_offline(tmp_path, tiny_agent_dir):
    pytest.importorskip("wandb")
    train_reporting_to("wandb", tmp_path, tiny_agent_dir, WANDB_MODE="offline", WANDB_DIR=str(tmp_path),
                       WANDB_SILENT="true")
    (run_file,) = tmp_path.glob("wandb/offline-run-*/run-*.wandb")
    rows = [row for row in wandb_history(run_file) if "train/rollout/success" in row]
    assert [row["train/global_step"] for row in rows] == [1, 2]
    for name in METRICS:
        # wandb's history JSON writes a whole float (0.0) as 0: any real number, not a string or a missing value
        assert all(isinstance(row[name], (int, float)) and not isinstance(row[name], bool) for row in rows), name


@pytest.mark.slow
def test_trackio_local(tmp_path, tiny_agent_dir):
    pytest.importorskip("trackio")
    train_reporting_to("trackio", tmp_path, tiny_agent_dir, TRACKIO_DIR=str(tmp_path / "trackio"))
    with sqlite3.connect(tmp_path / "trackio" / "trl-starpo-tests.db") as db:
        rows = [(step, json.loads(metrics)) for step, metrics in db.execute("select step, metrics from metrics")]
    logged = [(step, metrics) for step, metrics in rows if "train/rollout/success" in metrics]
    assert [step for step, _ in logged] == [1, 2]
    for name in METRICS:
        assert all(isinstance(metrics[name], float) for _, metrics in logged), name
