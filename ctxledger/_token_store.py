"""The token-count cache table as the assembler's ``TokenCountStore``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import sqlalchemy as sa

from ctxledger.assembler.tokens import TokenCount
from ctxledger.projections.token_cache import load_counts


class TableTokenStore:
    """Looks counts up in ``token_counts`` on one open connection."""

    def __init__(self, conn: sa.Connection) -> None:
        self.conn = conn

    def load(self, encoding: str, hashes: Sequence[str]) -> Mapping[str, TokenCount]:
        """Known counts for ``hashes`` in ``encoding`` (missing hashes are absent)."""
        found = load_counts(self.conn, encoding, hashes)
        return {key: TokenCount(tokens, method) for key, (tokens, method) in found.items()}
