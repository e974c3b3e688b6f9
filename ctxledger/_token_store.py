"""The token caches as the assembler sees them: ``token_counts`` as its
``TokenCountStore``, and the cache rows an assembly hands back written to their tables."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import sqlalchemy as sa

from ctxledger.assembler.caches import CacheWrite
from ctxledger.assembler.tokens import TokenCount
from ctxledger.projections.token_cache import load_counts, store_history_memo


class TableTokenStore:
    """Looks counts up in ``token_counts`` on one open connection."""

    def __init__(self, conn: sa.Connection) -> None:
        self.conn = conn

    def load(self, encoding: str, hashes: Sequence[str]) -> Mapping[str, TokenCount]:
        """Known counts for ``hashes`` in ``encoding`` (missing hashes are absent)."""
        found = load_counts(self.conn, encoding, hashes)
        return {key: TokenCount(tokens, method) for key, (tokens, method) in found.items()}


def save_cache_writes(conn: sa.Connection, writes: Iterable[CacheWrite]) -> None:
    """Write the cache rows an assembly computed (in the caller's transaction), each
    replacing an older row for the same key."""
    for write in writes:
        store_history_memo(conn, stream_id=write.stream_id, encoding=write.encoding,
                           through_seq=write.through_seq,
                           retracted_count=write.retracted_count, tokens=write.tokens)
