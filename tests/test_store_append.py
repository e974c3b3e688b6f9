"""Appending: expected_version, atomic batches, idempotent event ids, and recorded_at.

Every test runs on SQLite and PostgreSQL (the ``ledger`` fixture is parametrized by
``db_url``). "Nothing written" is checked against every stored column and every projection
row, not just the head position.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, ClassVar

import pytest
import sqlalchemy as sa
from freezegun import freeze_time
from helpers.assertions import ledger_state, one_line
from helpers.tables import raw_events

from ctxledger import (
    ConcurrencyError,
    EventValidationError,
    IdempotencyError,
    Ledger,
    LedgerError,
    RecordedEvent,
)
from ctxledger.projections.base import Projection
from ctxledger.projections.registry import builtin_projections
from ctxledger.projections.rowstore import RowStore
from ctxledger.store.sql_engine import create_engine


def msg(content: str, *, event_id: str | None = None, role: str = "user") -> dict[str, Any]:
    """A ``message.appended`` input, optionally with a client-chosen id."""
    event: dict[str, Any] = {"type": "message.appended",
                             "data": {"role": role, "content": content}}
    if event_id is not None:
        event["id"] = event_id
    return event


def new_id() -> str:
    """A fresh client-side event id."""
    return str(uuid.uuid4())


# -- expected_version ---------------------------------------------------------------------


def test_expected_none_appends_at_any_version(ledger: Ledger) -> None:
    first = ledger.append("chat", msg("a"))
    second = ledger.append("chat", [msg("b"), msg("c")], expected_version=None)
    assert (first.stream_version, second.stream_version) == (1, 3)
    assert [e.stream_version for e in ledger.events("chat")] == [1, 2, 3]


def test_expected_zero_requires_a_new_stream(ledger: Ledger) -> None:
    created = ledger.append("chat", msg("a"), expected_version=0)
    assert created.stream_version == 1
    before = ledger_state(ledger)
    with pytest.raises(ConcurrencyError) as err:
        ledger.append("chat", msg("b"), expected_version=0)
    assert (err.value.stream_id, err.value.expected, err.value.actual) == ("chat", 0, 1)
    assert "actual version 1" in one_line(err.value)
    assert ledger_state(ledger) == before


@pytest.mark.parametrize("expected", [2, 4])
def test_expected_n_requires_exactly_n(ledger: Ledger, expected: int) -> None:
    ledger.append("chat", [msg("a"), msg("b"), msg("c")])
    before = ledger_state(ledger)
    with pytest.raises(ConcurrencyError) as err:
        ledger.append("chat", [msg("d"), msg("e")], expected_version=expected)
    assert err.value.actual == 3 and err.value.expected == expected
    text = one_line(err.value)
    assert f"expected version {expected}" in text and "actual version 3" in text
    assert ledger_state(ledger) == before
    assert ledger.log.stream_version("chat") == 3


def test_expected_n_matching_appends(ledger: Ledger) -> None:
    ledger.append("chat", [msg("a"), msg("b"), msg("c")])
    result = ledger.append("chat", [msg("d"), msg("e")], expected_version=3)
    assert result.stream_version == 5
    assert [e.data["content"] for e in ledger.events("chat")] == ["a", "b", "c", "d", "e"]


def test_expected_version_of_a_missing_stream_names_zero(ledger: Ledger) -> None:
    with pytest.raises(ConcurrencyError, match="actual version 0"):
        ledger.append("nowhere", msg("a"), expected_version=2)
    assert ledger.head() == 0


def test_expected_version_is_per_stream(ledger: Ledger) -> None:
    ledger.append("one", [msg("a"), msg("b")])
    # "two" is new even though the log is not empty.
    assert ledger.append("two", msg("c"), expected_version=0).stream_version == 1
    assert ledger.append("one", msg("d"), expected_version=2).stream_version == 3


@pytest.mark.parametrize("bad", [-1, "1", 1.0, True])
def test_expected_version_must_be_a_non_negative_integer(ledger: Ledger, bad: Any) -> None:
    with pytest.raises(EventValidationError) as err:
        ledger.append("chat", msg("a"), expected_version=bad)
    one_line(err.value)
    assert ledger.head() == 0


# -- atomic batches -----------------------------------------------------------------------


def test_batch_with_an_invalid_third_event_writes_nothing(ledger: Ledger) -> None:
    ledger.append("chat", msg("existing"))
    before = ledger_state(ledger)
    batch = [msg("one"), msg("two"),
             {"type": "message.appended", "data": {"role": "narrator", "content": "x"}},
             msg("four")]
    with pytest.raises(EventValidationError) as err:
        ledger.append("chat", batch)
    text = one_line(err.value)
    assert text.startswith("event 3: ") and "role" in text
    assert ledger_state(ledger) == before


def test_batch_failing_inside_the_transaction_writes_nothing(ledger: Ledger) -> None:
    """The third event's id already belongs to another stream: detected after the lock."""
    taken = new_id()
    ledger.append("other", msg("owner", event_id=taken))
    before = ledger_state(ledger)
    with pytest.raises(IdempotencyError) as err:
        ledger.append("chat", [msg("one"), msg("two"), msg("three", event_id=taken)])
    one_line(err.value)
    assert ledger_state(ledger) == before


