"""The MiniGrid / BabyAI environment package (environments/minigrid), on the real minigrid engine."""

import gymnasium as gym
import numpy as np
import pytest
from minigrid.core.grid import Grid
from minigrid.core.mission import MissionSpace
from minigrid.core.world_object import Ball, Door, Goal, Key, Lava, Wall
from minigrid.minigrid_env import MiniGridEnv
from starpo_minigrid import (
    ACTIONS,
    ENV_IDS,
    DATA_DIR,
    LONG_DATA_DIR,
    LONG_ENV_IDS,
    MiniGridTextEnv,
    expert_solution,
    generate_tasks,
    main,
)
from starpo_minigrid.text import object_name, parse_action, relative_position
from starpo_minigrid.thinking import summarize_plan

import trl_starpo
from trl_starpo.envs import split_of_content
from trl_starpo.envs import Environment
from trl_starpo.sft import expert_plan

SPLITS = ("train", "validation", "test")


class HandBuiltRoom(MiniGridEnv):
    """A 7x7 walled room laid out by hand. The agent stands at (3, 5), facing up (north), carrying a green key.

    ``blocked`` walls off the far half of the room (row 3, where the red key was); ``lava`` puts lava one step ahead.
    """

    def __init__(self, blocked: bool = False, lava: bool = False, max_steps: int = 20):
        self.blocked, self.lava = blocked, lava
        mission_space = MissionSpace(mission_func=lambda: "get to the green goal square")
        super().__init__(mission_space=mission_space, grid_size=7, max_steps=max_steps)

    def _gen_grid(self, width, height):
        self.grid = Grid(width, height)
        self.grid.wall_rect(0, 0, width, height)
        self.put_obj(Door("red", is_open=True), 0, 5)
        self.put_obj(Door("yellow", is_locked=True), 6, 4)
        self.put_obj(Key("red"), 1, 3)
        self.put_obj(Ball("blue"), 3, 2)
        self.put_obj(Goal(), 5, 1)
        if self.blocked:
            for x in range(1, 6):
                self.put_obj(Wall(), x, 3)
        if self.lava:
            self.put_obj(Lava(), 3, 4)
        self.agent_pos, self.agent_dir = (3, 5), 3

    def reset(self, **kwargs):
        observation = super().reset(**kwargs)
        self.carrying = Key("green")
        return observation


gym.register("StarPOTest/HandBuilt-v0", entry_point=HandBuiltRoom)
gym.register("StarPOTest/HandBuiltBlocked-v0", entry_point=HandBuiltRoom, kwargs={"blocked": True})
gym.register("StarPOTest/HandBuiltLava-v0", entry_point=HandBuiltRoom, kwargs={"lava": True})


@pytest.fixture(scope="module")
def splits():
    return {split: trl_starpo.load_tasks("minigrid", split) for split in SPLITS}


def start(env_id, **kwargs):
    env = MiniGridTextEnv(**kwargs)
    observation, _ = env.reset(options={"task": {"env_id": env_id, "seed": 0}})
    return env, observation


def play(env, actions, **reset_kwargs):
    trajectory = [env.reset(**reset_kwargs)]
    for action in actions:
        trajectory.append(env.step(action))
        if trajectory[-1][2] or trajectory[-1][3]:
            break
    return trajectory


def test_registered_and_follows_the_protocol():
    assert "minigrid" in trl_starpo.list_environments()
    env = trl_starpo.load_environment("minigrid", env_ids="BabyAI-GoToObj-v0")
    assert isinstance(env, Environment)
    assert env.action_description == "turn left, turn right, go forward, pick up, drop, toggle"
    assert all(action in env.system_prompt for action in ACTIONS)
    assert env.admissible_actions() == list(ACTIONS)
    observation, info = env.reset(seed=5)
    assert info == {"env_id": "BabyAI-GoToObj-v0", "seed": 5, "mission": env.engine.mission,
                    "state_key": env.state_key()}
    assert observation.startswith(f"Mission: {env.engine.mission}\nYou see ")
    assert env.expert_action() in ACTIONS
    env.close()


def test_describes_a_hand_built_room():
    _, observation = start("StarPOTest/HandBuilt-v0")
    assert observation.splitlines() == [
        "Mission: get to the green goal square",
        "You carry a green key",
        "You see a wall 3 steps right",
        "You see an open red door 3 steps left",
        "You see a blue ball 3 steps forward",
        "You see a red key 2 steps left and 2 steps forward",
        "You see a locked yellow door 3 steps right and 1 step forward",
        "You see a green goal 2 steps right and 4 steps forward",
    ]


