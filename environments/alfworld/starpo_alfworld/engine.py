"""The real ALFWorld text engine: TextWorld's ``PddlEnv`` with ALFWorld's wrappers.

The stack is the one ``alfworld-generate`` and ALFWorld's ``AlfredTWEnv`` build: ``PddlEnv`` (Fast Downward's PDDL
translator and search, in a private copy of ``libdownward.so``), ``AlfredDemangler`` (``Apple_bar__plus_01...`` ->
``apple 1``), ``AlfredInfos`` (the game file) and, optionally, ``AlfredExpert`` with the planner expert, which replans
after every step so the game state always carries an optimal plan from where the agent stands (``extra.expert_plan``);
``plan_from_here`` asks the same planner only when a plan is wanted.

Two things are handled here:

- Fast Downward's translator overwrites ``sys.argv`` on every problem it reads (``load`` and ``reset``);
  ``preserved_argv`` puts it back.
- Speed. On full-size ALFRED scenes (30 receptacles, 25 objects: 4,000 grounded operators) the engine spends most of
  ``reset`` translating the same PDDL problem to SAS four times (twice in ``load``, twice in ``reset``), and most of
  ``step`` re-parsing the same few grammar strings with TatSu to phrase the admissible commands.
  ``install_speedups`` memoizes these three pure functions (the translation per problem, the grammar and query
  parses per string, handing out deep copies where the result is mutable). That changes no output (a test
  compares episodes with and without it), cuts a step and a new game's ``reset`` to about 60 % and a reset to the
  same game to a few percent.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import sys
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import textworld
from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredExpert, AlfredExpertType, AlfredInfos
from textworld.envs import PddlEnv

__all__ = ["INTRO_BANNER", "install_speedups", "make_engine", "plan_from_here", "play_expert", "preserved_argv"]

INTRO_BANNER = "-= Welcome to TextWorld, ALFRED! =-"
"""The first line of every ALFWorld game's opening text."""


@contextmanager
def preserved_argv() -> Iterator[None]:
    """Restore ``sys.argv`` after a block that runs Fast Downward's translator (which replaces it)."""
    saved = sys.argv
    try:
        yield
    finally:
        sys.argv = saved


_TRANSLATION_CACHE_SIZE = 16
_speedups_installed = False


def install_speedups() -> None:
    """Memoize the engine's pure, repeated work (see the module docstring); idempotent, process-wide."""
    global _speedups_installed
    if _speedups_installed:
        return
    import fast_downward
    import textworld.envs.pddl.textgen as textgen
    from textworld.logic import Rule

    translate = fast_downward.pddl2sas
    translations: OrderedDict[tuple[str, bool], tuple] = OrderedDict()

    @functools.wraps(translate)
    def cached_translate(domain: str, problem: str, verbose: bool = False, optimize: bool = False):
        key = (hashlib.sha256(f"{domain}\0{problem}".encode()).hexdigest(), bool(optimize))
        if key in translations:
            translations.move_to_end(key)
            return translations[key]
        result = translations[key] = translate(domain, problem, verbose=verbose, optimize=optimize)
        if len(translations) > _TRANSLATION_CACHE_SIZE:
            translations.popitem(last=False)
        return result

    parse_symbols = textgen._parse_and_convert
    parsed_symbols: dict[tuple, list] = {}

    def cached_parse_symbols(text, rule_name=None, **kwargs):
        key = (text, rule_name, tuple(sorted(kwargs.items())))
        if key not in parsed_symbols:
            parsed_symbols[key] = parse_symbols(text, rule_name=rule_name, **kwargs)
        return copy.deepcopy(parsed_symbols[key])  # symbols get their context assigned by the caller

    parse_query = functools.lru_cache(maxsize=4096)(Rule.parse_conjunctive_query.__func__.__get__(Rule))

    fast_downward.pddl2sas = cached_translate
    textgen._parse_and_convert = cached_parse_symbols
    Rule.parse_conjunctive_query = classmethod(lambda cls, expr: parse_query(expr))
    _speedups_installed = True


def make_engine(expert: bool = False, speedups: bool = True) -> textworld.core.Wrapper:
    """A fresh ALFWorld engine, nothing loaded yet, reporting admissible commands and the win flag.

    Args:
        expert: Attach ALFWorld's planner expert (``AlfredExpert``, planner type): every state then carries
            ``extra.expert_plan``, a plan from the current state, at the price of a replan per step (seconds in a
            messy kitchen; ``plan_from_here`` plans only when asked).
        speedups: Call ``install_speedups`` first.
    """
    if speedups:
        install_speedups()
    infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
    engine = PddlEnv(infos)
    engine = AlfredDemangler(engine, shuffle=False)
    engine = AlfredInfos(engine)
    if expert:
        infos.extras.append("expert_plan")
        engine = AlfredExpert(engine, expert_type=AlfredExpertType.PLANNER)
    return engine


def plan_from_here(engine: textworld.core.Wrapper) -> list[str]:
    """The planner's plan from the engine's current state, computed now.

    The same call ``PddlEnv`` makes for ``policy_commands`` (and ``AlfredExpert`` passes on as ``expert_plan``) after
    every step when asked to; doing it on demand spares the replan on steps nobody asks for a plan.
    """
    base = engine.unwrapped
    return list(base._pddl_state.replan(base._entity_infos))


def play_expert(game_file: str | Path) -> list[str] | None:
    """The planner's plan from the start of ``game_file`` if playing it wins the game (reward 1), else ``None``.

    This is how the generator checks solvability: the plan is what ``AlfredExpert`` (planner type) offers at the
    start (TextWorld's ``policy_commands``, see ``plan_from_here``); it is then played without replanning.
    """
    engine = make_engine(expert=False)
    with preserved_argv():
        engine.load(str(game_file))
        state = engine.reset()
        plan = plan_from_here(engine)
        if not plan or state["won"]:
            return None
        for command in plan:
            state, reward, done = engine.step(command)
            if done:
                break
        return plan if state["won"] and reward == 1 else None
