import re

import pytest
from datasets import Dataset, DatasetDict

import trl_starpo
from trl_starpo.envs import Environment, load_task_dataset, write_task_split
from trl_starpo.rollout.collector import RolloutCollector
from trl_starpo.rollout.parsing import parse_response


def test_shipped_environments_are_registered():
    assert {"bandit", "countdown", "frozenlake", "sokoban"} <= set(trl_starpo.list_environments())


@pytest.mark.parametrize("name", ["bandit", "countdown", "frozenlake", "sokoban"])
def test_every_environment_follows_the_protocol(name):
    env = trl_starpo.load_environment(name)
    assert isinstance(env, Environment)
    assert env.system_prompt and env.action_description
    task = dict(trl_starpo.load_tasks(name, "validation")[0])
    first, _ = env.reset(seed=task["seed"], options={"task": task})
    again, _ = trl_starpo.load_environment(name).reset(seed=task["seed"], options={"task": task})
    assert first == again and first.strip()
    observation, reward, terminated, truncated, info = env.step("surely not an action")
    assert info["action_is_valid"] is False and reward == 0.0
    assert {"action_is_valid", "action_is_effective", "success"} <= set(info)
    env.close()


def is_valid_action(name, task, action):
    """Whether ``action`` is one of the start state's admissible actions, or the environment takes it as valid."""
    env = trl_starpo.load_environment(name)
    env.reset(seed=task.get("seed"), options={"task": task})
    admissible = env.admissible_actions() if hasattr(env, "admissible_actions") else []
    valid = action in admissible or env.step(action)[4]["action_is_valid"]
    env.close()
    return valid


@pytest.mark.parametrize("enable_thinking", [True, False])
@pytest.mark.parametrize("name", trl_starpo.list_environments())
def test_prompts_show_no_well_formed_answer_that_names_no_valid_action(name, enable_thinking, tiny_tokenizer):
    """A model copies the answer its prompt shows (SmolLM2 on Bandit learned `<answer>your action</answer>`): every
    answer the prompt or the format hint shows that parses as well-formed must name a valid action."""
    collector = RolloutCollector(tiny_tokenizer, enable_thinking=enable_thinking, max_actions_per_turn=2)
    task = dict(trl_starpo.load_tasks(name, "validation")[0])
    env = trl_starpo.load_environment(name)
    trajectory = collector._start(env, task, 0)[0]
    env.close()
    shown = tiny_tokenizer.decode(trajectory.token_ids) + collector._format_hint()
    answers = [parse_response(span, enable_thinking=False, max_actions=9)
               for span in re.findall(r"<answer>.*?</answer>", shown, re.DOTALL)]
    actions = [action for parsed in answers if parsed.format_ok for action in parsed.actions]
    assert actions == [env.example_action]  # every shipped environment shows a real example
    for action in actions:
        assert is_valid_action(name, task, action), f"{name} shows {action!r}, which it does not take"


def test_unknown_environment_names_what_is_installed():
    with pytest.raises(ValueError, match=r"Unknown environment 'chess'. Installed environments: alfworld, bandit, countdown"):
        trl_starpo.load_environment("chess")


def test_task_splits_round_trip_through_jsonl(tmp_path):
    rows = {"train": [{"task_id": "a", "seed": 1}], "validation": [{"task_id": "b", "seed": 2}], "test": []}
    rows["test"] = [{"task_id": "c", "seed": 3}, {"task_id": "d", "seed": 4}]
    for split, split_rows in rows.items():
        write_task_split(tmp_path, split, split_rows)
    everything = load_task_dataset(tmp_path)
    assert isinstance(everything, DatasetDict) and {k: len(v) for k, v in everything.items()} == {
        "train": 1, "validation": 1, "test": 2}
    test = load_task_dataset(tmp_path, "test")
    assert isinstance(test, Dataset) and test["seed"] == [3, 4]
    with pytest.raises(ValueError, match="Unknown split 'dev'"):
        load_task_dataset(tmp_path, "dev")


FUNCTION_PACKAGE = '''
from trl_starpo.envs import TextEnvironment, load_task_dataset
from pathlib import Path


class Echo(TextEnvironment):
    system_prompt = "Say anything."
    action_description = "any text"

    def __init__(self, greeting="hello"):
        self.greeting = greeting

    def reset(self, *, seed=None, options=None):
        return self.greeting, {}

    def step(self, action):
        return action, 1.0, True, False, self.step_info(valid=True, effective=True, success=True)


def make_echo(**kwargs):
    return Echo(**kwargs)


def load_tasks(split=None, source=None):
    return load_task_dataset(Path(__file__).with_name("starpo_fnecho_data"), split, source)
'''


@pytest.fixture
def function_entry_points(tmp_path):
    """Environments registered as ``module:function``, ``module:Class`` and a function whose module has no tasks."""
    import sys

    from trl_starpo.envs import registry

    (tmp_path / "starpo_fnecho.py").write_text(FUNCTION_PACKAGE)
    (tmp_path / "starpo_notasks.py").write_text("from starpo_fnecho import Echo\n\ndef build():\n    return Echo()\n")
    for split in ("train", "validation", "test"):
        write_task_split(tmp_path / "starpo_fnecho_data", split, [{"task_id": f"{split}-0", "seed": 0}])
    info = tmp_path / "starpo_fnecho-0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: starpo-fnecho\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text(
        "[trl_starpo.environments]\nfnecho = starpo_fnecho:make_echo\nclassecho = starpo_fnecho:Echo\n"
        "notasks = starpo_notasks:build\n"
    )
    sys.path.insert(0, str(tmp_path))
    registry._entry_points.cache_clear()
    yield
    sys.path.remove(str(tmp_path))
    for module in ("starpo_fnecho", "starpo_notasks"):
        sys.modules.pop(module, None)
    registry._entry_points.cache_clear()