def test_batch_positions_contiguous_and_versions_consecutive(ledger: Ledger) -> None:
    ledger.append("warmup", msg("w"))
    ledger.append("chat", [msg("a"), msg("b")])
    result = ledger.append("chat", [msg(str(i)) for i in range(25)])
    first = result.positions[0]
    assert result.positions == tuple(range(first, first + 25))
    assert result.stream_version == 27
    stored = ledger.events("chat")
    assert [e.stream_version for e in stored] == list(range(1, 28))
    assert [e.position for e in stored[2:]] == list(result.positions)
    assert [e.data["content"] for e in stored[2:]] == [str(i) for i in range(25)]
    # The chain links the batch's events one to the next.
    assert all(b.prev_hash == a.hash for a, b in itertools.pairwise(stored))


def test_empty_batch_is_rejected(ledger: Ledger) -> None:
    with pytest.raises(EventValidationError, match="empty"):
        ledger.append("chat", [])
    assert ledger.head() == 0


def test_positions_increase_across_streams(ledger: Ledger) -> None:
    seen: list[int] = []
    for i in range(6):
        seen.extend(ledger.append(f"s{i % 3}", [msg("x"), msg("y")]).positions)
    assert seen == sorted(seen) and len(set(seen)) == len(seen)
    assert [e.position for e in ledger.events()] == seen


# -- idempotency --------------------------------------------------------------------------


def test_resending_a_batch_returns_original_positions(ledger: Ledger) -> None:
    ids = [new_id() for _ in range(3)]
    batch = [msg(f"m{i}", event_id=ids[i]) for i in range(3)]
    original = ledger.append("chat", batch, expected_version=0)
    ledger.append("chat", msg("later"))
    before = ledger_state(ledger)
    again = ledger.append("chat", batch, expected_version=0)
    assert again.positions == original.positions
    assert again.stream_version == original.stream_version == 3
    assert again.duplicate and not original.duplicate
    assert ledger_state(ledger) == before


def test_resending_with_an_uppercase_id_is_the_same_event(ledger: Ledger) -> None:
    ident = new_id()
    original = ledger.append("chat", msg("a", event_id=ident))
    again = ledger.append("chat", msg("a", event_id=ident.upper()))
    assert again.duplicate and again.positions == original.positions
    assert ledger.events("chat")[0].event_id == ident
    assert ledger.head() == original.positions[0]


def test_same_id_with_different_content_is_an_error(ledger: Ledger) -> None:
    ident = new_id()
    ledger.append("chat", msg("original", event_id=ident))
    before = ledger_state(ledger)
    with pytest.raises(IdempotencyError) as err:
        ledger.append("chat", msg("changed", event_id=ident))
    assert ident in one_line(err.value)
    with pytest.raises(IdempotencyError):
        ledger.append("chat", {"type": "message.retracted", "id": ident,
                               "data": {"message_id": "x"}})
    with pytest.raises(IdempotencyError):
        ledger.append("elsewhere", msg("original", event_id=ident))
    assert ledger_state(ledger) == before


