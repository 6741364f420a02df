"""The trl-starpo console script: eval, play, envs and their errors (subprocesses, as a user runs them)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from starpo_testenv import NAME, install_counter_env

SCRIPT = str(Path(sys.executable).with_name("trl-starpo"))


@pytest.fixture(scope="module")
def env_path(tmp_path_factory):
    return install_counter_env(tmp_path_factory.mktemp("envpkg"))


def cli(env_path, *args, stdin=None, timeout=300):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(env_path), os.environ.get("PYTHONPATH", "")]),
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.run([SCRIPT, *args], input=stdin, capture_output=True, text=True, env=env, timeout=timeout)


def test_eval_baselines_table_and_json(env_path):
    done = cli(env_path, "eval", "--env", NAME, "--policy", "random,expert", "--episodes", "4", "--json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert [(r["policy"], r["episodes"], r["split"]) for r in rows] == [("random", 4, "validation"), ("expert", 4, "validation")]
    assert rows[1]["success"] == 1.0
    table = cli(env_path, "eval", "--env", NAME, "--policy", "expert", "--split", "test")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].startswith("| environment | split | policy | episodes | success |")
    assert lines[2].startswith(f"| {NAME} | test | expert | 6 | 1.000 | 0.000 |")


def test_eval_model_with_the_tiny_agent(env_path, tiny_agent_dir, tmp_path):
    done = cli(env_path, "eval", "--env", NAME, "--model", tiny_agent_dir, "--episodes", "3", "--max-turns", "2",
               "--max-tokens-per-turn", "16", "--max-context-length", "512", "--json",
               "--save-trajectories", str(tmp_path))
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)
    assert row["policy"] == "model" and row["model"] == tiny_agent_dir and row["episodes"] == 3
    assert 0.0 <= row["success"] <= 1.0 and 1.0 <= row["turns"] <= 2.0
    from trl_starpo.store import TrajectoryStore

    store = TrajectoryStore.load(tmp_path / f"{NAME}-validation-model")
    assert len(store) == 3 and all(t.token_ids for t in store.trajectories())


@pytest.mark.parametrize(
    "args, message",
    [
        (["eval", "--env", "nope", "--policy", "random"], "Unknown environment 'nope'. Installed environments: .*testcounter"),
        (["eval", "--env", NAME, "--policy", "random", "--split", "dev"], "Unknown split 'dev'"),
        (["eval", "--env", NAME, "--policy", "oracle"], "Unknown policy 'oracle'"),
        (["eval", "--env", NAME], "--policy model needs --model"),
        (["eval", "--env", NAME, "--model", "/no/such/model"], "Cannot load model '/no/such/model'"),
        (["eval", "--env", "testplain", "--policy", "expert"], "needs the environment to implement expert_action"),
        (["play", "--env", "nope"], "Unknown environment 'nope'"),
        (["train", "--env", "nope"], "Unknown environment 'nope'"),
    ],
)
def test_clear_errors(env_path, args, message):
    import re

    done = cli(env_path, *args)
    assert done.returncode == 2
    assert re.search(message, done.stderr), done.stderr
    assert "Traceback" not in done.stderr


def test_a_person_plays_an_episode(env_path):
    # Task 1 of the validation split has target 2: two actions reach it.
    done = cli(env_path, "play", "--env", NAME, "--task", "1", stdin="inc || inc\n")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "observation: The counter is at 0." in out and "admissible: inc, dec" in out
    assert out.count("action: inc") == 2
    assert "episode: success, return +1.000, 1 turns, ended: terminated" in out
    quit_ = cli(env_path, "play", "--env", NAME, stdin="dec\nquit\n")
    assert quit_.returncode == 1 and "episode: quit" in quit_.stdout


@pytest.mark.slow
def test_a_model_plays_an_episode(env_path, tiny_agent_dir):
    done = cli(env_path, "play", "--env", NAME, "--model", tiny_agent_dir, "--max-turns", "2",
               "--max-tokens-per-turn", "16", "--max-context-length", "512")
    assert done.returncode == 0, done.stderr
    assert "--- turn 1 ---" in done.stdout and "thinking: go" in done.stdout and "actions: " in done.stdout
    assert "episode: " in done.stdout


@pytest.mark.slow
def test_envs_lists_the_registered_environments(env_path):
    done = cli(env_path, "envs")
    assert done.returncode == 0
    assert any(line.startswith(NAME) and "validation=6" in line for line in done.stdout.splitlines())


def test_train_runs_the_recipe_with_a_preset(tmp_path, tiny_agent_dir, env_path):
    from starpo_testenv import register

    from trl_starpo.cli import main

    undo = register(env_path)
    try:
        code = main([
            "train", "--env", NAME, "--model", tiny_agent_dir, "--preset", "starpo",
            "--output_dir", str(tmp_path / "out"), "--num_generations", "4", "--per_device_train_batch_size", "4",
            "--max_steps", "1", "--max_turns", "2", "--max_tokens_per_turn", "16", "--max_context_length", "512",
            "--eval_episodes", "2", "--report_to", "none", "--save_strategy", "no", "--beta", "0.0",
        ])
    finally:
        undo()
    assert code == 0
    out = tmp_path / "out"
    results = json.loads((out / "validation_results.json").read_text())
    assert set(results) == {"before", "after", "splits"} and results["splits"]["validation"]["after"] == results["after"]
    record = json.loads((out / "starpo_agent.json").read_text())
    assert record["preset"] == "starpo" and record["environments"] == [NAME]
    assert record["validation"]["episodes"] == 2 and record["validation"]["after"] == results["after"]
    for name in ("model.safetensors", "learning_curves.png", "README.md", "trajectories.html", "trajectories/CURRENT"):
        assert (out / name).is_file(), name
    card = (out / "README.md").read_text()
    assert "| before training |" in card and "| after training |" in card and "- Preset: `starpo`" in card


def test_eval_caps_the_actions_of_an_episode_and_reports_a_wilson_interval(env_path):
    # Validation targets are 1, 2, 3, 1, 2, 3: with one action an episode the expert reaches only the 1s.
    done = cli(env_path, "eval", "--env", NAME, "--policy", "expert", "--max-actions-per-trajectory", "1", "--json")
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)
    assert row["success"] == pytest.approx(2 / 6) and row["turns"] == 1.0
    z, n, p = 1.959963984540054, 6, 2 / 6
    centre, half = (p + z**2 / (2 * n)) / (1 + z**2 / n), z * (p * (1 - p) / n + z**2 / (4 * n**2)) ** 0.5 / (1 + z**2 / n)
    assert (row["success_ci_low"], row["success_ci_high"]) == pytest.approx((centre - half, centre + half))
    assert json.loads(cli(env_path, "eval", "--env", NAME, "--policy", "expert", "--json").stdout)["success"] == 1.0


def test_play_lists_at_most_forty_admissible_actions(env_path):
    done = cli(env_path, "play", "--env", "countdown", "--task", "2", stdin="quit\n")  # four numbers: 7,680 answers
    assert done.returncode == 1, done.stderr
    (listing,) = [line for line in done.stdout.splitlines() if line.startswith("admissible:")]
    assert listing.endswith(", ... (7680 in all)") and listing.count(",") == 40
