"""First end-to-end checks of append, projections and verify on both backends."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from ctxledger import ConcurrencyError, Ledger


def test_append_project_verify(ledger: Ledger) -> None:
    ledger.append("chat-1", [{"type": "session.started", "data": {"scope": "alice"}}],
                  expected_version=0)
    ledger.append("chat-1", [
        {"type": "message.appended", "data": {"role": "user", "content": "hi",
                                              "message_id": "m1"}},
        {"type": "message.appended", "data": {"role": "assistant", "content": "hello"}},
    ])
    ledger.append("chat-1", {"type": "message.retracted", "data": {"message_id": "m1"}})
    with pytest.raises(ConcurrencyError, match="actual version 4"):
        ledger.append("chat-1", {"type": "message.retracted", "data": {"message_id": "m1"}},
                      expected_version=1)
    with ledger.engine.connect() as conn:
        row = conn.execute(sa.text("select * from sessions")).mappings().one()
    assert (row["scope"], row["messages_user"], row["messages_assistant"],
            row["messages_total"], row["messages_retracted"]) == ("alice", 0, 1, 1, 1)
    assert ledger.verify().ok
