"""The ``window`` context policy in the collector: what each turn is given, token by token."""

import pytest
from conftest import CounterEnv, ScriptedGenerator

from trl_starpo.rollout.collector import RolloutCollector
from trl_starpo.rollout.context import EARLIER_TURNS_NOTE
from trl_starpo.rollout.metrics import STAT_NAMES, trajectory_stats
from trl_starpo.rollout.settings import RolloutSettings

THOUGHTS = ["first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth"]
RESPONSES = [f"{word} step</think><answer>inc</answer>" for word in THOUGHTS]  # after the prefilled <think>


def play(tokenizer, turns=4, target=99, **settings):
    defaults = {"max_turns": turns, "max_actions_per_turn": 1, "context_policy": "window"}
    collector = RolloutCollector(tokenizer, **{**defaults, **settings})
    generator = ScriptedGenerator(tokenizer, {0: RESPONSES[:turns]})
    task = {"task_id": "t0", "start": 0, "target": target}
    (trajectory,) = collector.collect([CounterEnv()], [task], generator)
    return trajectory, [call[0] for call in generator.calls], collector


def test_a_window_holding_every_turn_gives_the_full_contexts(tiny_tokenizer):
    full, full_calls, _ = play(tiny_tokenizer, context_policy="full")
    windowed, calls, _ = play(tiny_tokenizer, history_turns=4, history_thinking=True)
    assert calls == full_calls  # the model was given exactly what `full` gives it
    assert windowed.token_ids == full.token_ids and windowed.segments == full.segments
    assert [turn.context_ids for turn in windowed.turns] == [full.token_ids[: t.response_start] for t in full.turns]
    assert all(turn.context_ids is None for turn in full.turns)


def test_each_turn_records_exactly_the_tokens_it_was_given(tiny_tokenizer):
    trajectory, calls, collector = play(tiny_tokenizer, turns=5, history_turns=2)
    assert [turn.context_ids for turn in trajectory.turns] == calls
    # the sampled tokens stay in the trajectory, each turn's right after the context it came from
    for turn, context in zip(trajectory.turns, calls):
        assert context[-len(collector.response_prefix_ids):] == collector.response_prefix_ids
        assert turn.response_end > turn.response_start


def test_a_window_shows_the_task_then_only_the_last_turns_answers(tiny_tokenizer):
    trajectory, calls, _ = play(tiny_tokenizer, turns=5, history_turns=2)
    fifth = tiny_tokenizer.decode(calls[4])
    assert "The counter is at 0." in fifth  # the task
    assert EARLIER_TURNS_NOTE.format(count=2) in fifth
    assert "The counter is at 3." in fifth and "The counter is at 4." in fifth  # the last two observations
    assert "The counter is at 1." not in fifth and "The counter is at 2." not in fifth
    assert fifth.count("<answer>inc</answer>") == 2
    assert "step</think>" not in fifth  # earlier thinking is dropped by default
    second = tiny_tokenizer.decode(calls[1])
    assert EARLIER_TURNS_NOTE.format(count=2) not in second  # nothing dropped yet
    kept = tiny_tokenizer.decode(play(tiny_tokenizer, turns=5, history_turns=2, history_thinking=True)[1][4])
    assert "second step</think>" not in kept and "third step</think>" in kept and "fourth step</think>" in kept


def test_window_contexts_stay_bounded_where_full_runs_out_of_room(tiny_tokenizer):
    limits = {"turns": 8, "max_actions_per_trajectory": 20, "max_context_length": 300, "max_tokens_per_turn": 24}
    full, _, _ = play(tiny_tokenizer, context_policy="full", **limits)
    windowed, calls, _ = play(tiny_tokenizer, history_turns=1, **limits)
    assert full.truncation == "context" and len(full.turns) < 8
    assert windowed.truncation == "max_turns" and len(windowed.turns) == 8
    stats = [dict(zip(STAT_NAMES, trajectory_stats(t))) for t in (full, windowed)]
    assert [(s["truncated"], s["context_truncated"]) for s in stats] == [(1.0, 1.0), (1.0, 0.0)]
    assert max(map(len, calls)) < 300 - 24
    assert max(map(len, calls[2:])) - min(map(len, calls[2:])) <= 2  # flat once the window is full


@pytest.mark.parametrize("policy", ["full", "window"])
def test_no_turn_is_played_with_less_than_its_token_budget(tiny_tokenizer, policy):
    # the third turn's context leaves it one token short of max_tokens_per_turn: the episode ends before it, rather
    # than play a turn cut short by the context and penalize it as malformed
    budget, window = 24, {"history_turns": 4, "history_thinking": True} if policy == "window" else {}
    _, calls, _ = play(tiny_tokenizer, turns=4, context_policy=policy, max_tokens_per_turn=budget, **window)
    limit = len(calls[2]) + budget - 1
    trajectory, played, _ = play(tiny_tokenizer, turns=4, context_policy=policy, max_tokens_per_turn=budget,
                                 max_context_length=limit, **window)
    assert played == calls[:2] and trajectory.truncation == "context"
    assert all(turn.format_error is None for turn in trajectory.turns)
    assert len(trajectory.token_ids) == trajectory.turns[-1].response_end  # no observation that no turn answers
    longer, _, _ = play(tiny_tokenizer, turns=4, context_policy=policy, max_tokens_per_turn=budget,
                        max_context_length=limit + 1, **window)
    assert len(longer.turns) == 3


def test_a_turn_whose_thinking_never_closed_shows_nothing_of_it_later(tiny_tokenizer):
    collector = RolloutCollector(tiny_tokenizer, max_turns=3, max_actions_per_turn=1, context_policy="window",
                                 history_turns=2)
    responses = ["an unfinished thought about the counter", *RESPONSES[1:3]]
    generator = ScriptedGenerator(tiny_tokenizer, {0: responses})
    (trajectory,) = collector.collect([CounterEnv()], [{"task_id": "t0", "start": 0, "target": 99}], generator)
    assert trajectory.turns[0].format_error is not None and len(trajectory.turns) == 3
    later = [tiny_tokenizer.decode(call[0]) for call in generator.calls[1:]]
    assert all("unfinished thought" not in context for context in later)
    assert "<answer>inc</answer>" in later[1]  # the second turn's answer is shown as usual


@pytest.mark.parametrize("bad", [{"context_policy": "sliding"}, {"history_turns": 0}])
def test_settings_refuse_a_window_that_cannot_work(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        RolloutSettings(**bad)


def test_the_store_and_the_page_keep_what_each_turn_was_given(tiny_tokenizer, tmp_path):
    from trl_starpo.display.html_export import trajectories_html
    from trl_starpo.store import TrajectoryStore

    trajectory, calls, _ = play(tiny_tokenizer, turns=4, history_turns=1)
    store = TrajectoryStore()
    store.add([trajectory], step=1)
    (stored,) = TrajectoryStore.load(store.save(tmp_path / "store")).trajectories()
    assert [turn.context_ids for turn in stored.turns] == calls
    page = trajectories_html([stored], tokenizer=tiny_tokenizer)
    assert page.count("what the model was given") == 4
    assert "Earlier turns are not shown" in page
