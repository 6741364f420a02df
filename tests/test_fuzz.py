"""Random and adversarial text, up to 1 MB, through the response parser and every installed environment's ``step``.

Model output is untrusted: whatever it is, each call must return in bounded time (linear in its length) without
raising, and an environment must answer with a protocol-conforming step whose observation does not grow with the
action. The adversarial shapes repeat a short unit up to 1 MB, the inputs that make backtracking regexes and fuzzy
matchers quadratic; hypothesis draws the units, counts and surroundings.
"""

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trl_starpo
from trl_starpo.rollout.env_calls import reset_environment, step_environment
from trl_starpo.rollout.parsing import parse_response

MAX_CHARS = 1_000_000
PARSE_SECONDS = 5.0  # a linear pass over 1 MB takes well under a second; quadratic ones took minutes
STEP_SECONDS = 10.0
MAX_OBSERVATION_CHARS = 20_000

PIECES = ["<think>", "</think>", "<answer>", "</answer>", "<", ">", "/", " ", "\n", "a", "||", "[", "]", "(", ")",
          "search[", "lookup[", "finish[", "click[", "go to ", "1+", "Up", "\x00", "\u202e", "é", "🙂"]

small_text = st.text(max_size=40)
units = st.lists(st.sampled_from(PIECES), min_size=1, max_size=4).map("".join) | st.text(min_size=1, max_size=8)


@st.composite
def hostile_text(draw, max_chars=MAX_CHARS):
    """A prefix, a unit repeated up to ``max_chars`` characters, and a suffix; or short random text."""
    if draw(st.integers(0, 4)) == 0:
        return draw(st.text(max_size=2000))
    unit = draw(units)
    repeats = draw(st.integers(1, max_chars // len(unit)))
    return draw(small_text) + unit * repeats + draw(small_text)


ADVERSARIAL = [
    "<think>" + "</think><answer>" * 65_000,
    "<think>" * 140_000 + "</think><answer>x</answer>",
    "<think>a</think>" + " " * 999_000 + "<answer>",
    "<answer>" + "a" * 999_000,
    "search[" + "Karvia page " * 83_000 + "]",
    "[" * 500_000 + "]" * 499_000,
]

FUZZ = settings(
    max_examples=40,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)


def timed(function, *args, **kwargs):
    started = time.perf_counter()
    result = function(*args, **kwargs)
    return result, time.perf_counter() - started


def check_parse(text):
    for enable_thinking in (True, False):
        parsed, seconds = timed(parse_response, text, enable_thinking=enable_thinking, max_actions=2)
        assert seconds < PARSE_SECONDS, f"parsing {len(text)} characters took {seconds:.1f} s"
        assert parsed.format_ok == (parsed.error is None)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("text", ADVERSARIAL, ids=range(len(ADVERSARIAL)))
def test_the_parser_is_linear_on_adversarial_text(text):
    check_parse(text)


@pytest.mark.timeout(300)
@FUZZ
@given(text=hostile_text())
def test_the_parser_takes_bounded_time_on_any_text(text):
    check_parse(text)


# ---------------------------------------------------------------------------------------------------------------
# Environments


@pytest.fixture(scope="module")
def environments(tmp_path_factory):
    """Each installed environment (ALFWorld with a fresh game cache), with the first task of its validation split."""
    loaded = {}
    for name in trl_starpo.list_environments():
        kwargs = {"cache_dir": str(tmp_path_factory.mktemp("alfworld"))} if name == "alfworld" else {}
        loaded[name] = (trl_starpo.load_environment(name, **kwargs), dict(trl_starpo.load_tasks(name, "validation")[0]))
    yield loaded
    for env, _ in loaded.values():
        env.close()


def step_hostile(env, task, text):
    """Step ``text`` (restarting the task first when the last step ended it) within the per-call bound."""
    if getattr(env, "_fuzz_episode_over", True):
        reset_environment(env, task, timeout=STEP_SECONDS * 3)
    result, seconds = timed(step_environment, env, text, timeout=STEP_SECONDS)  # raises EnvironmentFault on a hang
    assert seconds < STEP_SECONDS, f"a step on {len(text)} characters took {seconds:.1f} s"
    assert len(result.observation) <= MAX_OBSERVATION_CHARS, "the observation grows with the action"
    env._fuzz_episode_over = result.terminated or result.truncated


@pytest.mark.slow  # loading ALFWorld's engine and HotPotQA's corpus takes most of a minute on a busy machine
@pytest.mark.timeout(900)
def test_every_environment_steps_hostile_text_in_bounded_time(environments):
    assert len(environments) >= 8

    @FUZZ
    @given(text=hostile_text())
    def fuzz(text):
        for env, task in environments.values():
            step_hostile(env, task, text)

    for text in ADVERSARIAL:
        for env, task in environments.values():
            step_hostile(env, task, text)
    fuzz()
