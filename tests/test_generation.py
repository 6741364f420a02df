import pytest
import torch
from conftest import CounterEnv
from transformers import AutoModelForCausalLM, GenerationConfig

from trl_starpo.rollout.collector import RolloutCollector
from trl_starpo.rollout.generation import (
    CachedTransformersGenerator,
    GrowingLayer,
    TransformersGenerator,
    cut_at_eos,
)
from trl_starpo.store import from_dataset, to_dataset
from trl_starpo.trajectory import MODEL_SEGMENTS, Segment

GREEDY = GenerationConfig(do_sample=False)


class RecordingModel:
    """Wraps a model and keeps, for every forward call, its input ids and its last-position logits."""

    def __init__(self, model):
        self.model = model
        self.calls = []

    def __getattr__(self, name):
        return getattr(self.model, name)

    def __call__(self, **kwargs):
        output = self.model(**kwargs)
        self.calls.append((kwargs["input_ids"].clone(), output.logits[:, -1, :].float().clone()))
        return output


@pytest.fixture(scope="module")
def tiny_model(tiny_model_dir):
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()


@pytest.fixture(scope="module")
def tiny_agent(tiny_agent_dir):
    """Answers a CounterEnv prompt with ``<think>go</think><answer>inc</answer>`` and an end-of-turn token."""
    return AutoModelForCausalLM.from_pretrained(tiny_agent_dir).eval()


@pytest.fixture(scope="module")
def agent_prompt(tiny_tokenizer):
    collector = RolloutCollector(tiny_tokenizer, max_actions_per_turn=2)
    return collector._start(CounterEnv(), {"task_id": "t", "seed": 0, "start": 0, "target": 2}, 0)[0].token_ids


def generators(model, tokenizer, config=GREEDY, pad_token_id=None):
    settings = dict(
        pad_token_id=tokenizer.pad_token_id if pad_token_id is None else pad_token_id,
        eos_token_ids=[tokenizer.eos_token_id],
        generation_config=config,
    )
    return TransformersGenerator(model, **settings), CachedTransformersGenerator(model, **settings)


def random_tokens(rng, tokenizer, n):
    # From id 3 on: no <|pad|>, <|im_start|> or <|im_end|>.
    return torch.randint(3, len(tokenizer), (n,), generator=rng).tolist()


def play(generator, tokenizer, prompt, turns=3, max_new_tokens=8):
    """Drive ``generator`` for ``turns`` turns on four contexts of different lengths; after each turn every row gets
    a chunk of a different length appended, and row 1 leaves after the first turn. Returns each turn's responses."""
    rng = torch.Generator().manual_seed(0)
    contexts = {
        0: prompt,
        1: random_tokens(rng, tokenizer, 9),
        2: random_tokens(rng, tokenizer, 5) + prompt,
        3: random_tokens(rng, tokenizer, 14),
    }
    generator.reset()
    history = []
    for turn in range(turns):
        responses = generator.generate(contexts, max_new_tokens)
        history.append(responses)
        contexts = {
            key: contexts[key] + responses[key] + random_tokens(rng, tokenizer, 1 + 3 * key + turn)
            for key in contexts
            if not (turn == 0 and key == 1)
        }
    return history


@pytest.mark.parametrize("repetition_penalty", [None, 1.5])
@pytest.mark.parametrize("spare", [GrowingLayer.SPARE, 1])  # 1: the cache outgrows its buffer over and over
def test_cached_greedy_matches_full_prefill_over_ragged_turns_with_a_row_leaving(
    tiny_agent, tiny_tokenizer, agent_prompt, repetition_penalty, spare, monkeypatch
):
    monkeypatch.setattr(GrowingLayer, "SPARE", spare)
    # Padding with the end-of-turn token (as SmolLM2 does) checks that padding escapes the repetition penalty.
    config = GenerationConfig(do_sample=False, repetition_penalty=repetition_penalty)
    pad = tiny_tokenizer.eos_token_id if repetition_penalty else None
    plain, cached = generators(tiny_agent, tiny_tokenizer, config, pad_token_id=pad)
    expected = play(plain, tiny_tokenizer, agent_prompt)
    got = play(cached, tiny_tokenizer, agent_prompt)
    assert got == expected
    assert [list(turn) for turn in got] == [[0, 1, 2, 3], [0, 2, 3], [0, 2, 3]]
    # In the first turn some rows stop at an end-of-turn token and others run into the budget.
    lengths = {len(tokens) for tokens in got[0].values()}
    assert 8 in lengths and min(lengths) < 8


