"""Reads on a PostgreSQL hot standby: a read-only ``Ledger.open``, the standby's settled
position, and ``ctxledger serve --replica-url`` (reads to the replica, writes to the
primary, read-your-writes by the last position seen).

One real standby for the module (``helpers.standby``: ``pg_basebackup`` of the test
server, started with ``pg_ctl`` on a free port), stopped and removed at the end. The
read-only open itself is tested on both backends too.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from conftest import PG_URL, REQUIRE_PG, require_postgres
from helpers.card_sessions import card_session
from helpers.databases import sibling_database
from helpers.scenario import CARD, StepClock
from helpers.service import client, make_key, serve_process
from helpers.standby import Standby, StandbyUnavailable
from typer.testing import CliRunner

from ctxledger import Ledger, ReadOnlyLedger, ReplicaNotReady
from ctxledger._service.replica import MIN_POSITION_HEADER, SERVED_BY_HEADER
from ctxledger.cli import app
from ctxledger.projections.token_cache import token_counts

T0 = datetime(2025, 6, 1, 9, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def standby() -> Iterator[Standby]:
    """One hot standby of the test server for every test here."""
    require_postgres()
    try:
        made = Standby.create(PG_URL)
    except StandbyUnavailable as exc:
        if REQUIRE_PG:
            pytest.fail(f"no standby: {exc} (CTXLEDGER_REQUIRE_PG=1 makes it mandatory)")
        pytest.skip(f"no standby: {exc}")
    try:
        yield made
    finally:
        made.stop()


def _chat(ledger: Ledger, clock: StepClock, session: str, turns: int) -> list[int]:
    """A card session with ``turns`` exchanges, each assembly recorded; their positions."""
    card_session(ledger, session, CARD)
    recorded = []
    for turn in range(turns):
        clock.tick()
        ledger.append_messages(session, [
            {"role": "user", "content": f"Turn {turn}: is the lamp lit tonight?"},
            {"role": "assistant", "content": f"Turn {turn}: it is, the wick is trimmed."}])
        assembly = ledger.assemble(session, "card")
        recorded.append(ledger.record_assembly(session, assembly).positions[0])
    return recorded


def _one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    message = str(exc.value)
    assert "\n" not in message and message
    return message


# -- the read-only open, on both backends ----------------------------------------------


def test_read_only_open_writes_nothing_and_assembles_the_same(db_url: str) -> None:
    clock = StepClock(T0)
    with Ledger.open(db_url, clock=clock) as primary:
        _chat(primary, clock, "lamp", 2)
        expected = primary.assemble("lamp", "card", now=T0 + timedelta(days=1))
        with primary.engine.begin() as conn:
            conn.execute(sa.delete(token_counts))  # the read-only assembly must count all
    with Ledger.open(db_url, read_only=True, clock=clock) as replica:
        got = replica.assemble("lamp", "card", now=T0 + timedelta(days=1))
        assert got.model_dump_json() == expected.model_dump_json()
        with replica.engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(token_counts)
                                ).scalar_one() == 0
        head = replica.head()
        for write in (lambda: replica.append("lamp", {"type": "message.appended", "data": {
                          "role": "user", "content": "hello"}}),
                      replica.refresh_projections, replica.seal):
            with pytest.raises(ReadOnlyLedger) as refused:
                write()
            assert "read-only" in _one_line(refused)
        assert replica.head() == head


# -- on a real hot standby -------------------------------------------------------------


@pytest.mark.postgres
def test_replay_why_audit_on_the_standby_equal_the_primary(standby: Standby,
                                                           pg_url: str) -> None:
    clock = StepClock(T0)
    with Ledger.open(pg_url, clock=clock) as primary:
        recorded = _chat(primary, clock, "lamp", 3)
        standby.catch_up(pg_url)
        with Ledger.open(standby.url(pg_url), read_only=True, clock=clock) as replica:
            assert replica.head() == primary.head()
            for position in [*recorded, None]:
                assert (replica.replay("lamp", position).model_dump_json()
                        == primary.replay("lamp", position).model_dump_json())
            first_message = next(d.item for d in primary.replay("lamp").decisions
                                 if d.item.startswith("message:"))
            for item in ("mes_example", first_message, "description"):
                assert replica.why("lamp", item).to_json() == primary.why("lamp", item).to_json()
            audit = replica.audit("lamp").to_json()
            assert audit == primary.audit("lamp").to_json()
            assert len(audit["records"]) == 3 and audit["ok"]
            later = T0 + timedelta(days=2)
            # A fresh process: every text is new to its counter, and nothing is saved.
            assert (replica.assemble("lamp", "card", now=later).model_dump_json()
                    == primary.assemble("lamp", "card", now=later).model_dump_json())
            assert _settles(replica, primary.head())
            assert [e.position for e in replica.events()] == [
                e.position for e in primary.events()]


@pytest.mark.postgres
def test_the_standby_feed_never_skips_a_late_commit(standby: Standby, pg_url: str) -> None:
    with Ledger.open(pg_url) as primary, ExitStack() as late:
        primary.append("s1", {"type": "session.started", "data": {}})
        before = primary.head()
        conn = late.enter_context(primary.log.transaction())
        primary.log.append_in(conn, "s2", [{"type": "session.started", "data": {}}])
        early = primary.append("s3", {"type": "session.started", "data": {}}).positions[0]
        assert early == before + 2  # the open transaction took before + 1
        standby.catch_up(pg_url)
        with Ledger.open(standby.url(pg_url), read_only=True) as replica:
            assert replica.head() == early  # the later position has arrived...
            assert _settles(replica, before)
            assert replica.log.settled_position() == before  # ...but the feed waits
            assert [e.position for e in replica.events(after=before - 1)] == [before]
            late.close()  # commits the earlier position
            standby.catch_up(pg_url)
            assert _settles(replica, early)
            assert [e.position for e in replica.events(after=before)] == [before + 1, early]


def _settles(replica: Ledger, position: int, timeout: float = 60.0) -> bool:
    """Whether the standby's settled position reaches ``position``: any transaction
    open on the primary, in any database (other tests'), holds it back a moment."""
    import time

    deadline = time.monotonic() + timeout
    while replica.log.settled_position() < position:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.postgres
def test_read_only_open_refuses_a_standby_it_cannot_answer_for(standby: Standby,
                                                               pg_url: str) -> None:
    with Ledger.open(pg_url) as primary:
        primary.append("s1", {"type": "session.started", "data": {}})
        primary.append("s1", {"type": "message.appended",
                              "data": {"role": "user", "content": "hi"}})
    admin = sa.create_engine(pg_url)
    replica_url = standby.url(pg_url)
    cases = [
        ("UPDATE projection_checkpoints SET inline = false, position = 1"
         " WHERE name = 'session_stats'",
         "projection session_stats is at position 1 but the log ends at 2"),
        ("UPDATE projection_checkpoints SET version = version + 100"
         " WHERE name = 'session_stats'",
         "projection session_stats was built by version"),
        ("DELETE FROM projection_checkpoints WHERE name = 'session_stats'",
         "projection session_stats has never been built there"),
        ("UPDATE alembic_version SET version_num = 'f00dfeed'",
         "the schema is at revision f00dfeed"),
    ]
    try:
        for statement, expected in cases:
            with admin.begin() as conn:
                conn.exec_driver_sql(statement)
            standby.catch_up(pg_url)
            with pytest.raises(ReplicaNotReady) as refused:
                Ledger.open(replica_url, read_only=True, load_vocabulary=False)
            message = _one_line(refused)
            assert expected in message and "read-only open of" in message
    finally:
        admin.dispose()


# -- ctxledger serve --replica-url, over real HTTP ---------------------------------------


def test_serve_refuses_a_replica_it_cannot_answer_for_in_one_line(
        db_url: str, tmp_path: Path) -> None:
    with Ledger.open(db_url, load_vocabulary=False):
        pass
    with sibling_database(db_url, tmp_path) as nothing_there:
        result = CliRunner().invoke(app, ["--db", db_url, "serve", "--port", "0",
                                          "--replica-url", nothing_there])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "no ctxledger database" in lines[0], result.output


@pytest.mark.postgres
@pytest.mark.slow
def test_serve_sends_reads_to_the_replica_and_writes_to_the_primary(
        standby: Standby, pg_url: str, tmp_path: Path) -> None:
    clock = StepClock(T0)
    with Ledger.open(pg_url, clock=clock) as primary:
        _chat(primary, clock, "lamp", 2)
    token = make_key(pg_url, admin=True)
    standby.catch_up(pg_url)
    with serve_process(pg_url, "--replica-url", standby.url(pg_url)) as served, \
            client(served.base, token) as http:
        health = http.get("/healthz").json()
        assert health["replica"]["lag_seconds"] >= 0

        def read(path: str, **headers: str) -> httpx.Response:
            answer = http.get(path, headers=headers)
            assert answer.status_code == 200, answer.text
            return answer

        for path in ("/sessions/lamp/replay", "/sessions/lamp/why?item=mes_example",
                     "/sessions/lamp/audit", "/streams/lamp/events", "/events",
                     "/sessions/lamp/replay?timeline=true"):
            assert read(path).headers[SERVED_BY_HEADER] == "replica", path
        with http.stream("GET", "/events/stream") as feed:
            assert feed.status_code == 200
            assert feed.headers[SERVED_BY_HEADER] == "replica"
        assert "replica" not in http.get("/sessions/lamp/state").headers[SERVED_BY_HEADER]
        appended = http.post("/streams/lamp/events", json={"events": [{
            "type": "message.appended",
            "data": {"role": "user", "content": "Is the boat back?"}}]})
        assert appended.status_code == 200
        assert appended.headers[SERVED_BY_HEADER] == "primary"
        assert read("/sessions/lamp/assemble").headers[SERVED_BY_HEADER] == "primary"

        # The replica stops replaying: a new write is on the primary only.
        standby.set_replay(paused=True)
        try:
            position = http.post("/streams/lamp/events", json={"events": [{
                "type": "message.appended",
                "data": {"role": "user", "content": "The fog is lifting."}}]}
                ).json()["positions"][0]
            lag = _lagging(http)
            assert lag["lag_positions"] >= 1 and lag["lag_seconds"] > 0
            stale = read("/sessions/lamp/replay")
            assert stale.headers[SERVED_BY_HEADER] == "replica"
            assert stale.json()["position"] < position
            fresh = read("/sessions/lamp/replay", **{MIN_POSITION_HEADER: str(position)})
            assert fresh.headers[SERVED_BY_HEADER] == "primary"
            assert fresh.json()["position"] == position
            beyond = read(f"/sessions/lamp/replay?until={position}")
            assert beyond.headers[SERVED_BY_HEADER] == "primary"
            bad = http.get("/sessions/lamp/replay", headers={MIN_POSITION_HEADER: "-1"})
            assert bad.status_code == 400 and MIN_POSITION_HEADER in bad.json()["detail"]
            bad_until = http.get("/sessions/lamp/replay?until=soon")
            assert bad_until.status_code == 400 and "until" in bad_until.json()["detail"]
            by_time = read("/sessions/lamp/replay?until="
                           + datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
            assert by_time.headers[SERVED_BY_HEADER] == "primary"
            assert by_time.json()["position"] == position
        finally:
            standby.set_replay(paused=False)
        standby.catch_up(pg_url)
        caught = _from_replica(http, "/sessions/lamp/replay",
                               **{MIN_POSITION_HEADER: str(position)})
        assert caught.json() == fresh.json()


def _from_replica(http: httpx.Client, path: str, timeout: float = 60.0,
                  **headers: str) -> httpx.Response:
    """``path`` once the replica answers it (its settled position, like a follower's,
    waits for every transaction open on the primary's server)."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        answer = http.get(path, headers=headers)
        assert answer.status_code == 200, answer.text
        if answer.headers[SERVED_BY_HEADER] == "replica":
            return answer
        assert time.monotonic() < deadline, "the replica never reached the position"
        time.sleep(0.05)


def _lagging(http: httpx.Client, timeout: float = 60.0) -> dict[str, Any]:
    """The health report's replica section once it shows the replica behind (the WAL
    of the last append received, not replayed)."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        replica: dict[str, Any] = http.get("/healthz").json()["replica"]
        if (replica["lag_positions"] and replica["lag_seconds"]) or time.monotonic() > deadline:
            return replica
        time.sleep(0.05)
