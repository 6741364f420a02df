import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trl_starpo.rollout.parsing import (
    format_instructions,
    parse_response,
    response_shape,
    split_actions,
    thinking_end,
)


def test_well_formed_response():
    parsed = parse_response("<think>go right</think><answer>Right</answer>")
    assert parsed.format_ok and parsed.error is None
    assert parsed.thinking == "go right"
    assert parsed.actions == ["Right"]
    assert parsed.thinking_end == len("<think>go right</think>")


def test_whitespace_around_tags_is_allowed():
    parsed = parse_response("  \n<think> a </think>\n <answer> Up </answer>\n")
    assert parsed.format_ok and parsed.thinking == "a" and parsed.actions == ["Up"]


def test_actions_split_and_limited():
    parsed = parse_response("<think>t</think><answer>Up || Left ||  || Down</answer>", max_actions=2)
    assert parsed.format_ok
    assert parsed.actions == ["Up", "Left"]
    assert parsed.num_dropped_actions == 1


def test_custom_separator():
    assert split_actions("a ; b;c", ";") == ["a", "b", "c"]


def test_thinking_disabled():
    parsed = parse_response("<answer>Right</answer>", enable_thinking=False)
    assert parsed.format_ok and parsed.thinking is None and parsed.thinking_end == 0
    rejected = parse_response("<think>x</think><answer>Right</answer>", enable_thinking=False)
    assert not rejected.format_ok and "disabled" in rejected.error


@pytest.mark.parametrize(
    "text, error",
    [
        ("", "empty response"),
        ("   ", "empty response"),
        ("just moving right", "no <answer> tag"),
        ("<think>hmm</think><answer>Right", "unclosed <answer> tag"),
        ("<answer>Right</answer>", "no <think> tag"),
        ("<think>hmm<answer>Right</answer>", "unclosed <think> tag"),
        ("<think>a</think><answer>   </answer>", "empty answer"),
        ("<think>a</think><answer>||</answer>", "empty answer"),
        ("<think>a</think><answer>Up</answer> and more", "text outside the tags or tags out of order"),
        ("<answer>Up</answer><think>a</think>", "text outside the tags or tags out of order"),
        ("<think>a</think><answer>Up</answer><answer>Down</answer>", "nested or repeated tags"),
        ("<think>a<answer>x</answer></think><answer>Up</answer>", "nested or repeated tags"),
        ("<think><think>a</think></think><answer>Up</answer>", "nested or repeated tags"),
    ],
)
def test_malformed_responses_are_rejected_with_a_reason(text, error):
    parsed = parse_response(text)
    assert not parsed.format_ok
    assert parsed.actions == []
    assert parsed.error == error


@pytest.mark.parametrize(
    "text",
    [
        "\x00\x01\xff" * 50,
        "\ufffd\ufffd<think>\ud800</think>",
        "<think>" * 1000,
        "</answer><answer>" * 500,
        "<think>" + "a" * 100_000 + "</think><answer>",
        "<answer>__import__('os').system('rm -rf /')",
    ],
)
def test_hostile_strings_never_raise(text):
    parsed = parse_response(text)
    assert not parsed.format_ok and parsed.error


def test_garbage_inside_answer_is_passed_on_as_an_action():
    # Whether an action exists is the environment's call; the parser only checks the format.
    parsed = parse_response("<think>x</think><answer>\x00\ufffd eval(1)</answer>")
    assert parsed.format_ok and parsed.actions == ["\x00\ufffd eval(1)"]


def test_thinking_end_needs_a_leading_think():
    assert thinking_end("<think>a</think>rest") == len("<think>a</think>")
    assert thinking_end("  <think>a</think>") == len("  <think>a</think>")
    assert thinking_end("x <think>a</think>") == 0
    assert thinking_end("<think>never closed") == 0


