"""PostgreSQL writers without a table lock: what the global order still promises.

Writer A takes positions and holds its transaction open; writer B, on another stream,
commits later positions meanwhile (it must not wait for A). A reader following the log
must not pass A's positions until A ends, then sees both in position order. Seals made
meanwhile stop before A. Appends on different streams that update the same row of a
scope-wide projection apply in position order, so the tables equal a rebuild. Every
wait here would be a deadlock of the test itself, so connections carry a lock timeout:
a writer that waits on another fails instead of hanging.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa
from helpers.tables import assert_projections_equal_rebuild

from ctxledger import AppendResult, Ledger
from ctxledger._migrate import upgrade
from ctxledger.store.seal import SealSettings, list_seals
from ctxledger.store.sql_engine import create_engine

pytestmark = pytest.mark.postgres

A, B = "stream-a", "stream-b"


def messages(stream: str, first: int, size: int) -> list[dict[str, Any]]:
    return [{"type": "message.appended", "data": {"role": "user", "content": f"{stream} {n}"}}
            for n in range(first, first + size)]


@pytest.fixture
def url(pg_url: str) -> str:
    """``pg_url`` whose connections give up on a lock after 10 s instead of waiting."""
    parsed = sa.engine.make_url(pg_url)
    options = f"{parsed.query['options']} -clock_timeout=10000"
    return parsed.update_query_dict({"options": options}).render_as_string(
        hide_password=False)


@pytest.fixture
def ledger(url: str) -> Iterator[Ledger]:
    with Ledger.open(url, load_vocabulary=False) as opened:
        yield opened


def committed_positions(ledger: Ledger) -> list[int]:
    """Every committed position, read with plain SQL (no settled bound)."""
    with ledger.engine.connect() as conn:
        return list(conn.execute(sa.text("SELECT position FROM events ORDER BY position"))
                    .scalars())


@pytest.mark.parametrize("earlier_write", [False, True], ids=["fresh", "had-an-id"])
def test_a_reader_does_not_pass_an_append_in_progress(ledger: Ledger,
                                                      earlier_write: bool) -> None:
    before = ledger.append("earlier", messages("earlier", 1, 3)).positions
    with ledger.log.transaction() as conn:
        if earlier_write:
            # The transaction has an id before it appends (the path for a second append).
            ledger.log.append_in(conn, "warm-up", messages("warm-up", 1, 1))
        held = ledger.log.append_in(conn, A, messages(A, 1, 2))
        late = ledger.append(B, messages(B, 1, 2))  # commits while A is still open
        assert late.positions[0] > held.positions[-1]
        assert committed_positions(ledger) == [*before, *late.positions]
        # The follower stops before A's positions, though B's later ones are committed.
        assert [e.position for e in ledger.log.read_all(after=0)] == list(before)
        assert ledger.log.read_all(after=before[-1]) == []
        assert ledger.log.settled_position() == before[-1]
    # A has committed: the follower goes on from where it stopped and sees both, in order.
    rest = [e.position for e in ledger.log.read_all(after=before[-1])]
    warm = rest[:1] if earlier_write else []
    assert rest == [*warm, *held.positions, *late.positions]
    assert [e.stream_id for e in ledger.log.read_all(after=before[-1])] == [
        *(["warm-up"] if earlier_write else []), A, A, B, B]
    assert ledger.verify().ok


def test_a_rolled_back_append_leaves_a_hole_the_follower_passes(ledger: Ledger) -> None:
    before = ledger.append("earlier", messages("earlier", 1, 2)).positions
    with pytest.raises(RuntimeError), ledger.log.transaction() as conn:
        ledger.log.append_in(conn, A, messages(A, 1, 2))
        late = ledger.append(B, messages(B, 1, 2))
        assert ledger.log.read_all(after=before[-1]) == []
        raise RuntimeError("roll back")
    assert [e.position for e in ledger.log.read_all(after=0)] == [*before, *late.positions]
    assert late.positions[0] == before[-1] + 3  # A's two positions are a hole for good
    ledger.seal()
    assert ledger.verify().ok


def test_a_following_reader_in_another_thread_sees_every_event_once(ledger: Ledger) -> None:
    """Threads append while A holds positions open; the follower's list is the log."""
    seen: list[int] = []
    stop = threading.Event()

    def follow() -> None:
        last = 0
        while True:
            finished = stop.is_set()  # sampled before the read, so that read sees all
            batch = ledger.log.read_all(after=last, limit=50)
            for event in batch:
                assert event.position > last
                last = event.position
                seen.append(event.position)
            if not batch and finished:
                return

    follower = threading.Thread(target=follow)
    follower.start()
    try:
        with ledger.log.transaction() as conn:
            held = ledger.log.append_in(conn, A, messages(A, 1, 3))
            for n in range(5):
                ledger.append(B, messages(B, 1 + 2 * n, 2))
            assert held.positions[-1] not in seen and not seen
    finally:
        stop.set()
        follower.join()
    assert seen == committed_positions(ledger)


