"""Adapters for environments of other frameworks: gymnasium, OpenEnv (a real local server) and TRL's
environment_factory classes. Training on each runs in tests/test_byo_docs.py, from the docs' examples."""

import asyncio

import gymnasium as gym
import pytest

from trl_starpo.envs import Environment
from trl_starpo.envs.adapters import GymnasiumAdapter, OpenEnvAdapter, TRLEnvironmentAdapter, from_environment_factory
from trl_starpo.evaluation import RandomPolicy, ScriptedPolicy, evaluate

LAKE = ["SFF", "FHF", "FFG"]
INVALID = {"action_is_valid": False, "action_is_effective": False, "success": False}


# ------------------------------------------------------------------------------------------------- gymnasium


def make_lake(**kwargs):
    return GymnasiumAdapter(
        gym.make("FrozenLake-v1", desc=LAKE, is_slippery=False, max_episode_steps=10),
        action_names=["Left", "Down", "Right", "Up"], system_prompt="Cross the lake.", **kwargs)


def test_gymnasium_steps_the_engine_with_parsed_actions():
    env = make_lake()
    assert isinstance(env, Environment) and env.action_description == "Left, Down, Right, Up"
    assert env.reset(options={"task": {"task_id": "t", "seed": 3}}) == ("0", {"prob": 1, "task_id": "t", "seed": 3})
    assert env.step(" right ")[:4] == ("1", 0.0, False, False)
    assert env.step("Left")[4]["action_is_effective"]
    assert not env.step("Up")[4]["action_is_effective"]  # the edge: FrozenLake leaves the player in place
    for action in ("Right", "Right", "Down"):
        observation, reward, terminated, truncated, info = env.step(action)
    assert (observation, reward, terminated, truncated) == ("5", 0.0, False, False)
    observation, reward, terminated, _, info = env.step("down")
    assert (observation, reward, terminated, info["success"], info["action_is_valid"]) == ("8", 1.0, True, True, True)


@pytest.mark.parametrize("text", ["Jump", "", "0", "x" * 2000])
def test_gymnasium_text_it_cannot_read_is_an_invalid_action(text):
    env = make_lake()
    env.reset(seed=0)
    observation, reward, terminated, truncated, info = env.step(text)
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert {key: info[key] for key in INVALID} == INVALID
    assert observation.startswith("Invalid action (") and observation.endswith("Left, Down, Right, Up.\n0")
    assert env.env.unwrapped.s == 0  # not stepped


def test_gymnasium_checks_the_action_space_and_its_own_arguments():
    env = GymnasiumAdapter(gym.make("FrozenLake-v1", desc=LAKE, is_slippery=False), parse_action=int)
    env.reset(seed=0)
    assert env.step("7")[4]["action_is_valid"] is False  # parsed, but outside Discrete(4)
    assert "not in the action space" in env.step("7")[0]
    assert env.step("2")[0] == "1"
    assert env.admissible_actions is None  # a custom parser: no finite set of texts to draw from
    numbers = GymnasiumAdapter(gym.make("FrozenLake-v1", desc=LAKE))
    assert numbers.admissible_actions() == ["0", "1", "2", "3"] and numbers.action_description.startswith("an integer")
    with pytest.raises(ValueError, match="Pass parse_action"):
        GymnasiumAdapter(gym.make("MountainCarContinuous-v0"))
    with pytest.raises(ValueError, match="Discrete action space of 3 actions"):
        GymnasiumAdapter(gym.make("FrozenLake-v1"), action_names=["a", "b", "c"])


def test_gymnasium_prompt_shows_a_real_action_as_the_example(tiny_tokenizer):
    from trl_starpo.rollout.collector import RolloutCollector

    assert make_lake().example_action == "Left"
    assert make_lake(example_action="Down").example_action == "Down"
    assert GymnasiumAdapter(gym.make("FrozenLake-v1", desc=LAKE)).example_action == "0"
    assert GymnasiumAdapter(gym.make("FrozenLake-v1", desc=LAKE), parse_action=int).example_action is None
    collector = RolloutCollector(tiny_tokenizer, max_turns=1, enable_thinking=False)
    trajectory, _, _ = collector._start(make_lake(), {"task_id": "t", "seed": 0}, group=0)
    prompt = tiny_tokenizer.decode(trajectory.token_ids[: trajectory.prompt_length])
    assert "for example <answer>Left</answer>. Valid actions: Left, Down, Right, Up." in prompt


