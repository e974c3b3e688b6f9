"""A tier's shedding as its report and decisions show it: the figures of the last fit and
the one range decision, ``<tier>:dropped``, that covers its dropped tail (count, ids in
drop order, priority range, tokens dropped, limit, ``used`` at the cut, the first misfit).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import cast

from ctxledger.assembler.details import detail_values
from ctxledger.assembler.digest import canonical_text, json_object
from ctxledger.assembler.model import Decision, DetailScalar, DetailValue
from ctxledger.assembler.profiles.novel.prepared import Prepared
from ctxledger.store.canonical import canonical_json


def dropped_item(tier: str) -> str:
    """The item id of the decision covering ``tier``'s dropped items: ``<tier>:dropped``
    (like the history window's ``history:dropped``)."""
    return f"{tier}:dropped"


@dataclass(slots=True)
class Shed:
    """A tier's shedding as of the last fit: the figures its report and range decision
    show, and that decision (None when nothing is dropped)."""

    signature: Hashable
    size: int
    fits: bool
    kept: int
    item_tokens: int
    dropped: tuple[Decision, str] | None


def range_decision(tier: str, section: str, ids: list[str], priorities: tuple[int, int], *,
                   tokens_dropped: int, limit: int, size_before: int, used: int,
                   misfit: Prepared) -> tuple[Decision, str]:
    """The ``<tier>:dropped`` decision over a tier's dropped tail (``ids`` in drop
    order, ``priorities`` their lowest and highest; ``misfit``: the first that did not
    fit), with its canonical JSON."""
    detail: dict[str, DetailValue] = {
        "count": len(ids), "items": cast("list[DetailScalar]", ids),
        "priority_min": priorities[0], "priority_max": priorities[1],
        "tokens_dropped": tokens_dropped, "limit": limit, "unit": "tokens",
        "size_before": size_before, "used": used, "remaining": limit - used,
        "over_budget": used > limit, "first_misfit": misfit.item.item_id,
        "first_misfit_tokens": misfit.candidate.tokens,
        "first_misfit_priority": misfit.priority, **detail_values({"tier": tier})}
    # Built without validating thousands of ids one by one: every value is plain JSON.
    made = Decision.model_construct(item=dropped_item(tier), section=section,
                                    action="dropped", reason=f"{tier}_over_budget",
                                    priority=None, detail=detail)
    fields = {"action": canonical_json("dropped"), "item": canonical_json(made.item),
              "priority": "null", "reason": canonical_json(made.reason),
              "section": canonical_json(section),
              "detail": json_object({key: canonical_text(ids) if key == "items"
                                     else canonical_json(value)
                                     for key, value in detail.items()})}
    return made, json_object(fields)