def test_an_entry_point_may_name_a_function_or_a_class(function_entry_points, capsys):
    from trl_starpo.cli import main

    assert {"fnecho", "classecho", "notasks"} <= set(trl_starpo.list_environments())
    for name in ("fnecho", "classecho"):
        env = trl_starpo.load_environment(name, greeting="hi")
        assert env.reset(seed=0)[0] == "hi" and isinstance(env, Environment)
        assert trl_starpo.load_tasks(name, "validation")["task_id"] == ["validation-0"]
    with pytest.raises(ValueError, match=r"Environment 'notasks' \(starpo_notasks:build\) provides no load_tasks\(\)"):
        trl_starpo.load_tasks("notasks")
    assert main(["envs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.split() == ["fnecho", "train=1,", "validation=1,", "test=1"] for line in lines), lines
    assert any(line.startswith("notasks") and "provides no load_tasks()" in line for line in lines), lines


def test_reading_a_task_set_prints_no_progress_bars(tmp_path, capfd):
    import datasets

    for split in ("train", "validation", "test"):
        write_task_split(tmp_path, split, [{"task_id": f"{split}-{i}", "seed": i} for i in range(3)])
    assert len(load_task_dataset(tmp_path, "validation")) == 3  # new files: the json builder generates every split
    assert "Generating" not in capfd.readouterr().err
    assert not datasets.utils.are_progress_bars_disabled()  # the user's own setting is left as it was


def test_task_split_sizes_are_counted_without_importing_the_package():
    import json
    import subprocess
    import sys

    from trl_starpo.envs.registry import task_split_sizes

    code = ("import json, sys; from trl_starpo.envs.registry import task_split_sizes; "
            "print(json.dumps([task_split_sizes('hotpotqa'), 'starpo_hotpotqa' in sys.modules]))")
    sizes, imported = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                                check=True).stdout)
    assert sizes == {"train": 1000, "validation": 200, "test": 200} and not imported  # corpus.jsonl is no split
    assert task_split_sizes("alfworld") == {"train": 300, "valid_seen": 60, "valid_unseen": 60}
    assert {k: len(v) for k, v in trl_starpo.load_tasks("sokoban").items()} == task_split_sizes("sokoban")


def test_a_misspelt_environment_gets_a_suggestion():
    with pytest.raises(ValueError, match=r"Unknown environment 'sokobn'. Did you mean 'sokoban'\?"):
        trl_starpo.load_environment("sokobn")


def test_the_task_split_command_every_package_shares(tmp_path, capsys):
    from trl_starpo.envs import parse_task_split_args, write_task_splits

    sizes = {"train": 5, "validation": 2, "test": 2}
    args = parse_task_split_args("python -m starpo_x", sizes, tmp_path / "default",
                                 argv=["--out-dir", str(tmp_path), "--train-size", "3", "--level", "7"],
                                 options=lambda parser: parser.add_argument("--level", type=int, default=1))
    assert args.split_sizes == {"train": 3, "validation": 2, "test": 2} and args.level == 7
    taken = []  # splits are generated in order, so later ones can avoid what earlier ones took

    def rows(split, count):
        start = len(taken)
        taken.extend(range(start, start + count))
        return [{"task_id": f"{split}-{i}", "seed": i} for i in range(start, start + count)]

    paths = write_task_splits(args.out_dir, ((split, rows(split, n)) for split, n in args.split_sizes.items()))
    assert [p.name for p in paths] == ["train.jsonl", "validation.jsonl", "test.jsonl"]
    assert load_task_dataset(tmp_path, "test")["seed"] == [5, 6]
    assert "wrote 2 tasks to" in capsys.readouterr().out
    per_level = parse_task_split_args("p", sizes, tmp_path, size_flag="--{split}-per-env", argv=["--test-per-env", "9"])
    assert per_level.split_sizes["test"] == 9 and per_level.out_dir == tmp_path


@pytest.mark.parametrize("name", trl_starpo.list_environments())
def test_load_dataset_on_a_data_folder_returns_the_environments_own_splits(name, tmp_path):
    import shutil

    from datasets import load_dataset

    from trl_starpo.envs import tasks_data_dir
    from trl_starpo.hub import write_tasks_card

    folder = tasks_data_dir(name)
    tasks = trl_starpo.load_tasks(name)
    loaded = load_dataset(str(folder), cache_dir=str(tmp_path / "cache"))
    assert {split: len(rows) for split, rows in loaded.items()} == {split: len(rows) for split, rows in tasks.items()}
    first = next(iter(tasks))
    assert loaded[first][0] == tasks[first][0]
    copy = tmp_path / "data"
    shutil.copytree(folder, copy)
    write_tasks_card(name, copy)
    assert (copy / "README.md").read_text() == (folder / "README.md").read_text(), (
        f"{folder}/README.md is out of date: python -c 'from trl_starpo.hub import write_tasks_card; "
        f"write_tasks_card(\"{name}\")'")


def test_alfworld_validation_splits_stay_apart():
    from datasets import load_dataset

    from trl_starpo.envs import tasks_data_dir

    splits = load_dataset(str(tasks_data_dir("alfworld")))
    assert set(splits) == {"train", "valid_seen", "valid_unseen"} and len(splits["valid_seen"]) == 60
