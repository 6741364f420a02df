"""Type and range checks of a config's numeric and boolean fields, run when the config is built.

A value a run cannot use (``learning_rate`` NaN, ``top_p`` 2, ``enable_thinking='maybe'``, ``max_steps`` -5) is
refused with one line naming the field and what it takes, before any model is loaded. Comparisons written as
``x <= 0`` let NaN through, so every float is first checked to be finite.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import fields
from typing import Any, Callable

_SEED_LIMIT = 2**32 - 1  # numpy's seeds; transformers seeds numpy, random and torch with the same value


def _between(low: float, high: float, *, low_open: bool = False, high_open: bool = False):
    def check(value: float) -> bool:
        above = value > low if low_open else value >= low
        below = value < high if high_open else value <= high
        return above and below

    return check


def _interval(low: float, high: float, *, low_open: bool = False, high_open: bool = False) -> str:
    return f"in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"


_POSITIVE = ("> 0", lambda value: value > 0)
_NON_NEGATIVE = (">= 0", lambda value: value >= 0)
_PROBABILITY = (_interval(0, 1), _between(0, 1))
_NUCLEUS = (_interval(0, 1, low_open=True), _between(0, 1, low_open=True))
_ADAM_BETA = (_interval(0, 1, high_open=True), _between(0, 1, high_open=True))
_SEED = (f"in [0, {_SEED_LIMIT}]", _between(0, _SEED_LIMIT))

# Ranges of fields that no other check covers (StarPOConfig's own fields are also checked where they are used, with
# messages that say more). ``None`` stays allowed wherever the field's type allows it.
RANGES: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "learning_rate": _NON_NEGATIVE,  # 0 is a sanity run that trains nothing (and is then told so)
    "weight_decay": _NON_NEGATIVE,
    "adam_beta1": _ADAM_BETA,
    "adam_beta2": _ADAM_BETA,
    "adam_epsilon": _POSITIVE,
    "max_grad_norm": _NON_NEGATIVE,
    "num_train_epochs": _NON_NEGATIVE,
    "max_steps": ("-1 or >= 0 (up to 0: train num_train_epochs)", lambda value: value >= -1),
    "warmup_steps": _NON_NEGATIVE,
    "logging_steps": _NON_NEGATIVE,  # transformers asks for > 0 itself where the strategy is "steps"
    "save_steps": _NON_NEGATIVE,
    "eval_steps": _NON_NEGATIVE,
    "save_total_limit": _NON_NEGATIVE,  # 0 or None: no checkpoint is deleted
    "seed": _SEED,
    "data_seed": _SEED,
    "top_p": _NUCLEUS,
    "top_k": _NON_NEGATIVE,
    "min_p": _PROBABILITY,
    "repetition_penalty": _POSITIVE,
    "beta": _NON_NEGATIVE,
    "epsilon": _POSITIVE,
    "epsilon_high": _POSITIVE,
    "entropy_coef": _NON_NEGATIVE,
    "env_timeout": _POSITIVE,
}

_KINDS = {"bool": bool, "int": int, "float": float}
# Fields whose declared type says int, but which configs written for older TRL versions set to None
_NONE_ALLOWED = frozenset({"top_k"})


def declared_kind(annotation: Any) -> tuple[type | None, bool]:
    """``(bool | int | float | None, optional)`` from a dataclass field's annotation (``"float | None"`` ->
    ``(float, True)``); ``(None, _)`` for every other type."""
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    wrapped = text.startswith("Optional[")
    parts = [part.strip() for part in text.removeprefix("Optional[").removesuffix("]" if wrapped else "").split("|")]
    optional = wrapped or "None" in parts or "NoneType" in parts
    kinds = [part for part in parts if part not in ("None", "NoneType")]
    if len(kinds) == 1 and kinds[0] in _KINDS:
        return _KINDS[kinds[0]], optional
    return None, optional


def declared_annotations(cls: type) -> dict[str, Any]:
    """Each field's annotation as its class declared it. (``HfArgumentParser`` rewrites ``Field.type`` in place,
    dropping ``Optional``, so the dataclass fields cannot be trusted after a parser has seen the class.)"""
    annotations: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        annotations.update(klass.__dict__.get("__annotations__", {}))
    return annotations


def _type_error(name: str, kind: type, optional: bool, value: Any) -> str | None:
    if value is None:
        return None if optional or name in _NONE_ALLOWED else f"{name} must be {_describe(kind)}, got None."
    if kind is bool:
        ok = isinstance(value, bool)
    elif kind is int:  # numbers.Integral takes numpy's integers too (a sweep built with np.arange)
        ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    else:
        ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if not ok:
        return f"{name} must be {_describe(kind)}{' or None' if optional else ''}, got {value!r}."
    if kind is float and not math.isfinite(value):
        return f"{name} must be a finite number, got {value!r}."
    return None


def _describe(kind: type) -> str:
    return {bool: "true or false", int: "an integer", float: "a number"}[kind]


def check_field_values(config: Any, ranges: dict[str, tuple[str, Callable[[Any], bool]]] = RANGES) -> None:
    """Raise ``ValueError`` (one line: the field, what it takes, the value given) for the first boolean, integer or
    float field of ``config`` whose value has the wrong type, is not finite, or lies outside ``ranges``."""
    annotations = declared_annotations(type(config))
    for spec in fields(config):
        kind, optional = declared_kind(annotations.get(spec.name, spec.type))
        if kind is None:
            continue
        value = getattr(config, spec.name)
        problem = _type_error(spec.name, kind, optional, value)
        if problem:
            raise ValueError(problem)
        if value is not None and spec.name in ranges:
            description, holds = ranges[spec.name]
            if not holds(value):
                raise ValueError(f"{spec.name} must be {description}, got {value!r}.")