def test_gymnasium_adapter_plays_the_random_baseline_by_name():
    tasks = [{"task_id": f"t{i}", "seed": i} for i in range(6)]
    result = evaluate(RandomPolicy(seed=0), make_lake, tasks)
    assert result.episodes == 6 and result.stats["action_validity"] == 1.0
    assert all(action in ("Left", "Down", "Right", "Up") for t in result.trajectories for turn in t.turns
               for action in turn.actions)


# ------------------------------------------------------------------------------------------------------- TRL


class Counter:
    """A TRL environment_factory class: tools, reset(**row), a `done` flag and get_reward."""

    def reset(self, start: int = 0, target: int = 2, **kwargs) -> str:
        self.value, self.target, self.done, self.calls = start, target, False, 0
        return f" The counter is at {start}."

    def add(self, amount: int, note: str = "") -> str:
        """
        Add to the counter.

        Args:
            amount: How much to add, -2 to 2.
            note: A remark, ignored.
        """
        if abs(amount) > 2:
            raise ValueError("amount must be between -2 and 2")
        self.value += amount
        self.calls += 1
        self.done = self.value == self.target
        return f"The counter is at {self.value}."

    async def peek(self) -> str:
        """
        Look at the counter.
        """
        return str(self.value)

    def get_reward(self) -> float:
        return 1.0 if self.value == self.target else 0.0

    def _helper(self):
        raise AssertionError("private methods are not tools")


def counter(**kwargs):
    env = TRLEnvironmentAdapter(Counter(), **kwargs)
    row = {"prompt": [{"role": "system", "content": "Count."}, {"role": "user", "content": "Reach 2."}], "target": 2}
    return env, env.reset(options={"task": row})


def test_trl_class_tools_reset_and_prompt():
    env, (observation, info) = counter()
    assert set(env.tools) == {"add", "peek"}
    assert observation == "Reach 2. The counter is at 0." and env.system_prompt == "Count."
    assert env.action_description.startswith('one tool call, written name(argument=value, ...) or as JSON {"name": '
                                             '..., "arguments": {...}}: add(amount: integer, note: string) - Add to '
                                             'the counter; peek() -')


@pytest.mark.parametrize("call", ["add(1)", "add(amount=1)", " add( 1, note='hi' ) ", "add(1, note=hi)"])
def test_trl_tool_calls_in_their_written_forms(call):
    env, _ = counter()
    assert env.step(call)[:4] == ("The counter is at 1.", 0.0, False, False)
    assert env.environment.calls == 1


@pytest.mark.parametrize("call", [
    '{"name": "add", "arguments": {"amount": 1}}',
    '<tool_call>\n{"name": "add", "arguments": {"amount": 1, "note": "hi"}}\n</tool_call>',
    '{"name": "add", "arguments": "{\\"amount\\": 1}"}',  # OpenAI's arguments string
])
def test_trl_tool_calls_in_a_chat_templates_json(call):
    env, _ = counter()
    assert env.step(call)[:4] == ("The counter is at 1.", 0.0, False, False)
    assert env.environment.calls == 1
    assert env._completion[0]["tool_calls"][0]["function"] == {"name": "add", "arguments": {
        "amount": 1, **({"note": "hi"} if "note" in call else {})}}


@pytest.mark.parametrize("call, error", [
    ('<tool_call>{"name": "subtract", "arguments": {}}</tool_call>', "no tool named 'subtract'"),
    ('{"name": "add", "arguments": [1]}', "must be a JSON object"),
    ('{"name": "add", "arguments": {"size": 1}}', "missing a required argument"),
    ('{"name": "add", "arguments": {"amount": NaN}}', "NaN is not a JSON number"),
    ('{"name": "add", "arguments": {"amount": 1}', "not a JSON tool call"),
    ('<tool_call>{"name": "add", "arguments": {"amount": 1}}', "write <tool_call>"),
    ('{"name": "add", ' + '"x": 1, ' * 800 + '}', "longer"),
])
def test_trl_malformed_json_calls_are_invalid(call, error):
    env, _ = counter()
    feedback, reward, terminated, truncated, info = env.step(call)
    assert error in feedback and (reward, terminated, info) == (0.0, False, INVALID)


