"""The Sokoban environment package (environments/sokoban)."""

import pytest
import starpo_sokoban
from conftest import play_expert
from starpo_sokoban import LEGEND, Room, SokobanEnv, generate_room, solve

import trl_starpo
from trl_starpo.envs import Environment

WALK_ROOM = [
    "#######",
    "#P____#",
    "#__X_O#",
    "#_____#",
    "#######",
]


def grid(*rows):
    return "\n".join([*rows, LEGEND])


def start(room, **kwargs):
    env = SokobanEnv(**kwargs)
    obs, info = env.reset(options={"task": {"task_id": "hand", "room": room}})
    return env, obs, info


def test_registered_and_follows_the_protocol():
    assert "sokoban" in trl_starpo.list_environments()
    env = trl_starpo.load_environment("sokoban", dim_room=[7, 7], num_boxes=2)
    assert isinstance(env, Environment)
    assert env.action_description == "Up, Down, Left, Right"
    assert LEGEND in env.system_prompt
    obs, _ = env.reset(seed=1)
    *rows, legend = obs.splitlines()
    assert legend == LEGEND
    assert len(rows) == 7 and sum(row.count("X") + row.count("√") for row in rows) == 2


def test_pushing_the_box_onto_the_target_solves_the_room():
    env, obs, info = start(WALK_ROOM)
    assert obs == grid(*WALK_ROOM)
    assert info == {"task_id": "hand"}
    expected = [
        ("Down", -0.1, ["#######", "#_____#", "#P_X_O#", "#_____#", "#######"]),
        ("right", -0.1, ["#######", "#_____#", "#_PX_O#", "#_____#", "#######"]),
        (" RIGHT\n", -0.1, ["#######", "#_____#", "#__PXO#", "#_____#", "#######"]),
    ]
    for action, reward, rows in expected:
        obs, r, terminated, truncated, info = env.step(action)
        assert (obs, terminated, truncated) == (grid(*rows), False, False)
        assert r == pytest.approx(reward)
        assert info == {"action_is_valid": True, "action_is_effective": True, "success": False}
    obs, r, terminated, truncated, info = env.step("Right")
    assert obs == grid("#######", "#_____#", "#___P√#", "#_____#", "#######")
    assert r == pytest.approx(-0.1 + 1.0 + 10.0)
    assert (terminated, truncated, info["success"]) == (True, False, True)
    with pytest.raises(RuntimeError):
        env.step("Left")


def test_pushing_a_box_off_a_target_costs_one():
    room = ["######", "#P√__#", "#_XO_#", "######"]
    env, _, _ = start(room)
    obs, r, terminated, _, info = env.step("Right")
    assert obs == grid("######", "#_SX_#", "#_XO_#", "######")
    assert r == pytest.approx(-1.1)
    assert not terminated and info["action_is_effective"]


def test_pushing_a_box_from_target_to_target_is_a_plain_step():
    env, _, _ = start(["######", "#P√O_#", "#X___#", "######"])
    obs, r, _, _, _ = env.step("Right")
    assert obs == grid("######", "#_S√_#", "#X___#", "######")
    assert r == pytest.approx(-0.1)


def test_blocked_moves_are_valid_but_not_effective():
    env, obs, _ = start(["######", "#PXX_#", "#_O__#", "#_O__#", "######"])
    for action in ("Up", "Left", "Right"):
        new_obs, r, terminated, truncated, info = env.step(action)
        assert new_obs == obs
        assert r == pytest.approx(-0.1)
        assert info == {"action_is_valid": True, "action_is_effective": False, "success": False}
        assert not (terminated or truncated)


@pytest.mark.parametrize("action", ["jump", "", "UPP", "up right", "1"])
def test_invalid_actions_change_nothing(action):
    env, obs, _ = start(WALK_ROOM)
    new_obs, r, terminated, truncated, info = env.step(action)
    assert new_obs == "Invalid action.\n" + obs
    assert r == 0.0 and not (terminated or truncated)
    assert info == {"action_is_valid": False, "action_is_effective": False, "success": False}


def test_truncates_after_max_valid_steps():
    env, _, _ = start(WALK_ROOM, max_steps=2)
    assert env.step("Up")[3] is False
    assert env.step("jump")[3] is False
    _, _, terminated, truncated, _ = env.step("Up")
    assert (terminated, truncated) == (False, True)