def test_turning_changes_the_view():
    env, _ = start("StarPOTest/HandBuilt-v0")
    observation, *_ = env.step("turn left")
    assert observation.splitlines() == [
        "Mission: get to the green goal square",
        "You carry a green key",
        "You see a wall 1 step left",
        "You see an open red door 3 steps forward",
        "You see a blue ball 3 steps right",
        "You see a red key 2 steps right and 2 steps forward",
    ]


def test_walls_hide_what_is_behind_them():
    _, observation = start("StarPOTest/HandBuiltBlocked-v0")
    assert observation.splitlines()[1:] == [
        "You carry a green key",
        "You see a wall 2 steps forward",
        "You see a wall 3 steps right",
        "You see an open red door 3 steps left",
        "You see a locked yellow door 3 steps right and 1 step forward",
    ]


def test_sentence_parts():
    assert relative_position(0, 1) == "1 step forward"
    assert relative_position(-1, 0) == "1 step left"
    assert relative_position(2, 3) == "2 steps right and 3 steps forward"
    assert object_name(Door("grey")) == "a closed grey door"
    assert object_name(Door("grey", is_open=True)) == "an open grey door"
    assert object_name(Door("grey", is_locked=True)) == "a locked grey door"
    assert object_name(Lava()) == "lava"


@pytest.mark.parametrize(
    ("text", "action"),
    [
        ("go forward", 2),
        ("  Go   Forward ", 2),
        ("TURN LEFT", 0),
        ("turn\tright", 1),
        ("pickup", 3),
        ("Pick Up", 3),
        ("drop", 4),
        ("Toggle", 5),
    ],
)
def test_word_actions_ignore_case_and_spaces(text, action):
    assert parse_action(text) == action


@pytest.mark.parametrize("text", ["", "forward", "go forward please", "done", "2", "turn around", "left"])
def test_invalid_actions_change_nothing(text):
    env, observation = start("BabyAI-GoToLocal-v0")
    new_observation, reward, terminated, truncated, info = env.step(text)
    assert new_observation == "Invalid action.\n" + observation
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert info == {"action_is_valid": False, "action_is_effective": False, "success": False,
                    "state_key": env.state_key()}
    assert env.engine.step_count == 0
    assert env.step("turn right")[0] != observation


def test_effective_means_the_state_changed():
    env, _ = start("StarPOTest/HandBuilt-v0")
    steps = ["pick up", "turn right", "go forward", "go forward", "go forward", "turn left", "drop", "pick up"]
    effective = [env.step(action)[4]["action_is_effective"] for action in steps]
    # Nothing to pick up ahead (and the hands are full); the third step east bumps into the wall; the green key is
    # dropped and picked up again.
    assert effective == [False, True, True, True, False, True, True, True]
    assert env.engine.carrying.color == "green"


def test_the_state_key_tells_apart_states_that_read_alike(splits):
    # the text shows only the agent's view: over 30 turns on each of 20 test layouts, some texts stand for several
    # states. The key names the state: equal in two episodes of one task exactly where the states are equal.
    env, twin = MiniGridTextEnv(), MiniGridTextEnv()
    aliased, rng = 0, np.random.default_rng(0)
    for task in splits["test"].select(range(20)):
        env.reset(options={"task": task})
        twin.reset(options={"task": task})
        keys_by_text: dict[str, set] = {}
        for _ in range(30):
            action = ["turn left", "turn right", "go forward"][rng.integers(3)]
            observation, _, terminated, truncated, info = env.step(action)
            assert twin.step(action)[4]["state_key"] == info["state_key"] == env.state_key()
            keys_by_text.setdefault(observation, set()).add(info["state_key"])
            if terminated or truncated:
                break
        aliased += any(len(keys) > 1 for keys in keys_by_text.values())
    assert aliased >= 2
    # four turns bring the agent back to the state it started from; a turn does not
    env = MiniGridTextEnv()
    first = env.reset(options={"task": {"env_id": "StarPOTest/HandBuilt-v0", "seed": 0}})[1]["state_key"]
    assert first == env.state_key()
    keys = [env.step("turn left")[4]["state_key"] for _ in range(4)]
    assert keys[-1] == first and first not in keys[:-1]