@pytest.mark.parametrize("answer", ['{"answer": 2}', '{"name": "Alice", "age": 3}', '{"name": "subtract"}',
                                    '{"result": "' + "x" * 5000 + '"}'])
def test_trl_json_that_names_no_tool_is_a_final_answer(answer):
    env, _ = counter()
    assert env.step(answer)[2] is True  # terminated: the final answer


@pytest.mark.parametrize("call, error", [
    ("add(", "is not a call"), ("add(1)(2)", "write one call"), ("add(*[1])", "* and **"),
    ("add(amount=__import__('os'))", "arguments must be literals"), ("add(1, 2, 3)", "too many positional"),
    ("add(1, size=1)", "unexpected keyword"), ("add", "missing a required argument"), ("add(" + "1" * 5000 + ")", "longer"),
])
def test_trl_malformed_calls_are_invalid_and_the_episode_goes_on(call, error):
    env, (observation, _) = counter()
    feedback, reward, terminated, truncated, info = env.step(call)
    assert error in feedback and feedback.startswith("Invalid tool call: ")
    assert (reward, terminated, truncated, info) == (0.0, False, False, INVALID)
    assert env.environment.calls == 0


def test_trl_tool_errors_go_back_to_the_model_and_async_tools_run():
    env, _ = counter()
    assert env.step("add(5)")[0] == "{'error': 'amount must be between -2 and 2'}"
    assert env.step("add(5)")[4]["action_is_valid"] is False
    assert env.step("peek()")[0] == "0" and env.step("peek")[0] == "0"


def test_trl_reward_is_telescoped_and_done_ends_the_episode():
    env, _ = counter()
    steps = [env.step(call) for call in ("add(2)", "add(-1)", "add(1)")]
    assert [s[1] for s in steps] == [1.0, -1.0, 1.0] and sum(s[1] for s in steps) == env.environment.get_reward()
    assert [s[2] for s in steps] == [True, False, True]  # `done`
    assert steps[-1][4]["success"] and not steps[1][4]["success"]


def test_trl_final_answer_ends_the_episode_and_reward_functions_see_it():
    seen = {}

    def answer_reward(prompts, completions, environments, target, **kwargs):
        seen.update(prompts=prompts, completions=completions, target=target, environments=environments)
        return [0.5 if completions[0][-1]["content"] == "two" else None]

    env, _ = counter(reward_funcs=[answer_reward], reward_weights=[2.0], success_threshold=2.0)
    assert env.step("add(1)")[1] == 0.0
    observation, reward, terminated, _, info = env.step("two")
    assert (reward, terminated, info["success"]) == (1.0, True, False)  # 2.0 * 0.5; get_reward still 0
    assert seen["target"] == [2] and seen["environments"] == [env.environment]
    assert seen["prompts"][0][-1] == {"role": "user", "content": "Reach 2. The counter is at 0."}
    assert seen["completions"][0] == [
        {"role": "assistant", "content": "",
         "tool_calls": [{"type": "function", "function": {"name": "add", "arguments": {"amount": 1}}}]},
        {"role": "tool", "name": "add", "content": "The counter is at 1."},
        {"role": "assistant", "content": "two"},
    ]


def test_trl_classes_without_reset_or_reward_are_refused():
    class NoReward:
        def reset(self, **kwargs):
            return None

    with pytest.raises(ValueError, match="No reward source"):
        TRLEnvironmentAdapter(NoReward())
    with pytest.raises(ValueError, match="no reset method"):
        TRLEnvironmentAdapter(object(), reward_funcs=lambda **kwargs: [0.0])
    factory = from_environment_factory(Counter)
    assert factory.__name__ == "Counter" and factory() is not factory()


def test_trl_adapter_plays_in_the_evaluation_loop_with_async_reward():
    async def reward(environments, **kwargs):
        await asyncio.sleep(0)
        return [float(environments[0].value)]

    tasks = [{"task_id": "a", "target": 2, "prompt": "Reach 2."}]

    class Scripted(ScriptedPolicy):
        required_method = "step"

        def choose(self, environment, rng):
            return "add(2)" if environment.environment.value < 2 else "done"

    result = evaluate(Scripted(), from_environment_factory(Counter, reward_funcs=reward), tasks)
    (trajectory,) = result.trajectories
    assert trajectory.success and trajectory.episode_return == pytest.approx(1.0 + 2.0)


