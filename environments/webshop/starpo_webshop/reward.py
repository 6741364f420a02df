"""WebShop's reward for a purchase (web_agent_site/engine/goal.py ``get_reward``), rewritten for this package.

    reward = r_type * (attributes matched + options matched + price ok) / (goal attributes + goal options + 1)

- ``r_type`` (type match): 1.0 when the bought product is of the goal's kind, lowered to 0.5 when neither the search
  query, nor two levels of the category path, nor more than a fifth of the goal title's nouns match; 0.1 when under a
  tenth of those nouns match; 0.0 when none do.
- An attribute of the goal is matched when one of the product's attributes matches it fuzzily (token-set ratio above
  85), or when it occurs in the product's title, features or description.
- Each option the agent selected is matched when it equals a goal option (for ``size``) or matches one fuzzily (any
  other option), or when it occurs in the product's title, features or description; option values are first
  normalised to the first WebShop colour word they contain.
- The price counts when the product's price is at most the goal's bound.

Fuzzy matching is ``rapidfuzz``'s token-set ratio with thefuzz's preprocessing and rounding, which is what WebShop's
``thefuzz`` calls compute. The one departure: WebShop finds a title's nouns with spaCy's ``en_core_web_lg`` tagger,
which cannot be installed offline; here they are the title's words outside the generator's list of adjectives and
function words (``vocabulary.NON_NOUNS``). Pass ``noun_words=`` to use another tagger.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rapidfuzz import fuzz
from rapidfuzz.utils import default_process

from .records import Goal, Product
from .vocabulary import COLOR_SET, NON_NOUNS

EXACT_MATCH_OPTIONS = ("size",)
FUZZY_THRESHOLD = 85
CATEGORY_SEPARATOR = "›"

_WORD = re.compile(r"[a-z0-9]+(?:['.-][a-z0-9]+)*")


def normalize_color(value: str) -> str:
    """The first WebShop colour word contained in ``value`` (``"navy blue"`` gives ``"blue"``), else ``value``."""
    return next((color for color in COLOR_SET if color in value), value)


def fuzzy_score(a: str, b: str) -> int:
    """thefuzz's ``token_set_ratio(a, b)``: lower-cased, punctuation-stripped token sets, rounded to an integer."""
    a, b = default_process(a), default_process(b)
    if not a or not b:
        return 0
    return round(fuzz.token_set_ratio(a, b))


def fuzzy_match(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` match under WebShop's fuzzy rule (score above 85)."""
    return fuzzy_score(a, b) > FUZZY_THRESHOLD


def noun_words(title: str) -> list[str]:
    """The nouns (and proper nouns) of a title, lower-cased, repeats kept: the words not in ``NON_NOUNS``."""
    return [word for word in _WORD.findall(title.lower()) if word not in NON_NOUNS and not word[0].isdigit()]


def type_reward(product: Product, goal: Goal, noun_words: Callable[[str], list[str]] = noun_words) -> dict[str, Any]:
    """The type-match factor ``r_type`` and what it was computed from (``query_match``, ``category_match``,
    ``title_score``)."""
    query_match = product.query == goal.query
    product_levels = {level.strip() for level in product.product_category.split(CATEGORY_SEPARATOR)}
    goal_levels = {level.strip() for level in goal.product_category.split(CATEGORY_SEPARATOR)}
    category_match = len(product_levels & goal_levels) >= 2

    bought, desired = noun_words(product.title), noun_words(goal.name)
    title_score = len(set(bought) & set(desired)) / len(desired) if desired else 0.2

    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return {"r_type": r_type, "query_match": query_match, "category_match": category_match, "title_score": title_score}


def _in_product_text(text: str, product: Product) -> bool:
    return (
        text in product.title.lower()
        or text in " ".join(product.features).lower()
        or text in product.description.lower()
    )


def attribute_matches(product: Product, goal: Goal) -> int:
    """How many goal attributes the product has (fuzzily among its attributes, or verbatim in its texts)."""
    matches = 0
    for wanted in goal.attributes:
        if any(fuzzy_match(have, wanted) for have in product.attributes) or _in_product_text(wanted, product):
            matches += 1
    return matches


def option_matches(product: Product, goal_options: Sequence[str], selected: Mapping[str, str]) -> int:
    """How many of the selected options match a goal option (``size`` exactly, the others fuzzily, or verbatim in
    the product's texts), after colour normalisation."""
    wanted = [normalize_color(value) for value in goal_options]
    matches = 0
    for name, value in selected.items():
        value = normalize_color(value)
        if name.lower() in EXACT_MATCH_OPTIONS:
            matched = value in wanted
        else:
            matched = any(fuzzy_match(goal_value, value) for goal_value in wanted)
        if matched or _in_product_text(value, product):
            matches += 1
    return matches


def get_reward(
    product: Product,
    goal: Goal,
    price: float,
    options: Mapping[str, str],
    noun_words: Callable[[str], list[str]] = noun_words,
) -> tuple[float, dict[str, Any]]:
    """WebShop's reward for buying ``product`` at ``price`` with the selected ``options`` (option name to value).

    Returns:
        The reward in ``[0, 1]`` and its components, with WebShop's verbose keys: ``r_type``, ``query_match``,
        ``category_match``, ``title_score``, ``r_att``, ``w_att``, ``r_option`` and ``w_option`` (when the goal names
        options), ``r_price``, ``w_price``.
    """
    type_info = type_reward(product, goal, noun_words)
    goal_values = list(goal.goal_options.values())
    num_attributes = attribute_matches(product, goal)
    num_options = option_matches(product, goal_values, options)
    price_ok = price <= goal.price_upper
    denominator = len(goal.attributes) + len(goal_values) + 1
    reward = (num_attributes + num_options + price_ok) / denominator * type_info["r_type"]

    info = {
        **type_info,
        "r_att": num_attributes / len(goal.attributes) if goal.attributes else 0.0,
        "w_att": len(goal.attributes) / denominator,
        "r_price": price_ok,
        "w_price": 1 / denominator,
    }
    if goal_values:
        info["r_option"] = num_options / len(goal_values)
        info["w_option"] = len(goal_values) / denominator
    return reward, info