def test_reaching_the_goal_pays_minigrid_reward():
    env, _ = start("StarPOTest/HandBuilt-v0")
    for action in ["turn right", "go forward", "go forward", "turn left", "go forward", "go forward", "go forward"]:
        _, reward, terminated, truncated, info = env.step(action)
        assert (reward, terminated, truncated, info["success"]) == (0.0, False, False, False)
    assert env.expert_action() == "go forward"
    _, reward, terminated, truncated, info = env.step("go forward")
    assert reward == pytest.approx(1 - 0.9 * 8 / 20)
    assert (terminated, truncated, info["success"]) == (True, False, True)
    flags = (terminated, truncated, *(value for key, value in info.items() if key != "state_key"))
    assert all(type(value) is bool for value in flags) and isinstance(info["state_key"], str)
    assert env.expert_action() is None
    with pytest.raises(RuntimeError):
        env.step("turn left")


def test_lava_ends_the_episode_without_reward():
    env, _ = start("StarPOTest/HandBuiltLava-v0")
    _, reward, terminated, truncated, info = env.step("go forward")
    assert (reward, terminated, truncated, info["success"]) == (0.0, True, False, False)


def test_step_limit_truncates_and_invalid_actions_do_not_count():
    env, _ = start("BabyAI-GoToLocal-v0", max_steps=2)
    assert env.engine.max_steps == 2
    assert env.step("turn left")[2:4] == (False, False)
    assert env.step("fly")[2:4] == (False, False)
    assert env.step("turn left")[2:4] == (False, True)


def test_expert_solves_a_sample_of_each_split_as_recorded(splits):
    env = MiniGridTextEnv()
    for split, tasks in splits.items():
        sample = tasks.select(range(0, len(tasks), 23 if split == "train" else 3))
        assert len(set(sample["env_id"])) >= 8
        for task in sample:
            solution = expert_solution(env, task)
            assert solution is not None, task
            assert len(solution) == task["expert_steps"]


def test_expert_advises_after_the_agent_strays(splits):
    """After a random detour the expert still completes the mission. The detours never toggle (opening a box may
    destroy the object of the mission) and skip the lava levels (stepping into lava ends the episode)."""
    env = MiniGridTextEnv()
    rng = np.random.default_rng(0)
    detour_actions = [action for action in ACTIONS if action != "toggle"]
    for task in splits["validation"].select(range(10, 40)):
        env.reset(options={"task": task})
        detour = 0 if "Lava" in task["env_id"] else int(rng.integers(1, 12))
        for step in range(100):
            action = detour_actions[rng.integers(len(detour_actions))] if step < detour else env.expert_action()
            *_, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                break
        assert info["success"], task


def test_no_expert_for_a_level_it_does_not_know():
    env, _ = start("MiniGrid-Unlock-v0")  # no goal square and no BabyAI instructions
    assert env.expert_action() is None


def test_layout_is_determined_by_the_seed():
    env = MiniGridTextEnv()
    actions = ["go forward", "turn left", "go forward", "pick up", "turn right", "go forward", "toggle"] * 2
    for env_id in ENV_IDS:
        task = {"env_id": env_id, "seed": 7}
        assert play(env, actions, options={"task": task}) == play(env, actions, options={"task": task})
        assert play(env, actions, options={"task": task}) == play(env, actions, seed=1, options={"task": task})
    assert play(env, actions, seed=3) == play(env, actions, seed=3)
    starts = {env.reset(options={"task": {"env_id": "BabyAI-GoToLocal-v0", "seed": seed}})[0] for seed in range(10)}
    assert len(starts) == 10
    assert len({env.reset(seed=seed)[1]["env_id"] for seed in range(40)}) == len(ENV_IDS)


def test_a_task_from_another_minigrid_version_is_refused():
    task = {"task_id": "old", "env_id": "BabyAI-GoToLocal-v0", "seed": 0, "mission": "go to the moon"}
    with pytest.raises(ValueError, match="another minigrid version"):
        MiniGridTextEnv().reset(options={"task": task})


def test_shipped_splits_hold_every_level_and_keep_layouts_apart(splits):
    # training has 50 layouts of each level; a held-out split up to 10 of each, fewer where a small level has few
    # layouts of its own (tests/test_split_contents.py checks that none is a training layout)
    counts = {split: {env_id: tasks["env_id"].count(env_id) for env_id in ENV_IDS} for split, tasks in splits.items()}
    assert counts["train"] == dict.fromkeys(ENV_IDS, 50)
    for split in ("validation", "test"):
        assert all(count <= 10 for count in counts[split].values()) and len(splits[split]) >= 70
        big = [env_id for env_id in ENV_IDS if env_id.startswith("BabyAI") or "6x6" in env_id]
        assert all(counts[split][env_id] >= 6 for env_id in big), counts[split]
    seeds = [set(tasks["seed"]) for tasks in splits.values()]
    assert sum(map(len, seeds)) == len(set.union(*seeds)) == sum(len(tasks) for tasks in splits.values())
    env = MiniGridTextEnv()
    for tasks in splits.values():
        for task in tasks.select(range(0, len(tasks), 7)):
            env.reset(options={"task": task})  # checks the recorded mission
            assert env.engine.max_steps == task["max_steps"] and 0 < task["expert_steps"] < task["max_steps"]
            assert split_of_content(env.layout_key()) == task["task_id"].split("-")[1]
    assert splits["test"][12]["task_id"] == "minigrid-test-00012"


