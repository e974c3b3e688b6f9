"""Brief statistics (SPEC §3 "Profile brief" 8): the nearest-rank P95 of the brief's
tokens over a scope, from the ``context.assembled`` events the app recorded."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import sqlalchemy as sa

from ctxledger.assembler.api import policy_for
from ctxledger.jobs._usage import scope_exists
from ctxledger.projections.session_stats import sessions
from ctxledger.projections.view_loader import load_settings
from ctxledger.store.errors import LedgerError

if TYPE_CHECKING:
    from ctxledger._ledger import Ledger  # passed in: the jobs never open a ledger


def nearest_rank(values: Sequence[int], percentile: float) -> int | None:
    """The nearest-rank percentile: the ceil(p/100 · n)-th smallest value (None if empty)."""
    if not values:
        return None
    if not 0 < percentile <= 100:
        raise ValueError("percentile must be in (0, 100]")
    ordered = sorted(values)
    return ordered[max(1, math.ceil(percentile / 100 * len(ordered))) - 1]


@dataclass(frozen=True, slots=True)
class BriefStats:
    """Brief token figures of one scope."""

    scope: str
    assemblies: int
    """``context.assembled`` events of the profile with a token count."""
    p95_tokens: int | None
    max_tokens: int | None
    budget: int
    """The scope's brief budget (``brief_max_tokens``, default 2500)."""

    @property
    def within_budget(self) -> bool:
        """True when the P95 is at most the budget (or nothing was assembled)."""
        return self.p95_tokens is None or self.p95_tokens <= self.budget

    def record(self) -> dict[str, object]:
        """JSON-ready figures."""
        return {"scope": self.scope, "assemblies": self.assemblies,
                "p95_tokens": self.p95_tokens, "max_tokens": self.max_tokens,
                "budget": self.budget, "within_budget": self.within_budget}


def brief_stats(ledger: Ledger, scope: str, profile: str = "brief") -> BriefStats:
    """The P95 (nearest rank) of ``profile`` tokens recorded in the scope's sessions.

    Raises ``LedgerError`` for a scope no session or scope stream names (as ``usage``
    does), so a typo is not answered with "nothing assembled".
    """
    with ledger.log.connection() as conn:
        if not scope_exists(conn, scope):
            raise LedgerError(f"unknown scope {scope!r}: no session or scope stream names it")
        streams = sorted(conn.execute(sa.select(sessions.c.stream_id)
                                      .where(sessions.c.scope == scope)).scalars())
        settings, _ = load_settings(conn, "", scope)
    tokens = [int(event.data["tokens"]) for stream in streams
              for event in ledger.events(stream)
              if event.type == "context.assembled" and event.data.get("profile") == profile
              and event.data.get("tokens") is not None]
    budget = getattr(policy_for(profile, settings), "max_tokens", 0)
    return BriefStats(scope=scope, assemblies=len(tokens),
                      p95_tokens=nearest_rank(tokens, 95),
                      max_tokens=max(tokens) if tokens else None, budget=int(budget))
