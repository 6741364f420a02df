"""``WebShopEnv``: WebShop's text environment, offline, over the package's catalog.

The agent shops for the customer whose instruction heads every page. Actions are WebShop's: ``search[query]`` on the
search page and ``click[button]`` for a button, product id or option value shown on the page (case-insensitive, as
WebShop lower-cases the argument). Pages and their buttons:

======================  ==============================================================================
page                    clickable
======================  ==============================================================================
search                  (none; ``search[...]`` with any non-empty query)
results (10 a page)     ``Back to Search``, ``< Prev`` / ``Next >`` where there is such a page, product ids
item                    ``Back to Search``, ``< Prev`` (to the results), option values, ``Description``,
                        ``Features``, ``Reviews``, ``Buy Now``
Description/Features/   ``Back to Search``, ``< Prev`` (to the item)
Reviews
======================  ==============================================================================

Anything else is invalid: the state does not change, the reward is 0 and ``info["action_is_valid"]`` is False.
``Buy Now`` ends the episode with WebShop's reward (``reward.get_reward``); ``info["success"]`` is ``reward == 1``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from trl_starpo.envs import TextEnvironment

from . import pages
from .catalog import Catalog, load_catalog
from .goals import make_task, search_query
from .records import Goal
from .reward import get_reward

SYSTEM_PROMPT = (
    "You are shopping on WebShop, an online store, for a customer whose instruction is shown at the top of every "
    "page.\n"
    "Goal: buy the product that best matches the instruction: its kind, the attributes it asks for, the options it "
    "names (such as color or size) and its price bound. Buying ends the episode and is scored from 0 to 1; only a "
    "product matching everything scores 1.\n"
    "Pages are shown as text, their parts separated by [SEP]. Actions:\n"
    "- search[your query] on the search page;\n"
    "- click[button] to click a button, product id or option value shown on the page: Back to Search, < Prev, "
    "Next >, a product id such as B0ABCD1234, an option value, Description, Features, Reviews, Buy Now.\n"
    "On a product page, click each option value the instruction asks for before you click Buy Now."
)
ACTION_DESCRIPTION = "search[query] on the search page, or click[button] with a button, product id or option shown"
EXAMPLE_ACTION = "search[red running shoes]"
"""Valid where every episode starts: on the search page, where any non-empty search is."""

_ACTION = re.compile(r"\s*(search|click)\s*\[(.*)\]", re.IGNORECASE | re.DOTALL)

SEARCH, RESULTS, ITEM, SUB, DONE = "search", "results", "item", "sub", "done"


def parse_action(action: str) -> tuple[str, str] | None:
    """``"click[Buy Now]"`` -> ``("click", "buy now")``; ``None`` unless the text starts with ``search[`` or ``click[``.

    As WebShop's parser, the argument runs to the last ``]`` and what follows is ignored; the argument is lower-cased
    (and its whitespace normalised). An empty argument is no action.
    """
    match = _ACTION.match(action)
    if match is None:
        return None
    name, argument = match.group(1).lower(), " ".join(match.group(2).split()).lower()
    return (name, argument) if argument else None


@dataclass(frozen=True)
class _Page:
    """Where the browser is: the page, the search it came from, the product and the options selected."""

    kind: str = SEARCH
    keywords: str | None = None
    results: tuple[str, ...] = ()
    number: int = 1
    asin: str | None = None
    options: tuple[tuple[str, str], ...] = ()
    sub: str | None = None
    reward: float = 0.0

    @property
    def selected(self) -> dict[str, str]:
        return dict(self.options)


@dataclass
class _Episode:
    goal: Goal
    page: _Page = field(default_factory=_Page)
    queries: list[str] = field(default_factory=list)
    steps: int = 0
    done: bool = False


class WebShopEnv(TextEnvironment):
    """WebShop over a generated catalog, with WebShop's pages, actions and reward.

    Args:
        catalog: The catalog: ``None`` for the shipped one, a source for ``load_catalog`` (a ``.jsonl`` file, a Hub
            dataset id or a folder), or a ``Catalog``.
        max_steps: Valid actions before the episode is truncated (reward 0).
    """

    system_prompt = SYSTEM_PROMPT
    action_description = ACTION_DESCRIPTION
    example_action = EXAMPLE_ACTION

    def __init__(self, catalog: str | Catalog | None = None, max_steps: int = 15):
        self.catalog = catalog if isinstance(catalog, Catalog) else load_catalog(catalog)
        self.max_steps = max_steps
        self._seeds = np.random.default_rng()
        self._episode: _Episode | None = None

    # ------------------------------------------------------------------ protocol

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Start the task ``options["task"]`` (a task row), or else a task drawn from ``seed`` (random if ``None``)."""
        task = (options or {}).get("task")
        if task is None:
            seed = int(self._seeds.integers(2**31)) if seed is None else seed
            task = make_task(self.catalog, seed)
        version = task.get("catalog_version")
        if version not in (None, self.catalog.version):
            raise ValueError(f"The task was written for catalog {version}, the environment has {self.catalog.version}.")
        goal = Goal.from_row(task)
        if goal.asin not in self.catalog.by_asin:
            raise ValueError(f"The task's product {goal.asin} is not in the catalog.")
        self._episode = _Episode(goal)
        _ = self.catalog.search_engine  # build the index now rather than inside the first step
        info = {key: task[key] for key in ("task_id", "seed") if task.get(key) is not None}
        return self._observation(), info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Apply one ``search[...]`` or ``click[...]`` action; see the module docstring."""
        episode = self._require_episode()
        if episode.done:
            raise RuntimeError("The episode is over; call reset() first.")
        parsed = parse_action(action)
        target = self._target(parsed) if parsed is not None else None
        if target is None:
            info = self.step_info(valid=False, effective=False, success=False)
            return f"Invalid action.\n{self._observation()}", 0.0, False, False, info

        before = episode.page
        episode.steps += 1
        if parsed[0] == "search":
            episode.queries.append(parsed[1])
        episode.page = target
        extra: dict[str, Any] = {}
        reward, terminated = 0.0, target.kind == DONE
        if terminated:
            reward, extra = self._purchase(before)
            episode.page = replace(target, reward=reward)
        success = terminated and reward == 1.0
        truncated = not terminated and episode.steps >= self.max_steps
        episode.done = terminated or truncated
        info = self.step_info(valid=True, effective=episode.page != before, success=success, **extra)
        return self._observation(), reward, terminated, truncated, info

    # ------------------------------------------------------------------ baselines

    def admissible_actions(self) -> list[str]:
        """The valid actions on the current page, buttons lower-cased as WebShop lists them.

        On the search page any non-empty ``search[...]`` is valid; the one listed searches for the instruction.
        """
        episode = self._require_episode()
        if episode.done:
            return []
        if episode.page.kind == SEARCH:
            return [f"search[{search_query(episode.goal.instruction_text)}]"]
        return [f"click[{text}]" for text in self._clickables(episode.page)]

    def expert_action(self) -> str | None:
        """The scripted expert's next action: search with the instruction (then with the goal product's title if the
        first search misses it), open the goal product, select the goal options and buy."""
        episode = self._require_episode()
        if episode.done:
            return None
        goal, page = episode.goal, episode.page
        if page.kind == SEARCH:
            query = search_query(goal.instruction_text)
            if parse_action(f"search[{query}]")[1] in episode.queries:  # searched already: look up the title
                query = self.catalog[goal.asin].title
            return f"search[{query}]"
        if page.kind == RESULTS:
            if goal.asin not in page.results:
                return f"click[{pages.BACK_TO_SEARCH.lower()}]"
            wanted_page = page.results.index(goal.asin) // pages.PRODUCTS_PER_PAGE + 1
            if wanted_page == page.number:
                return f"click[{goal.asin.lower()}]"
            return f"click[{(pages.NEXT_PAGE if wanted_page > page.number else pages.PREV_PAGE).lower()}]"
        if page.kind == ITEM and page.asin == goal.asin:
            selected = page.selected
            for name, values in self.catalog[goal.asin].options.items():
                wanted = goal.goal_options.get(name)
                if wanted in values and selected.get(name) != wanted:
                    return f"click[{wanted}]"
            return f"click[{pages.BUY_NOW.lower()}]"
        return f"click[{pages.PREV_PAGE.lower()}]"

    # ------------------------------------------------------------------ state

    @property
    def goal(self) -> Goal:
        """The goal of the current episode."""
        return self._require_episode().goal

    @property
    def selected_options(self) -> dict[str, str]:
        """The options selected on the current product page (option name to value)."""
        return self._require_episode().page.selected

    def _require_episode(self) -> _Episode:
        if self._episode is None:
            raise RuntimeError("Call reset() before using the environment.")
        return self._episode

    def _clickables(self, page: _Page) -> dict[str, _Page]:
        """Lower-cased clickable text to the page it leads to, in page order."""
        back = {pages.BACK_TO_SEARCH.lower(): _Page()}
        if page.kind == RESULTS:
            targets = dict(back)
            if page.number > 1:
                targets[pages.PREV_PAGE.lower()] = replace(page, number=page.number - 1)
            if page.number * pages.PRODUCTS_PER_PAGE < len(page.results):
                targets[pages.NEXT_PAGE.lower()] = replace(page, number=page.number + 1)
            for asin in self._page_asins(page):
                targets.setdefault(asin.lower(), replace(page, kind=ITEM, asin=asin, options=()))
            return targets
        if page.kind == ITEM:
            targets = {**back, pages.PREV_PAGE.lower(): replace(page, kind=RESULTS, asin=None, options=())}
            for name, values in self.catalog[page.asin].options.items():
                for value in values:
                    selected = tuple({**page.selected, name: value}.items())
                    targets.setdefault(value.lower(), replace(page, options=selected))
            for name in pages.SUB_PAGES:
                targets.setdefault(name.lower(), replace(page, kind=SUB, sub=name))
            targets[pages.BUY_NOW.lower()] = replace(page, kind=DONE)
            return targets
        if page.kind == SUB:
            return {**back, pages.PREV_PAGE.lower(): replace(page, kind=ITEM, sub=None)}
        return {}

    def _target(self, parsed: tuple[str, str]) -> _Page | None:
        """The page an action leads to, or ``None`` if the action is invalid here."""
        name, argument = parsed
        page = self._require_episode().page
        if name == "search":
            if page.kind != SEARCH:
                return None
            return _Page(kind=RESULTS, keywords=argument, results=tuple(self.catalog.search(argument)))
        return self._clickables(page).get(argument)

    def _page_asins(self, page: _Page) -> tuple[str, ...]:
        start = (page.number - 1) * pages.PRODUCTS_PER_PAGE
        return page.results[start : start + pages.PRODUCTS_PER_PAGE]

    def _purchase(self, page: _Page) -> tuple[float, dict[str, Any]]:
        product = self.catalog[page.asin]
        reward, reward_info = get_reward(product, self._episode.goal, price=product.price, options=page.selected)
        return reward, {"reward_info": reward_info, "purchased": {"asin": page.asin, "options": page.selected}}

    def _observation(self) -> str:
        episode = self._require_episode()
        page, instruction = episode.page, episode.goal.instruction_text
        if page.kind == SEARCH:
            return pages.search_page(instruction)
        if page.kind == RESULTS:
            products = [self.catalog[asin] for asin in self._page_asins(page)]
            return pages.results_page(instruction, page.number, len(page.results), products)
        if page.kind == ITEM:
            return pages.item_page(instruction, self.catalog[page.asin])
        if page.kind == SUB:
            return pages.sub_page(instruction, self.catalog[page.asin], page.sub)
        return pages.done_page(page.reward)
