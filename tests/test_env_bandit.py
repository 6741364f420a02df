"""The two-armed bandit environment package (environments/bandit)."""

import pytest
import starpo_bandit

import trl_starpo
from trl_starpo.envs import Environment

TASK = {"task_id": "t", "seed": 7, "low_name": "Teacher", "high_name": "Gambler", "high_first": False}


@pytest.fixture
def env():
    return starpo_bandit.BanditEnv()


def pull(env, action, task=TASK):
    env.reset(options={"task": task})
    return env.step(action)


def test_registered_and_follows_the_protocol():
    assert "bandit" in trl_starpo.list_environments()
    env = trl_starpo.load_environment("bandit", high_probability=0.5)
    assert isinstance(env, Environment)
    assert env.expected_rewards == {"low": 0.1, "high": 0.5}
    assert "1 or 2" in env.system_prompt


def test_observation_lists_the_arms_in_task_order(env):
    obs, info = env.reset(options={"task": TASK})
    assert info == {"task_id": "t", "seed": 7}
    assert "1. Teacher\n2. Gambler" in obs
    obs, _ = env.reset(options={"task": {**TASK, "high_first": True}})
    assert "1. Gambler\n2. Teacher" in obs


def test_arm_order_differs_across_seeds_and_is_reproducible(env):
    orders = {starpo_bandit.make_task(seed)["high_first"] for seed in range(50)}
    assert orders == {True, False}
    pairs = {starpo_bandit.make_task(seed)["low_name"] for seed in range(200)}
    assert len(pairs) > 10
    for seed in range(20):
        assert env.reset(seed=seed) == env.reset(seed=seed)


def test_seed_and_its_task_row_give_the_same_episode(env):
    for seed in range(50):
        obs, _ = env.reset(seed=seed)
        _, reward, *_ = env.step("2")
        task = starpo_bandit.make_task(seed)
        assert pull(env, "2", task)[1] == reward
        assert env.reset(options={"task": task})[0] == obs


def test_high_arm_pays_one_about_a_quarter_of_the_time_and_low_always_pays_a_tenth(env):
    high_rewards, low_rewards = [], []
    for seed in range(2000):
        task = {**TASK, "seed": seed}
        _, reward, _, _, info = pull(env, "gambler", task)
        assert info["arm"] == "high" and info["success"]
        high_rewards.append(reward)
        _, reward, _, _, info = pull(env, "teacher", task)
        assert info["arm"] == "low" and not info["success"]
        low_rewards.append(reward)
    assert set(high_rewards) == {0.0, 1.0}
    assert 0.20 <= sum(high_rewards) / len(high_rewards) <= 0.30
    assert set(low_rewards) == {0.1}


@pytest.mark.parametrize(
    ("action", "arm"),
    [("Gambler", "high"), ("  gAMBLER \n", "high"), ("2", "high"), ("teacher", "low"), (" 1 ", "low")],
)
def test_answer_by_name_or_position_case_insensitively(env, action, arm):
    obs, reward, terminated, truncated, info = pull(env, action)
    assert (terminated, truncated) == (True, False)
    assert info["action_is_valid"] and info["action_is_effective"]
    assert info["arm"] == arm
    assert obs.startswith("You pulled " + ("Gambler" if arm == "high" else "Teacher"))


def test_position_follows_the_presentation_order(env):
    flipped = {**TASK, "high_first": True}
    assert pull(env, "1", flipped)[4]["arm"] == "high"
    assert pull(env, "2", flipped)[4]["arm"] == "low"


@pytest.mark.parametrize("action", ["", "3", "Gambler Teacher", "the gambler", "arm 1", "Engineer"])
def test_invalid_answer(env, action):
    obs, reward, terminated, truncated, info = pull(env, action)
    assert reward == 0.0 and (terminated, truncated) == (True, False)
    assert info == {"action_is_valid": False, "action_is_effective": False, "success": False, "arm": None}
    assert obs.startswith("Invalid answer") and "(Teacher or Gambler) or its number (1 or 2)" in obs


