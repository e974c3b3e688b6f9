"""Maximal Marginal Relevance, written by hand.

Why by hand: the libraries that offer MMR (LangChain, sentence-transformers utilities)
bring an embedding stack and order ties by array position; the brief needs cosine over
the analyzer's term-frequency vectors, scores rounded before they are compared, and one
total order (MMR, then trust, then relevance, then snippet_id). That is a dozen lines.

``mmr = λ · relevance − (1 − λ) · max cosine(candidate, already selected)``, picking the
best one at a time.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ctxledger.assembler.ranking import ranked, round_score


def cosine(first: Mapping[str, int], second: Mapping[str, int]) -> float:
    """Cosine of two term-frequency vectors (0 when either is empty), rounded."""
    if not first or not second:
        return 0.0
    small, large = (first, second) if len(first) <= len(second) else (second, first)
    dot = sum(count * large.get(term, 0) for term, count in sorted(small.items()))
    norm = math.sqrt(sum(v * v for v in first.values())) * \
        math.sqrt(sum(v * v for v in second.values()))
    return round_score(dot / norm) if norm else 0.0


@dataclass(frozen=True, slots=True)
class MmrItem:
    """A candidate: its id, trust, normalized relevance and term vector."""

    item_id: str
    trust: float
    relevance: float
    vector: Counter[str]


def relevance_items(candidates: Sequence[tuple[str, float, float, Counter[str]]]
                    ) -> list[MmrItem]:
    """MMR's items from ``(id, retrieval score, trust, term vector)``: relevance is
    retrieval × trust, scaled so that the best is 1 (every one 0 when none scores)."""
    weighted = [round_score(score * trust) for _, score, trust, _ in candidates]
    top = max(weighted, default=0.0)
    return [MmrItem(item_id, trust, round_score(value / top) if top > 0 else 0.0, vector)
            for (item_id, _, trust, vector), value in zip(candidates, weighted, strict=True)]


@dataclass(frozen=True, slots=True)
class MmrPick:
    """A selected item with its MMR score at the time it was picked (``rank`` from 1)."""

    item: MmrItem
    rank: int
    mmr: float
    max_similarity: float


@dataclass(frozen=True, slots=True)
class MmrResult:
    """The picks in order, and the rest with the score they had when selection ended."""

    picked: list[MmrPick]
    rest: list[MmrPick]


def select(items: Sequence[MmrItem], *, lam: float, limit: int) -> MmrResult:
    """Pick up to ``limit`` items by MMR (see the module docstring).

    Each item's largest similarity to the picks so far is kept and only compared with the
    newest pick, so a selection costs O(items × picks) cosines.
    """
    remaining = list(items)
    similarity = {item.item_id: 0.0 for item in items}
    picked: list[MmrPick] = []

    def order(pool: Sequence[MmrItem]) -> list[tuple[MmrItem, float]]:
        rows = [(item, round_score(lam * item.relevance
                                   - (1.0 - lam) * similarity[item.item_id]))
                for item in pool]
        return ranked(rows, key=lambda row: (-row[1], -row[0].trust, -row[0].relevance,
                                             row[0].item_id))

    while remaining and len(picked) < limit:
        best, mmr = order(remaining)[0]
        picked.append(MmrPick(best, len(picked) + 1, mmr, similarity[best.item_id]))
        remaining.remove(best)
        for item in remaining:
            similarity[item.item_id] = max(similarity[item.item_id],
                                           cosine(item.vector, best.vector))
    rest = [MmrPick(item, len(picked) + index, mmr, similarity[item.item_id])
            for index, (item, mmr) in enumerate(order(remaining), start=1)]
    return MmrResult(picked, rest)