def test_same_id_with_different_metadata_is_an_error(ledger: Ledger) -> None:
    ident = new_id()
    event = {**msg("same", event_id=ident), "metadata": {"actor": "alice"}}
    ledger.append("chat", event)
    before = ledger_state(ledger)
    forged = {**event, "metadata": {"actor": "mallory"}}
    try:
        ledger.append("chat", forged)
    except IdempotencyError as err:
        assert ident in one_line(err)
    else:
        raise AssertionError("a different actor was accepted as the same event")
    assert ledger_state(ledger) == before


def test_partial_retry_with_new_events_is_an_error(ledger: Ledger) -> None:
    ident = new_id()
    ledger.append("chat", msg("a", event_id=ident))
    before = ledger_state(ledger)
    with pytest.raises(IdempotencyError) as err:
        ledger.append("chat", [msg("a", event_id=ident), msg("b", event_id=new_id())])
    one_line(err.value)
    assert ledger_state(ledger) == before


def test_an_id_reused_inside_one_batch_is_an_error(ledger: Ledger) -> None:
    ident = new_id()
    with pytest.raises(LedgerError) as err:
        ledger.append("chat", [msg("a", event_id=ident), msg("b"), msg("a", event_id=ident)])
    assert ident in one_line(err.value)
    assert ledger.head() == 0 and raw_events(ledger) == []


@pytest.mark.parametrize("bad", ["not-a-uuid", "", "1234"])
def test_an_id_must_be_a_uuid(ledger: Ledger, bad: str) -> None:
    with pytest.raises(EventValidationError) as err:
        ledger.append("chat", msg("a", event_id=bad))
    assert "UUID" in one_line(err.value)
    assert ledger.head() == 0


# -- atomicity with the inline projections --------------------------------------------------


class FailingProjection(Projection):
    """Raises on a message whose content is ``"boom"``, after other projections ran."""

    name: ClassVar[str] = "failing"
    version: ClassVar[int] = 1
    tables: ClassVar[tuple[sa.Table, ...]] = ()
    handles: ClassVar[frozenset[str]] = frozenset({"message.appended"})

    def apply(self, event: RecordedEvent, rows: RowStore) -> None:
        """Fail on the marked message; ignore every other event."""
        if event.data["content"] == "boom":
            raise RuntimeError("projection failed")


def test_a_failing_projection_rolls_the_append_back(db_url: str) -> None:
    with Ledger.open(db_url):
        pass  # create the schema
    engine = create_engine(db_url)
    ledger = Ledger(engine, projections=[*builtin_projections(), FailingProjection()])
    try:
        first = ledger.append("chat", [msg("a"), msg("b")])
        before = ledger_state(ledger)
        with pytest.raises(RuntimeError, match="projection failed"):
            ledger.append("chat", [msg("c"), msg("boom"), msg("d")])
        assert ledger_state(ledger) == before
        after = ledger.append("chat", msg("e"))
        # A rolled-back insert may leave a hole (PostgreSQL); a position is never reused.
        assert after.positions[0] > first.positions[-1]
        assert after.stream_version == 3
        assert [e.data["content"] for e in ledger.events("chat")] == ["a", "b", "e"]
        assert ledger.verify().ok
    finally:
        ledger.close()


# -- recorded_at --------------------------------------------------------------------------


@pytest.fixture
def frozen_ledger(db_url: str) -> Iterator[Ledger]:
    """A ledger on the default (system) clock, opened while time is frozen."""
    with freeze_time("2026-03-01T12:00:00Z"), Ledger.open(db_url) as opened:
        yield opened


