"""The one ranking rule: scores rounded before they are compared, then explicit
tie-breakers, and a tie on the whole key is an error."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from ctxledger.assembler.errors import EngineError

SCORE_DIGITS = 6
"""Decimal places every float is rounded to before it enters the output."""

T = TypeVar("T")


def ranked(items: Iterable[T], key: Callable[[T], tuple[Any, ...]]) -> list[T]:
    """``items`` sorted by ``key`` ascending, as a total order.

    Floats in the key are rounded (``round_score``) before they are compared, so two
    scores that differ only by float noise tie and the explicit tie-breakers that follow
    decide; negate a score to rank it descending. Two items with equal whole keys are an
    ``EngineError``: the key must end in something unique (a name, an id, a position).
    """
    def rounded(item: T) -> tuple[Any, ...]:
        return tuple(round_score(part) if isinstance(part, float) else part
                     for part in key(item))

    keyed = sorted(((rounded(item), item) for item in items), key=lambda pair: pair[0])
    for (first, _), (second, _) in itertools.pairwise(keyed):
        if first == second:
            raise EngineError(f"ranking key {first!r} is not unique: add a tie-breaker")
    return [item for _, item in keyed]


def round_score(value: float) -> float:
    """``value`` rounded to ``SCORE_DIGITS`` places (and -0.0 made 0.0)."""
    rounded = round(value, SCORE_DIGITS)
    return rounded + 0.0
