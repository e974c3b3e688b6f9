"""Retrieval scores: a ``Scorer`` protocol, BM25 through ``bm25s``, and reciprocal-rank
fusion for when a dense scorer joins.

bm25s is used for determinism as follows: ``method="lucene"`` (its idf is never negative,
even on a corpus of two documents), float64, the vocabulary built here from the sorted
terms, no progress bars, an empty query guarded (every score 0), and every score taken
(``get_scores``): its top-k does not order ties, so the caller sorts with explicit
tie-breakers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from ctxledger.assembler.ranking import round_score

Scores = npt.NDArray[np.float64]


class Scorer(Protocol):
    """Scores every document of an index (in index order) for a query's terms."""

    name: str

    def scores(self, query_terms: Sequence[str]) -> Scores:
        """One non-negative float64 per document; 0 means "not retrieved"."""
        ...


class Bm25Scorer:
    """BM25 (Lucene variant) over analyzed documents, through ``bm25s``."""

    name = "bm25"

    def __init__(self, documents: Sequence[Sequence[str]], *, k1: float, b: float) -> None:
        import bm25s

        self.size = len(documents)
        vocabulary = sorted({term for document in documents for term in document})
        self._ids = {term: index for index, term in enumerate(vocabulary)}
        self._model: bm25s.BM25 | None = None
        if self.size and vocabulary:
            model = bm25s.BM25(k1=k1, b=b, method="lucene", dtype="float64",
                               backend="numpy", csc_backend="numpy")
            corpus_ids = [[self._ids[term] for term in document] for document in documents]
            model.index((corpus_ids, dict(self._ids)), create_empty_token=False,
                        show_progress=False)
            self._model = model

    def scores(self, query_terms: Sequence[str]) -> Scores:
        """BM25 of every document for the distinct known query terms (sorted, so the sum
        is taken in one order)."""
        known = sorted({self._ids[term] for term in query_terms if term in self._ids})
        if self._model is None or not known:
            return np.zeros(self.size, dtype=np.float64)
        found = self._model.get_scores(known)
        return np.asarray(found, dtype=np.float64)


def rank_order(scores: Scores) -> npt.NDArray[np.int64]:
    """Document indexes with a positive score, best first: the rounded score descending,
    then index order (documents are indexed by snippet_id, a unique tie-breaker)."""
    rounded = np.round(scores, 6)
    positive = np.flatnonzero(rounded > 0)
    # lexsort sorts by the last key first: -score, then the index.
    order = np.lexsort((positive, -rounded[positive]))
    return positive[order].astype(np.int64)


def fuse(scored: Sequence[Scores], *, k: int) -> Scores:
    """One score per document from several scorers' scores.

    One scorer: its scores as they are (BM25 stays on its own scale). Several:
    reciprocal-rank fusion, ``sum(1 / (k + rank))`` over the scorers that retrieve the
    document, with each scorer's ranks from ``rank_order``.
    """
    if not scored:
        raise ValueError("fuse needs at least one scorer")
    if len(scored) == 1:
        return scored[0]
    size = len(scored[0])
    fused = np.zeros(size, dtype=np.float64)
    for scores in scored:
        if len(scores) != size:
            raise ValueError("every scorer must score the same documents")
        order = rank_order(scores)
        fused[order] += 1.0 / (k + np.arange(1, len(order) + 1, dtype=np.float64))
    return np.asarray([round_score(float(value)) for value in fused], dtype=np.float64)
