"""Content-addressed token caches. Not event driven: the assembler fills them.

- ``token_counts``: tokens of a text under an encoding, keyed by the SHA-256 of the text,
  so unchanged content is never counted twice.
- ``history_token_memo``: the token total of a session's non-retracted messages up to a
  ``seq``, so the ``card`` profile's "summarized from Y" costs O(messages since the memo).
  A memo is valid only while the session's retraction count is the one it was taken at.

Rebuilds never wipe these tables (no projection lists them): their rows stay true for as
long as the content they describe does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import sqlalchemy as sa

from ctxledger.projections.base import metadata
from ctxledger.store.backends import backend_for
from ctxledger.store.canonical import sha256_hex

token_counts = sa.Table(
    "token_counts",
    metadata,
    sa.Column("encoding", sa.String(50), primary_key=True),
    sa.Column("content_hash", sa.String(64), primary_key=True),
    sa.Column("tokens", sa.Integer, nullable=False),
    sa.Column("method", sa.String(50), nullable=False),
    sqlite_with_rowid=False,  # the key is the table: one b-tree per row written
)
"""Token count of one text (by SHA-256 hex of its UTF-8) under one encoding."""

history_token_memo = sa.Table(
    "history_token_memo",
    metadata,
    sa.Column("stream_id", sa.String(200), primary_key=True),
    sa.Column("encoding", sa.String(50), primary_key=True),
    sa.Column("through_seq", sa.Integer, primary_key=True),
    sa.Column("retracted_count", sa.Integer, nullable=False),
    sa.Column("tokens", sa.Integer, nullable=False),
    sqlite_with_rowid=False,  # the key is the table: one b-tree per row written
)
"""Token total of a session's non-retracted messages with ``seq <= through_seq``, taken
when the session had ``retracted_count`` retractions."""

# Keeps each IN (...) list under SQLite's and psycopg's bound-parameter limits.
_CHUNK = 500


class TokenCount(NamedTuple):
    """One cached count: ``method`` says how it was counted (e.g. ``tiktoken``)."""

    encoding: str
    content_hash: str
    tokens: int
    method: str


class HistoryMemo(NamedTuple):
    """A usable memo: the token total of the messages with ``seq <= through_seq``."""

    through_seq: int
    tokens: int


def content_hash(text: str) -> str:
    """The cache key of ``text``: SHA-256 hex of its UTF-8 bytes."""
    return sha256_hex(text)


def _insert(conn: sa.Connection, table: sa.Table) -> Any:
    return backend_for(conn).upsert(table)


def load_counts(conn: sa.Connection, encoding: str,
                hashes: Iterable[str]) -> dict[str, tuple[int, str]]:
    """Cached ``content_hash -> (tokens, method)`` for those of ``hashes`` that are known."""
    wanted = sorted(set(hashes))
    found: dict[str, tuple[int, str]] = {}
    query = sa.select(token_counts.c.content_hash, token_counts.c.tokens,
                      token_counts.c.method).where(
        token_counts.c.encoding == encoding,
        token_counts.c.content_hash.in_(sa.bindparam("hashes", expanding=True)))
    for start in range(0, len(wanted), _CHUNK):
        for row in conn.execute(query, {"hashes": wanted[start:start + _CHUNK]}):
            found[row.content_hash] = (int(row.tokens), str(row.method))
    return found


def store_counts(conn: sa.Connection, rows: Iterable[tuple[str, str, int, str]]) -> None:
    """Insert counts (``TokenCount`` or ``(encoding, content_hash, tokens, method)``);
    a key already cached keeps its stored count."""
    unique: dict[tuple[str, str], TokenCount] = {}
    for row in rows:
        count = TokenCount(*row)
        unique.setdefault((count.encoding, count.content_hash), count)
    if not unique:
        return
    # Sorted so concurrent writers take row locks in the same order.
    params = [unique[key]._asdict() for key in sorted(unique)]
    stmt = _insert(conn, token_counts).on_conflict_do_nothing(
        index_elements=["encoding", "content_hash"])
    conn.execute(stmt, params)


def store_history_memo(conn: sa.Connection, *, stream_id: str, encoding: str,
                       through_seq: int, retracted_count: int, tokens: int) -> None:
    """Record the token total of ``stream_id``'s non-retracted messages up to
    ``through_seq``, taken at ``retracted_count`` retractions (replaces an older memo)."""
    ins = _insert(conn, history_token_memo)
    stmt = ins.on_conflict_do_update(
        index_elements=["stream_id", "encoding", "through_seq"],
        set_={"retracted_count": ins.excluded.retracted_count, "tokens": ins.excluded.tokens})
    conn.execute(stmt, {"stream_id": stream_id, "encoding": encoding, "through_seq": through_seq,
                        "retracted_count": retracted_count, "tokens": tokens})


def load_history_memo(conn: sa.Connection, *, stream_id: str, encoding: str,
                      through_seq: int, retracted_at: Callable[[int], int]
                      ) -> HistoryMemo | None:
    """The memo with the greatest ``through_seq <= through_seq``, if no message at or
    before its own ``through_seq`` was retracted since (``retracted_at(seq)`` gives the
    number retracted now)."""
    memo = history_token_memo.c
    row = conn.execute(
        sa.select(memo.through_seq, memo.tokens, memo.retracted_count)
        .where(memo.stream_id == stream_id, memo.encoding == encoding,
               memo.through_seq <= through_seq)
        .order_by(memo.through_seq.desc())
        .limit(1)
    ).first()
    if row is None or retracted_at(int(row.through_seq)) != int(row.retracted_count):
        return None
    return HistoryMemo(int(row.through_seq), int(row.tokens))
