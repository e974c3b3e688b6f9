"""Upcasting: a ``tool.used`` v1 row written by an older release reads as v2, verifies, and
feeds the projections exactly as a v2 event would."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from helpers.databases import sibling_database
from helpers.legacy import LegacyEvent, LegacyRow, append_through_api, insert_legacy
from helpers.tables import dump_projections

from ctxledger import EventValidationError, Ledger
from ctxledger._migrate import upgrade
from ctxledger.store.sql_engine import create_engine
from ctxledger.store.upcasting import upcast

T0 = datetime(2026, 2, 1, 9, 0, tzinfo=UTC)
STARTED = LegacyEvent("session.started", {"scope": "team"}, T0)
V1_TOOL_USE = LegacyEvent("tool.used", {"tool": "grep", "success": True},
                          T0.replace(minute=5), schema_version=1,
                          metadata={"actor": "agent-7"})


@pytest.fixture
def old_database(empty_db_url: str) -> Iterator[tuple[str, list[LegacyRow]]]:
    """A database at revision 0001 holding a session whose second event is tool.used v1."""
    db_url = empty_db_url
    engine = create_engine(db_url)
    try:
        upgrade(engine, "0001")
        with engine.begin() as conn:
            rows = insert_legacy(conn, "chat", [STARTED, V1_TOOL_USE])
    finally:
        engine.dispose()
    yield db_url, rows


def test_v1_row_reads_as_v2_after_upgrade(old_database: tuple[str, list[LegacyRow]]) -> None:
    url, rows = old_database
    with Ledger.open(url) as ledger:
        _started, used = ledger.events("chat")
        assert (used.type, used.schema_version) == ("tool.used", 2)
        assert used.data == {"tool_name": "grep", "ok": True}
        assert used.metadata == {"actor": "agent-7"}
        assert (used.position, used.hash, used.event_id) == (
            rows[1].position, rows[1].hash, V1_TOOL_USE.event_id)
        # Every read path upcasts.
        assert ledger.log.read_all()[1].data == used.data
        assert ledger.log.read_stream("chat", 2, 2)[0].data == used.data
        # The stored bytes are still v1: upcasting happens on read, never in place.
        with ledger.engine.connect() as conn:
            version, data = conn.execute(sa.text(
                "SELECT schema_version, data FROM events WHERE position = :p"),
                {"p": rows[1].position}).one()
        assert (version, json.loads(data)) == (1, {"tool": "grep", "success": True})


def test_v1_row_still_verifies(old_database: tuple[str, list[LegacyRow]]) -> None:
    url, _ = old_database
    with Ledger.open(url) as ledger:
        report = ledger.verify()
    assert report.ok, report.problems
    assert (report.events, report.streams) == (2, 1)


def test_projections_see_the_upcast_event(old_database: tuple[str, list[LegacyRow]],
                                          tmp_path: Path) -> None:
    url, rows = old_database
    with Ledger.open(url) as ledger:
        migrated = dump_projections(ledger)
        with ledger.engine.connect() as conn:
            last = conn.execute(sa.text(
                "SELECT last_position FROM sessions WHERE stream_id = 'chat'")).scalar_one()
        assert last == rows[1].position
    # The same session written by today's release, with a v2 payload, projects the same.
    with sibling_database(url, tmp_path) as reference_url:
        append_through_api(reference_url, [("chat", STARTED), ("chat", V1_TOOL_USE)])
        with Ledger.open(reference_url) as reference:
            assert reference.events("chat")[1].schema_version == 2
            assert dump_projections(reference) == migrated
    tool_rows = [row for table in migrated.values() for row in table if "grep" in row]
    assert tool_rows, "no projection recorded the upcast tool use"


def test_v1_input_is_upcast_before_it_is_stored(ledger: Ledger) -> None:
    ledger.append("chat", {"type": "session.started", "data": {}})
    ledger.append("chat", {"type": "tool.used", "schema_version": 1,
                           "data": {"tool": "grep", "success": False}})
    (used,) = ledger.log.read_stream("chat", 2, 2)
    assert (used.schema_version, used.data) == (2, {"tool_name": "grep", "ok": False})
    with ledger.engine.connect() as conn:
        stored = conn.execute(sa.text(
            "SELECT schema_version, data FROM events WHERE stream_version = 2")).one()
    assert (stored[0], json.loads(stored[1])) == (2, {"tool_name": "grep", "ok": False})
    assert ledger.verify().ok


def test_invalid_v1_input_is_rejected_after_upcasting(ledger: Ledger) -> None:
    with pytest.raises(EventValidationError, match="tool_name"):
        ledger.append("chat", {"type": "tool.used", "schema_version": 1,
                               "data": {"success": True}})
    assert ledger.head() == 0


@pytest.mark.parametrize(("data", "expected"), [
    ({"tool": "grep", "success": True}, {"tool_name": "grep", "ok": True}),
    ({"tool": "grep"}, {"tool_name": "grep"}),
    ({"tool": "ls", "success": False, "server_name": "fs"},
     {"tool_name": "ls", "ok": False, "server_name": "fs"}),
])
def test_tool_used_upcaster(data: dict[str, object], expected: dict[str, object]) -> None:
    assert upcast("tool.used", 1, dict(data)) == (2, expected)
    assert upcast("tool.used", 2, dict(expected)) == (2, expected)


def test_current_types_pass_through_unchanged() -> None:
    data = {"role": "user", "content": "x"}
    assert upcast("message.appended", 2, data) == (2, data)
    assert upcast("session.started", 1, {"scope": "s"}) == (1, {"scope": "s"})


def test_a_v1_message_is_a_v2_message_as_it_is() -> None:
    # v2 added roles and fields; a v1 tool result without a call id stays as it was.
    legacy = {"role": "tool", "name": "get_weather", "content": "12C"}
    assert upcast("message.appended", 1, dict(legacy)) == (2, legacy)
