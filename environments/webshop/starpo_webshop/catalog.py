"""The product catalog: its procedural generator and its loader.

``generate_catalog(seed)`` draws every product from ``numpy.random.default_rng(seed)``: for each product type of
``vocabulary.PRODUCT_TYPES``, a number of products with a brand, three to five attributes, a title and texts built from
them, option groups, a price (sometimes shown as a range) and a few reviews. The shipped catalog is
``data/catalog.jsonl`` (``CATALOG_VERSION``); ``load_catalog()`` reads it, or another catalog with the same columns,
through ``datasets.load_dataset``.

Option values are chosen so that WebShop's matching tells them apart: within a product no two values normalise to the
same colour word or match fuzzily (``size`` values, compared exactly, only need to differ), and no value occurs in the
product's own texts.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import cache, cached_property
from pathlib import Path

import numpy as np

from .records import Product, Review
from .reward import EXACT_MATCH_OPTIONS, fuzzy_match, normalize_color
from .search import SearchEngine
from .vocabulary import BRANDS, DESCRIPTION_CLOSERS, FEATURE_LINES, PRODUCT_TYPES, REVIEWS, ProductType

CATALOG_VERSION = "1.0"
CATALOG_SEED = 0
PRODUCTS_PER_TYPE = 25
DATA_DIR = Path(__file__).parent / "data"
CATALOG_FILE = "catalog.jsonl"

_ASIN_CHARS = np.array(list("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"))
_UPPER_WORDS = {"usb", "led", "gmo", "dpi", "bbq"}
_CENTS = (0.99, 0.49, 0.95, 0.0, 0.79)


def title_case(phrase: str) -> str:
    """``"usb c charging cable"`` -> ``"USB C Charging Cable"``; hyphenated words keep their hyphen."""
    words = []
    for word in phrase.split():
        if word in _UPPER_WORDS:
            words.append(word.upper())
        else:
            words.append("-".join(part[:1].upper() + part[1:] for part in word.split("-")))
    return " ".join(words)


def join_phrases(phrases: Sequence[str]) -> str:
    """``["a"]`` -> ``"a"``, ``["a", "b"]`` -> ``"a and b"``, ``["a", "b", "c"]`` -> ``"a, b and c"``."""
    return phrases[0] if len(phrases) == 1 else f"{', '.join(phrases[:-1])} and {phrases[-1]}"


def options_conflict(name_a: str, value_a: str, name_b: str, value_b: str) -> bool:
    """Whether WebShop's option matching could take one value for the other.

    Values are compared after colour normalisation; a ``size`` value is matched by equality, any other value fuzzily
    against every goal option.
    """
    a, b = normalize_color(value_a), normalize_color(value_b)
    if a == b:
        return True
    if name_a.lower() in EXACT_MATCH_OPTIONS and name_b.lower() in EXACT_MATCH_OPTIONS:
        return False
    return fuzzy_match(a, b)


def _draw(rng: np.random.Generator, pool: Sequence, size: int | None = None):
    """Draw from a sequence of Python objects (``rng.choice`` would turn strings into numpy strings)."""
    if size is None:
        return pool[int(rng.integers(len(pool)))]
    return [pool[int(i)] for i in rng.choice(len(pool), size=size, replace=False)]


def _asin(rng: np.random.Generator, taken: set[str]) -> str:
    while True:
        asin = "B0" + "".join(rng.choice(_ASIN_CHARS, size=8))
        if asin not in taken:
            taken.add(asin)
            return asin


def _choose_options(rng: np.random.Generator, kind: ProductType, text: str) -> dict[str, tuple[str, ...]]:
    chosen: dict[str, list[str]] = {}
    for name, pool in kind.options.items():
        wanted = int(rng.integers(2, min(6, len(pool)) + 1))
        accepted: list[str] = []
        for value in _draw(rng, pool, len(pool)):
            if len(accepted) == wanted:
                break
            if normalize_color(value) in text:
                continue
            others = [(other_name, v) for other_name, values in chosen.items() for v in values]
            others += [(name, v) for v in accepted]
            if not any(options_conflict(name, value, other_name, v) for other_name, v in others):
                accepted.append(value)
        if len(accepted) < 2:
            raise ValueError(f"Could not draw two distinguishable {name!r} values for {kind.query!r}.")
        chosen[name] = sorted(accepted, key=pool.index)
    return {name: tuple(values) for name, values in chosen.items()}


def _price(rng: np.random.Generator, kind: ProductType) -> tuple[float, str]:
    low, high = kind.price
    price = round(float(np.floor(rng.uniform(low, high))) + _draw(rng, _CENTS), 2)
    if rng.random() < 0.2:  # a price range; the reward uses a price within it, as WebShop does
        top = round(price * float(rng.uniform(1.1, 1.6)), 2)
        return round(float(rng.uniform(price, top)), 2), f"${price:.2f} to ${top:.2f}"
    return price, f"${price:.2f}"


def generate_product(rng: np.random.Generator, kind: ProductType, taken_asins: set[str]) -> Product:
    """Draw one product of ``kind`` (its asin not in ``taken_asins``, which it joins)."""
    asin = _asin(rng, taken_asins)
    brand = _draw(rng, BRANDS)
    attributes = _draw(rng, kind.attributes, int(rng.integers(3, 6)))
    in_title = int(rng.integers(1, 3))
    tail = attributes[in_title : in_title + int(rng.integers(0, 3))]
    audience = _draw(rng, kind.audiences)
    title = " ".join([brand, *map(title_case, attributes[:in_title]), title_case(kind.name)])
    title += f" {audience}" if audience else ""
    title += "".join(f", {title_case(attribute)}" for attribute in tail)

    blurbs = list(kind.blurbs)
    description = " ".join(
        [
            f"Meet the {brand} {kind.name}.",
            blurbs[int(rng.integers(len(blurbs)))],
            f"Key features: {join_phrases(attributes)}.",
            _draw(rng, DESCRIPTION_CLOSERS),
        ]
    )
    features = [f"{attribute.upper()}: {_draw(rng, FEATURE_LINES)}" for attribute in attributes]
    features.insert(int(rng.integers(len(features) + 1)), _draw(rng, blurbs))

    text = " ".join([title, description, *features]).lower()
    options = _choose_options(rng, kind, text)
    price, price_tag = _price(rng, kind)

    reviews = []
    for review_title, score, body in _draw(rng, REVIEWS, int(rng.integers(0, 4))):
        attribute = _draw(rng, attributes)
        body = body.format(name=kind.name, attribute=attribute, Attribute=attribute.capitalize())
        reviews.append(Review(review_title, score, body))
    rating = f"{np.mean([r.score for r in reviews]):.1f}" if reviews else "N.A."

    return Product(
        asin=asin,
        category=kind.category,
        query=kind.query,
        product_category=kind.product_category,
        title=title,
        price=price,
        price_tag=price_tag,
        rating=rating,
        description=description,
        features=tuple(features),
        attributes=tuple(attributes),
        options=options,
        reviews=tuple(reviews),
    )


def generate_catalog(
    seed: int = CATALOG_SEED,
    products_per_type: int = PRODUCTS_PER_TYPE,
    product_types: Sequence[ProductType] = PRODUCT_TYPES,
) -> list[Product]:
    """Generate the catalog, deterministically from ``seed``: ``products_per_type`` products of each type, shuffled."""
    rng = np.random.default_rng(seed)
    taken: set[str] = set()
    products = [generate_product(rng, kind, taken) for kind in product_types for _ in range(products_per_type)]
    return [products[int(i)] for i in rng.permutation(len(products))]


class Catalog:
    """The products of the store, by asin, with their search engine (built on first use).

    Args:
        products: The products, in catalog order (search ties follow it).
        version: The catalog's version; tasks name the version they were written for.
    """

    def __init__(self, products: Iterable[Product], version: str = CATALOG_VERSION):
        self.products = list(products)
        self.version = version
        self.by_asin = {product.asin: product for product in self.products}
        if len(self.by_asin) != len(self.products):
            raise ValueError("Catalog asins must be unique.")

    def __len__(self) -> int:
        return len(self.products)

    def __getitem__(self, asin: str) -> Product:
        return self.by_asin[asin]

    @cached_property
    def search_engine(self) -> SearchEngine:
        """The BM25 index of the catalog."""
        return SearchEngine(self.products)

    def search(self, query: str) -> list[str]:
        """Asins of the top results for ``query``, best first (at most 50)."""
        return [self.products[i].asin for i in self.search_engine.search(query)]

    def to_rows(self) -> list[dict]:
        """The catalog as rows of ``catalog.jsonl``."""
        return [{**product.to_row(), "catalog_version": self.version} for product in self.products]


@cache
def load_catalog(source: str | None = None) -> Catalog:
    """Load a catalog with ``datasets.load_dataset`` (cached per ``source``).

    Args:
        source: ``None`` for the shipped ``data/catalog.jsonl``; otherwise a JSON Lines file, or a Hub dataset id or
            local dataset folder whose ``train`` split has the catalog's columns.
    """
    import datasets

    if source is None:
        dataset = datasets.load_dataset("json", data_files=str(DATA_DIR / CATALOG_FILE), split="train")
    elif source.endswith((".json", ".jsonl")):
        dataset = datasets.load_dataset("json", data_files=source, split="train")
    else:
        dataset = datasets.load_dataset(source, split="train")
    versions = set(dataset["catalog_version"]) if "catalog_version" in dataset.column_names else {None}
    if len(versions) != 1:
        raise ValueError(f"A catalog must have one version; found {sorted(map(str, versions))}.")
    version = versions.pop() or "unversioned"
    return Catalog((Product.from_row(row) for row in dataset), version=version)
