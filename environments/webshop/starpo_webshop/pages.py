"""The store's pages in WebShop's simple text mode: the visible texts of the page, joined with `` [SEP] ``.

Each function returns the observation of one page. The texts and their order follow WebShop's page templates (search
page, results, item page, Description / Features / Reviews sub-pages and the page after Buy Now); option values and
product ids appear as they are clicked.
"""

from __future__ import annotations

from collections.abc import Sequence

from .records import Product

SEP = " [SEP] "
PRODUCTS_PER_PAGE = 10

BACK_TO_SEARCH = "Back to Search"
PREV_PAGE = "< Prev"
NEXT_PAGE = "Next >"
BUY_NOW = "Buy Now"
SUB_PAGES = ("Description", "Features", "Reviews")


def _header(instruction: str) -> list[str]:
    return ["Instruction:", instruction]


def search_page(instruction: str) -> str:
    """The start page: the instruction and the search box."""
    return SEP.join(["WebShop", *_header(instruction), "Search"])


def results_page(instruction: str, page: int, total: int, products: Sequence[Product]) -> str:
    """One page of search results: navigation buttons, then id, title and price of each product."""
    texts = [*_header(instruction), BACK_TO_SEARCH, f"Page {page} (Total results: {total})"]
    if page > 1:
        texts.append(PREV_PAGE)
    if page * PRODUCTS_PER_PAGE < total:
        texts.append(NEXT_PAGE)
    for product in products:
        texts += [product.asin, product.title, product.price_tag]
    return SEP.join(texts)


def item_page(instruction: str, product: Product) -> str:
    """A product page: its option groups and values, title, price, rating and the buttons."""
    texts = [*_header(instruction), BACK_TO_SEARCH, PREV_PAGE]
    for name, values in product.options.items():
        texts += [name, *values]
    texts += [product.title, f"Price: {product.price_tag}", f"Rating: {product.rating}", *SUB_PAGES, BUY_NOW]
    return SEP.join(texts)


def sub_page(instruction: str, product: Product, name: str) -> str:
    """The Description, Features or Reviews page of a product."""
    texts = [*_header(instruction), BACK_TO_SEARCH, PREV_PAGE]
    if name == "Description":
        texts.append(product.description or "No Description")
    elif name == "Features":
        texts += list(product.features) or ["No Features"]
    elif name == "Reviews":
        for review in product.reviews:
            texts += [f'"{review.title}"', str(review.score), review.body]
        if not product.reviews:
            texts.append("No reviews found")
    else:
        raise ValueError(f"Unknown sub-page {name!r}; choose one of {', '.join(SUB_PAGES)}.")
    return SEP.join(texts)


def done_page(reward: float) -> str:
    """The page after Buy Now, with the score."""
    return SEP.join(["Thank you for shopping with us!", "Your score (min 0.0, max 1.0)", f"{reward}"])
