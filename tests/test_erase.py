"""Erasure: a session's or a scope's content gone from the database files (the SQLite file
and its WAL; PostgreSQL's relation files, read from its data directory), while every
chain, seal and anchor still verifies and other sessions assemble as before."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from ctxledger import ErasedHistory, Ledger, LedgerError
from ctxledger.cli import app
from ctxledger.projections.base import Projection
from ctxledger.projections.registry import builtin_projections
from ctxledger.projections.rowstore import RowStore
from ctxledger.store.records import RecordedEvent
from ctxledger.store.schema import events

MARK = "zq7-MARKER-erase-4b1d"
"""In every piece of the erased session's content; found nowhere once it is erased."""


def message(content: str, role: str = "user") -> dict[str, Any]:
    return {"type": "message.appended", "data": {"role": role, "content": content}}


def seed(ledger: Ledger) -> None:
    """``alice`` (scope ``home``) holds the marker everywhere; ``bob`` (scope ``work``)
    does not."""
    ledger.append("alice", [
        {"type": "session.started", "data": {"scope": "home"}},
        message(f"my secret is {MARK}-message"),
        message(f"noted {MARK}-reply", role="assistant"),
        {"type": "tool.used", "data": {"tool_name": f"grep-{MARK}-tool"}},
        {"type": "observation.recorded",
         "data": {"kind": "finding", "content": f"alice said {MARK}-observation"}},
        {"type": "item.put", "data": {"item_id": "note", "kind": "summary",
                                      "content": f"summary {MARK}-item"}},
    ])
    ledger.append("bob", [
        {"type": "session.started", "data": {"scope": "work"}},
        message("bob's plain question"),
        message("bob's plain answer", role="assistant"),
    ])


def raw_bytes(ledger: Ledger) -> bytes:
    """Every byte of the database's files: the SQLite file with its WAL and journal, or
    every PostgreSQL relation (tables, TOAST, indexes) of the ledger's schema."""
    url = ledger.engine.url
    if url.get_backend_name() == "sqlite":
        base = Path(str(url.database))
        return b"".join(p.read_bytes() for p in sorted(base.parent.glob(base.name + "*")))
    with ledger.engine.connect() as conn:
        conn.exec_driver_sql("CHECKPOINT")  # dirty buffers into the relation files
        data_dir = Path(str(conn.exec_driver_sql("SHOW data_directory").scalar()))
        paths = conn.exec_driver_sql(
            "WITH own AS (SELECT oid, reltoastrelid FROM pg_class"
            "             WHERE relnamespace = current_schema()::regnamespace),"
            " toast AS (SELECT reltoastrelid AS oid FROM own WHERE reltoastrelid <> 0),"
            " toast_index AS (SELECT indexrelid AS oid FROM pg_index"
            "                 WHERE indrelid IN (SELECT oid FROM toast))"
            " SELECT pg_relation_filepath(oid) FROM (SELECT oid FROM own UNION"
            " SELECT oid FROM toast UNION SELECT oid FROM toast_index) AS r"
        ).scalars().all()
    out = b""
    for rel in paths:
        if rel is None:
            continue
        main = data_dir / rel
        # The main fork, its 1 GB segments (.1, .2...) and its other forks (_fsm, _vm).
        for part in sorted(main.parent.glob(main.name + "*")):
            if part.name == main.name or part.name[len(main.name)] in "._":
                out += part.read_bytes()
    return out


@pytest.fixture
def seeded(db_url: str) -> Iterator[Ledger]:
    with Ledger.open(db_url) as ledger:
        seed(ledger)
        yield ledger