def test_room_parse_rejects_malformed_rooms():
    with pytest.raises(ValueError, match="outer ring"):
        Room.parse(["#####", "#P_XO", "#####"])
    with pytest.raises(ValueError, match="as many boxes"):
        Room.parse(["#####", "#PXX#", "#_O_#", "#####"])
    with pytest.raises(ValueError, match="symbols"):
        Room.parse(["#####", "#P?X#", "#_O_#", "#####"])


def test_solver_finds_a_shortest_solution_or_none():
    assert solve(WALK_ROOM) == ["Down", "Right", "Right", "Right"]
    assert solve(["######", "#X_PO#", "######"]) is None


def test_generated_rooms_are_deterministic_unsolved_and_optimally_labelled():
    for seed in range(20):
        room, min_steps = generate_room(seed)
        assert generate_room(seed) == (room, min_steps)
        parsed = Room.parse(room)
        assert (parsed.height, parsed.width, len(parsed.boxes)) == (6, 6, 1)
        assert not parsed.solved
        assert len(solve(room)) == min_steps >= 1
    assert len({tuple(generate_room(seed)[0]) for seed in range(20)}) > 15


def test_larger_rooms_with_two_boxes():
    for seed in range(5):
        room, min_steps = generate_room(seed, dim_room=(7, 7), num_boxes=2)
        parsed = Room.parse(room)
        assert (parsed.height, parsed.width, len(parsed.boxes)) == (7, 7, 2)
        assert len(solve(room)) == min_steps
    with pytest.raises(ValueError, match="no space"):
        generate_room(0, dim_room=(4, 4), num_boxes=3)


def test_reset_with_a_seed_generates_that_seeds_room():
    env = SokobanEnv()
    obs, info = env.reset(seed=42)
    room, min_steps = generate_room(42)
    assert obs == grid(*room)
    assert info == {"seed": 42, "min_steps": min_steps}


def test_shipped_splits():
    splits = {split: trl_starpo.load_tasks("sokoban", split) for split in ("train", "validation", "test")}
    assert {split: len(ds) for split, ds in splits.items()} == {"train": 500, "validation": 100, "test": 100}
    seeds = [set(ds["seed"]) for ds in splits.values()]
    assert sum(map(len, seeds)) == 700 and len(set.union(*seeds)) == 700
    assert len({tuple(room) for ds in splits.values() for room in ds["room"]}) == 700
    train = splits["train"]
    assert train[17]["task_id"] == "sokoban-train-00017"
    assert train[0]["room"] == generate_room(train[0]["seed"])[0]
    assert starpo_sokoban.load_tasks()["test"].num_rows == 100


def test_replaying_shipped_solutions_earns_the_formula_reward():
    env = SokobanEnv()
    for task in trl_starpo.load_tasks("sokoban", "test").select(range(5)):
        env.reset(options={"task": task})
        actions = solve(task["room"])
        assert len(actions) == task["min_steps"]
        total, terminated, info = 0.0, False, {}
        for action in actions:
            assert not terminated
            _, reward, terminated, _, info = env.step(action)
            total += reward
        assert terminated and info["success"]
        assert total == pytest.approx(-0.1 * task["min_steps"] + 1.0 + 10.0)


def test_expert_follows_a_shortest_solution_of_every_validation_room():
    env = SokobanEnv()
    for task in trl_starpo.load_tasks("sokoban", "validation"):
        env.reset(options={"task": task})
        assert env.admissible_actions() == ["Up", "Down", "Left", "Right"]
        actions, terminated, info = play_expert(env)
        assert terminated and info["success"] and len(actions) == task["min_steps"], task["task_id"]


def test_expert_replans_after_a_detour_and_gives_up_on_a_dead_room():
    env, _, _ = start(WALK_ROOM)
    env.step("Down")
    env.step("Left")  # off the first plan: the expert searches again from here
    assert play_expert(env)[0] == solve(["#######", "#_____#", "#P_X_O#", "#_____#", "#######"])
    room = ["######", "#P___#", "#_X__#", "#___O#", "######"]
    dead, _, _ = start(room)
    assert dead.expert_action() is not None
    for action in ("Down", "Down", "Right", "Up"):  # the box is pushed against the top wall, away from the target
        dead.step(action)
    assert dead.expert_action() is None