def test_one_turn_always_terminates(env):
    for seed, action in enumerate(["1", "2", "nonsense"]):
        env.reset(seed=seed)
        assert env.step(action)[2] is True
        with pytest.raises(RuntimeError):
            env.step("1")


def test_success_follows_the_expected_values():
    env = starpo_bandit.BanditEnv(low_reward=0.5)
    assert pull(env, "Teacher")[4]["success"]
    assert not pull(env, "Gambler")[4]["success"]


def test_bad_arm_names_are_rejected():
    with pytest.raises(ValueError):
        starpo_bandit.BanditEnv(name_pairs=[("Same", "same")])
    with pytest.raises(ValueError):
        starpo_bandit.BanditEnv(name_pairs=[("Safe", "2")])


def test_shipped_splits_have_the_documented_sizes_and_disjoint_seeds():
    splits = {split: trl_starpo.load_tasks("bandit", split) for split in ("train", "validation", "test")}
    assert {split: len(rows) for split, rows in splits.items()} == {"train": 1000, "validation": 200, "test": 200}
    seeds = [set(rows["seed"]) for rows in splits.values()]
    assert len(set.union(*seeds)) == 1400
    assert splits["train"][17]["task_id"] == "bandit-train-00017"
    assert set(splits["train"].column_names) >= {"task_id", "seed", "low_name", "high_name", "high_first"}


def test_shipped_splits_match_the_generator():
    for split in ("validation", "test"):
        assert trl_starpo.load_tasks("bandit", split).to_list() == starpo_bandit.generate_tasks(split, 200)


def test_regenerating_writes_the_same_files(tmp_path):
    starpo_bandit.main(["--out-dir", str(tmp_path), "--train-size", "30", "--validation-size", "5", "--test-size", "5"])
    shipped = (starpo_bandit.DATA_DIR / "train.jsonl").read_text().splitlines()[:30]
    assert (tmp_path / "train.jsonl").read_text().splitlines() == shipped
    assert len((tmp_path / "test.jsonl").read_text().splitlines()) == 5


def test_random_and_expert_baselines(env):
    env.reset(options={"task": {**TASK, "high_first": True}})
    assert env.admissible_actions() == ["Gambler", "Teacher"]
    assert env.expert_action() == "Gambler"
    assert env.step(env.expert_action())[4]["success"]
    assert env.admissible_actions() == [] and env.expert_action() is None
    cautious = starpo_bandit.BanditEnv(high_probability=0.05)  # the low-risk arm is now better in expectation
    cautious.reset(options={"task": TASK})
    assert cautious.expert_action() == "Teacher"
    assert cautious.step(cautious.expert_action())[4] == {
        "action_is_valid": True, "action_is_effective": True, "success": True, "arm": "low"}


def test_the_example_answer_is_an_arm_of_the_task_drawn_apart_from_the_better_arm(env):
    """A fixed example (`1`) was copied to every task; the example names one of the task's own arms, per task, and
    says nothing about which one is better."""
    tasks = trl_starpo.load_tasks("bandit", "validation")
    better, first = [], []
    for task in tasks:
        env.reset(options={"task": task})
        assert env.example_action in env.admissible_actions()
        better.append(env.example_action == env.expert_action())
        first.append(env.example_action == env.admissible_actions()[0])
        env.reset(options={"task": task})
        assert better[-1] == (env.example_action == env.expert_action())  # the same task, the same example
    assert 0.4 < sum(better) / len(tasks) < 0.6 and 0.4 < sum(first) / len(tasks) < 0.6


def test_an_arm_name_from_a_task_row_is_bounded():
    from starpo_bandit import MAX_NAME_LENGTH, BanditEnv

    env = BanditEnv()
    task = {"seed": 0, "low_name": "x" * 4_000_000, "high_name": "Gambler", "high_first": True}
    with pytest.raises(ValueError, match=f"at most {MAX_NAME_LENGTH} characters, got 'xxxx"):
        env.reset(options={"task": task})
