"""Goals: what a customer asks for, written from one product of the catalog in WebShop's wording.

A goal names one to three of the product's attributes, one value of each of its option groups and a price bound
drawn as WebShop draws it: of the first four multiples of ten above the product's price, two are sampled and the
larger is the bound. The instruction reads like WebShop's::

    i need a long lasting and aluminum free deodorant with scent: lavender, and size: 2.6 ounce (pack of 1),
    and price lower than 30.00 dollars
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .catalog import Catalog, join_phrases
from .records import Goal, Product
from .vocabulary import PRODUCT_TYPES

PRICE_RANGE = tuple(10.0 * i for i in range(1, 100))
NO_PRICE_BOUND = 1_000_000.0
PRICE_CLAUSE = ", and price lower than"
TYPE_NAMES = {kind.query: kind.name for kind in PRODUCT_TYPES}

OPENERS = ("i need", "i am looking for", "i want", "i'm looking for", "i would like", "find me", "i want to buy")
MASS_NOUNS = frozenset(
    {"shampoo", "face moisturizer", "nail polish", "body wash", "ground coffee", "extra virgin olive oil",
     "trail mix", "gummy candy", "pasta sauce", "beef jerky"}
)  # fmt: skip


def price_bound(price: float, rng: np.random.Generator) -> float:
    """WebShop's price bound for a product costing ``price``: the larger of two of the next four multiples of ten."""
    candidates = [bound for bound in PRICE_RANGE if bound > price][:4]
    if len(candidates) < 2:
        return NO_PRICE_BOUND
    first, second = rng.choice(len(candidates), size=2, replace=False)
    return candidates[max(int(first), int(second))]


def _plural(name: str) -> bool:
    return name.endswith("s") and not name.endswith("ss")


def _article(name: str, next_word: str) -> str:
    if name in MASS_NOUNS or _plural(name):
        return "some"
    return "an" if next_word[0] in "aeiou" else "a"


def instruction_text(
    name: str, attributes: list[str], options: dict[str, str], price_upper: float, rng: np.random.Generator
) -> str:
    """The instruction for a product named ``name`` with the given goal, in one of WebShop's phrasings."""
    opener = OPENERS[int(rng.integers(len(OPENERS)))]
    wanted = join_phrases(attributes) if attributes else ""
    if not wanted:
        text = f"{opener} {_article(name, name)} {name}"
    elif rng.random() < 0.7:
        text = f"{opener} {_article(name, wanted)} {wanted} {name}"
    else:
        verb = "are" if _plural(name) else "is"
        text = f"{opener} {_article(name, name)} {name} that {verb} {wanted}"
    if options:
        if rng.random() < 0.6:  # WebShop's synthetic goals: "with color: black, and size: large"
            text += " with " + ", and ".join(f"{key}: {value}" for key, value in options.items())
        else:
            text += " in " + " and ".join(f"{key} {value}" for key, value in options.items())
    if price_upper < NO_PRICE_BOUND:
        text += f"{PRICE_CLAUSE} {price_upper:.2f} dollars"
    return text


def search_query(instruction: str) -> str:
    """The instruction without its price clause: what the scripted expert types into the search box."""
    return instruction.split(PRICE_CLAUSE)[0].strip()


def make_goal(product: Product, rng: np.random.Generator) -> Goal:
    """Draw a goal for ``product``: attributes, options, price bound and the instruction naming them."""
    count = min(len(product.attributes), int(rng.choice([1, 2, 3], p=[0.25, 0.5, 0.25])))
    attributes = [product.attributes[int(i)] for i in rng.choice(len(product.attributes), count, replace=False)]
    options = {name: values[int(rng.integers(len(values)))] for name, values in product.options.items()}
    price_upper = price_bound(product.price, rng)
    name = TYPE_NAMES.get(product.query, product.query)
    return Goal(
        asin=product.asin,
        instruction_text=instruction_text(name, attributes, options, price_upper, rng),
        query=product.query,
        product_category=product.product_category,
        name=product.title,
        attributes=tuple(attributes),
        goal_options=options,
        price_upper=price_upper,
        category=product.category,
    )


def make_task(catalog: Catalog, seed: int) -> dict[str, Any]:
    """A task row for a goal drawn from ``seed``: a product of ``catalog`` and a goal written from it."""
    rng = np.random.default_rng(seed)
    product = catalog.products[int(rng.integers(len(catalog)))]
    return {"seed": seed, "catalog_version": catalog.version, **make_goal(product, rng).to_row()}
