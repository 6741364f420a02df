"""The two records of the environment: a product of the catalog and the goal of a task.

Both convert to and from the flat rows of the package's ``datasets`` files (``data/catalog.jsonl`` and the task
splits): option groups are stored as lists of ``{"name", "values"}`` and goal options as lists of
``{"name", "value"}``, which Arrow can hold, and become ordered dicts here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Review:
    """A customer review: its title, its 1-5 star score and its text."""

    title: str
    score: int
    body: str


@dataclass(frozen=True)
class Product:
    """One product of the store, with the fields of a WebShop product.

    Attributes:
        asin: The product id, ten characters, upper case (``B0`` and eight letters or digits).
        category: One of WebShop's five categories.
        query: The search query shared by products of the same type (WebShop's ``query``).
        product_category: The category path, levels joined by `` › ``.
        title: The product title (WebShop's ``Title`` and ``name``).
        price: The price the reward compares with the goal's bound.
        price_tag: The price as the pages show it: ``$12.99`` or a range ``$12.99 to $15.49``.
        rating: The average review score as shown (``4.5``), or ``N.A.`` without reviews.
        description: The Description sub-page.
        features: The Features sub-page's bullet points (WebShop's ``BulletPoints``).
        attributes: Short attribute phrases (WebShop's ``Attributes``), matched against goal attributes.
        options: Option groups, name to values, in page order.
        reviews: The Reviews sub-page.
    """

    asin: str
    category: str
    query: str
    product_category: str
    title: str
    price: float
    price_tag: str
    rating: str = "N.A."
    description: str = ""
    features: tuple[str, ...] = ()
    attributes: tuple[str, ...] = ()
    options: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    reviews: tuple[Review, ...] = ()

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Product:
        """Read a catalog row (as stored in ``catalog.jsonl``)."""
        return cls(
            asin=row["asin"],
            category=row["category"],
            query=row["query"],
            product_category=row["product_category"],
            title=row["title"],
            price=float(row["price"]),
            price_tag=row["price_tag"],
            rating=row.get("rating") or "N.A.",
            description=row.get("description") or "",
            features=tuple(row.get("features") or ()),
            attributes=tuple(row.get("attributes") or ()),
            options={group["name"]: tuple(group["values"]) for group in row.get("options") or ()},
            reviews=tuple(Review(r["title"], int(r["score"]), r["body"]) for r in row.get("reviews") or ()),
        )

    def to_row(self) -> dict[str, Any]:
        """The catalog row of this product."""
        return {
            "asin": self.asin,
            "category": self.category,
            "query": self.query,
            "product_category": self.product_category,
            "title": self.title,
            "price": self.price,
            "price_tag": self.price_tag,
            "rating": self.rating,
            "description": self.description,
            "features": list(self.features),
            "attributes": list(self.attributes),
            "options": [{"name": name, "values": list(values)} for name, values in self.options.items()],
            "reviews": [{"title": r.title, "score": r.score, "body": r.body} for r in self.reviews],
        }


@dataclass(frozen=True)
class Goal:
    """What the customer wants: WebShop's goal dict.

    Attributes:
        asin: The product the goal was written from (one product that earns reward 1; others may too).
        instruction_text: The instruction shown on every page.
        query: ``query`` of the goal product, for the type reward.
        product_category: Category path of the goal product, for the type reward.
        name: Title of the goal product, for the type reward.
        attributes: Attribute phrases the instruction asks for.
        goal_options: Option name to the value the instruction asks for.
        price_upper: The price bound (``price lower than ...``).
        category: The goal product's category.
    """

    asin: str
    instruction_text: str
    query: str
    product_category: str
    name: str
    attributes: tuple[str, ...]
    goal_options: Mapping[str, str]
    price_upper: float
    category: str = ""

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Goal:
        """Read the goal of a task row."""
        return cls(
            asin=row["asin"],
            instruction_text=row["instruction_text"],
            query=row["query"],
            product_category=row["product_category"],
            name=row["name"],
            attributes=tuple(row["attributes"]),
            goal_options={option["name"]: option["value"] for option in row.get("goal_options") or ()},
            price_upper=float(row["price_upper"]),
            category=row.get("category") or "",
        )

    def to_row(self) -> dict[str, Any]:
        """The goal's fields of a task row."""
        return {
            "asin": self.asin,
            "instruction_text": self.instruction_text,
            "query": self.query,
            "category": self.category,
            "product_category": self.product_category,
            "name": self.name,
            "attributes": list(self.attributes),
            "goal_options": [{"name": name, "value": value} for name, value in self.goal_options.items()],
            "price_upper": self.price_upper,
        }
