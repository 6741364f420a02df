"""The echo-trap study's bookkeeping (benchmarks/echo_trap.py): which saved runs it may reuse."""

import importlib.util
import sys
from pathlib import Path

import pytest

from trl_starpo.presets import PRESETS

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def echo_trap():
    spec = importlib.util.spec_from_file_location("echo_trap_study", ROOT / "benchmarks" / "echo_trap.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


def test_every_arm_trains_its_own_configuration(echo_trap):
    keys = {arm: echo_trap.arm_key(arm) for arm in echo_trap.ARMS}
    assert len(set(keys.values())) == len(keys)


def test_a_changed_preset_is_a_new_arm_and_a_renamed_one_keeps_its_runs(echo_trap, monkeypatch):
    before = echo_trap.arm_key("starpo-s")
    # an arm that spells out what its preset already sets trains the same thing, so its saved runs carry over
    monkeypatch.setitem(echo_trap.ARMS, "spelled-out", ("starpo-s", {"thinking_scale_rule": "multiplicative"}))
    assert echo_trap.arm_key("spelled-out") == before
    monkeypatch.setitem(PRESETS, "starpo-s", {**PRESETS["starpo-s"], "thinking_scale_rule": "sign_aware"})
    assert echo_trap.arm_key("starpo-s") != before
    assert echo_trap.arm_key("starpo-s") == echo_trap.arm_key("starpo-s+sign_aware")