def test_cached_greedy_matches_full_prefill_in_a_collection(tiny_agent, tiny_tokenizer):
    collector = RolloutCollector(tiny_tokenizer, max_turns=3, max_actions_per_turn=2, max_tokens_per_turn=24)
    # Different targets end the episodes after different turns, so rows leave the batch one by one.
    tasks = [{"task_id": f"t{i}", "seed": i, "start": 0, "target": target} for i, target in enumerate((1, 2, 9))]
    runs = []
    for generator in generators(tiny_agent, tiny_tokenizer):
        trajectories = collector.collect([CounterEnv() for _ in tasks], tasks, generator)
        runs.append([(t.token_ids, t.segments, len(t.turns)) for t in trajectories])
    assert runs[1] == runs[0]
    assert [turns for _, _, turns in runs[0]] == [1, 2, 3]


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_logprobs_after_a_ragged_chunk_match_a_fresh_forward(tiny_model_dir, tiny_tokenizer, attn_implementation):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, attn_implementation=attn_implementation).eval()
    recorder = RecordingModel(model)
    _, cached = generators(recorder, tiny_tokenizer)
    rng = torch.Generator().manual_seed(1)
    contexts = {key: random_tokens(rng, tiny_tokenizer, length) for key, length in ((3, 7), (5, 19), (8, 2))}
    responses = cached.generate(contexts, 6)
    contexts = {
        key: contexts[key] + responses[key] + random_tokens(rng, tiny_tokenizer, 2 + 9 * i)
        for i, key in enumerate(contexts)
    }
    recorder.calls.clear()
    cached.generate(contexts, 1)

    ((chunk, logits),) = recorder.calls
    assert chunk.shape[1] < max(len(context) for context in contexts.values())  # only the new tokens went in
    with torch.no_grad():
        fresh = torch.stack([model(input_ids=torch.tensor([c])).logits[0, -1].float() for c in contexts.values()])
    torch.testing.assert_close(logits.log_softmax(-1), fresh.log_softmax(-1), atol=1e-4, rtol=0)


def test_falls_back_to_a_full_prefill_when_a_context_does_not_extend_the_cache(tiny_model, tiny_tokenizer):
    recorder = RecordingModel(tiny_model)
    plain, cached = generators(recorder, tiny_tokenizer)
    rng = torch.Generator().manual_seed(2)
    contexts = {0: random_tokens(rng, tiny_tokenizer, 9), 1: random_tokens(rng, tiny_tokenizer, 13)}
    responses = cached.generate(contexts, 5)
    extended = {key: contexts[key] + responses[key] + [7, 8, 9] for key in contexts}
    rewritten = {0: extended[0], 1: extended[1][:2] + [extended[1][2] % 300 + 3] + extended[1][3:]}
    new_key = {0: extended[0], 2: random_tokens(rng, tiny_tokenizer, 6)}

    recorder.calls.clear()
    assert cached.generate(new_key, 5) == plain.generate(new_key, 5)
    assert recorder.calls[0][0].shape[1] == max(len(c) for c in new_key.values())  # a full prefill
    cached.reset()
    cached.generate(contexts, 5)
    recorder.calls.clear()
    rewritten[1] = [rewritten[1][0] % 300 + 3] + rewritten[1][1:]  # shares nothing with its row
    assert cached.generate(rewritten, 5) == plain.generate(rewritten, 5)
    assert recorder.calls[0][0].shape[1] == max(len(c) for c in rewritten.values())


