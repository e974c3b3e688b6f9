"""Reading: one stream by version range, the whole log after a position, until a position
or a time, and ``position_at``. Times come from a scripted clock that also goes backwards."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone

import pytest
from helpers.databases import module_database

from ctxledger import Ledger, RecordedEvent
from ctxledger.store.read import read_all

T0 = datetime(2026, 3, 1, 10, 0, tzinfo=UTC)


def at(minutes: float) -> datetime:
    """``T0`` plus some minutes."""
    return T0 + timedelta(minutes=minutes)


class ScriptedClock:
    """A clock whose next reading is set by the test, to record events at chosen times."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture(scope="module",
                params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def log(request: pytest.FixtureRequest,
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ledger]:
    """A ledger with 3 interleaved streams; the clock goes backwards at position 5.

    Shared by the module (every test here only reads), once per backend.

    position: 1  2  3  4  5  6  7  8  9  10
    stream:   a  b  a  c  a  b  a  c  a  b
    minutes:  0  1  2  3  1.5 4 5  6  7  8   (position 5 is recorded "in the past")
    """
    minutes = [0, 1, 2, 3, 1.5, 4, 5, 6, 7, 8]
    streams = ["a", "b", "a", "c", "a", "b", "a", "c", "a", "b"]
    clock = ScriptedClock()
    with (module_database(request.param, tmp_path_factory.mktemp("read")) as url,
          Ledger.open(url, clock=clock) as ledger):
        for i, (stream, minute) in enumerate(zip(streams, minutes, strict=True), start=1):
            clock.now = at(minute)
            ledger.append(stream, {"type": "message.appended",
                                   "data": {"role": "user", "content": f"e{i}"}})
        yield ledger


def contents(events: list[RecordedEvent]) -> list[str]:
    """The message contents, which name each event by its position (e1..e10)."""
    return [e.data["content"] for e in events]


def positions(events: list[RecordedEvent]) -> list[int]:
    """Positions of ``events``, in the order returned."""
    return [e.position for e in events]


# -- one stream ---------------------------------------------------------------------------


def test_read_stream_whole(log: Ledger) -> None:
    events = log.log.read_stream("a")
    assert contents(events) == ["e1", "e3", "e5", "e7", "e9"]
    assert [e.stream_version for e in events] == [1, 2, 3, 4, 5]


@pytest.mark.parametrize(("start", "end", "expected"), [
    (1, None, ["e1", "e3", "e5", "e7", "e9"]),
    (2, 4, ["e3", "e5", "e7"]),
    (3, 3, ["e5"]),
    (4, None, ["e7", "e9"]),
    (5, 99, ["e9"]),
    (6, None, []),
    (4, 2, []),
    (1, 0, []),
])
def test_read_stream_between_versions(log: Ledger, start: int, end: int | None,
                                      expected: list[str]) -> None:
    assert contents(log.log.read_stream("a", start, end)) == expected


def test_read_missing_stream_is_empty(log: Ledger) -> None:
    assert log.log.read_stream("zzz") == []
    assert log.events("zzz") == []


# -- the whole log ------------------------------------------------------------------------


def test_read_all_in_position_order(log: Ledger) -> None:
    events = log.log.read_all()
    assert positions(events) == list(range(1, 11))
    assert contents(events) == [f"e{i}" for i in range(1, 11)]
    assert log.head() == 10


@pytest.mark.parametrize(("after", "limit", "expected"), [
    (0, None, list(range(1, 11))),
    (0, 3, [1, 2, 3]),
    (4, None, [5, 6, 7, 8, 9, 10]),
    (4, 2, [5, 6]),
    (8, 5, [9, 10]),
    (10, None, []),
    (3, 0, []),
    (2**40, 5, []),  # positions are 64-bit: a cursor past 2**31 is no overflow
    (2**63 - 1, None, []),
])
def test_read_all_after_with_limit(log: Ledger, after: int, limit: int | None,
                                   expected: list[int]) -> None:
    assert positions(log.log.read_all(after, limit)) == expected
    assert positions(log.events(after=after, limit=limit)) == expected


@pytest.mark.parametrize(("after", "until", "expected"), [
    (0, 4, [1, 2, 3, 4]),
    (2, 4, [3, 4]),
    (0, 0, []),
    (0, 100, list(range(1, 11))),
    (5, 5, []),
    (0, 2**40, list(range(1, 11))),
])
def test_read_all_until_position(log: Ledger, after: int, until: int,
                                 expected: list[int]) -> None:
    assert positions(log.log.read_all(after, until_position=until)) == expected
    assert positions(log.events(after=after, until=until)) == expected


