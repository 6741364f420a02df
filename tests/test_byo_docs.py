"""The examples of docs/byo_environment.md run as written, the tiny agent standing in for SmolLM2: each adapter
trains two StarPO steps, and an adapter packaged as an installed environment is found by the eval command."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import docs_example
from starpo_testenv import declare_environments

import trl_starpo


@pytest.fixture
def run_example(monkeypatch, tmp_path, tiny_agent_dir):
    monkeypatch.setattr(trl_starpo, "resolve_model_path", lambda model=None: tiny_agent_dir)
    monkeypatch.chdir(tmp_path)

    def run(name, replace=None):
        code = docs_example(name)
        for old, new in (replace or {}).items():
            assert old in code
            code = code.replace(old, new)
        namespace = {"__name__": f"byo_example_{name}"}
        exec(compile(code, f"docs/byo_environment.md:{name}", "exec"), namespace)  # our own docs, not model output
        return namespace

    return run


def trained(namespace):
    trainer = namespace["trainer"]
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert trainer.state.global_step == 2 and len(logs) == 2
    assert all(entry["rollout/env_error"] == 0.0 for entry in logs)
    return trainer, logs


@pytest.mark.slow
def test_gymnasium_example_trains(run_example, capsys):
    trainer, logs = trained(run_example("gymnasium"))
    assert 0.0 <= float(capsys.readouterr().out.splitlines()[0]) <= 1.0  # the random baseline's success, printed first
    assert all(t.turns and t.turns[0].observation.startswith("PFFF") for t in trainer.last_trajectories)


@pytest.mark.slow
def test_trl_example_trains(run_example):
    trainer, logs = trained(run_example("trl"))
    first = trainer.last_trajectories[0].turns[0].observation
    assert first == "Find my secret number with the guess tool. I picked a whole number from 1 to 8."


@pytest.mark.slow
def test_openenv_example_trains_against_a_real_server(run_example, openenv_server):
    trainer, logs = trained(run_example("openenv", replace={"http://127.0.0.1:8000": openenv_server}))
    # The tiny agent answers inc or dec, which the server takes: real rewards come back over the socket.
    assert any(entry["rollout/action_validity"] > 0 for entry in logs)
    assert {t.turns[0].observation for t in trainer.last_trajectories} <= {
        f"The counter is at 0. Reach {target}." for target in (1, 2, 3)}


@pytest.mark.slow
def test_packaged_adapter_is_an_installed_environment(tmp_path):
    from trl_starpo.envs import write_task_split

    package = tmp_path / "starpo_lake"
    package.mkdir()
    (package / "__init__.py").write_text(docs_example("package"), encoding="utf-8")
    for split in ("train", "validation", "test"):
        write_task_split(package / "data", split, [{"task_id": f"{split}-{i}", "seed": i} for i in range(4)])
    declare_environments(tmp_path, "starpo-lake", {"lake": "starpo_lake"})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    script = Path(sys.executable).with_name("trl-starpo")
    done = subprocess.run([str(script), "eval", "--env", "lake", "--policy", "random", "--json"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)
    assert (row["environment"], row["episodes"], row["action_validity"]) == ("lake", 4, 1.0)
