import pytest
from datasets import Dataset, DatasetDict

import trl_starpo
from trl_starpo.envs import Environment, load_task_dataset, write_task_split


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


@pytest.mark.parametrize("name", trl_starpo.list_environments())
def test_load_dataset_on_a_data_folder_returns_the_environments_own_splits(name, tmp_path):
    import shutil

    from datasets import load_dataset

    from trl_starpo.envs import tasks_data_dir, write_tasks_card

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
        f"{folder}/README.md is out of date: python -c 'from trl_starpo.envs import write_tasks_card; "
        f"write_tasks_card(\"{name}\")'")


def test_alfworld_validation_splits_stay_apart():
    from datasets import load_dataset

    from trl_starpo.envs import tasks_data_dir

    splits = load_dataset(str(tasks_data_dir("alfworld")))
    assert set(splits) == {"train", "valid_seen", "valid_unseen"} and len(splits["valid_seen"]) == 60
