"""Immutability triggers, and ``verify`` detecting tampering that gets past them."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from helpers.tables import raw_events

from ctxledger import Ledger
from ctxledger.store.clock import format_utc
from ctxledger.store.hash_chain import event_hash
from ctxledger.store.schema import events
from ctxledger.store.verify import verify_log

STREAM = "chat"


@pytest.fixture
def filled(ledger: Ledger) -> Ledger:
    """Two streams: ``chat`` with 4 events (versions 1..4), ``other`` with 2."""
    ledger.append(STREAM, {"type": "session.started", "data": {"scope": "s"}})
    ledger.append("other", [{"type": "session.started", "data": {}},
                            {"type": "message.appended",
                             "data": {"role": "user", "content": "o"}}])
    ledger.append(STREAM, [{"type": "message.appended",
                            "data": {"role": "user", "content": f"m{i}"},
                            "metadata": {"actor": "tester"}} for i in range(3)])
    return ledger


def position_of(ledger: Ledger, stream: str, version: int) -> int:
    """The position of ``stream`` at ``version``."""
    (event,) = ledger.log.read_stream(stream, version, version)
    return event.position


def run_sql(ledger: Ledger, sql: str, **params: Any) -> None:
    """Execute raw SQL in its own transaction, as an attacker with DB access would."""
    with ledger.engine.begin() as conn:
        conn.execute(sa.text(sql), params)


def disable_trigger(ledger: Ledger, name: str) -> None:
    """Remove an immutability trigger: dropped on SQLite, disabled on PostgreSQL."""
    if ledger.engine.dialect.name == "sqlite":
        run_sql(ledger, f"DROP TRIGGER {name}")
    else:
        run_sql(ledger, f"ALTER TABLE events DISABLE TRIGGER {name}")


def test_clean_log_verifies(filled: Ledger) -> None:
    seen: list[int] = []
    report = filled.verify(progress=seen.append)
    assert report.ok and report.triggers_ok and report.problems == []
    assert (report.events, report.streams) == (6, 2)
    assert seen and seen[-1] == 6


def test_verify_reads_in_chunks(filled: Ledger) -> None:
    """Chunk boundaries inside a stream must not break the chain check."""
    for chunk in (1, 2, 3, 5):
        with filled.engine.connect() as conn:
            report = verify_log(conn, chunk=chunk)
        assert report.ok and (report.events, report.streams) == (6, 2), chunk


# -- triggers -----------------------------------------------------------------------------


@pytest.mark.parametrize("sql", [
    "UPDATE events SET data = '{}' WHERE stream_version = 2",
    "UPDATE events SET recorded_at = recorded_at",
    "UPDATE events SET stream_id = 'moved' WHERE stream_id = 'other'",
    "DELETE FROM events WHERE stream_version = 4",
    "DELETE FROM events",
])
def test_update_and_delete_are_rejected(filled: Ledger, sql: str) -> None:
    before = raw_events(filled)
    with pytest.raises(sa.exc.DBAPIError, match="events are immutable"):
        run_sql(filled, sql)
    assert raw_events(filled) == before
    assert filled.verify().ok


@pytest.mark.postgres
def test_truncate_is_rejected_on_postgres(pg_url: str) -> None:
    with Ledger.open(pg_url) as ledger:
        ledger.append(STREAM, {"type": "session.started", "data": {}})
        before = raw_events(ledger)
        with pytest.raises(sa.exc.DBAPIError, match="events are immutable"):
            run_sql(ledger, "TRUNCATE events")
        with pytest.raises(sa.exc.DBAPIError, match="events are immutable"):
            run_sql(ledger, "TRUNCATE events CASCADE")
        assert raw_events(ledger) == before


@pytest.mark.parametrize("trigger", ["events_no_update", "events_no_delete"])
def test_missing_trigger_fails_verify(filled: Ledger, trigger: str) -> None:
    disable_trigger(filled, trigger)
    report = filled.verify()
    assert not report.ok and not report.triggers_ok
    assert report.problems == [f"immutability trigger(s) missing: {trigger}"]


@pytest.mark.postgres
def test_disabled_truncate_trigger_fails_verify(pg_url: str) -> None:
    with Ledger.open(pg_url) as ledger:
        disable_trigger(ledger, "events_no_truncate")
        report = ledger.verify()
        assert not report.ok
        assert report.problems == ["immutability trigger(s) missing: events_no_truncate"]


# -- tampering ----------------------------------------------------------------------------


@pytest.mark.parametrize(("column", "value"), [
    ("data", '{"content":"forged","role":"user"}'),
    ("metadata", '{"actor":"mallory"}'),
    ("type", "message.retracted"),
    ("schema_version", 7),
    ("event_id", "00000000-0000-0000-0000-000000000000"),
])
def test_altered_column_is_a_hash_mismatch(filled: Ledger, column: str, value: Any) -> None:
    position = position_of(filled, STREAM, 2)
    disable_trigger(filled, "events_no_update")
    run_sql(filled, f"UPDATE events SET {column} = :value WHERE position = :position",
            value=value, position=position)
    report = filled.verify()
    assert not report.ok
    assert report.problems == [
        "immutability trigger(s) missing: events_no_update",
        f"stream 'chat' v2 (position {position}): hash mismatch, content was altered",
    ]


def test_altered_recorded_at_is_a_hash_mismatch(filled: Ledger) -> None:
    (event,) = filled.log.read_stream(STREAM, 3, 3)
    disable_trigger(filled, "events_no_update")
    with filled.engine.begin() as conn:
        conn.execute(events.update().where(events.c.position == event.position)
                     .values(recorded_at=event.recorded_at.replace(microsecond=1)))
    report = filled.verify()
    assert f"stream 'chat' v3 (position {event.position}): hash mismatch, content was " \
           "altered" in report.problems


def test_altered_hash_breaks_the_next_link(filled: Ledger) -> None:
    p2, p3 = position_of(filled, STREAM, 2), position_of(filled, STREAM, 3)
    disable_trigger(filled, "events_no_update")
    run_sql(filled, "UPDATE events SET hash = :h WHERE position = :p", h="f" * 64, p=p2)
    problems = filled.verify().problems
    assert f"stream 'chat' v2 (position {p2}): hash mismatch, content was altered" in problems
    assert f"stream 'chat' v3 (position {p3}): prev_hash does not match the previous event" \
        in problems


def test_rehashed_forgery_is_caught_by_the_next_event(filled: Ledger) -> None:
    """Forging an event and recomputing its own hash still breaks the following link."""
    (event,) = filled.log.read_stream(STREAM, 2, 2)
    forged_data = '{"content":"forged","role":"user"}'
    forged_hash = event_hash(
        prev_hash=event.prev_hash, stream_id=STREAM, stream_version=2,
        event_id=event.event_id, type=event.type, schema_version=event.schema_version,
        data_json=forged_data, metadata_json='{"actor":"tester"}',
        recorded_at=format_utc(event.recorded_at))
    disable_trigger(filled, "events_no_update")
    run_sql(filled, "UPDATE events SET data = :d, hash = :h WHERE position = :p",
            d=forged_data, h=forged_hash, p=event.position)
    p3 = position_of(filled, STREAM, 3)
    report = filled.verify()
    assert report.problems[1:] == [
        f"stream 'chat' v3 (position {p3}): prev_hash does not match the previous event"]


@pytest.mark.parametrize("deleted", [1, 2, 3])
def test_deleted_event_is_a_gap_and_a_broken_link(filled: Ledger, deleted: int) -> None:
    following = position_of(filled, STREAM, deleted + 1)
    disable_trigger(filled, "events_no_delete")
    run_sql(filled, "DELETE FROM events WHERE stream_id = :s AND stream_version = :v",
            s=STREAM, v=deleted)
    report = filled.verify()
    where = f"stream 'chat' v{deleted + 1} (position {following})"
    assert report.problems[:3] == [
        "immutability trigger(s) missing: events_no_delete",
        f"{where}: version gap, expected v{deleted}",
        f"{where}: prev_hash does not match the previous event",
    ]
    # The projections still hold the deleted event: cut evidence, named once per table.
    evidence = report.problems[3:]
    assert evidence and all("names an event the log no longer holds" in p
                            for p in evidence), evidence
    assert report.events == 5


def test_only_the_tampered_stream_is_reported(filled: Ledger) -> None:
    position = position_of(filled, "other", 2)
    disable_trigger(filled, "events_no_update")
    run_sql(filled, "UPDATE events SET data = '{}' WHERE position = :p", p=position)
    problems = filled.verify().problems[1:]
    assert problems == [f"stream 'other' v2 (position {position}): hash mismatch, "
                        "content was altered"]


def test_verify_detects_the_newest_events_removed(sqlite_url: str) -> None:
    with Ledger.open(sqlite_url) as ledger:
        ledger.append("s", [{"type": "message.appended",
                             "data": {"role": "user", "content": f"m{i}"}} for i in range(3)])
        with ledger.engine.begin() as conn:
            conn.exec_driver_sql("DROP TRIGGER events_no_delete")
            conn.exec_driver_sql("DELETE FROM events WHERE position = 3")
        report = ledger.verify()
    assert not report.ok
    assert any("log ends at 2" in p and "removed" in p for p in report.problems)