def test_the_long_task_set_holds_its_levels_with_expert_solutions_of_at_most_40_steps():
    long = {split: trl_starpo.load_tasks("minigrid", split, source=str(LONG_DATA_DIR)) for split in SPLITS}
    assert {split: len(tasks) for split, tasks in long.items()} == {"train": 500, "validation": 100, "test": 100}
    env = MiniGridTextEnv(LONG_ENV_IDS)
    for split, tasks in long.items():
        assert set(tasks["env_id"]) == set(LONG_ENV_IDS)
        assert max(tasks["expert_steps"]) <= 40 and sum(tasks["expert_steps"]) / len(tasks) > 20  # long: 50 turns
        for task in tasks.select(range(0, len(tasks), 37)):
            env.reset(options={"task": task})
            assert split_of_content(env.layout_key()) == split
            solution = expert_solution(env, task)
            assert solution is not None and len(solution) == task["expert_steps"]


def test_generated_tasks_keep_to_the_expert_step_bound(tmp_path):
    rows = generate_tasks("train", 3, 0, ["BabyAI-KeyCorridorS3R2-v0"], max_expert_steps=30)
    assert len(rows) == 3 and all(row["expert_steps"] <= 30 for row in rows)
    unbounded = generate_tasks("train", 12, 0, ["BabyAI-KeyCorridorS3R2-v0"])
    assert max(row["expert_steps"] for row in unbounded) > 30  # the bound skipped some

    main(["--long", "--out-dir", str(tmp_path), "--train-per-env", "1", "--validation-per-env", "0",
          "--test-per-env", "0"])
    written = trl_starpo.load_tasks("minigrid", "train", source=str(tmp_path))
    assert written["env_id"] == list(LONG_ENV_IDS) and max(written["expert_steps"]) <= 40


@pytest.mark.parametrize("argv, expected", [
    (["--long"], (LONG_DATA_DIR, {"train": 100, "validation": 20, "test": 20}, LONG_ENV_IDS, 40, "minigrid-long")),
    ([], (DATA_DIR, {"train": 50, "validation": 10, "test": 10}, ENV_IDS, None, "minigrid")),
    (["--max-expert-steps", "0", "--train-per-env", "3"],
     (DATA_DIR, {"train": 3, "validation": 10, "test": 10}, ENV_IDS, 0, "minigrid")),
])
def test_the_command_line_picks_the_task_set_and_its_defaults(argv, expected, monkeypatch):
    import starpo_minigrid

    calls, written = [], []
    monkeypatch.setattr(starpo_minigrid, "generate_tasks", lambda split, count, seed, env_ids, **kw: calls.append(
        (split, count, tuple(env_ids), kw["max_expert_steps"], kw["task_prefix"])) or [])
    monkeypatch.setattr(starpo_minigrid, "write_task_splits", lambda out_dir, splits: written.append((out_dir, list(splits))))
    main(argv)
    out_dir, sizes, env_ids, bound, prefix = expected
    assert written[0][0] == out_dir
    assert calls == [(split, count, tuple(env_ids), bound, prefix) for split, count in sizes.items()]


def test_the_command_line_takes_no_abbreviation_that_could_overwrite_the_shipped_tasks():
    with pytest.raises(SystemExit):
        main(["--lon", "--out-dir", "/nonexistent"])


@pytest.mark.parametrize("env_id", ["this:Foo-v0", "this:BabyAI-GoToLocal-v0", "BabyAI-NoSuchLevel-v0", "CartPole-v1", 3])
def test_a_task_row_names_only_registered_levels_and_imports_nothing(env_id):
    import sys

    sys.modules.pop("this", None)
    env = MiniGridTextEnv()
    task = {"task_id": "hostile", "env_id": env_id, "seed": 0}
    with pytest.raises(ValueError, match="minigrid level|not a MiniGrid or BabyAI level"):
        env.reset(options={"task": task})
    assert "this" not in sys.modules  # gymnasium imports the module part of "module:Level-v0"
    with pytest.raises(ValueError, match="minigrid level"):
        MiniGridTextEnv(env_ids=["this:Foo-v0"])


