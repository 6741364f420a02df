"""The Countdown environment package (environments/countdown): answer parser, rewards and shipped puzzles."""

from collections import Counter
from fractions import Fraction

import pytest
import starpo_countdown
from starpo_countdown import ExpressionError, evaluate_answer, evaluate_expression

import trl_starpo
from trl_starpo.envs import Environment

TASK = {"task_id": "t", "seed": 0, "numbers": [44, 19, 35], "target": 28, "solution": "(44 + 19) - 35"}


@pytest.fixture
def env():
    return starpo_countdown.CountdownEnv()


def answer(env, action, task=TASK):
    env.reset(options={"task": task})
    return env.step(action)


@pytest.mark.parametrize(
    ("expression", "value", "numbers"),
    [
        ("2+3*4", 14, [2, 3, 4]),
        ("(2+3)*4", 20, [2, 3, 4]),
        ("2*3+4", 10, [2, 3, 4]),
        ("10-4-3", 3, [10, 4, 3]),
        ("24/4/2", 3, [24, 4, 2]),
        ("8/(3-1)", 4, [8, 3, 1]),
        ("7/2", Fraction(7, 2), [7, 2]),
        ("1/3 + 1/6", Fraction(1, 2), [1, 3, 1, 6]),
        ("-(3 - 5) * 2", 4, [3, 5, 2]),
        ("  ( ( 44 + 19 ) - 35 )\n", 28, [44, 19, 35]),
        ("100", 100, [100]),
    ],
)
def test_parser_evaluates_exactly(expression, value, numbers):
    assert evaluate_expression(expression) == (value, numbers)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "__import__('os')",
        "__import__('os').system('true')",
        "2**10",
        "1e9",
        "1.5 + 2",
        "(" * 30 + "1" + ")" * 30,
        "-" * 50 + "1",
        "1+" * 5000 + "1",
        "9" * 10_000,
        "١٢ + ٣",
        "²+3",
        "3 × 4",
        "\x00\ufffd\U0001f600",
        "1;2",
        "1 2",
        "(1 + 2",
        "1 + 2)",
        "()",
        "3 +",
        "* 3",
        "5 / (2 - 2)",
        "1/0",
        "x = 1",
        "1 == 1",
        "abs(-3)",
        "[1, 2]",
    ],
)
def test_parser_rejects_hostile_or_malformed_text(text):
    with pytest.raises(ExpressionError):
        evaluate_answer(text)


def test_length_and_nesting_limits():
    assert evaluate_expression("(" * 20 + "1" + ")" * 20) == (1, [1])
    with pytest.raises(ExpressionError, match="nested"):
        evaluate_expression("(" * 21 + "1" + ")" * 21)
    long_sum = "+".join(["1"] * 100)
    assert len(long_sum) == 199
    assert evaluate_expression(long_sum) == (100, [1] * 100)
    with pytest.raises(ExpressionError, match="longer"):
        evaluate_expression(long_sum + "+1")


def test_answer_may_state_its_result():
    assert evaluate_answer(" (44 + 19) - 35 = 28 ") == (28, [44, 19, 35])
    assert evaluate_answer("(44 + 19) - 35 = 99")[0] == 28
    with pytest.raises(ExpressionError):
        evaluate_answer("28 = (44 + 19) - 35")
    with pytest.raises(ExpressionError):
        evaluate_answer("1 = 2 = 3")


def test_registered_and_follows_the_protocol(env):
    assert "countdown" in trl_starpo.list_environments()
    assert isinstance(trl_starpo.load_environment("countdown"), Environment)
    obs, info = env.reset(options={"task": TASK})
    assert obs == "Numbers: [44, 19, 35]\nTarget: 28\nUse each number exactly once with + - * / and parentheses."
    assert info == {"task_id": "t", "seed": 0}


@pytest.mark.parametrize(
    ("action", "reward"),
    [
        ("(44 + 19) - 35", 1.0),
        ("44 - (35 - 19)", 1.0),
        ("19 + 44 - 35 = 28", 1.0),
        ("44 + 19 + 35", 0.1),
        ("44 * 19 / 35", 0.1),
        ("44 - 19 - 35 = 28", 0.1),
        ("44 - 16", 0.0),
        ("44 - 35 + 19", 1.0),
        ("44 + 44 - 35 - 19 - 6", 0.0),
        ("(44 + 19) - 35 + 0", 0.0),
        ("63 - 35", 0.0),
        ("44 + 19 - 35 + 19 - 19", 0.0),
        ("44 + 19 + 19 + 35", 0.0),
    ],
)
def test_rewards(env, action, reward):
    _, got, terminated, truncated, info = answer(env, action)
    assert got == reward
    assert (terminated, truncated) == (True, False)
    assert info == {"action_is_valid": True, "action_is_effective": True, "success": reward == 1.0}


def test_repeated_numbers_count_as_a_multiset(env):
    task = {**TASK, "numbers": [3, 3, 8], "target": 17}
    assert answer(env, "3 + 3 * 8 - 10", task)[1] == 0.0
    assert answer(env, "8 * 3 - 3", task)[1] == 0.1
    assert answer(env, "(8 - 3) * 3 + 2", task)[1] == 0.0
    assert answer(env, "8 * 3 - 3 * 3", task)[1] == 0.0
    assert answer(env, "8 + 3 * 3", task)[1] == 1.0


