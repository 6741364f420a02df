import pytest
from conftest import CounterEnv, ScriptedGenerator

from trl_starpo.rollout.collector import RolloutCollector
from trl_starpo.rollout.parsing import format_instructions
from trl_starpo.trajectory import Segment, dataset_to_trajectories, trajectories_to_dataset

GOOD_1 = "<think>up</think><answer>inc</answer>"
GOOD_2 = "<think>again</think><answer>inc</answer>"


def collect(tokenizer, responses, tasks=None, eos=True, **settings):
    defaults = {"max_turns": 5, "max_actions_per_turn": 2, "prefill_opening_tag": False}
    collector = RolloutCollector(tokenizer, **{**defaults, **settings})
    tasks = tasks or [{"task_id": "t0", "seed": 0, "start": 0, "target": 2}] * len(responses)
    generator = ScriptedGenerator(tokenizer, responses, eos=eos)
    trajectories = collector.collect([CounterEnv() for _ in tasks], tasks, generator)
    return trajectories, generator


def ids(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_two_turn_trajectory_segments_token_by_token(tiny_tokenizer):
    tok = tiny_tokenizer
    (trajectory,), _ = collect(tok, {0: [GOOD_1, GOOD_2]})
    system = CounterEnv.system_prompt + "\n" + format_instructions(
        CounterEnv.action_description, enable_thinking=True, max_actions=2, separator="||"
    )
    prompt = tok.apply_chat_template(
        [{"role": "system", "content": system}, {"role": "user", "content": "The counter is at 0."}],
        tokenize=False,
        add_generation_prompt=True,
    )
    P, O, T, TH, A = (int(s) for s in Segment)
    eos = tok.eos_token_id
    expected = [
        (ids(tok, prompt), [P] * len(ids(tok, prompt))),
        (ids(tok, "<think>up</think>"), [TH] * len(ids(tok, "<think>up</think>"))),
        (ids(tok, "<answer>inc</answer>") + [eos], [A] * (len(ids(tok, "<answer>inc</answer>")) + 1)),
        (ids(tok, "\n<|im_start|>user\n"), [T] * len(ids(tok, "\n<|im_start|>user\n"))),
        (ids(tok, "The counter is at 1."), [O] * len(ids(tok, "The counter is at 1."))),
        (ids(tok, "<|im_end|>\n<|im_start|>assistant\n"), [T] * len(ids(tok, "<|im_end|>\n<|im_start|>assistant\n"))),
        (ids(tok, "<think>again</think>"), [TH] * len(ids(tok, "<think>again</think>"))),
        (ids(tok, "<answer>inc</answer>") + [eos], [A] * (len(ids(tok, "<answer>inc</answer>")) + 1)),
    ]
    assert trajectory.token_ids == [t for chunk, _ in expected for t in chunk]
    assert trajectory.segments == [s for _, labels in expected for s in labels]
    assert trajectory.prompt_length == len(ids(tok, prompt))
    assert trajectory.success and trajectory.terminated and trajectory.truncation is None
    assert [turn.reward for turn in trajectory.turns] == [0.0, 1.0]
    assert trajectory.turns[1].observation == "The counter is at 1."
    assert [trajectory.token_ids[t.response_start : t.response_end] for t in trajectory.turns] == [
        expected[1][0] + expected[2][0],
        expected[6][0] + expected[7][0],
    ]


def test_incremental_tokens_match_the_chat_template(tiny_tokenizer):
    tok = tiny_tokenizer
    (trajectory,), _ = collect(tok, {0: [GOOD_1, GOOD_2]})
    system = tok.decode(trajectory.token_ids).split("<|im_start|>system\n")[1].split("<|im_end|>")[0]
    rendered = tok.apply_chat_template(
        [
            {"role": "system", "content": system},
            {"role": "user", "content": "The counter is at 0."},
            {"role": "assistant", "content": GOOD_1},
            {"role": "user", "content": "The counter is at 1."},
            {"role": "assistant", "content": GOOD_2},
        ],
        tokenize=False,
    )
    assert tok.decode(trajectory.token_ids) == rendered.rstrip("\n")


def test_response_cut_by_the_token_budget_is_closed_by_template_glue(tiny_tokenizer):
    tok = tiny_tokenizer
    (trajectory,), _ = collect(tok, {0: [GOOD_1, GOOD_2]}, eos=False)
    glue = ids(tok, "<|im_end|>\n<|im_start|>user\n")
    start = trajectory.turns[0].response_end
    assert trajectory.token_ids[start : start + len(glue)] == glue
    assert set(trajectory.segments[start : start + len(glue)]) == {int(Segment.TEMPLATE)}
    assert tok.eos_token_id not in trajectory.token_ids[trajectory.turns[0].response_start : start]


def test_malformed_output_gets_the_format_penalty_and_the_episode_goes_on(tiny_tokenizer):
    (trajectory,), _ = collect(tiny_tokenizer, {0: ["no tags at all", GOOD_1, GOOD_2]}, format_penalty=-0.25)
    first, second, third = trajectory.turns
    assert not first.format_ok and first.format_error == "no <answer> tag"
    assert first.reward == -0.25 and first.actions == []
    assert second.observation.startswith("Invalid response (no <answer> tag).")
    assert second.observation.endswith("The counter is at 0.")  # the state did not move
    assert third.reward == 1.0 and trajectory.success
    assert trajectory.episode_return == pytest.approx(0.75)


def test_invalid_actions_are_dropped_and_counted(tiny_tokenizer):
    (trajectory,), _ = collect(tiny_tokenizer, {0: ["<think>x</think><answer>jump || inc</answer>", GOOD_2]})
    turn = trajectory.turns[0]
    assert turn.actions == ["jump", "inc"]
    assert turn.num_valid_actions == 1 and turn.num_effective_actions == 1
    assert trajectory.turns[1].observation == "The counter is at 1."


def test_a_turn_with_an_invalid_action_costs_the_format_penalty_once(tiny_tokenizer):
    responses = ["<think>x</think><answer>jump || hop</answer>", "<think>x</think><answer>jump || inc</answer>", GOOD_2]
    (trajectory,), _ = collect(tiny_tokenizer, {0: list(responses)}, format_penalty=-0.25)
    assert [turn.num_valid_actions for turn in trajectory.turns] == [0, 1, 1]
    assert [turn.reward for turn in trajectory.turns] == [-0.25, -0.25, 1.0] and trajectory.success
    (trajectory,), _ = collect(tiny_tokenizer, {0: list(responses)}, format_penalty=-0.25, invalid_action_penalty=0.0)
    assert [turn.reward for turn in trajectory.turns] == [0.0, 0.0, 1.0]


@pytest.mark.parametrize("response", ["your action</answer>", "1</answer>", "2</answer>", "no answer at all"])
def test_on_bandit_a_well_formed_invalid_answer_is_no_safer_than_a_malformed_one(tiny_tokenizer, response):
    """The collapse seen with SmolLM2: answer-only, every response the old placeholder `<answer>your action</answer>`.
    It now earns the format penalty, like a malformed turn, and less than either arm ever pays."""
    import trl_starpo

    tasks = [dict(row) for row in trl_starpo.load_tasks("bandit", "validation").select(range(4))]
    collector = RolloutCollector(tiny_tokenizer, enable_thinking=False, max_turns=1, max_actions_per_turn=1)
    generator = ScriptedGenerator(tiny_tokenizer, {i: [response] for i in range(4)})
    environments = [trl_starpo.load_environment("bandit") for _ in tasks]
    trajectories = collector.collect(environments, tasks, generator)
    returns = [t.episode_return for t in trajectories]
    if response.startswith(("1", "2")):
        assert min(returns) >= 0.0 and all(t.turns[0].num_valid_actions == 1 for t in trajectories)
    else:
        assert returns == [-0.1] * 4


def test_extra_actions_beyond_the_turn_limit_are_dropped(tiny_tokenizer):
    (trajectory,), _ = collect(
        tiny_tokenizer, {0: ["<think>x</think><answer>dec || dec || dec</answer>", GOOD_1]}, max_turns=2
    )
    turn = trajectory.turns[0]
    assert turn.actions == ["dec", "dec"] and turn.num_dropped_actions == 1
    assert trajectory.truncation == "max_turns" and not trajectory.success


def test_environment_exception_fails_only_its_trajectory(tiny_tokenizer):
    responses = {0: ["<think>x</think><answer>boom</answer>"], 1: [GOOD_1, GOOD_2]}
    (broken, healthy), generator = collect(tiny_tokenizer, responses)
    assert broken.truncation == "env_error" and "environment exploded" in broken.env_error
    assert not broken.success and len(broken.turns) == 1 and broken.turns[0].reward == 0.0  # no invalid-action penalty
    assert healthy.success
    assert [sorted(call) for call in generator.calls] == [[0, 1], [1]]  # finished episodes leave the batch


def test_reset_failure_is_an_env_error_not_a_crash(tiny_tokenizer):
    class BrokenReset(CounterEnv):
        def reset(self, *, seed=None, options=None):
            raise ValueError("no such level")

    collector = RolloutCollector(tiny_tokenizer, prefill_opening_tag=False)
    generator = ScriptedGenerator(tiny_tokenizer, {1: [GOOD_1, GOOD_2]})
    task = {"task_id": "t", "seed": 0, "start": 0, "target": 2}
    broken, healthy = collector.collect([BrokenReset(), CounterEnv()], [task, task], generator)
    assert broken.truncation == "env_error" and "no such level" in broken.env_error
    assert broken.turns == [] and broken.completion_ids == []
    assert healthy.success


def test_max_turns_truncates(tiny_tokenizer):
    (trajectory,), _ = collect(tiny_tokenizer, {0: ["<think>x</think><answer>dec</answer>"] * 3}, max_turns=3)
    assert len(trajectory.turns) == 3 and trajectory.truncation == "max_turns"
    assert trajectory.segments[-1] == int(Segment.ACTION)  # no dangling observation after the last turn


def test_action_budget_truncates(tiny_tokenizer):
    (trajectory,), _ = collect(
        tiny_tokenizer,
        {0: ["<think>x</think><answer>dec || dec</answer>", "<think>x</think><answer>dec || dec</answer>"]},
        max_actions_per_trajectory=3,
    )
    assert sum(len(t.actions) for t in trajectory.turns) == 3
    assert trajectory.truncation == "action_budget"


def test_context_budget_truncates_gracefully(tiny_tokenizer):
    collector = RolloutCollector(tiny_tokenizer, max_actions_per_turn=2, prefill_opening_tag=False)
    task = {"task_id": "t", "seed": 0, "start": 0, "target": 5}
    prompt_length = len(collector._start(CounterEnv(), task, 0)[0].token_ids)
    limit = prompt_length + 30
    (trajectory,), _ = collect(
        tiny_tokenizer, {0: [GOOD_1] * 5}, tasks=[task], max_context_length=limit, max_tokens_per_turn=8
    )
    assert trajectory.truncation == "context"
    assert len(trajectory.token_ids) <= limit
    assert not trajectory.success


def test_trajectories_round_trip_through_a_dataset(tiny_tokenizer):
    trajectories, _ = collect(tiny_tokenizer, {0: ["bad", GOOD_1, GOOD_2], 1: ["<think>x</think><answer>boom</answer>"]})
    restored = dataset_to_trajectories(trajectories_to_dataset(trajectories))
    assert restored == trajectories


def test_prefilled_opening_tag_is_template_and_part_of_the_parsed_text(tiny_tokenizer):
    tok = tiny_tokenizer
    (trajectory,), generator = collect(tok, {0: ["up</think><answer>inc</answer>"] * 2}, prefill_opening_tag=True)
    think = ids(tok, "<think>")
    prompt_end = trajectory.prompt_length
    assert trajectory.token_ids[prompt_end : prompt_end + len(think)] == think
    assert trajectory.segments[prompt_end : prompt_end + len(think)] == [int(Segment.TEMPLATE)] * len(think)
    assert all(context[-len(think) :] == think for call in generator.calls for context in call.values())
    first = trajectory.turns[0]
    assert first.format_ok and first.thinking == "up" and first.response == "<think>up</think><answer>inc</answer>"
    response = trajectory.segments[first.response_start : first.response_end]
    n_thinking = len(ids(tok, "up</think>"))
    assert response == [int(Segment.THINKING)] * n_thinking + [int(Segment.ACTION)] * (len(response) - n_thinking)
    assert trajectory.success


def test_text_after_the_answer_is_cut_off(tiny_tokenizer):
    tok = tiny_tokenizer
    rambling = "<think>up</think><answer>inc</answer> and then I also say more things"
    (trajectory,), _ = collect(tok, {0: [rambling, GOOD_2]})
    first = trajectory.turns[0]
    assert first.format_ok and first.response == GOOD_1
    assert trajectory.token_ids[first.response_start : first.response_end] == ids(tok, GOOD_1)
    assert trajectory.success  # the cut response still acted


def test_malformed_turns_in_a_row_show_one_hint_not_a_pile(tiny_tokenizer):
    tok = tiny_tokenizer
    (trajectory,), _ = collect(tok, {0: ["no tags", "<think>x</think>", "still nothing", GOOD_1]}, max_turns=4)
    hint = "Invalid response (no <answer> tag). " + RolloutCollector(tok)._format_hint() + "\n"
    assert [turn.observation for turn in trajectory.turns] == ["The counter is at 0."] + [
        hint + "The counter is at 0."
    ] * 3
    observed = tok.decode([i for i, s in zip(trajectory.token_ids, trajectory.segments) if s == Segment.OBSERVATION])
    assert observed.count("Invalid response") == 3  # one per malformed turn, never restated
    assert [turn.format_ok for turn in trajectory.turns] == [False, False, False, True]
