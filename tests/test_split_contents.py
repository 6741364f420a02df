"""Every shipped environment's held-out tasks are new by content, not only by id or seed.

A held-out task that repeats a training task (the same layout, question, instruction or game) measures recall, not
generalization. Each environment names what makes two of its tasks the same (one key, or several of which any one is
enough: a WebShop task repeats another if it asks the same instruction or targets the same product), and no held-out
split may share a key with the training split or with the other held-out split.
"""

import json

import pytest

import trl_starpo


def minigrid_layouts(rows):
    from starpo_minigrid import MiniGridTextEnv

    env = MiniGridTextEnv()
    keys = []
    for row in rows:
        env.reset(options={"task": row})
        keys.append(env.layout_key())  # the grid, the agent's pose and the mission
    return keys


def single(contents):
    return lambda rows: [(content,) for content in contents(rows)]


def hotpotqa_contents(rows):
    # the question, and the pair of articles its answer rests on
    return [(" ".join(row["question"].lower().split()), frozenset(row["supporting_facts"]["title"])) for row in rows]


# per task, its keys: a held-out task repeats a training task when any of its keys is one of the training keys
CONTENTS = {
    "alfworld": single(lambda rows: [row["pddl_sha256"] for row in rows]),  # the generated game
    "webshop": lambda rows: [(row["instruction_text"], row["asin"]) for row in rows],  # the instruction, its product
    "hotpotqa": hotpotqa_contents,
    "minigrid": single(minigrid_layouts),
    "sokoban": single(lambda rows: [json.dumps(row["room"]) for row in rows]),  # the room's layout
    "frozenlake": single(lambda rows: ["\n".join(row["desc"]) for row in rows]),  # the map
    "bandit": single(lambda rows: [frozenset((row["low_name"], row["high_name"])) for row in rows]),  # names, any order
    "countdown": single(lambda rows: [(tuple(sorted(row["numbers"])), row["target"]) for row in rows]),
}
HELD_OUT = {"alfworld": ("valid_seen", "valid_unseen")}


def parts(contents):
    """Every key of every task."""
    return {key for keys in contents for key in keys}


@pytest.mark.parametrize("name", sorted(CONTENTS))
def test_held_out_tasks_are_new_by_content(name):
    assert set(CONTENTS) == set(trl_starpo.list_environments())  # every shipped environment is checked
    held_out = HELD_OUT.get(name, ("validation", "test"))
    contents = {split: CONTENTS[name](list(trl_starpo.load_tasks(name, split))) for split in ("train", *held_out)}
    train = parts(contents["train"])
    for split in held_out:
        repeated = [content for content in contents[split] if parts([content]) & train]
        assert not repeated, f"{name}: {len(repeated)} of {len(contents[split])} {split} tasks repeat training tasks"
    first, second = (parts(contents[split]) for split in held_out)
    assert not first & second, f"{name}: {held_out[0]} and {held_out[1]} share {len(first & second)} tasks"


def test_minigrid_held_out_layouts_are_distinct():
    for split in ("validation", "test"):
        layouts = minigrid_layouts(list(trl_starpo.load_tasks("minigrid", split)))
        assert len(set(layouts)) == len(layouts), split


def test_minigrid_long_held_out_layouts_are_new_and_distinct():
    from starpo_minigrid import LONG_DATA_DIR

    layouts = {split: minigrid_layouts(list(trl_starpo.load_tasks("minigrid", split, source=str(LONG_DATA_DIR))))
               for split in ("train", "validation", "test")}
    for split in ("validation", "test"):
        assert not set(layouts[split]) & set(layouts["train"]), split
        assert len(set(layouts[split])) == len(layouts[split]), split
    assert not set(layouts["validation"]) & set(layouts["test"])


def test_alfworld_valid_unseen_plays_in_rooms_training_never_visits():
    scenes = {split: set(trl_starpo.load_tasks("alfworld", split)["scene"]) for split in ("train", "valid_unseen")}
    assert not scenes["train"] & scenes["valid_unseen"]


def test_content_decides_the_split_alone():
    from trl_starpo.envs import split_of_content

    splits = [split_of_content(f"layout {i}") for i in range(20_000)]
    for split, share in (("test", 0.15), ("validation", 0.15), ("train", 0.70)):
        assert splits.count(split) / len(splits) == pytest.approx(share, abs=0.015)
    assert split_of_content("layout 7") == split_of_content(b"layout 7") == splits[7]  # the same content, the same split
    assert split_of_content("layout 7", held_out_fraction=0.5) in ("test", "validation")
    with pytest.raises(ValueError, match="held_out_fraction"):
        split_of_content("layout 7", held_out_fraction=0.6)