def test_an_automatic_seal_stops_before_an_append_in_progress(url: str) -> None:
    with Ledger.open(url, load_vocabulary=False, seal=SealSettings(every=5)) as ledger:
        first = ledger.append("earlier", messages("earlier", 1, 2)).positions
        with ledger.log.transaction() as conn:
            held = ledger.log.append_in(conn, A, messages(A, 1, 2))
            late = ledger.append(B, messages(B, 1, 6))  # crosses the mark: seals
            with ledger.engine.connect() as reader:
                sealed = [s.position for s in list_seals(reader)]
            # The seal covers only what no open transaction can still fill.
            assert sealed == [first[-1]]
            assert held.positions[0] == first[-1] + 1
        ledger.append(B, messages(B, 7, 5))
        with ledger.engine.connect() as reader:
            sealed = [s.position for s in list_seals(reader)]
        assert sealed == [first[-1], ledger.head()]
        assert late.positions[-1] < ledger.head()
        report = ledger.verify()
        assert report.ok, report.problems
        assert report.sealed_position == ledger.head()


def test_an_explicit_seal_waits_for_appends_in_progress(url: str) -> None:
    with Ledger.open(url, load_vocabulary=False) as ledger:
        ledger.append("earlier", messages("earlier", 1, 2))
        sealed: list[int] = []
        with ledger.log.transaction() as conn:
            ledger.log.append_in(conn, A, messages(A, 1, 2))
            sealer = threading.Thread(
                target=lambda: sealed.append(getattr(ledger.seal(), "position", 0)))
            sealer.start()
            sealer.join(0.5)  # it waits for A (the lock timeout fails it after 10 s)
        sealer.join()
        assert sealed == [ledger.head()] == [4]
        assert ledger.verify().ok


@pytest.mark.slow
def test_same_scope_tool_counts_from_concurrent_streams_equal_a_rebuild(
        ledger: Ledger) -> None:
    """Sessions of one scope use one tool at once: each use reads and rewrites the scope's
    count for the tool, so concurrent appends must apply in position order."""
    writers, uses = 4, 25
    streams = [f"chat-{n}" for n in range(writers)]
    for stream in streams:
        ledger.append(stream, {"type": "session.started", "data": {"scope": "team"}})
    barrier = threading.Barrier(writers)
    errors: list[BaseException] = []
    results: list[AppendResult] = []

    def write(stream: str) -> None:
        try:
            barrier.wait()
            for n in range(uses):
                results.append(ledger.append(stream, [
                    {"type": "tool.used", "data": {"tool_name": "grep"}},
                    {"type": "message.appended",
                     "data": {"role": "assistant", "content": f"{stream} {n}"}}]))
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(s,)) for s in streams]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    with ledger.engine.connect() as conn:
        count = conn.execute(sa.text(
            "SELECT lifetime_count FROM tool_usage WHERE scope = 'team' AND tool_name = 'grep'"
        )).scalar_one()
        seqs = list(conn.execute(sa.text(
            "SELECT seq FROM tool_uses WHERE scope = 'team' ORDER BY seq")).scalars())
        # A use stamped before another that committed first is late: kept at its time.
        late = conn.execute(sa.text(
            "SELECT count(*) FROM tool_uses_late WHERE scope = 'team'")).scalar_one()
    assert count == writers * uses
    assert seqs == list(range(1, writers * uses - late + 1))
    assert_projections_equal_rebuild(ledger)
    assert ledger.verify().ok