def test_feedback_explains_the_reward(env):
    assert answer(env, "44 - 35 + 19")[0] == "Correct: your expression equals the target 28."
    assert answer(env, "44 + 19 + 35")[0] == "Your expression equals 98, not the target 28."
    assert answer(env, "44 * 19 / 35")[0] == "Your expression equals 836/35, not the target 28."
    assert "each of [44, 19, 35] exactly once" in answer(env, "44 - 16")[0]


@pytest.mark.parametrize("action", ["", "forty-four", "2**10", "44 + 19 - 35;", "(44 + 19 - 35", "44/(19-19)*35"])
def test_invalid_answer(env, action):
    obs, reward, terminated, truncated, info = answer(env, action)
    assert reward == 0.0 and (terminated, truncated) == (True, False)
    assert info == {"action_is_valid": False, "action_is_effective": False, "success": False}
    assert obs.startswith("Invalid answer: ") and "uses each of [44, 19, 35] exactly once" in obs


def test_one_turn_always_terminates(env):
    env.reset(seed=3)
    assert env.step("1 + 1")[2] is True
    with pytest.raises(RuntimeError):
        env.step("1 + 1")


def test_generation_is_reproducible_and_respects_its_parameters(env):
    assert env.reset(seed=5) == env.reset(seed=5)
    assert env.reset(seed=5)[0] == env.reset(options={"task": starpo_countdown.make_task(5)})[0]
    params = {"min_numbers": 2, "max_numbers": 5, "max_number": 9, "max_target": 50}
    tasks = [starpo_countdown.make_task(seed, **params) for seed in range(300)]
    assert {len(task["numbers"]) for task in tasks} == {2, 3, 4, 5}
    for task in tasks:
        _assert_solved(task, min_numbers=2, max_numbers=5, max_number=9, max_target=50)


def _assert_solved(row, *, min_numbers=3, max_numbers=4, max_number=100, max_target=1000):
    value, used = evaluate_expression(row["solution"])
    assert value == row["target"], row
    assert Counter(used) == Counter(row["numbers"]), row
    assert min_numbers <= len(row["numbers"]) <= max_numbers, row
    assert all(1 <= n <= max_number for n in row["numbers"]) and 1 <= row["target"] <= max_target, row


def test_shipped_puzzles_are_solved_by_their_solutions():
    splits = {split: trl_starpo.load_tasks("countdown", split) for split in ("train", "validation", "test")}
    assert {split: len(rows) for split, rows in splits.items()} == {"train": 1000, "validation": 200, "test": 200}
    for row in [*splits["validation"], *splits["test"], *splits["train"].select(range(0, 1000, 5))]:
        _assert_solved(row)
    seeds = [set(rows["seed"]) for rows in splits.values()]
    assert len(seeds[0] | seeds[1] | seeds[2]) == 1400
    assert splits["test"][3]["task_id"] == "countdown-test-00003"


def test_shipped_solutions_earn_full_reward(env):
    for row in trl_starpo.load_tasks("countdown", "validation").select(range(50)):
        assert answer(env, row["solution"], row)[1] == 1.0


def test_shipped_splits_match_the_generator(tmp_path):
    assert trl_starpo.load_tasks("countdown", "test").to_list() == starpo_countdown.generate_tasks("test", 200)
    starpo_countdown.main(["--out-dir", str(tmp_path), "--train-size", "20", "--validation-size", "0", "--test-size", "0"])
    shipped = (starpo_countdown.DATA_DIR / "train.jsonl").read_text().splitlines()[:20]
    assert (tmp_path / "train.jsonl").read_text().splitlines() == shipped


def test_all_expressions_lists_every_answer_that_uses_each_number_once():
    from starpo_countdown import all_expressions

    assert all_expressions([2, 3]) == ["2 + 3", "2 - 3", "2 * 3", "2 / 3", "3 + 2", "3 - 2", "3 * 2", "3 / 2"]
    assert len(all_expressions([44, 19, 35])) == 3 * 2 * 2 * 4**2  # orders x tree shapes x operators
    answers = all_expressions([1, 2, 3, 4])
    assert len(answers) == len(set(answers)) == 7680 - 24  # the divisions by zero, e.g. 4 / (3 - (1 + 2)), are left out
    for expression in answers[::97]:
        assert sorted(evaluate_answer(expression)[1]) == [1, 2, 3, 4]
    with pytest.raises(ValueError, match="at most 4 numbers"):
        all_expressions([1, 2, 3, 4, 5])


def test_solver_and_baselines(env):
    from starpo_countdown import solve

    assert solve([1, 1], 5) is None
    assert evaluate_answer(solve([3, 3, 8, 8], 24))[0] == 24  # 8 / (3 - 8 / 3): needs a fraction on the way
    for task in trl_starpo.load_tasks("countdown", "validation"):
        env.reset(options={"task": task})
        assert env.step(env.expert_action())[1] == 1.0, task["task_id"]
    env.reset(options={"task": TASK})
    answers = env.admissible_actions()
    assert "(44 + 19) - 35" in answers and len(answers) == 192
    rewards = Counter(answer(env, action)[1] for action in answers)
    assert set(rewards) == {0.1, 1.0} and rewards[1.0] == 8  # 44 + 19 - 35 in its orders and groupings
    assert env.admissible_actions() == [] and env.expert_action() is None