def test_erase_session_leaves_no_trace_and_verifies(seeded: Ledger) -> None:
    ledger = seeded
    anchor = ledger.anchor()
    alice = ledger.assemble("alice", "session")
    ledger.record_assembly("alice", alice)
    bob = ledger.replay("bob", profile="session")
    assert MARK.encode() in raw_bytes(ledger)
    head = ledger.head()

    report = ledger.erase(session="alice", reason="subject access request 17")

    assert (report.target, report.name, report.events) == ("session", "alice", 7)
    assert report.position == head + 1
    assert MARK.encode() not in raw_bytes(ledger)
    checked = ledger.verify(anchor=anchor, deep=True)
    assert checked.problems == [] and checked.ok and checked.anchor == "ok"
    # A seal after the erasure covers the blanked rows too.
    ledger.seal()
    assert ledger.verify(anchor=ledger.anchor()).ok
    # Other sessions assemble exactly as before.
    assert ledger.replay("bob", bob.position, profile="session").digest == bob.digest
    # The record: what, when and why, without content.
    (record,) = [e for e in ledger.events("system") if e.type == "erasure.completed"]
    assert record.data["reason"] == "subject access request 17"
    assert record.data["streams"] == ["alice"] and record.data["events"] == 7
    assert MARK not in json.dumps(record.data)
    assert [e.type for e in ledger.events("alice")] == ["event.erased"] * 7


def test_erase_takes_the_forks_that_copied_the_session(seeded: Ledger) -> None:
    alice_end = seeded.events("alice")[-1].position
    copied = seeded.fork("alice", "alice-fork", alice_end)
    seeded.fork("alice-fork", "alice-fork-2", copied.positions[-1])
    seeded.append("alice-fork-2", message("a later message of the fork"))
    bob = seeded.replay("bob", profile="session")
    report = seeded.erase(session="alice", reason="the person asked")
    assert report.streams == ["alice", "alice-fork", "alice-fork-2"]
    assert MARK.encode() not in raw_bytes(seeded)
    assert {e.type for s in report.streams for e in seeded.events(s)} == {"event.erased"}
    assert seeded.verify().ok
    assert seeded.replay("bob", bob.position, profile="session").digest == bob.digest


def test_erase_again_erases_nothing(seeded: Ledger) -> None:
    seeded.erase(session="alice", reason="first")
    head = seeded.head()
    again = seeded.erase(session="alice", reason="second")
    assert (again.events, again.position) == (0, None)
    assert seeded.head() == head


def test_erase_scope_takes_its_sessions_and_spares_others(seeded: Ledger) -> None:
    seeded.append("scope:home", [
        {"type": "source.registered", "data": {"source_id": "wiki", "version": "1",
                                               "trust": 0.5}},
        {"type": "snippet.added", "data": {"snippet_id": "s1", "source_id": "wiki",
                                           "source_version": "1",
                                           "text": f"snippet {MARK}-snippet"}}])
    bob = seeded.replay("bob", profile="session")
    report = seeded.erase(scope="home", reason="account closed")
    assert report.streams == ["alice", "scope:home"]
    assert MARK.encode() not in raw_bytes(seeded)
    assert seeded.verify().ok
    assert seeded.replay("bob", bob.position, profile="session").digest == bob.digest


def test_audit_of_erased_session_says_erased(seeded: Ledger) -> None:
    seeded.record_assembly("alice", seeded.assemble("alice", "session"))
    seeded.record_assembly("bob", seeded.assemble("bob", "session"))
    seeded.erase(session="alice", reason="gone")
    report = seeded.audit()
    assert [(e.session, e.status) for e in report.entries] == [
        ("alice", "erased"), ("bob", "match")]
    assert report.ok
    assert [e.status for e in seeded.audit("alice").entries] == ["erased"]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"session": "nobody", "reason": "r"}, "unknown session 'nobody'"),
    ({"scope": "nowhere", "reason": "r"}, "unknown scope 'nowhere'"),
    ({"session": "alice", "reason": "  "}, "erase needs a reason"),
    ({"session": "alice", "scope": "home", "reason": "r"}, "exactly one of"),
    ({"reason": "r"}, "exactly one of"),
])
def test_bad_input_writes_nothing(seeded: Ledger, kwargs: dict[str, Any],
                                  message: str) -> None:
    head = seeded.head()
    with pytest.raises(LedgerError, match=message):
        seeded.erase(**kwargs)
    assert seeded.head() == head
    assert MARK.encode() in raw_bytes(seeded)