def test_rows_from_before_0011_have_no_txid_and_count_as_settled(url: str) -> None:
    engine = create_engine(url)
    try:
        upgrade(engine, "0010")
        with engine.begin() as conn:
            conn.execute(sa.text(
                "INSERT INTO events (stream_id, stream_version, event_id, type,"
                " schema_version, data, metadata, recorded_at, prev_hash, hash) VALUES"
                " ('old', 1, '00000000-0000-4000-8000-000000000001', 'message.appended', 1,"
                " :data, '{}', '2026-01-01T00:00:00Z', :genesis, :digest)"),
                {"data": '{"content":"old","role":"user"}', "genesis": "0" * 64,
                 "digest": "f" * 64})
    finally:
        engine.dispose()
    with Ledger.open(url, load_vocabulary=False) as ledger:
        new = ledger.append("new", messages("new", 1, 1))
        with ledger.engine.connect() as conn:
            txids = dict(conn.execute(sa.text("SELECT position, txid FROM events")).all())
        assert txids[1] is None and txids[new.positions[0]] is not None
        assert [e.position for e in ledger.log.read_all()] == [1, new.positions[0]]
        assert ledger.log.settled_position() == new.positions[0]


def test_an_assembly_waits_for_an_earlier_append_in_flight(ledger: Ledger) -> None:
    """The scope's card is set in a transaction still open while the session's message
    commits at a later position. An assembly taken meanwhile must not name that later
    position without the card: its replay, once the card has committed, would differ."""
    now = datetime(2026, 3, 1, 12, tzinfo=UTC)
    ledger.append("chat", [{"type": "session.started", "data": {"scope": "team"}},
                           {"type": "message.appended",
                            "data": {"role": "user", "content": "hello"}}])
    started, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def hold_card_open() -> None:
        try:
            with ledger.log.transaction() as conn:
                ledger.log.append_in(conn, "scope:team", [{"type": "card.set", "data": {
                    "name": "Wren", "description": "A lighthouse keeper."}}])
                started.set()
                release.wait(30)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
            started.set()

    holder = threading.Thread(target=hold_card_open)
    holder.start()
    started.wait(30)
    late = ledger.append("chat", {"type": "message.appended",
                                  "data": {"role": "user", "content": "still there?"}})
    assembled: list[Any] = []
    reader = threading.Thread(target=lambda: assembled.append(
        ledger.assemble("chat", "card", now=now)))
    reader.start()
    reader.join(1.0)
    waited = reader.is_alive()
    release.set()
    holder.join(30)
    reader.join(30)
    assert errors == []
    assert waited, "the assembly read past an append in flight"
    assembly = assembled[0]
    assert assembly.position >= late.positions[-1]
    assert "A lighthouse keeper." in assembly.text
    replayed = ledger.replay("chat", until=assembly.position, profile="card", now=now)
    assert replayed.digest == assembly.digest


def test_an_assembly_with_nothing_in_flight_does_not_wait(ledger: Ledger) -> None:
    """A transaction left open that is no append (a reader, another table's writer) is
    no reason to wait."""
    ledger.append("chat", {"type": "message.appended",
                           "data": {"role": "user", "content": "hello"}})
    with ledger.engine.connect() as other, other.begin():
        other.execute(sa.text("SELECT pg_current_xact_id()"))  # holds an id, appends nothing
        later = ledger.append("chat", {"type": "message.appended",
                                       "data": {"role": "user", "content": "again"}})
        assembly = ledger.assemble("chat", "card")
    assert assembly.position == later.positions[-1]
