"""The trl-starpo console script: eval, play, envs and their errors (subprocesses, as a user runs them)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

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
    assert lines[0].startswith("| environment | split | policy | episodes | success | 95% interval | return |")
    assert lines[2].startswith(f"| {NAME} | test | expert | 6 | 1.000 | 0.610–1.000 | 1.000 |")


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
        (["eval", "--env", NAME, "--model", "/no/such/model"], "No model folder at '/no/such/model': .* does not exist"),
        (["eval", "--env", NAME, "--model", "no-such-agent"],
         "Cannot load model 'no-such-agent': there is no folder 'no-such-agent' in .*, and it is not a Hub model"),
        (["eval", "--env", "testcountr", "--policy", "random"], "Unknown environment 'testcountr'. Did you mean 'testcounter'"),
        (["eval", "--env", NAME, "--policy", "randm"], "Unknown policy 'randm'; did you mean 'random'"),
        (["eval", "--env", NAME, "--policy", "random", "--max_turn", "2"], "unrecognized argument --max_turn; did you mean --max_turns"),
        (["play", "--env", NAME, "--max-turn", "2"], "unrecognized argument --max-turn; did you mean --max_turns"),
        (["train", "--env", NAME, "--max_stepz", "2"], "unrecognized argument --max_stepz; did you mean --max_steps"),
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


def test_every_subcommand_takes_both_flag_spellings(env_path):
    rows = [json.loads(cli(env_path, "eval", "--env", NAME, "--policy", "expert", *flags, "--json").stdout)
            for flags in (["--max_turns", "1", "--batch_size", "2"], ["--max-turns=1", "--batch-size", "2"])]
    assert rows[0] == rows[1] and rows[0]["turns"] == 1.0
    for command in ("eval", "play"):
        help_text = cli(env_path, command, "--help").stdout
        assert "--max_turns" in help_text and "--max-turns" not in help_text, command  # one spelling documented
        assert "--env_kwargs" in help_text and "--env-kwargs" not in help_text, command


# Each flag in both spellings; the dashed list also tries the ``--flag=value`` form.
PLAY_FLAGS = (["--max_turns", "3", "--max_tokens_per_turn", "9", "--env_kwargs", "{}", "--top_p", "0.5"],
              ["--max-turns=3", "--max-tokens-per-turn", "9", "--env-kwargs", "{}", "--top-p", "0.5"])
TRAIN_FLAGS = (["--max_turns", "3", "--per_device_train_batch_size", "2", "--num_generations", "2",
                "--environment_kwargs", "{}", "--max_actions_per_trajectory", "7", "--report_to", "none"],
               ["--max-turns=3", "--per-device-train-batch-size", "2", "--num-generations", "2",
                "--environment-kwargs", "{}", "--max-actions-per-trajectory", "7", "--report-to", "none"])


def test_play_and_train_take_both_flag_spellings(env_path, monkeypatch, tmp_path):
    """`play` and `train` parse underscores and dashes alike (parsing only: nothing is played or trained)."""
    from starpo_testenv import register

    import trl_starpo.play
    import trl_starpo.recipes
    from trl_starpo.cli import main

    played, trained = [], []
    monkeypatch.setattr(trl_starpo.play, "play_human",
                        lambda env, task, settings, **kwargs: played.append((env, task, settings, kwargs))
                        or SimpleNamespace(env_error=None))
    monkeypatch.setattr(trl_starpo.recipes, "train", lambda *parsed: trained.append(parsed))
    undo = register(env_path)
    try:
        for flags in PLAY_FLAGS:
            assert main(["play", "--env", NAME, "--task", "1", *flags]) == 0
        for flags in TRAIN_FLAGS:
            assert main(["train", "--env", NAME, "--output_dir", str(tmp_path), *flags]) == 0
    finally:
        undo()
    assert played[0] == played[1] and played[0][2].max_turns == 3 and played[0][2].max_tokens_per_turn == 9
    (env, recipe, config, model), (env_, recipe_, config_, model_) = trained
    assert (env, recipe, model) == (env_, recipe_, model_) == (NAME, recipe, model)
    differ = [key for key, value in config.to_dict().items()
              if key != "logging_dir" and value != config_.to_dict()[key]]  # logging_dir: a timestamp
    assert not differ, differ
    assert (config.max_turns, config.per_device_train_batch_size, config.num_generations,
            config.max_actions_per_trajectory) == (3, 2, 2, 7)


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


def short_train_argv(model, output_dir):
    return ["train", "--env", NAME, "--model", model, "--preset", "starpo", "--output_dir", str(output_dir),
            "--num_generations", "4", "--per_device_train_batch_size", "4", "--max_steps", "1", "--max_turns", "2",
            "--max_tokens_per_turn", "16", "--max_context_length", "512", "--report_to", "none",
            "--save_strategy", "no", "--beta", "0.0"]


def test_train_runs_the_recipe_with_a_preset(tmp_path, tiny_agent_dir, env_path):
    from starpo_testenv import register

    from trl_starpo.cli import main

    undo = register(env_path)
    try:
        code = main([
            *short_train_argv(tiny_agent_dir, tmp_path / "out"), "--eval_episodes", "2",
            "--entropy_coef", "0.01",  # the tiny agent wins every episode: no spread, the entropy term moves it
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
    assert results["after"]["episodes"] == 2  # the curves' and card's Wilson intervals need the count
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    assert any(key.startswith("monitor/") for key in history[0])  # the recipes watch for the echo trap
    # The store's HTML view finds the tokenizer saved beside it, for prompts and the token view.
    assert main(["html", str(out / "trajectories"), "-o", str(tmp_path / "page.html")]) == 0
    assert "system prompt and first observation" in (tmp_path / "page.html").read_text()


def test_play_edits_the_line_in_a_terminal_and_shows_the_final_state(env_path):
    """In a terminal the arrow keys edit the line (readline) instead of typing ``^[[D`` into the action."""
    import pty
    import select
    import time

    main_fd, child_fd = pty.openpty()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(env_path), os.environ.get("PYTHONPATH", "")]),
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TERM": "xterm"}
    process = subprocess.Popen([SCRIPT, "play", "--env", NAME, "--task", "1"], stdin=child_fd, stdout=child_fd,
                               stderr=child_fd, env=env, close_fds=True)
    os.close(child_fd)
    output, sent, deadline = b"", False, time.monotonic() + 240
    while time.monotonic() < deadline:
        ready = select.select([main_fd], [], [], 1)[0]
        if ready:
            try:
                output += os.read(main_fd, 4096)
            except OSError:  # the terminal closed with the process
                break
        if not sent and b"> " in output:
            # "ic", left arrow, "n", right arrow, " || inc": "inc || inc" with line editing.
            os.write(main_fd, b"ic\x1b[Dn\x1b[C || inc\r")
            sent = True
        if process.poll() is not None and not ready:
            break
    process.kill()
    process.wait(timeout=60)
    os.close(main_fd)
    text = output.decode(errors="replace")
    assert process.returncode == 0, text
    assert text.count("action: inc") == 2 and "episode: success" in text
    assert "final state: The counter is at 2." in text  # the state after the win is shown


def test_play_prints_model_output_without_terminal_escape_sequences(monkeypatch, tiny_tokenizer):
    import io

    from conftest import CounterEnv, ScriptedGenerator

    import trl_starpo.envs
    from trl_starpo.play import Printer, play_model
    from trl_starpo.rollout.collector import RolloutCollector

    hostile = ("<think>\x1b]52;c;cHduZWQ=\x07clipboard \x1b]0;title\x07 \x1b[2J\x1b[H\r go\x9b31m"
               "\u202egnp.exe\u2066</think>")

    class Scripted:
        def play(self, environments, tasks, groups):
            collector = RolloutCollector(tiny_tokenizer, max_actions_per_turn=2, prefill_opening_tag=False)
            responses = {0: [hostile + "<answer>inc || inc</answer>"]}
            return collector.collect(environments, tasks, ScriptedGenerator(tiny_tokenizer, responses), groups)

    monkeypatch.setattr(trl_starpo.envs, "load_environment", lambda name, **kwargs: CounterEnv())
    stream = io.StringIO()
    trajectory = play_model(Scripted(), "counter", {"task_id": "t", "start": 0, "target": 2},
                            printer=Printer(stream, color=False))
    out = stream.getvalue()
    assert trajectory.success and "thinking: ]52;c;cHduZWQ=clipboard ]0;title [2J[H go31mgnp.exe" in out
    assert not any(ord(c) < 32 and c not in "\n\t" or 0x7F <= ord(c) <= 0x9F for c in out)
    assert "\u202e" not in out and "\u2066" not in out  # nothing reorders how a line displays
    assert "final state: The counter is at 2." in out  # the model's winning move is followed by the state


def test_play_shows_what_a_windowed_model_was_given_each_turn(monkeypatch, tiny_tokenizer):
    import io

    from conftest import CounterEnv, ScriptedGenerator

    import trl_starpo.envs
    from trl_starpo.play import Printer, play_model
    from trl_starpo.rollout.collector import RolloutCollector

    class Scripted:
        tokenizer = tiny_tokenizer

        def play(self, environments, tasks, groups):
            collector = RolloutCollector(tiny_tokenizer, max_actions_per_turn=1, context_policy="window",
                                         history_turns=1)
            responses = {0: ["up</think><answer>inc</answer>"] * 3}
            return collector.collect(environments, tasks, ScriptedGenerator(tiny_tokenizer, responses), groups)

    monkeypatch.setattr(trl_starpo.envs, "load_environment", lambda name, **kwargs: CounterEnv())
    stream = io.StringIO()
    play_model(Scripted(), "counter", {"task_id": "t", "start": 0, "target": 3}, printer=Printer(stream, color=False))
    out = stream.getvalue()
    assert out.count("the model was given (history window):") == 3
    third = out.split("--- turn 3 ---")[1]
    assert "Earlier turns are not shown" in third and "The counter is at 2." in third


@pytest.fixture
def registered(env_path):
    from starpo_testenv import register

    undo = register(env_path)
    yield
    undo()


def error_lines(capsys) -> list[str]:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return [line for line in err.splitlines() if line.startswith("trl-starpo ")]


BOGUS = '{"bogus": 1}'
REJECTED = r"Environment 'testcounter' cannot be built with --env_kwargs \{\"bogus\": 1\}: TypeError: .*'bogus'$"
REJECTED_IN_TRAIN = REJECTED.replace("--env_kwargs", "--environment_kwargs")


@pytest.mark.parametrize(
    "args, message",
    [
        (["eval", "--policy", "random", "--max-turns", "0"], r"eval: error: max_turns must be at least 1, got 0\.$"),
        (["eval", "--policy", "random", "--max-turns", "-1"], r"max_turns must be at least 1, got -1\.$"),
        (["eval", "--policy", "random", "--max-tokens-per-turn", "0"], r"max_tokens_per_turn must be at least 1"),
        (["eval", "--policy", "random", "--max-context-length", "10"],
         r"max_context_length \(10\) must exceed max_tokens_per_turn \(128\) .*raise max_context_length\.$"),
        (["eval", "--policy", "random", "--env-kwargs", BOGUS], REJECTED),
        (["play", "--max-turns", "0"], r"play: error: max_turns must be at least 1"),
        (["play", "--env-kwargs", BOGUS], REJECTED),
        (["train", "--max_turns", "0"], r"train: error: max_turns must be at least 1"),
        (["train", "--num_generations", "0"], r"num_generations must be at least 2, got 0"),
        (["train", "--temperature", "0"], r"temperature must be > 0"),
        (["train", "--environment_kwargs", BOGUS], REJECTED_IN_TRAIN),
    ],
)
def test_settings_that_cannot_work_are_one_line_errors(registered, capsys, tmp_path, args, message):
    # These printed a table of zeros with exit 0, a traceback, or failed deep inside TRL or torch.
    from trl_starpo.cli import main

    command, *rest = args
    extra = ["--output_dir", str(tmp_path / "out"), "--report_to", "none"] if command == "train" else []
    assert main([command, "--env", NAME, *rest, *extra]) == 2
    (line,) = error_lines(capsys)
    assert re.search(message, line), line
    assert not (tmp_path / "out").exists()  # refused before anything ran


@pytest.fixture
def broken_tasks(tmp_path):
    """A task folder whose validation row 1 breaks the environment at reset (its start is not a number)."""
    from trl_starpo.envs import write_task_split

    rows = [{"task_id": f"v{i}", "seed": i, "start": "x" if i == 1 else 0, "target": 2} for i in range(3)]
    write_task_split(tmp_path / "tasks", "validation", rows)
    write_task_split(tmp_path / "broken", "validation", [rows[1], {**rows[1], "task_id": "v3"}])
    return tmp_path


def test_eval_counts_episodes_whose_environment_failed(registered, capsys, broken_tasks):
    from trl_starpo.cli import main

    assert main(["eval", "--env", NAME, "--policy", "expert", "--tasks", str(broken_tasks / "tasks"), "--json"]) == 0
    captured = capsys.readouterr()
    row = json.loads(captured.out)
    assert row["episodes"] == 3 and row["env_errors"] == 1 and row["env_error"] == pytest.approx(1 / 3)
    assert row["success"] == pytest.approx(2 / 3)
    assert row["first_env_error"].startswith("ValueError: invalid literal for int()")
    (line,) = [line for line in captured.err.splitlines() if line.startswith("trl-starpo ")]
    assert line.startswith(f"trl-starpo eval: warning: {NAME} (expert): 1 of 3 episodes failed in the environment, "
                           "e.g. ValueError: invalid literal")


def test_eval_fails_when_every_episode_failed_in_the_environment(registered, capsys, broken_tasks):
    from trl_starpo.cli import main

    assert main(["eval", "--env", NAME, "--policy", "random", "--tasks", str(broken_tasks / "broken")]) == 1
    captured = capsys.readouterr()
    header, _, row = captured.out.splitlines()[:3]
    assert header.endswith("| format errors | env errors |") and row.endswith("| 2 |")
    (line,) = [line for line in captured.err.splitlines() if line.startswith("trl-starpo ")]
    assert line.startswith(f"trl-starpo eval: error: {NAME} (random): 2 of 2 episodes failed in the environment")


def test_play_on_a_broken_row_says_why_in_one_line(registered, capsys, broken_tasks):
    from trl_starpo.cli import main

    assert main(["play", "--env", NAME, "--tasks", str(broken_tasks / "tasks"), "--task", "1"]) == 1
    out = capsys.readouterr().out
    assert "episode: no success, return +0.000, 0 turns, ended: env_error" in out
    assert "environment error: ValueError: invalid literal for int() with base 10: 'x'" in out


def test_eval_refuses_a_context_too_short_for_the_prompt(registered, capsys, tiny_agent_dir):
    from trl_starpo.cli import main

    code = main(["eval", "--env", NAME, "--model", tiny_agent_dir, "--episodes", "2", "--max-tokens-per-turn", "8",
                 "--max-context-length", "20", "--no-progress"])
    assert code == 2
    (line,) = error_lines(capsys)
    assert re.search(r"max_context_length \(20\) leaves no room to answer: the prompts take \d+ tokens or more; "
                     r"raise it to at least \d+\.$", line), line


def test_eval_and_play_pass_bf16_to_the_model_policy(registered, monkeypatch, tiny_agent_dir):
    from trl_starpo import evaluation
    from trl_starpo.cli import main

    asked = []
    init = evaluation.ModelPolicy.__init__
    monkeypatch.setattr(evaluation.ModelPolicy, "__init__",
                        lambda self, *args, **kwargs: asked.append(kwargs["bf16"]) or init(self, *args, **kwargs))
    monkeypatch.setattr(evaluation, "device_computes_bf16", lambda device: True)
    limits = ["--max-turns", "1", "--max-tokens-per-turn", "4", "--no-progress"]
    assert main(["eval", "--env", NAME, "--model", tiny_agent_dir, "--episodes", "1", "--bf16", *limits]) == 0
    assert main(["eval", "--env", NAME, "--model", tiny_agent_dir, "--episodes", "1", "--no-bf16", *limits]) == 0
    assert main(["eval", "--env", NAME, "--model", tiny_agent_dir, "--episodes", "1", *limits]) == 0
    assert main(["play", "--env", NAME, "--model", tiny_agent_dir, "--bf16", *limits[:-1]]) == 0
    assert asked == [True, False, False, True]  # the tiny agent's record names no bf16: its weights' dtype


def test_eval_caps_the_actions_of_an_episode_and_reports_a_wilson_interval(env_path):
    # Validation targets are 1, 2, 3, 1, 2, 3: with one action an episode the expert reaches only the 1s.
    done = cli(env_path, "eval", "--env", NAME, "--policy", "expert", "--max-actions-per-trajectory", "1", "--json")
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)
    assert row["success"] == pytest.approx(2 / 6) and row["turns"] == 1.0
    z, n, p = 1.959963984540054, 6, 2 / 6
    centre, half = (p + z**2 / (2 * n)) / (1 + z**2 / n), z * (p * (1 - p) / n + z**2 / (4 * n**2)) ** 0.5 / (1 + z**2 / n)
    assert (row["success_low"], row["success_high"]) == pytest.approx((centre - half, centre + half))
    assert json.loads(cli(env_path, "eval", "--env", NAME, "--policy", "expert", "--json").stdout)["success"] == 1.0


def test_play_lists_at_most_forty_admissible_actions(env_path):
    done = cli(env_path, "play", "--env", "countdown", "--task", "2", stdin="quit\n")  # four numbers: 7,680 answers
    assert done.returncode == 1, done.stderr
    (listing,) = [line for line in done.stdout.splitlines() if line.startswith("admissible:")]
    assert listing.endswith(", ... (7680 in all)") and listing.count(",") == 40


def test_train_fails_in_one_line_and_saves_no_agent_when_no_step_changed_the_model(tmp_path, tiny_agent_dir, env_path,
                                                                                  capsys, monkeypatch):
    import torch
    from starpo_testenv import register

    from trl_starpo import StarPOTrainer
    from trl_starpo.cli import main

    score = StarPOTrainer.score_trajectories

    def tied(self, *args, **kwargs):  # every group's returns alike, as an untrained model's malformed answers make them
        output = score(self, *args, **kwargs)
        output["advantages"] = torch.zeros_like(output["advantages"])
        return output

    monkeypatch.setattr(StarPOTrainer, "score_trajectories", tied)
    undo = register(env_path)
    try:
        code = main([*short_train_argv(tiny_agent_dir, tmp_path / "out"), "--eval_episodes", "0"])
    finally:
        undo()
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert code != 0
    assert error.startswith("trl-starpo train: error: training ended without changing the model: none of the 1 "
                            "optimizer steps carried a gradient")
    out = tmp_path / "out"
    for name in ("model.safetensors", "README.md", "starpo_agent.json"):
        assert not (out / name).exists(), name


@pytest.mark.parametrize(
    "case, message",
    [
        ("missing_model", "--model_name_or_path: No model folder at"),
        ("missing_yaml", "--config: no file at"),
        ("broken_yaml", "not a plain YAML mapping: ParserError"),
        ("python_tag_yaml", "not a plain YAML mapping: ConstructorError"),
        ("output_dir_is_a_file", "is a file, not a folder"),
        ("missing_tasks", "--tasks"),
        ("seed", "seed must be in [0, 4294967295], got -1."),
        ("nan_learning_rate", "learning_rate must be a finite number, got nan."),
        ("nan_temperature", "temperature must be a finite number, got nan."),
        ("resume_without_checkpoint", "holds no complete checkpoint-* folder to resume from."),
    ],
)
def test_train_refuses_bad_input_in_one_line_before_making_any_folder(tmp_path, capsys, case, message):
    from trl_starpo.cli import main

    out = tmp_path / "out"
    argv = ["train", "--env", "bandit", "--output_dir", str(out), "--max_steps", "1"]
    if case == "missing_model":
        argv += ["--model", str(tmp_path / "no-model")]
    elif case == "missing_yaml":
        argv += ["--config", str(tmp_path / "none.yaml")]
    elif case in ("broken_yaml", "python_tag_yaml"):
        path = tmp_path / "config.yaml"
        path.write_text("max_steps: [1\n" if case == "broken_yaml" else '!!python/object/apply:os.system ["true"]\n')
        argv += ["--config", str(path)]
    elif case == "output_dir_is_a_file":
        (tmp_path / "file").write_text("")
        out = tmp_path / "file" / "out"
        argv[argv.index("--output_dir") + 1] = str(out)
    elif case == "missing_tasks":
        argv += ["--tasks", str(tmp_path / "no-tasks")]
    elif case == "seed":
        argv += ["--seed", "-1"]
    elif case == "nan_learning_rate":
        argv += ["--learning_rate", "nan"]
    elif case == "nan_temperature":
        argv += ["--temperature", "nan"]
    else:
        argv += ["--resume_from_checkpoint", "true"]
    code = main(argv)
    lines = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(lines) == 1, lines
    assert lines[0].startswith("trl-starpo train: error: ") and message in lines[0], lines[0]
    assert not out.exists()


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--temperature", "nan"], "--temperature must be a number >= 0 (0 decodes greedily), got nan."),
        (["--top-p", "5"], "--top-p must be in (0, 1], got 5.0."),
        (["--save_trajectories", "FILE/inside"], "is a file, not a folder"),
    ],
)
def test_eval_refuses_sampling_it_would_not_honour_and_an_unwritable_store_before_playing(tmp_path, capsys, flags,
                                                                                        message):
    from trl_starpo.cli import main

    (tmp_path / "FILE").write_text("")
    flags = [flag.replace("FILE", str(tmp_path / "FILE")) for flag in flags]
    code = main(["eval", "--env", "bandit", "--policy", "random", "--episodes", "2", *flags])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(lines) == 1 and message in lines[0], lines


@pytest.mark.parametrize("content, message", [("[1, 2]", "it holds a list, not a mapping"),
                                              ('{"rollout": null}', "'rollout' must be a mapping, got null")])
@pytest.mark.parametrize("command", ["eval", "push"])
def test_a_damaged_agent_record_is_one_line(tmp_path, tiny_agent_dir, capsys, content, message, command):
    import shutil

    from trl_starpo.cli import main

    agent = tmp_path / "agent"
    shutil.copytree(tiny_agent_dir, agent)
    (agent / "starpo_agent.json").write_text(content)
    argv = (["eval", "--env", "bandit", "--model", str(agent), "--episodes", "1"] if command == "eval"
            else ["push", str(agent), "--repo_id", "me/agent"])
    assert main(argv) != 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines


def test_train_help_lists_every_recipe_field_as_trls_scripts_do(capsys):
    from dataclasses import fields

    from trl_starpo import StarPOConfig
    from trl_starpo.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["train", "--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    for name in ("env", "preset", "learning_rate", "kl_early_stop", "eval_temperature", "warm_start", "lora_r",
                 "max_turns", "thinking_critic"):
        assert f"--{name}" in text, name
    assert sum(f"--{spec.name} " in text or f"--{spec.name}," in text for spec in fields(StarPOConfig)) > 150