def test_a_window_keeps_the_cached_prefix_it_shares_and_feeds_the_rest(tiny_model, tiny_tokenizer):
    # as under context_policy="window": every context starts with the same system prompt and task, and once turns are
    # dropped a context no longer extends its row; the shared start is kept, the rest fed, the result unchanged
    recorder = RecordingModel(tiny_model)
    plain, cached = generators(recorder, tiny_tokenizer)
    rng = torch.Generator().manual_seed(4)
    task = random_tokens(rng, tiny_tokenizer, 12)
    turns = [random_tokens(rng, tiny_tokenizer, 5) for _ in range(4)]
    contexts = {0: task + turns[0], 1: task + turns[1] + turns[2]}
    responses = cached.generate(contexts, 4)
    assert responses == plain.generate(contexts, 4)
    windows = {0: task + turns[0] + responses[0] + turns[3], 1: task + turns[2] + turns[3]}  # row 1 dropped a turn
    recorder.calls.clear()
    assert cached.generate(windows, 4) == plain.generate(windows, 4)
    # the cache keeps its first 12 slots, row 1's task; row 0, left-padded by 5 slots, holds 7 of its tokens there
    assert recorder.calls[0][0].shape[1] == max(len(windows[0]) - 7, len(windows[1]) - 12)
    # a context equal to what its row holds, or shorter (a retry), is fed its last token again: its logits start the
    # turn (the last sampled token is never fed, so `windows` + all but the last is what a row holds)
    held = {key: windows[key] + tokens[:-1] for key, tokens in cached.generate(windows, 4).items()}
    for contexts in (held, windows):
        recorder.calls.clear()
        assert cached.generate(contexts, 3) == plain.generate(contexts, 3)
        assert recorder.calls[0][0].shape[1] == 1


def test_sampling_is_reproducible_with_a_seed_and_respects_the_budget(tiny_model, tiny_tokenizer):
    config = GenerationConfig(do_sample=True, temperature=0.7, top_k=50, top_p=0.9)
    _, cached = generators(tiny_model, tiny_tokenizer, config)
    contexts = {0: [5, 6, 7], 1: [8, 9, 10, 11, 12]}

    def sample(seed, max_new_tokens):
        torch.manual_seed(seed)
        cached.reset()
        first = cached.generate(contexts, max_new_tokens)
        second = cached.generate({k: contexts[k] + first[k] + [30, 31] for k in contexts}, max_new_tokens)
        return first, second

    assert sample(0, 8) == sample(0, 8)
    assert sample(0, 8) != sample(1, 8)
    lengths = [len(tokens) for turn in sample(2, 3) for tokens in turn.values()]
    assert max(lengths) == 3 and min(lengths) >= 1


def test_top_k_1_sampling_is_greedy(tiny_model, tiny_tokenizer):
    contexts = {0: [5, 6, 7], 1: [8, 9, 10, 11, 12]}
    greedy = generators(tiny_model, tiny_tokenizer)[1].generate(contexts, 8)
    top_1 = generators(tiny_model, tiny_tokenizer, GenerationConfig(do_sample=True, top_k=1))[1]
    assert top_1.generate(contexts, 8) == greedy


def test_min_new_tokens_holds_back_the_end_of_turn(tiny_agent, tiny_tokenizer, agent_prompt):
    eos = tiny_tokenizer.eos_token_id
    (free,) = generators(tiny_agent, tiny_tokenizer)[1].generate({0: agent_prompt}, 16).values()
    assert free[-1] == eos and len(free) < 12
    config = GenerationConfig(do_sample=False, min_new_tokens=12)
    plain, cached = generators(tiny_agent, tiny_tokenizer, config)
    (forced,) = cached.generate({0: agent_prompt}, 16).values()
    assert len(forced) >= 12 and eos not in forced[:12]
    assert forced == plain.generate({0: agent_prompt}, 16)[0]


def test_cut_at_eos():
    assert cut_at_eos([4, 5, 2, 0, 0], [2]) == [4, 5, 2]
    assert cut_at_eos([4, 9, 5, 2], [2, 9]) == [4, 9]
    assert cut_at_eos([4, 5], [2]) == [4, 5]
    assert cut_at_eos([], [2]) == []