def test_verify_catches_content_blanked_outside_erase(seeded: Ledger) -> None:
    """Someone who drops the trigger and blanks an event as erase would is caught: no
    erasure record lists it."""
    with seeded.engine.begin() as conn:
        conn.execute(sa.text("DROP TRIGGER IF EXISTS events_no_update" if
                             conn.dialect.name == "sqlite" else
                             "ALTER TABLE events DISABLE TRIGGER events_no_update"))
        conn.execute(events.update().where(events.c.stream_id == "bob",
                                           events.c.stream_version == 2)
                     .values(type="event.erased", data="{}"))
        if conn.dialect.name != "sqlite":
            conn.execute(sa.text("ALTER TABLE events ENABLE TRIGGER events_no_update"))
    found = seeded.verify().problems
    assert any("blanked with no erasure recorded" in p for p in found), found


def test_verify_catches_an_erasure_record_listing_live_events(seeded: Ledger) -> None:
    seeded.erase(session="alice", reason="gone")
    with seeded.engine.begin() as conn:
        bob_first = conn.execute(sa.select(events.c.position).where(
            events.c.stream_id == "bob").order_by(events.c.position).limit(1)).scalar_one()
        conn.execute(sa.text("DROP TRIGGER IF EXISTS events_no_update" if
                             conn.dialect.name == "sqlite" else
                             "ALTER TABLE events DISABLE TRIGGER events_no_update"))
        record = conn.execute(sa.select(events.c.position, events.c.data).where(
            events.c.type == "erasure.completed")).one()
        data = json.loads(record.data)
        data["positions"].append(bob_first)
        conn.execute(events.update().where(events.c.position == record.position)
                     .values(data=json.dumps(data)))
    problems = seeded.verify().problems
    assert any(f"lists position {bob_first}" in p for p in problems), problems


def test_cli_erase(db_url: str) -> None:
    with Ledger.open(db_url) as ledger:
        seed(ledger)
    runner = CliRunner()
    out = runner.invoke(app, ["--db", db_url, "erase", "--session", "alice"])
    assert out.exit_code == 1
    assert out.output.strip().splitlines()[-1].startswith("error:")
    assert "reason" in out.output and len(out.output.strip().splitlines()) == 1
    out = runner.invoke(app, ["--db", db_url, "erase", "--session", "nobody",
                              "--reason", "r"])
    assert (out.exit_code, out.output.strip()) == (1, "error: unknown session 'nobody'")
    out = runner.invoke(app, ["--db", db_url, "erase", "--session", "alice",
                              "--reason", "request 9"])
    assert out.exit_code == 0, out.output
    done = json.loads(out.stdout.strip().splitlines()[-1])
    assert (done["events"], done["streams"], done["reason"]) == (6, ["alice"], "request 9")
    out = runner.invoke(app, ["--db", db_url, "verify"])
    assert out.exit_code == 0, out.output


def test_replay_and_why_of_erased_history_answer_erased(seeded: Ledger) -> None:
    """The erased session, and a peer whose scope-wide replay read its events, answer
    "erased"; a session of another scope replays as before."""
    seeded.append("carol", [{"type": "session.started", "data": {"scope": "home"}},
                            message("carol asks")])
    head = seeded.head()
    seeded.erase(session="alice", reason="gone")
    with pytest.raises(ErasedHistory, match="erased"):
        seeded.replay("alice", profile="session")
    with pytest.raises(ErasedHistory, match="erased"):
        seeded.replay("carol", head, profile="session")
    assert seeded.replay("carol", head, profile="card").session == "carol"
    assert seeded.replay("bob", profile="session").session == "bob"
    runner = CliRunner()
    url = seeded.engine.url.render_as_string(hide_password=False)
    for args in (["replay", "alice"], ["why", "alice", "mes_example"],
                 ["replay", "alice", "--timeline"]):
        out = runner.invoke(app, ["--db", url, *args])
        assert out.exit_code == 0, out.output
        assert json.loads(out.stdout)["status"] == "erased"
    out = runner.invoke(app, ["--db", url, "audit", "alice"])
    assert out.exit_code == 0, out.output


