"""The ``scope_members`` projection: append-only (scope, session, first join position)."""

from __future__ import annotations

import sqlalchemy as sa
from helpers.legacy import append_legacy

from ctxledger import Ledger
from ctxledger.projections.scope_members import members_until, scope_members


def _rows(ledger: Ledger) -> list[tuple[str, str, int]]:
    with ledger.engine.connect() as conn:
        return sorted((r.scope, r.stream_id, int(r.position))
                      for r in conn.execute(sa.select(scope_members)))


def test_members_keep_their_first_join_and_survive_a_move(ledger: Ledger) -> None:
    first = ledger.append("s1", {"type": "session.started", "data": {"scope": "alice"}})
    ledger.append("s2", {"type": "session.started", "data": {}})
    # A session that changes scope: only a log from before the stream rules has one.
    append_legacy(ledger, "s1", [{"type": "session.started", "data": {"scope": "bob"}}])
    moved_at = ledger.head()
    append_legacy(ledger, "s1", [{"type": "session.started", "data": {"scope": "alice"}}])
    ledger.append("scope:alice", {"type": "setting.changed",
                                  "data": {"key": "k", "value": 1}})
    p1, p2, p3 = first.positions[0], first.positions[0] + 1, moved_at
    assert _rows(ledger) == [("alice", "s1", p1), ("bob", "s1", p3), ("default", "s2", p2)]
    with ledger.engine.connect() as conn:
        assert members_until(conn, "alice", p1) == ["s1"]
        assert members_until(conn, "bob", p3 - 1) == []
        assert members_until(conn, "bob", p3) == ["s1"]
    inline = _rows(ledger)
    ledger.rebuild("scope_members")
    assert _rows(ledger) == inline