def test_stop_string_ends_a_row_without_an_end_of_turn_token(tiny_tokenizer, tiny_agent_dir):
    agent = AutoModelForCausalLM.from_pretrained(tiny_agent_dir).eval()
    collector = RolloutCollector(tiny_tokenizer, max_actions_per_turn=2, prefill_opening_tag=False)
    task = {"task_id": "t", "seed": 0, "start": 0, "target": 2}
    prompt = collector._start(CounterEnv(), task, 0)[0].token_ids
    eos = [tiny_tokenizer.eos_token_id]
    plain = CachedTransformersGenerator(agent, pad_token_id=tiny_tokenizer.pad_token_id, eos_token_ids=eos,
                                        generation_config=GREEDY)
    stopping = CachedTransformersGenerator(agent, pad_token_id=tiny_tokenizer.pad_token_id, eos_token_ids=eos,
                                           generation_config=GREEDY, stop_strings=["</answer>"], tokenizer=tiny_tokenizer)
    full = plain.generate({0: prompt}, 24)[0]
    stopped = stopping.generate({0: prompt}, 24)[0]
    # The agent writes "<think>go</think><answer>…</answer>" and then its end-of-turn token.
    assert full[-1] == eos[0] and tiny_tokenizer.decode(full[:-1]).endswith("</answer>")
    assert stopped == full[:-1]
    # The cache continues correctly from a row that stopped on a string: the next turn matches a fresh prefill.
    context = prompt + stopped + tiny_tokenizer("<|im_end|>\n<|im_start|>user\nThe counter is at 1.<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    fresh = CachedTransformersGenerator(agent, pad_token_id=tiny_tokenizer.pad_token_id, eos_token_ids=eos,
                                        generation_config=GREEDY, stop_strings=["</answer>"], tokenizer=tiny_tokenizer)
    assert stopping.generate({0: context}, 24) == fresh.generate({0: context}, 24)


def test_stop_strings_need_a_tokenizer(tiny_model):
    with pytest.raises(ValueError, match="tokenizer"):
        CachedTransformersGenerator(tiny_model, pad_token_id=0, eos_token_ids=[1], stop_strings=["</answer>"])


def test_sampling_logprobs_are_those_of_the_tempered_distribution(tiny_model, tiny_tokenizer):
    config = GenerationConfig(do_sample=True, temperature=0.7, top_k=0, top_p=1.0)
    _, cached = generators(tiny_model, tiny_tokenizer, config)
    contexts = {0: [5, 6, 7], 1: [8, 9, 10, 11, 12]}
    torch.manual_seed(0)
    first = cached.generate(contexts, 5)
    turn_two = {k: contexts[k] + first[k] + [30, 31] for k in contexts}
    second = cached.generate(turn_two, 5)
    for key, tokens in second.items():
        assert len(cached.last_logprobs[key]) == len(tokens)
        full = torch.tensor([turn_two[key] + tokens])
        with torch.no_grad():
            logits = tiny_model(full).logits[0, len(turn_two[key]) - 1 : -1] / 0.7
        expected = logits.log_softmax(-1).gather(1, torch.tensor(tokens)[:, None]).squeeze(1)
        assert cached.last_logprobs[key] == pytest.approx(expected.tolist(), abs=1e-4)


# -- every returned token was sampled: rows stopping at different steps ----------------------------------------------


