"""The read-view loader: history modes, position, request checks, and load cost."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from helpers.legacy import append_legacy

from ctxledger import Ledger, LedgerError
from ctxledger.projections.checkpoints import checkpoints
from ctxledger.projections.session_view import History, ViewRequest
from ctxledger.projections.view_loader import load_session_view

NOW = datetime(2026, 6, 1, tzinfo=UTC)


def msg(message_id: str, role: str = "user") -> dict[str, Any]:
    return {"type": "message.appended",
            "data": {"role": role, "content": f"text of {message_id}", "message_id": message_id}}


def summarize(through: str, summary: str = "so far") -> dict[str, Any]:
    return {"type": "history.summarized",
            "data": {"through_message_id": through, "summary": summary}}


def history(ledger: Ledger, mode: str, session: str = "s") -> History:
    loaded = ledger.view(session, ViewRequest(history=mode)).history  # type: ignore[arg-type]
    assert loaded is not None
    return loaded


def ids(h: History) -> list[str]:
    return [m.message_id for m in h.messages]


def test_history_without_summary_is_complete(ledger: Ledger) -> None:
    ledger.append("s", [msg("m1"), msg("m2", "assistant"), msg("m3")])
    ledger.append("s", {"type": "message.retracted", "data": {"message_id": "m2"}})
    assert ledger.view("s").history is None
    for mode in ("tail", "full"):
        h = history(ledger, mode)
        assert (ids(h), h.summary, h.complete, h.summarized_count) == (["m1", "m3"], None,
                                                                      True, 0)
    first = history(ledger, "full").messages[0]
    assert (first.seq, first.role, first.content, first.name) == (1, "user", "text of m1", None)


def test_tail_is_latest_summary_plus_later_messages(ledger: Ledger) -> None:
    ledger.append("s", [msg("m1"), msg("m2", "assistant"), msg("m3"), summarize("m2", "old")])
    ledger.append("s", [msg("m4", "assistant"), summarize("m3", "newer"), msg("m5")])
    ledger.append("s", {"type": "message.retracted", "data": {"message_id": "m1"}})
    tail = history(ledger, "tail")
    assert tail.summary is not None
    assert (tail.summary.summary, tail.summary.through_message_id) == ("newer", "m3")
    assert tail.summary.through_seq == 3
    assert ids(tail) == ["m4", "m5"]
    # m1 is retracted, so m2 and m3 are what the summary replaced.
    assert (tail.summarized_count, tail.complete) == (2, False)
    full = history(ledger, "full")
    assert ids(full) == ["m2", "m3", "m4", "m5"]
    assert (full.summarized_count, full.complete, full.summary) == (2, True, tail.summary)


def test_summary_of_an_unknown_message_keeps_every_message(ledger: Ledger) -> None:
    ledger.append("s", [msg("m1"), msg("m2")])
    append_legacy(ledger, "s", [summarize("ghost")])  # refused now; older logs may hold it
    tail = history(ledger, "tail")
    assert tail.summary is not None and tail.summary.through_seq is None
    assert (ids(tail), tail.summarized_count, tail.complete) == (["m1", "m2"], 0, True)


def test_unknown_session_view(ledger: Ledger) -> None:
    ledger.append("known", msg("m1"))
    view = ledger.view("nobody", ViewRequest(history="tail", items=True))
    assert (view.exists, view.scope, view.counts.total, view.items) == (False, "default", 0, ())
    assert view.history == History(summary=None, messages=(), complete=True,
                                   summarized_count=0)
    assert view.position == ledger.head()


def test_position_is_the_lowest_builtin_checkpoint(ledger: Ledger) -> None:
    assert ledger.view("s").position == 0
    ledger.append("s", [msg("m1"), msg("m2")])
    ledger.append("scope:x", {"type": "setting.changed", "data": {"key": "k", "value": 1}})
    assert ledger.view("s").position == ledger.head() == 3
    with ledger.engine.begin() as conn:
        conn.execute(checkpoints.update().where(checkpoints.c.name == "card")
                     .values(position=1, inline=False))
    assert ledger.view("s").position == 1
    with ledger.engine.begin() as conn:
        conn.execute(checkpoints.delete().where(checkpoints.c.name == "knowledge"))
    assert ledger.view("s").position == 0


@pytest.mark.parametrize(("request_", "message"), [
    (ViewRequest(usage_window=timedelta(days=7)), "needs 'now'"),
    (ViewRequest(now=NOW, usage_window=timedelta(days=-1)), "must not be negative"),
    (ViewRequest(now=datetime(2026, 6, 1), usage_window=timedelta(days=1)), "timezone-aware"),
])
def test_bad_requests_are_one_line_errors(ledger: Ledger, request_: ViewRequest,
                                          message: str) -> None:
    with pytest.raises(LedgerError, match=message) as caught:
        ledger.view("s", request_)
    assert "\n" not in str(caught.value)


def test_loading_inside_a_callers_transaction(ledger: Ledger) -> None:
    ledger.append("s", msg("m1"))
    with ledger.engine.begin() as conn:
        view = load_session_view(conn, "s", ViewRequest(history="full"))
        assert conn.in_transaction()
    assert view.counts.total == 1


# -- cost: index seeks only, and a statement count independent of history length ----------

EVERYTHING = ViewRequest(history="tail", token_encoding="cl100k_base", now=NOW,
                         usage_window=timedelta(days=7), tools=True, observations=5,
                         previous_session=True, items=True, documents=True, knowledge=True)


@contextmanager
def captured(conn: sa.Connection) -> Iterator[list[str]]:
    """Every statement SQLite runs on ``conn``, with its values in place: traced by the
    driver, so the statements compiled once and run on its cursor are seen too."""
    statements: list[str] = []
    dbapi: Any = conn.connection.dbapi_connection
    dbapi.set_trace_callback(statements.append)
    try:
        yield statements
    finally:
        dbapi.set_trace_callback(None)


def grow(ledger: Ledger, session: str, messages: int) -> None:
    ledger.append(session, {"type": "session.started", "data": {"scope": session}})
    batch = [msg(f"{session}-{i}", "user" if i % 2 else "assistant") for i in range(messages)]
    ledger.append(session, batch)
    ledger.append(session, [summarize(f"{session}-{messages - 1}"), msg(f"{session}-last"),
                            {"type": "tool.used", "data": {"tool_name": "grep"}},
                            {"type": "observation.recorded",
                             "data": {"kind": "finding", "content": "x"}}])


def test_load_uses_index_seeks_and_a_fixed_number_of_queries(sqlite_url: str) -> None:
    with Ledger.open(sqlite_url) as ledger:
        grow(ledger, "short", 5)
        grow(ledger, "long", 400)
        counts = {}
        with ledger.engine.connect() as conn:
            for session in ("short", "long"):
                with captured(conn) as statements:
                    view = load_session_view(conn, session, EVERYTHING)
                assert view.history is not None and len(view.history.messages) == 1
                selects = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
                counts[session] = len(selects)
                for statement in selects:
                    plan = [row[3] for row in
                            conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}")]
                    assert plan, statement
                    for step in plan:
                        assert step.startswith(("SEARCH", "CORRELATED SCALAR SUBQUERY")), (
                            statement, plan)
    assert counts["short"] == counts["long"] >= 10