def test_recorded_at_follows_freezegun(frozen_ledger: Ledger) -> None:
    instant = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
    with freeze_time("2026-03-01T12:00:00Z") as frozen:
        frozen_ledger.append("chat", msg("a"))
        frozen.move_to("2026-03-02T08:30:00.250000Z")
        frozen_ledger.append("chat", msg("b"))
        frozen.tick(timedelta(seconds=1))
        frozen_ledger.append("chat", msg("c"))
    stamps = [e.recorded_at for e in frozen_ledger.events("chat")]
    assert stamps == [instant, datetime(2026, 3, 2, 8, 30, 0, 250000, tzinfo=UTC),
                      datetime(2026, 3, 2, 8, 30, 1, 250000, tzinfo=UTC)]
    for stamp in stamps:
        assert stamp.utcoffset() == timedelta(0)


def test_recorded_at_comes_from_the_injected_clock(db_url: str) -> None:
    current = [datetime(2026, 1, 1, tzinfo=UTC)]

    def clock() -> datetime:
        return current[0]

    with Ledger.open(db_url, clock=clock) as ledger:
        for tick in (datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC),
                     # A non-UTC clock is stored as the same instant in UTC.
                     datetime(2026, 3, 1, 14, 0, 1, tzinfo=timezone(timedelta(hours=2)))):
            current[0] = tick
            ledger.append("chat", msg("x"))
        stored = [e.recorded_at for e in ledger.events("chat")]
    assert stored == [datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC),
                      datetime(2026, 3, 1, 12, 0, 1, tzinfo=UTC)]
    assert all(s.tzinfo is not None and s.utcoffset() == timedelta(0) for s in stored)
    # The whole batch shares the clock reading of its transaction.
    with Ledger.open(db_url, clock=clock) as ledger:
        ledger.append("batch", [msg("a"), msg("b")])
        assert {e.recorded_at for e in ledger.events("batch")} == {current[0]}


def test_recorded_at_round_trips_through_a_reopen(db_url: str) -> None:
    with freeze_time("2026-03-01T12:00:00Z"), Ledger.open(db_url) as ledger:
        ledger.append("chat", msg("a"))
    with Ledger.open(db_url) as reopened:
        (event,) = reopened.events("chat")
    assert event.recorded_at == datetime(2026, 3, 1, 12, tzinfo=UTC)
    assert event.recorded_at.utcoffset() == timedelta(0)


# -- the append transaction: statements through SQLAlchemy join the driver's -------------

_notes = sa.Table("test_append_notes", sa.MetaData(), sa.Column("content", sa.Text))


class NotingProjection(Projection):
    """Writes each message through ``conn.execute`` (SQLAlchemy's own path, not the
    RowStore's driver statements); raises on ``"boom"`` after writing."""

    name: ClassVar[str] = "noting"
    version: ClassVar[int] = 1
    tables: ClassVar[tuple[sa.Table, ...]] = ()
    handles: ClassVar[frozenset[str]] = frozenset({"message.appended"})

    def apply(self, event: RecordedEvent, rows: RowStore) -> None:
        """Insert the content, then fail on the marked message."""
        assert rows.conn is not None
        rows.conn.execute(_notes.insert().values(content=event.data["content"]))
        if event.data["content"] == "boom":
            raise RuntimeError("projection failed")


def test_sqlalchemy_statements_inside_an_append_commit_and_roll_back_with_it(
        db_url: str) -> None:
    with Ledger.open(db_url):
        pass  # create the schema
    engine = create_engine(db_url)
    _notes.create(engine)
    ledger = Ledger(engine, projections=[*builtin_projections(), NotingProjection()])

    def notes() -> list[str]:
        with engine.connect() as conn:
            return list(conn.execute(sa.select(_notes.c.content)).scalars())

    try:
        ledger.append("chat", msg("a"))
        with pytest.raises(RuntimeError, match="projection failed"):
            ledger.append("chat", [msg("b"), msg("boom")])
        assert notes() == ["a"]
        ledger.append("chat", msg("c"))  # the kept connection is usable again
        ledger.append("chat", [msg("d"), msg("e")])
        assert notes() == ["a", "c", "d", "e"]
        assert [e.data["content"] for e in ledger.events("chat")] == ["a", "c", "d", "e"]
        assert ledger.verify().ok
    finally:
        ledger.close()