class ScriptedChoices(CachedTransformersGenerator):
    """The real decoding loop on a real model, with the sampler's choices scripted per trajectory and turn.

    ``scripts[key][turn]`` lists the tokens the sampler picks for ``key`` in that turn, step by step; past its end
    (or without a script) the sampler samples as usual. Every choice the sampler makes, for every row and step, is
    recorded in ``choices[turn][key]`` as ``(token, log-prob under the distribution it was drawn from)``; rows that
    already stopped keep being recorded, although the decoding loop discards those choices.
    """

    def __init__(self, model, scripts=None, **settings):
        super().__init__(model, **settings)
        self.scripts = scripts or {}
        self.choices: list[dict[int, list[tuple[int, float]]]] = []

    def generate(self, contexts, max_new_tokens):
        self.choices.append({key: [] for key in contexts})
        return super().generate(contexts, max_new_tokens)

    def _pick(self, scores):
        picks = super()._pick(scores)
        logprobs = scores.log_softmax(dim=-1)
        turn = len(self.choices) - 1
        for row, key in enumerate(self._keys):
            made = self.choices[turn][key]
            planned = self.scripts.get(key, [])
            planned = planned[turn] if turn < len(planned) else []
            if len(made) < len(planned):
                picks[row] = planned[len(made)]
            made.append((int(picks[row]), logprobs[row, picks[row]].item()))
        return picks


UNTEMPERED = GenerationConfig(do_sample=True, top_k=0)  # sampling scores are the model's own log-probs


def scripted(tokenizer, model, scripts, pad_token_id, config=UNTEMPERED):
    return ScriptedChoices(model, scripts, pad_token_id=pad_token_id, eos_token_ids=[tokenizer.eos_token_id],
                           generation_config=config, stop_strings=["</answer>"], tokenizer=tokenizer)


def first_turn_scripts(tok):
    """Key 0 stops on the stop string, key 1 on its end-of-turn token, key 2 runs into a budget of 8; the tokens
    after each stop are what the sampler would pick next, and must never come back."""
    eos = tok.eos_token_id
    return {
        0: ids(tok, "go</think><answer>inc</answer>") + ids(tok, " go go"),
        1: ids(tok, "go</think>") + [eos] + ids(tok, " go go go"),
        2: ids(tok, " go") * 10,
    }