def test_paging_by_position_reads_every_event_once(log: Ledger) -> None:
    seen: list[int] = []
    last = 0
    while page := log.log.read_all(last, 3):
        seen.extend(positions(page))
        last = page[-1].position
    assert seen == list(range(1, 11))


@pytest.mark.parametrize("chunk", [1, 2, 3, 7])
def test_chunked_reads_match_unchunked(log: Ledger, chunk: int) -> None:
    """The reader pages internally; page boundaries must not drop or repeat events."""
    cases = [(0, None, None, None), (2, 5, None, None), (0, None, 7, None),
             (1, 4, 9, None), (0, None, None, at(4.5)), (0, 8, None, at(7))]
    # Expected results first: on SQLite a second connection would wait for this one.
    wanted = [positions(log.log.read_all(after, limit, until_position=until_pos,
                                         until_time=until_time))
              for after, limit, until_pos, until_time in cases]
    with log.engine.connect() as conn:
        for (after, limit, until_pos, until_time), want in zip(cases, wanted, strict=True):
            got = positions(list(read_all(conn, after, limit, until_position=until_pos,
                                          until_time=until_time, chunk=chunk)))
            assert got == want, (after, limit, until_pos, until_time)


# -- until a time: always a prefix ----------------------------------------------------------


@pytest.mark.parametrize(("until", "expected"), [
    (at(-1), []),
    (at(0), [1]),
    (at(0.5), [1]),
    (at(1), [1, 2]),
    # Position 5 (1.5 min) is before 1.75 min but comes after position 3 (2 min): a prefix
    # stops before the first event recorded after the time, so 5 is not included.
    (at(1.75), [1, 2]),
    (at(2), [1, 2, 3]),
    (at(3.5), [1, 2, 3, 4, 5]),
    (at(4), [1, 2, 3, 4, 5, 6]),
    (at(100), list(range(1, 11))),
])
def test_read_all_until_time_is_a_prefix(log: Ledger, until: datetime,
                                         expected: list[int]) -> None:
    assert positions(log.log.read_all(until_time=until)) == expected
    assert positions(log.events(until=until)) == expected
    assert log.log.position_at(until) == (expected[-1] if expected else 0)


def test_until_time_accepts_other_zones(log: Ledger) -> None:
    plus_two = at(2).astimezone(timezone(timedelta(hours=2)))
    assert positions(log.log.read_all(until_time=plus_two)) == [1, 2, 3]
    assert log.log.position_at(plus_two) == 3


def test_until_time_rejects_naive_datetimes(log: Ledger) -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        log.log.read_all(until_time=datetime(2026, 3, 1, 10, 0))


def test_until_time_and_position_together(log: Ledger) -> None:
    assert positions(log.log.read_all(until_position=2, until_time=at(5))) == [1, 2]
    assert positions(log.log.read_all(until_position=9, until_time=at(3.5))) == [1, 2, 3, 4, 5]
    assert positions(log.log.read_all(after=2, limit=2, until_time=at(3.5))) == [3, 4]


def test_position_at_on_an_empty_log(db_url: str) -> None:
    with Ledger.open(db_url) as ledger:
        assert ledger.log.position_at(T0) == 0
        assert ledger.log.read_all(until_time=T0) == []


def test_stream_read_until_time_is_the_stream_part_of_the_prefix(log: Ledger) -> None:
    until = at(1.75)
    prefix = {e.position for e in log.log.read_all(until_time=until)}
    expected = [e.position for e in log.log.read_stream("a") if e.position in prefix]
    assert expected == [1]
    assert positions(log.events("a", until=until)) == expected


def test_stream_read_with_after_limit_and_until_position(log: Ledger) -> None:
    assert positions(log.events("a", after=2)) == [3, 5, 7, 9]
    assert positions(log.events("a", after=2, limit=2)) == [3, 5]
    assert positions(log.events("a", until=5)) == [1, 3, 5]
    assert positions(log.events("b", after=2, until=9)) == [6]


def test_reads_return_stored_metadata_and_hashes(log: Ledger) -> None:
    events = log.log.read_all()
    by_stream: dict[str, list[RecordedEvent]] = {}
    for event in events:
        by_stream.setdefault(event.stream_id, []).append(event)
    for stream_events in by_stream.values():
        assert stream_events[0].prev_hash == "0" * 64
        for prev, cur in itertools.pairwise(stream_events):
            assert cur.prev_hash == prev.hash
    assert all(e.metadata == {} and len(e.hash) == 64 for e in events)
    assert [e.recorded_at for e in events][4] == at(1.5)