def test_plans_are_summarized_with_repeats_counted():
    assert summarize_plan(["turn right", "go forward", "go forward", "turn left", "go forward"]) == (
        "turn right, go forward 2 times, turn left, go forward"
    )
    assert summarize_plan(["pick up"]) == "pick up"


def test_expert_thinking_names_the_target_where_the_agent_sees_it_and_the_plan_to_it():
    env, _ = start("StarPOTest/HandBuilt-v0")
    # The goal is 2 right and 4 forward; the blue ball 3 ahead blocks the straight line, so the planner turns first.
    assert env.expert_thinking() == (
        "Next: reach the green goal, 2 steps right and 4 steps forward. "
        "Plan: turn right, go forward 2 times, turn left, go forward 4 times."
    )
    assert (tuple(env.engine.agent_pos), env.engine.agent_dir) == ((3, 5), 3)  # planned on a copy
    env.step("turn right")  # facing east: the goal is 4 left and 2 forward, outside the 7-wide view: its kind only
    assert env.expert_thinking() == (
        "Next: reach the goal, not in view. Plan: go forward 2 times, turn left, go forward 4 times."
    )


def test_a_copy_plays_the_running_episode_alone_and_leaves_the_other_levels_out(splits):
    import copy

    env = MiniGridTextEnv()
    for task in splits["train"].select(range(3)):  # three levels cached
        env.reset(options={"task": task})
    before = env.engine.grid.encode().tobytes(), tuple(env.engine.agent_pos), env.engine.agent_dir
    expected = expert_solution(MiniGridTextEnv(), splits["train"][2])
    clone = copy.deepcopy(env)
    assert list(clone._engines.values()) == [clone.engine] and clone.engine is not env.engine
    assert clone._expert.env is clone.engine  # the copied expert plans on the copied engine
    actions = []
    while (action := clone.expert_action()) is not None:
        actions.append(action)
        if clone.step(action)[4]["success"]:
            break
    assert actions == expected  # the copy wins the level as the expert does from its start
    assert (env.engine.grid.encode().tobytes(), tuple(env.engine.agent_pos), env.engine.agent_dir) == before
    assert env.expert_action() == expected[0] and len(env._engines) == 3
    clone.reset(options={"task": splits["train"][0]})  # another level: made anew in the copy
    assert len(clone._engines) == 2


def test_expert_thinking_agrees_with_the_observation_and_the_turns_actions(splits):
    """On the first turns of a sample of each level: a target in view is named and placed as an observation line
    names and places it, one out of view by its kind alone and only when the mission names that kind (the thinking
    names nothing the observations so far have not shown), and the turn's actions (three at most, as the learning
    benchmark plays) are the plan's first ones."""
    env = MiniGridTextEnv()
    verbs = set()
    for row in splits["train"].select(range(40)):
        observation, _ = env.reset(options={"task": dict(row)})
        seen = observation
        for _ in range(3):
            thinking, plan = env.expert_thinking(), expert_plan(env, 3)
            target, _, planned = thinking.removeprefix("Next: ").partition(". Plan: ")
            verb = next(verb for verb in ("reach", "pick up", "open", "go to", "drop", "explore")
                        if target.startswith(verb))
            verbs.add(verb)
            thing = target.removeprefix(verb + " ")
            if verb == "explore":
                assert target == "explore"
            elif thing.endswith(", not in view"):
                kind = thing.removesuffix(", not in view")
                assert kind in ("the goal", "a key", "a ball", "a box", "a door")
                assert kind.split()[1] in seen, (thinking, seen)
            elif verb == "drop":
                assert thing.startswith(f"the {object_name(env.engine.carrying).split(' ', 1)[1]}")
            else:
                name, position = thing.removeprefix("the ").rsplit(", ", 1)
                assert {f"You see a {name} {position}", f"You see an {name} {position}"} & set(
                    observation.splitlines()), (thinking, observation)
            steps = [part.rsplit(" ", 2)[0] if part.endswith(" times") else part
                     for part in planned.removesuffix(".").split(", ")
                     for _ in range(int(part.rsplit(" ", 2)[1]) if part.endswith(" times") else 1)]
            assert plan and plan[: len(steps)] == steps[: len(plan)], (thinking, plan)
            ended = False
            for action in plan:
                observation, _, terminated, truncated, _ = env.step(action)
                seen += "\n" + observation
                ended = terminated or truncated
                if ended:
                    break
            if ended:
                break
    assert {"reach", "pick up", "open", "go to", "drop", "explore"} <= verbs