def ids(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("pad", ["pad", "eos"])  # a pad token of its own, or the end-of-turn token (SmolLM2)
def test_each_row_returns_exactly_its_sampled_tokens_through_its_stop(tiny_model, tiny_tokenizer, agent_prompt, pad):
    tok = tiny_tokenizer
    scripts = first_turn_scripts(tok)
    generator = scripted(tok, tiny_model, {key: [script] for key, script in scripts.items()},
                         tok.pad_token_id if pad == "pad" else tok.eos_token_id)
    responses = generator.generate({key: agent_prompt for key in scripts}, 8)
    expected = {0: scripts[0][:6], 1: scripts[1][:3], 2: scripts[2][:8]}
    assert tok.decode(expected[0]).endswith("</answer>") and expected[1][-1] == tok.eos_token_id
    (choices,) = generator.choices
    for key in scripts:
        assert responses[key] == expected[key], f"row {key}"
        assert generator.last_logprobs[key] == pytest.approx([lp for _, lp in choices[key][: len(expected[key])]])
    # The rows that stopped early were still decoded alongside (their later choices were discarded).
    assert all(len(made) == 8 for made in choices.values())


@pytest.mark.parametrize("pad", ["pad", "eos"])
def test_collected_responses_hold_only_sampled_tokens_with_their_segments_and_logprobs(tiny_model, tiny_tokenizer, pad):
    tok = tiny_tokenizer
    eos = tok.eos_token_id
    first = first_turn_scripts(tok)
    second = {0: ids(tok, "go</think><answer>inc</answer>") + ids(tok, " go"),
              1: ids(tok, "go</think><answer>dec</answer>") + [eos],  # stops on the string, before eos
              2: ids(tok, "go</think>") + [eos] + ids(tok, " go")}
    generator = scripted(tok, tiny_model, {key: [first[key], second[key]] for key in first},
                         tok.pad_token_id if pad == "pad" else eos)
    collector = RolloutCollector(tok, max_turns=2, max_actions_per_turn=1, max_tokens_per_turn=8)
    tasks = [{"task_id": "t", "seed": 0, "start": 0, "target": 2}] * 3
    trajectories = collector.collect([CounterEnv() for _ in tasks], tasks, generator, groups=[0, 0, 0])

    expected = {0: [first[0][:6], second[0][:6]], 1: [first[1][:3], second[1][:6]], 2: [first[2][:8], second[2][:3]]}
    think_close = ids(tok, "</think>")[0]
    for key, trajectory in enumerate(trajectories):
        assert len(trajectory.turns) == 2 and trajectory.truncation == "max_turns" or trajectory.success
        recorded = {}
        for turn, (record, tokens) in enumerate(zip(trajectory.turns, expected[key])):
            span = slice(record.response_start, record.response_end)
            assert trajectory.token_ids[span] == tokens, f"row {key}, turn {turn}"
            thinking = tokens.index(think_close) + 1 if think_close in tokens else 0
            assert trajectory.segments[span] == [int(Segment.THINKING)] * thinking + [int(Segment.ACTION)] * (
                len(tokens) - thinking)
            # Each recorded log-prob is the sampler's, for the token the sampler chose at that step.
            choices = generator.choices[turn][key][: len(tokens)]
            assert [token for token, _ in choices] == tokens
            assert trajectory.logprobs[span] == pytest.approx([lp for _, lp in choices])
            recorded.update(zip(range(record.response_start, record.response_end), trajectory.logprobs[span]))
        # Nothing else is trained or carries a sampling log-prob.
        model_positions = [i for i, label in enumerate(trajectory.segments) if label in MODEL_SEGMENTS]
        assert model_positions == sorted(recorded)
        assert [i for i, lp in enumerate(trajectory.logprobs) if lp is not None] == model_positions
        # ... and each is what the policy gives that token after exactly the tokens the trajectory holds before it.
        with torch.no_grad():
            logits = tiny_model(torch.tensor([trajectory.token_ids])).logits[0].float().log_softmax(-1)
        fresh = [logits[i - 1, trajectory.token_ids[i]].item() for i in model_positions]
        assert [recorded[i] for i in model_positions] == pytest.approx(fresh, abs=1e-4)
    assert trajectories[0].success and [t.format_ok for t in trajectories[1].turns] == [False, True]
    # The trajectory store keeps them as they are (log-probs as float32).
    for trajectory, back in zip(trajectories, from_dataset(to_dataset(trajectories, step=0))):
        assert (back.token_ids, back.segments, back.turns) == (trajectory.token_ids, trajectory.segments,
                                                                trajectory.turns)
        assert [lp is None for lp in back.logprobs] == [lp is None for lp in trajectory.logprobs]
        assert [lp for lp in back.logprobs if lp is not None] == pytest.approx(
            [lp for lp in trajectory.logprobs if lp is not None], rel=1e-6)


def test_sampled_collection_records_only_the_chosen_tokens(tiny_agent, tiny_tokenizer):
    """Unscripted: at a high temperature the agent's rows end on the stop string, on an end-of-turn token or at the
    budget, at different steps."""
    tok = tiny_tokenizer
    collector = RolloutCollector(tok, max_turns=3, max_actions_per_turn=1, max_tokens_per_turn=8)
    tasks = [{"task_id": f"t{i}", "seed": i, "start": 0, "target": 3} for i in range(8)]
    torch.manual_seed(0)
    generator = scripted(tok, tiny_agent, {}, tok.pad_token_id, GenerationConfig(do_sample=True, temperature=2.0))
    trajectories = collector.collect([CounterEnv() for _ in tasks], tasks, generator)
    stops = set()
    for key, trajectory in enumerate(trajectories):
        for turn, record in enumerate(trajectory.turns):
            span = slice(record.response_start, record.response_end)
            choices = generator.choices[turn][key][: record.response_end - record.response_start]
            assert trajectory.token_ids[span] == [token for token, _ in choices]
            assert trajectory.logprobs[span] == pytest.approx([lp for _, lp in choices])
            tokens = trajectory.token_ids[span]
            stops.add("eos" if tokens[-1] == tok.eos_token_id else "string" if tok.decode(tokens).endswith(
                "</answer>") else "budget" if len(tokens) == 8 else "other")
    assert {"eos", "string", "budget"} <= stops, stops
