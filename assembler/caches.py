"""The cache rows an assembly hands back for its caller to save: plain data, no SQL.

Caches hold sums that are pure functions of the log, so a lost or stale row costs time,
never correctness, and no row ever enters an assembly's digest. The facade writes them
(``ctxledger._token_store.save_cache_writes``) to the tables in ``projections.token_cache``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class HistoryMemoRow:
    """The token total of a session's non-retracted messages with ``seq <= through_seq``,
    taken when the session had ``retracted_count`` retractions."""

    stream_id: str
    encoding: str
    through_seq: int
    retracted_count: int
    tokens: int


CacheWrite = HistoryMemoRow
"""A row an assembly asks its caller to save (only history memos so far)."""