# --------------------------------------------------------------------------------------------------- OpenEnv


def test_openenv_adapter_needs_one_way_to_build_actions():
    with pytest.raises(ValueError, match="exactly one of action_field"):
        OpenEnvAdapter("http://127.0.0.1:9", action_field="a", action_from_text=str)


@pytest.mark.slow
def test_openenv_session_against_a_real_server(openenv_server):
    env = OpenEnvAdapter(openenv_server, action_field="command", observation_field="text", action_description="inc or dec")
    try:
        assert env.reset(options={"task": {"task_id": "t", "seed": 1, "target": 2}}) == (
            "The counter is at 0. Reach 2.", {"task_id": "t", "seed": 1})
        assert env.step("inc") == ("The counter is at 1.", 0.0, False, False,
                                   {"action_is_valid": True, "action_is_effective": True, "success": False})
        observation, reward, terminated, truncated, info = env.step("jump")  # not a command the action model takes
        assert (reward, terminated, info) == (0.0, False, INVALID)
        assert "VALIDATION_ERROR" in observation and observation.endswith("inc or dec\nThe counter is at 1.")
        assert env.step("x" * 5000)[4] == INVALID
        assert env.step("inc")[1:] == (1.0, True, False, {"action_is_valid": True, "action_is_effective": True,
                                                          "success": True})
        assert env.reset(options={"task": {"target": -1}})[0] == "The counter is at 0. Reach -1."
        assert env.step("dec")[2] is True
    finally:
        env.close()
    json_env = OpenEnvAdapter(openenv_server, action_from_text=lambda text: {"command": text.strip().lower()})
    try:
        assert json_env.reset(seed=0)[0] == '{"text": "The counter is at 0. Reach 2."}'
        assert json_env.step(" INC ")[0] == '{"text": "The counter is at 1."}'
    finally:
        json_env.close()


def test_a_chat_template_that_shows_tools_shows_the_trl_classes_tools(tiny_tokenizer):
    import copy

    from conftest import CHATML_TEMPLATE, ScriptedGenerator

    from trl_starpo.rollout.collector import RolloutCollector

    shows_tools = copy.deepcopy(tiny_tokenizer)
    shows_tools.chat_template = ("{% if tools %}<|im_start|>system\nTools: {% for tool in tools %}"
                                 "{{ tool.function.name }}({{ tool.function.parameters.properties | list | join(', ') }})"
                                 " {% endfor %}<|im_end|>\n{% endif %}" + CHATML_TEMPLATE)
    row = {"prompt": [{"role": "user", "content": "Reach 2."}], "target": 2, "task_id": "t"}
    prompts = []
    for tokenizer in (tiny_tokenizer, shows_tools):
        collector = RolloutCollector(tokenizer, max_turns=1, max_actions_per_turn=1, enable_thinking=False)
        generator = ScriptedGenerator(tokenizer, {0: ['{"name": "add", "arguments": {"amount": 2}}</answer>']})
        (trajectory,) = collector.collect([TRLEnvironmentAdapter(Counter())], [row], generator)
        assert trajectory.success  # the JSON call was made
        prompts.append(tokenizer.decode(trajectory.token_ids[: trajectory.prompt_length]))
    assert "Tools:" not in prompts[0]
    assert "Tools: add(amount, note) peek() " in prompts[1]


def test_each_episode_is_prompted_with_its_own_rows_system_message(tiny_tokenizer):
    from conftest import ScriptedGenerator

    from trl_starpo.rollout.collector import RolloutCollector

    rows = [{"task_id": f"t{i}", "target": 2, "prompt": [{"role": "system", "content": f"System of row {i}."},
                                                          {"role": "user", "content": "Reach 2."}]} for i in (1, 2)]
    environment = TRLEnvironmentAdapter(Counter(), system_prompt="DEFAULT")  # one instance plays both, one by one
    collector = RolloutCollector(tiny_tokenizer, max_turns=1, max_actions_per_turn=1, enable_thinking=False)
    for row in rows:
        generator = ScriptedGenerator(tiny_tokenizer, {0: ["add(2)</answer>"]})
        (trajectory,) = collector.collect([environment], [row], generator)
        prompt = tiny_tokenizer.decode(trajectory.token_ids[: trajectory.prompt_length])
        assert row["prompt"][0]["content"] in prompt and "DEFAULT" not in prompt
