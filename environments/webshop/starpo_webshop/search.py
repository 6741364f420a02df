"""The store's search engine: BM25 over the product documents, with ``bm25s``.

WebShop indexes each product as one lower-cased document (title, description, first feature bullet and the option
values) with Lucene through pyserini, and shows the top 50 hits. Here the same documents are indexed with ``bm25s``
using Lucene's BM25 variant, pyserini's default parameters (``k1=0.9``, ``b=0.4``), English stop words and the Porter
stemmer. Hits are the documents with a positive score, best first, ties in catalog order.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from types import ModuleType

import numpy as np
import Stemmer

from .records import Product


def _import_bm25s_without_jax() -> ModuleType:
    """``bm25s``, kept from JAX. Where JAX imports, ``bm25s`` runs a JAX computation at import, and JAX then claims
    most of a GPU's memory (its default preallocation) in the process that trains the agent on that GPU: seen on an
    H200, where three WebShop runs side by side ran out of memory. The store needs only BM25 scores, in numpy."""
    hidden = ("jax", "jax.lax")
    saved = {name: sys.modules[name] for name in hidden if name in sys.modules}
    sys.modules.update(dict.fromkeys(hidden))  # None in sys.modules: `import jax.lax` raises ImportError
    try:
        import bm25s
    finally:
        for name in hidden:
            if name in saved:
                sys.modules[name] = saved[name]
            else:
                del sys.modules[name]
    return bm25s


bm25s = _import_bm25s_without_jax()

SEARCH_RETURN_N = 50


def product_document(product: Product) -> str:
    """The text a product is indexed under, as WebShop's search engine builds it."""
    option_text = ", and ".join(f"{name}: {', '.join(values)}" for name, values in product.options.items())
    first_feature = product.features[0] if product.features else ""
    return " ".join([product.title, product.description, first_feature, option_text]).lower()


class SearchEngine:
    """BM25 search over a list of products.

    Args:
        products: The catalog; results are indices into it.
        k1: BM25 term-frequency saturation.
        b: BM25 length normalisation.
    """

    def __init__(self, products: Sequence[Product], k1: float = 0.9, b: float = 0.4):
        self._stemmer = Stemmer.Stemmer("porter")
        self._bm25 = bm25s.BM25(k1=k1, b=b, method="lucene")
        corpus = [product_document(product) for product in products]
        self._bm25.index(self._tokenize(corpus), show_progress=False)
        self.num_documents = len(corpus)

    def _tokenize(self, texts: list[str]) -> list[list[str]]:
        return bm25s.tokenize(texts, stopwords="en", stemmer=self._stemmer, return_ids=False, show_progress=False)

    def scores(self, query: str) -> np.ndarray:
        """The BM25 score of every document for ``query``."""
        tokens = self._tokenize([query.lower()])[0]
        if not tokens:
            return np.zeros(self.num_documents, dtype=np.float32)
        return self._bm25.get_scores(tokens)

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[int]:
        """Indices of the (at most ``k``) best-scoring products for ``query``, best first."""
        scores = self.scores(query)
        order = np.lexsort((np.arange(len(scores)), -scores))  # by score, then catalog order
        return [int(i) for i in order[:k] if scores[i] > 0]