def test_format_instructions_mention_the_shape_and_actions():
    text = format_instructions("Up, Down", enable_thinking=True, max_actions=3, separator="||")
    assert "<think>" in text and "<answer>" in text and "Up, Down" in text and "'||'" in text
    assert "<think>" not in format_instructions("Up", enable_thinking=False, max_actions=1, separator="||")


def well_formed_answers(text):
    """The answers of ``text`` that parse as well-formed, by the collector's own parser."""
    answers = [parse_response(span, enable_thinking=False, max_actions=9) for span in
               re.findall(r"<answer>.*?</answer>", text, re.DOTALL)]
    return [action for parsed in answers if parsed.format_ok for action in parsed.actions]


@pytest.mark.parametrize("enable_thinking", [True, False])
def test_format_instructions_answer_only_with_the_example_action(enable_thinking):
    # The shape itself is not a well-formed response: copying it is malformed, never an action.
    assert not parse_response(response_shape(enable_thinking), enable_thinking=enable_thinking).format_ok
    bare = format_instructions("Up, Down", enable_thinking=enable_thinking, max_actions=2, separator="||")
    assert well_formed_answers(bare) == []
    shown = format_instructions("Up, Down", enable_thinking=enable_thinking, max_actions=1, separator="||",
                                example_action="Up")
    assert well_formed_answers(shown) == ["Up"] and "for example <answer>Up</answer>" in shown


# The parser before it became linear: two backtracking regexes, quadratic on inputs such as "<think>" followed by
# "</think><answer>" repeated. The linear parser must accept exactly what they accepted, with the same errors.
_REFERENCE = {
    True: re.compile(r"\s*<think>(?P<thinking>.*?)</think>\s*<answer>(?P<answer>.*?)</answer>\s*", re.DOTALL),
    False: re.compile(r"\s*<answer>(?P<answer>.*?)</answer>\s*", re.DOTALL),
}


def reference_parse(text, enable_thinking, max_actions, separator="||"):
    from trl_starpo.rollout.parsing import _diagnose

    match = _REFERENCE[enable_thinking].fullmatch(text)
    if match is None:
        return None, [], False, _diagnose(text, enable_thinking)
    thinking = match.group("thinking").strip() if enable_thinking else None
    # (The old code searched answer + thinking as one string, so a tag could straddle the two: "<" + "think>".)
    inner = [match.group("answer")] + ([match.group("thinking")] if enable_thinking else [])
    if any(re.search(r"</?(think|answer)>", part) for part in inner):
        return None, [], False, "nested or repeated tags"
    actions = split_actions(match.group("answer"), separator)
    if not actions:
        return thinking, [], False, "empty answer"
    return thinking, actions[:max_actions], True, None


PIECES = ["<think>", "</think>", "<answer>", "</answer>", " ", "\n", "\t", "a", "Up", "||", "<", ">", "/", "think"]
_FILL = st.lists(st.sampled_from(PIECES), max_size=3).map("".join)
_SKELETONS = [["<think>", "</think>", "<answer>", "</answer>"], ["<answer>", "</answer>"]]


@st.composite
def responses(draw):
    """Random pieces, or a well-formed skeleton with random pieces between and around its tags (near misses)."""
    if draw(st.booleans()):
        return "".join(draw(st.lists(st.sampled_from(PIECES), max_size=12)))
    skeleton = draw(st.sampled_from(_SKELETONS))
    return draw(_FILL) + "".join(tag + draw(_FILL) for tag in skeleton)


@settings(max_examples=800, database=None, deadline=None)
@given(text=responses(), enable_thinking=st.booleans(), max_actions=st.integers(1, 3))
def test_the_linear_parser_accepts_what_the_regexes_accepted(text, enable_thinking, max_actions):
    parsed = parse_response(text, enable_thinking=enable_thinking, max_actions=max_actions)
    assert (parsed.thinking, parsed.actions, parsed.format_ok, parsed.error) == reference_parse(
        text, enable_thinking, max_actions
    )
