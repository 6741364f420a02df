"""Every boolean, integer and float field of StarPOConfig is checked as a value at construction: NaN, infinities,
strings and out-of-range numbers are refused in one line that names the field."""

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trl_starpo import StarPOConfig
from trl_starpo.field_checks import declared_annotations, declared_kind


def _fields_of_kind(kind):
    annotations = declared_annotations(StarPOConfig)
    return sorted(name for name, annotation in annotations.items() if declared_kind(annotation)[0] is kind)


FLOAT_FIELDS = _fields_of_kind(float)
INT_FIELDS = _fields_of_kind(int)
BOOL_FIELDS = _fields_of_kind(bool)
BASE = dict(output_dir="unused", report_to="none", per_device_train_batch_size=2, num_generations=2,
            save_strategy="no")


def build(**overrides):
    return StarPOConfig(**{**BASE, **overrides})


def test_the_checked_fields_cover_the_configs_numbers():
    # The parser rewrites Field.type in place (dropping Optional); the checks read the declared annotations.
    assert {"learning_rate", "temperature", "top_p", "beta", "epsilon", "format_penalty", "filter_num_std",
            "kl_early_stop", "value_clip_range", "max_grad_norm", "entropy_coef"} <= set(FLOAT_FIELDS)
    assert {"max_steps", "seed", "max_turns", "num_generations"} <= set(INT_FIELDS)
    assert {"enable_thinking", "bf16"} <= set(BOOL_FIELDS)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(learning_rate=-1.0), "learning_rate must be >= 0, got -1.0."),
        (dict(learning_rate=float("nan")), "learning_rate must be a finite number, got nan."),
        (dict(learning_rate=float("inf")), "learning_rate must be a finite number, got inf."),
        (dict(learning_rate="abc"), "learning_rate must be a number, got 'abc'."),
        (dict(temperature=float("nan")), "temperature must be a finite number, got nan."),
        (dict(top_p=2.0), "top_p must be in (0, 1], got 2.0."),
        (dict(top_p=0.0), "top_p must be in (0, 1], got 0.0."),
        (dict(max_steps=-5), "max_steps must be -1 or >= 0 (up to 0: train num_train_epochs), got -5."),
        (dict(max_steps=2.5), "max_steps must be an integer, got 2.5."),
        (dict(seed=-1), "seed must be in [0, 4294967295], got -1."),
        (dict(seed=2**70), f"seed must be in [0, 4294967295], got {2**70}."),
        (dict(enable_thinking="maybe"), "enable_thinking must be true or false, got 'maybe'."),
        (dict(beta=float("nan")), "beta must be a finite number, got nan."),
        (dict(preset="starpo-s", epsilon=float("nan")), "epsilon must be a finite number, got nan."),
        (dict(kl_early_stop=float("nan")), "kl_early_stop must be a finite number, got nan."),
        (dict(env_timeout=0.0), "env_timeout must be > 0, got 0.0."),
        (dict(max_turns=True), "max_turns must be an integer, got True."),
    ],
)
def test_nonsense_values_are_refused_in_one_line_naming_the_field(overrides, message):
    with pytest.raises(ValueError) as refused:
        build(**overrides)
    assert str(refused.value) == message


def test_values_transformers_and_older_configs_accept_still_build():
    import numpy as np

    for overrides in (dict(save_total_limit=0), dict(max_steps=0), dict(learning_rate=0.0), dict(top_k=None),
                      dict(logging_steps=0, logging_strategy="no"), dict(seed=np.int64(3)),
                      dict(learning_rate=np.float32(1e-4)), dict(num_train_epochs=0, max_steps=5)):
        build(**overrides)


def test_a_preset_filled_field_is_checked_after_the_preset_and_answer_only_presets_still_build():
    config = build(preset="starpo-s", enable_thinking=False)
    assert config.thinking_critic is False and math.isfinite(config.epsilon_high)
    with pytest.raises(ValueError, match="enable_thinking=False asks for answers only"):
        build(thinking_critic=True, enable_thinking=False)


NOT_A_FLOAT = st.one_of(st.sampled_from([math.nan, math.inf, -math.inf]), st.text(max_size=5), st.booleans())
NOT_AN_INT = st.one_of(st.floats(allow_nan=True).filter(lambda value: not float(value).is_integer()),
                       st.text(max_size=5), st.booleans())
NOT_A_BOOL = st.one_of(st.text(max_size=5), st.integers(), st.floats(allow_nan=True))
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(st.one_of(
    st.tuples(st.sampled_from(FLOAT_FIELDS), NOT_A_FLOAT),
    st.tuples(st.sampled_from(INT_FIELDS), NOT_AN_INT),
    st.tuples(st.sampled_from(BOOL_FIELDS), NOT_A_BOOL),
))
def test_a_value_of_the_wrong_kind_is_refused_for_every_field(case):
    name, value = case
    with pytest.raises(ValueError) as refused:
        build(**{name: value})
    message = str(refused.value)
    assert message.startswith(f"{name} must be ") and "\n" not in message


@SETTINGS
@given(st.one_of(
    st.tuples(st.sampled_from(FLOAT_FIELDS), st.floats(allow_nan=False, allow_infinity=False)),
    st.tuples(st.sampled_from(INT_FIELDS), st.integers(min_value=-(2**40), max_value=2**40)),
))
def test_any_number_builds_a_config_or_is_refused_in_one_line(case):
    # Never a ZeroDivisionError, TypeError or torch error from deep inside: a config, or one ValueError line.
    name, value = case
    try:
        config = build(**{name: value})
    except ValueError as refused:
        assert "\n" not in str(refused).strip()
    else:
        assert getattr(config, name) == value or name in ("max_completion_length", "invalid_action_penalty")