def test_keyed_log_still_verifies_after_erase(db_url: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """With a chain key the erasure record is an HMAC link like any event, and the log
    verifies (with the key) across the tombstones and the seals made before and after."""
    monkeypatch.setenv("CTXLEDGER_CHAIN_KEY", "erase test key")
    with Ledger.open(db_url) as ledger:
        seed(ledger)
        anchor = ledger.anchor()
        ledger.erase(session="alice", reason="gone")
        ledger.seal()
        checked = ledger.verify(anchor=anchor)
        assert checked.problems == [] and checked.anchor == "ok"
    monkeypatch.setenv("CTXLEDGER_CHAIN_KEY", "another key")
    with Ledger.open(db_url) as ledger:
        assert not ledger.verify().ok


@pytest.mark.parametrize("kind", ["event.erased", "erasure.completed"])
def test_erasure_types_cannot_be_appended(seeded: Ledger, kind: str) -> None:
    head = seeded.head()
    with pytest.raises(LedgerError, match="unknown event type"):
        seeded.append("system" if kind == "erasure.completed" else "bob",
                      [{"type": kind, "data": {}}])
    assert seeded.head() == head


@pytest.mark.postgres
def test_erase_as_a_role_that_does_not_own_events_fails_cleanly(pg_url: str) -> None:
    """The app role of docs/DEPLOY.md (DML grants only) cannot erase: one line, nothing
    written."""
    role = f"erase_app_{uuid.uuid4().hex[:8]}"
    url = sa.engine.make_url(pg_url)
    with Ledger.open(pg_url) as ledger:
        seed(ledger)
        head = ledger.head()
        with ledger.engine.begin() as conn:
            schema = conn.exec_driver_sql("SELECT current_schema()").scalar()
            conn.exec_driver_sql(f'CREATE ROLE "{role}" LOGIN')
            conn.exec_driver_sql(f'GRANT USAGE ON SCHEMA "{schema}" TO "{role}"')
            conn.exec_driver_sql(f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES'
                                 f' IN SCHEMA "{schema}" TO "{role}"')
    try:
        with Ledger.open(url.set(username=role).render_as_string(hide_password=False),
                         upgrade=False) as app_ledger:
            with pytest.raises(LedgerError, match="must run as the owner of table events"):
                app_ledger.erase(session="alice", reason="r")
            # Asking for the erasing setting itself does not let a tombstone through.
            with pytest.raises(sa.exc.DBAPIError, match="events are immutable"), \
                    app_ledger.engine.begin() as conn:
                conn.exec_driver_sql("SELECT set_config('ctxledger.erasing', 'on', true)")
                conn.exec_driver_sql("UPDATE events SET type = 'event.erased', data = '{}'"
                                     " WHERE position = 2")
            assert app_ledger.head() == head
    finally:
        with Ledger.open(pg_url) as ledger, ledger.engine.begin() as conn:
            conn.exec_driver_sql(f'DROP OWNED BY "{role}"')
            conn.exec_driver_sql(f'DROP ROLE "{role}"')
    with Ledger.open(pg_url) as ledger:
        assert MARK.encode() in raw_bytes(ledger)


@pytest.mark.postgres
def test_another_scopes_append_goes_on_while_an_erase_writes(pg_url: str) -> None:
    """The erasing transaction takes no lock another stream's append waits for: an append
    to another scope, made while the erase is blanking (from its progress callback),
    commits before the erase does."""
    import threading

    with Ledger.open(pg_url) as ledger, Ledger.open(pg_url) as other:
        seed(ledger)
        other.append("carol", [{"type": "session.started", "data": {"scope": "work"}}])
        landed: list[int] = []

        def append_meanwhile(done: int, total: int) -> None:
            if landed or done >= total:
                return
            writer = threading.Thread(target=lambda: landed.append(
                other.append_messages("carol", [{"role": "user", "content": "hi"}])
                .positions[0]))
            writer.start()
            writer.join(20)
            assert not writer.is_alive(), "the append waited for the erase"

        done = ledger.erase(session="alice", reason="r", progress=append_meanwhile)
        # Appended after the erasure's record, committed while the erase was still open.
        assert done.position is not None and landed and landed[0] > done.position


@pytest.mark.postgres
def test_the_guard_lets_only_the_owners_erasing_transaction_tombstone(pg_url: str) -> None:
    """Outside ``Backend.erasing`` the update guard refuses every update; inside, only a
    tombstone that keeps every other column."""
    with Ledger.open(pg_url) as ledger:
        seed(ledger)
        tombstone = "UPDATE events SET type = 'event.erased', data = '{}' WHERE position = 2"
        cases = [("", tombstone),
                 ("SELECT set_config('ctxledger.erasing', 'on', true)", tombstone.replace(
                     "data = '{}'", "data = '{}', hash = repeat('0', 64)")),
                 ("SELECT set_config('ctxledger.erasing', 'on', true)",
                  "UPDATE events SET data = '{}' WHERE position = 2")]
        for setting, update in cases:
            with pytest.raises(sa.exc.DBAPIError, match="events are immutable"), \
                    ledger.engine.begin() as conn:
                if setting:
                    conn.exec_driver_sql(setting)
                conn.exec_driver_sql(update)
        with ledger.engine.connect() as conn, conn.begin() as tx:
            conn.exec_driver_sql(cases[1][0])
            assert conn.exec_driver_sql(tombstone).rowcount == 1
            tx.rollback()
        assert MARK.encode() in raw_bytes(ledger)


last_words = sa.Table("erase_last_words", sa.MetaData(),
                      sa.Column("role", sa.String(20), primary_key=True),
                      sa.Column("content", sa.Text, nullable=False))


class LastWords(Projection):
    """A projection of the application's own, keyed by neither stream nor scope: the
    newest message's text per role."""

    name: ClassVar[str] = "erase_last_words"
    version: ClassVar[int] = 1
    tables: ClassVar[tuple[sa.Table, ...]] = (last_words,)
    handles: ClassVar[frozenset[str]] = frozenset({"message.appended"})

    def apply(self, event: RecordedEvent, rows: RowStore) -> None:
        rows.put(last_words, {"role": event.data["role"], "content": event.data["content"]})


def test_a_projection_the_default_cannot_forget_from_is_rebuilt(db_url: str) -> None:
    """Rows keyed by neither stream nor scope cannot be told apart by stream: that
    projection is rebuilt, and no row keeps the erased text."""
    with Ledger.open(db_url) as opened:
        last_words.create(opened.engine)
        ledger = Ledger(opened.engine, projections=[*builtin_projections(), LastWords()])
        ledger.refresh_projections()
        seed(ledger)
        ledger.append_messages("bob", [{"role": "user", "content": "bob again"}])
        ledger.append_messages("alice", [{"role": "assistant", "content": f"again {MARK}"}])
        with ledger.engine.connect() as conn:
            before = {str(r.role): str(r.content) for r in conn.execute(sa.select(last_words))}
        assert before == {"user": "bob again", "assistant": f"again {MARK}"}
        ledger.erase(session="alice", reason="r")
        with ledger.engine.connect() as conn:
            after = {str(r.role): str(r.content) for r in conn.execute(sa.select(last_words))}
        assert after == {"user": "bob again", "assistant": "bob's plain answer"}
        assert MARK.encode() not in raw_bytes(ledger)


def test_an_erase_leaves_no_text_in_another_threads_token_counter(seeded: Ledger) -> None:
    """A service assembles on worker threads: the counters of a thread other than the
    erasing one drop the texts they counted too."""
    from concurrent.futures import ThreadPoolExecutor

    def counted() -> list[str]:
        counters = getattr(seeded._local, "counters", {})
        return [text for counter in counters.values() for text in counter._recent]

    with ThreadPoolExecutor(max_workers=1) as worker:  # one thread, kept alive
        worker.submit(seeded.assemble, "alice", "session").result()
        assert any(MARK in text for text in worker.submit(counted).result())
        seeded.erase(session="alice", reason="test")
        assert not any(MARK in text for text in worker.submit(counted).result())


# -- PostgreSQL's scrub: online with pg_repack, or VACUUM FULL ----------------------------

def _fill_events(ledger: Ledger, count: int) -> None:
    """``count`` rows of other streams copied into ``events``: a table whose rewrite
    takes long enough to be seen."""
    raw: Any = ledger.engine.raw_connection()
    try:
        with raw.cursor() as cursor, cursor.copy(
                "COPY events (stream_id, stream_version, event_id, type, schema_version,"
                " data, metadata, recorded_at, prev_hash, hash) FROM STDIN") as copy:
            for n in range(count):
                copy.write_row((f"filler-{n % 50}", n // 50 + 1, str(uuid.UUID(int=n + 1)),
                                "session.ended", 1, '{"pad": "' + "x" * 400 + '"}', "{}",
                                "2026-01-01 00:00:00+00", "0" * 64, f"{n:064d}"))
        raw.commit()
    finally:
        raw.close()


def skip_without_online_scrub(ledger: Ledger) -> None:
    """Skip where pg_repack is not installed; CI installs it (``make pg-repack``) and the
    tests create its extension, so there it must be found."""
    from conftest import REQUIRE_PG

    from ctxledger.store.backends import pg_scrub

    raw = ledger.engine.raw_connection()
    try:
        available = pg_scrub.online_scrub_available(raw.driver_connection)
    finally:
        raw.close()
    assert available or not REQUIRE_PG, "pg_repack is not installed: make pg-repack"
    if not available:
        pytest.skip("pg_repack is not installed here (make pg-repack installs it)")


@pytest.mark.postgres
def test_another_scopes_append_goes_on_while_the_scrub_rewrites(pg_url: str) -> None:
    """The online scrub copies ``events`` while appends go on: an append to another scope,
    made once the copy has begun (pg_repack's trigger is on the table), commits before the
    rewrite ends (the trigger is still there), and the marker is gone afterwards."""
    import threading
    import time

    with Ledger.open(pg_url) as ledger, Ledger.open(pg_url) as other:
        skip_without_online_scrub(ledger)
        seed(ledger)
        _fill_events(ledger, 40_000)
        other.append("carol", [{"type": "session.started", "data": {"scope": "work"}}])
        watch = sa.text("SELECT count(*) FROM pg_trigger WHERE tgrelid = 'events'::regclass"
                        " AND tgname LIKE '%repack%'")
        seen: list[str] = []

        def append_during_the_copy() -> None:
            deadline = time.monotonic() + 60
            with other.engine.connect() as conn:
                while time.monotonic() < deadline:
                    if conn.execute(watch).scalar():
                        conn.rollback()
                        other.append_messages("carol", [{"role": "user", "content": "hi"}])
                        seen.append("appended")
                        if conn.execute(watch).scalar():
                            seen.append("while the trigger was on")
                        return
                    conn.rollback()
                    time.sleep(0.002)

        watcher = threading.Thread(target=append_during_the_copy)
        watcher.start()
        ledger.erase(session="alice", reason="r")
        watcher.join(60)
        assert seen == ["appended", "while the trigger was on"]
        assert MARK.encode() not in raw_bytes(ledger)
        assert [m.data["content"] for m in other.messages("carol")] == ["hi"]
        # The table swapped in keeps its triggers: events are still immutable.
        with pytest.raises(sa.exc.DBAPIError, match="events are immutable"), \
                ledger.engine.begin() as conn:
            conn.exec_driver_sql("UPDATE events SET data = '{}' WHERE position = 1")


@pytest.mark.postgres
def test_the_scrub_without_pg_repack_is_vacuum_full(pg_url: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """``CTXLEDGER_PG_REPACK=off`` (or no extension) scrubs with ``VACUUM FULL``: the
    marker is gone all the same."""
    monkeypatch.setenv("CTXLEDGER_PG_REPACK", "off")
    with Ledger.open(pg_url) as ledger:
        seed(ledger)
        assert MARK.encode() in raw_bytes(ledger)
        ledger.erase(session="alice", reason="r")
        assert MARK.encode() not in raw_bytes(ledger)
        assert ledger.verify().ok


@pytest.mark.postgres
def test_a_bad_pg_repack_setting_erases_nothing(pg_url: str,
                                                monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    """A client path that is not a program is one line, before anything is written."""
    with Ledger.open(pg_url) as ledger:
        skip_without_online_scrub(ledger)
        seed(ledger)
        head = ledger.head()
        monkeypatch.setenv("CTXLEDGER_PG_REPACK", str(tmp_path / "no-such-program"))
        with pytest.raises(LedgerError, match=r"CTXLEDGER_PG_REPACK=.* is not an executable"):
            ledger.erase(session="alice", reason="r")
        assert ledger.head() == head
        assert MARK.encode() in raw_bytes(ledger)


@pytest.mark.postgres
def test_a_failed_online_scrubs_copy_is_dropped_by_the_next(pg_url: str) -> None:
    """pg_repack's copy of a table, left in schema ``repack`` by a run that failed
    half-way, holds the content as it was: the next scrub of that table drops it."""
    with Ledger.open(pg_url) as ledger:
        skip_without_online_scrub(ledger)
        seed(ledger)
        _fill_events(ledger, 20_000)  # past the size VACUUM FULL takes alone
        with ledger.engine.begin() as conn:
            oid = conn.exec_driver_sql("SELECT 'events'::regclass::oid").scalar()
            conn.exec_driver_sql(f"CREATE TABLE repack.table_{oid} AS SELECT * FROM events")
        try:
            ledger.erase(session="alice", reason="r")
            with ledger.engine.connect() as conn:
                left = conn.exec_driver_sql(
                    f"SELECT to_regclass('repack.table_{oid}')").scalar()
            assert left is None
            assert MARK.encode() not in raw_bytes(ledger)
        finally:
            with ledger.engine.begin() as conn:
                conn.exec_driver_sql(f"DROP TABLE IF EXISTS repack.table_{oid}")


@pytest.mark.postgres
def test_a_running_online_scrub_is_left_alone(pg_url: str) -> None:
    """While another pg_repack run holds the table (its advisory lock), its work tables are
    not dropped: this erase's scrub stops with one line, and the same erase run again
    once that run is over scrubs."""
    with Ledger.open(pg_url) as ledger:
        skip_without_online_scrub(ledger)
        seed(ledger)
        _fill_events(ledger, 20_000)
        with ledger.engine.begin() as conn:
            oid = conn.exec_driver_sql("SELECT 'events'::regclass::oid").scalar()
            conn.exec_driver_sql(f"CREATE TABLE repack.table_{oid} (n integer)")
        holder = ledger.engine.connect()
        try:
            holder.exec_driver_sql(f"SELECT pg_advisory_lock(16185446, CAST(-2147483648 +"
                                   f" {oid}::bigint AS integer))")
            holder.commit()  # a session-level lock: it outlives the transaction
            with pytest.raises(LedgerError, match="pg_repack could not rewrite the tables"):
                ledger.erase(session="alice", reason="r")
            with ledger.engine.connect() as conn:
                assert conn.exec_driver_sql(
                    f"SELECT to_regclass('repack.table_{oid}')").scalar() is not None
        finally:
            holder.exec_driver_sql(f"SELECT pg_advisory_unlock(16185446, CAST(-2147483648 +"
                                   f" {oid}::bigint AS integer))")
            holder.commit()
            holder.close()
        try:
            assert ledger.erase(session="alice", reason="r").events == 0  # scrubs again
            assert MARK.encode() not in raw_bytes(ledger)
        finally:
            with ledger.engine.begin() as conn:
                conn.exec_driver_sql(f"DROP TABLE IF EXISTS repack.table_{oid}")
