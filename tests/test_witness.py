"""The witness: heads sent after commits, checked by ``verify`` without being asked."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import sqlalchemy as sa

from ctxledger import Ledger, WitnessError, WitnessSettings
from ctxledger.store.chain_key import CHAIN_KEY_ENV
from ctxledger.store.seal import SealSettings
from ctxledger.store.witness import (
    WITNESS_ENV,
    DatabaseWitness,
    FileWitness,
    HttpWitness,
    witness_from_spec,
)


def message(text: str) -> dict[str, object]:
    return {"type": "message.appended", "data": {"role": "user", "content": text}}


def cut_tail(ledger: Ledger, count: int) -> None:
    """Delete the log's newest events behind its back (triggers down, then back)."""
    head = ledger.head()
    with ledger.engine.begin() as conn:
        if ledger.engine.dialect.name == "sqlite":
            (create,) = conn.exec_driver_sql(
                "SELECT sql FROM sqlite_master WHERE name = 'events_no_delete'").one()
            conn.exec_driver_sql("DROP TRIGGER events_no_delete")
            conn.execute(sa.text("DELETE FROM events WHERE position > :p"),
                         {"p": head - count})
            conn.exec_driver_sql(create)
        else:
            conn.exec_driver_sql("ALTER TABLE events DISABLE TRIGGER events_no_delete")
            conn.execute(sa.text("DELETE FROM events WHERE position > :p"),
                         {"p": head - count})
            conn.exec_driver_sql("ALTER TABLE events ENABLE TRIGGER events_no_delete")


@pytest.fixture
def heads_file(tmp_path: Path) -> Path:
    folder = tmp_path / "witness"
    folder.mkdir()
    return folder / "heads.log"


@pytest.fixture
def db_url_apart(db_url: str, tmp_path: Path) -> str:
    """The database URL, its SQLite file in a folder of its own (not the witness's)."""
    if not db_url.startswith("sqlite"):
        return db_url
    (tmp_path / "db").mkdir()
    return f"sqlite:///{tmp_path / 'db' / 'ledger.db'}"


def lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# -- the file witness ----------------------------------------------------------------------


def test_every_commit_sends_the_head_and_verify_checks_it(db_url_apart: str,
                                                          heads_file: Path) -> None:
    with Ledger.open(db_url_apart, witness=f"file://{heads_file}") as ledger:
        ledger.append("s", message("one"))
        ledger.append("s", [message("two"), message("three")])
        ledger.append("t", message("four"))
        sent = lines(heads_file)
        assert [h["events"] for h in sent] == [1, 3, 4]
        assert [h["position"] for h in sent] == [e.position for e in ledger.events()
                                                 if e.position in (1, 3, 4)]
        assert all(h["witness"] == "ctxledger-head/1" and len(str(h["hash"])) == 64
                   for h in sent)
        report = ledger.verify()
        assert report.ok and report.witness == "ok", report.problems
        assert report.witnessed_position == ledger.head()
    # The same heads prove a log that grew further by another process.
    with Ledger.open(db_url_apart, witness=f"file://{heads_file}") as ledger:
        ledger.append("s", message("five"))
        assert ledger.verify().ok


def test_a_cut_tail_fails_verify_with_the_witness_and_is_reported_without(
        db_url_apart: str, heads_file: Path) -> None:
    spec = f"file://{heads_file}"
    with Ledger.open(db_url_apart, witness=spec) as ledger:
        for i in range(4):
            ledger.append("s", message(f"m{i}"))
        top = ledger.head()
        cut_tail(ledger, 1)
        # The projections still count the cut message: evidence even without a witness.
        bare = Ledger(ledger.engine).verify()
        assert not bare.ok and bare.witness is None
        assert any("projection table" in p and "removed" in p for p in bare.problems)
        ledger.rebuild()  # the careful attacker makes the projections match...
        assert Ledger(ledger.engine).verify().ok  # ...and without a witness it passes
        report = ledger.verify()
    assert not report.ok and report.witness == "broken"
    assert (f"the log ends at position {top - 1}, before the witnessed head at position"
            f" {top}: its tail was cut or an older copy of the database was restored"
            in report.problems)


def test_a_restored_older_copy_that_grew_again_fails_on_the_hash(
        db_url_apart: str, heads_file: Path) -> None:
    """Cut, then append as much again: the witnessed position exists, its hash differs."""
    with Ledger.open(db_url_apart, witness=f"file://{heads_file}") as ledger:
        for i in range(3):
            ledger.append("s", message(f"m{i}"))
        cut_tail(ledger, 1)
        ledger.rebuild()
    with Ledger.open(db_url_apart, witness=f"file://{heads_file}") as ledger:
        ledger.append("s", message("replacement"))
        ledger.append("s", message("more"))
        report = ledger.verify()
    assert not report.ok and report.witness == "broken"
    assert any(p.startswith("the log does not extend the witnessed head at position")
               for p in report.problems), report.problems


def test_the_file_must_lie_outside_the_database_folder(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    for spec in (f"file://{tmp_path / 'heads.log'}", str(tmp_path / "sub" / "heads.log")):
        with pytest.raises(WitnessError, match="is inside the database's folder"):
            Ledger.open(url, witness=spec, load_vocabulary=False)
    assert not (tmp_path / "heads.log").exists()


def test_a_witness_that_cannot_be_written_fails_the_append_after_its_commit(
        db_url_apart: str, tmp_path: Path) -> None:
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    spec = f"file://{blocked / 'heads.log'}"
    ledger = Ledger.open(db_url_apart, witness=spec)
    with pytest.raises(WitnessError) as caught:
        ledger.append("s", message("kept"))
    assert str(caught.value).startswith("appended at positions 1, but cannot write"
                                        f" witness file {blocked / 'heads.log'}:")
    assert "\n" not in str(caught.value)
    assert caught.value.result.positions == (1,)
    # Committed, and reported: the log has it; verify cannot prove it either.
    assert [e.data["content"] for e in ledger.events("s")] == ["kept"]
    report = ledger.verify()
    assert report.witness == "unreadable" and not report.ok
    assert report.problems[0].startswith("cannot read witness file")
    with pytest.raises(WitnessError, match="cannot write witness file"):
        ledger.close()  # the head still unsent goes out on close, and fails again


def test_heads_are_batched_by_count_and_flushed_on_close(db_url_apart: str,
                                                         heads_file: Path) -> None:
    ledger = Ledger.open(db_url_apart, witness=f"file://{heads_file}",
                         witness_settings=WitnessSettings(every=3))
    for i in range(5):
        ledger.append("s", message(f"m{i}"))
    assert [h["events"] for h in lines(heads_file)] == [3]
    ledger.close()
    assert [h["events"] for h in lines(heads_file)] == [3, 5]


def test_heads_are_batched_by_time_on_the_ledger_clock(db_url_apart: str,
                                                       heads_file: Path) -> None:
    now = [datetime(2026, 1, 1, tzinfo=UTC)]
    with Ledger.open(db_url_apart, witness=f"file://{heads_file}", clock=lambda: now[0],
                     witness_settings=WitnessSettings(every=None, interval_ms=1000)) as ledger:
        ledger.append("s", message("first"))  # nothing sent yet: due at once
        now[0] += timedelta(milliseconds=400)
        ledger.append("s", message("second"))
        now[0] += timedelta(milliseconds=400)
        ledger.append("s", message("third"))
        assert [h["events"] for h in lines(heads_file)] == [1]
        now[0] += timedelta(milliseconds=300)
        ledger.append("s", message("fourth"))
        assert [h["events"] for h in lines(heads_file)] == [1, 4]
    with pytest.raises(ValueError, match="give every, interval_ms or both"):
        WitnessSettings(every=None)


def test_a_keyed_log_with_seals_between_heads(db_url_apart: str, heads_file: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CHAIN_KEY_ENV, "a key the database never sees")
    with Ledger.open(db_url_apart, witness=f"file://{heads_file}",
                     seal=SealSettings(every=2)) as ledger:
        for i in range(5):
            ledger.append("s", message(f"m{i}"))
        ledger.seal()
        ledger.append("s", message("after the seal"))
        assert ledger.verify().ok
        assert all(h["key_id"] is not None for h in lines(heads_file))
        monkeypatch.delenv(CHAIN_KEY_ENV)
        report = ledger.verify()
    assert not report.ok
    assert any("set CTXLEDGER_CHAIN_KEY" in p for p in report.problems)


def test_the_environment_names_the_witness(db_url_apart: str, heads_file: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(WITNESS_ENV, f"file://{heads_file}")
    with Ledger.open(db_url_apart) as ledger:
        ledger.append("s", message("m"))
        assert ledger.verify().witness == "ok"
    assert len(lines(heads_file)) == 1
    with Ledger.open(db_url_apart, witness="") as ledger:  # "" turns it off
        ledger.append("s", message("unwitnessed"))
        assert ledger.verify().witness is None
    assert len(lines(heads_file)) == 1


def test_a_torn_last_line_is_not_a_head(tmp_path: Path) -> None:
    path = tmp_path / "heads.log"
    witness = FileWitness(path)
    assert witness.heads() == []
    path.write_text('{"witness":"ctxledger-head/1","position":1,"events":1,"hash":"'
                    + "a" * 64 + '","key_id":null,"at":""}\n{"witness":"ctxl')
    assert [h.position for h in witness.heads()] == [1]
    path.write_text("not json\n")
    with pytest.raises(WitnessError, match=r"heads.log line 1: not a witnessed head"):
        witness.heads()


def test_specs(tmp_path: Path) -> None:
    assert isinstance(witness_from_spec(f"file://{tmp_path}/h.log"), FileWitness)
    assert isinstance(witness_from_spec(str(tmp_path / "h.log")), FileWitness)
    assert isinstance(witness_from_spec("https://witness.example/heads"), HttpWitness)
    db = witness_from_spec(f"sqlite:///{tmp_path}/w.db")
    assert isinstance(db, DatabaseWitness)
    db.close()
    for bad, message_part in (("", "empty witness spec"),
                              ("file://relative/h.log", "needs an absolute path"),
                              ("ftp://host/h", "unknown scheme 'ftp'")):
        with pytest.raises(WitnessError, match=message_part):
            witness_from_spec(bad)


# -- a second database ---------------------------------------------------------------------


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def witness_db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        folder = tmp_path / "witness-db"
        folder.mkdir()
        return f"sqlite:///{folder / 'witness.db'}"
    url: str = request.getfixturevalue("pg_url")
    return url


def test_a_second_database_witnesses_the_log(witness_db: str, tmp_path: Path) -> None:
    (tmp_path / "db").mkdir()
    url = f"sqlite:///{tmp_path / 'db' / 'ledger.db'}"
    with Ledger.open(url, witness=witness_db) as ledger:
        for i in range(3):
            ledger.append("s", message(f"m{i}"))
        assert ledger.verify().witness == "ok"
        cut_tail(ledger, 1)
        ledger.rebuild()
        report = ledger.verify()
    assert report.witness == "broken" and report.witnessed_position == 3
    witness = DatabaseWitness(witness_db)
    assert [h.events for h in witness.heads()] == [1, 2, 3]
    witness.close()


def test_a_witness_database_in_the_ledger_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(WitnessError, match="is inside the database's folder"):
        Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}",
                    witness=f"sqlite:///{tmp_path / 'witness.db'}", load_vocabulary=False)


# -- an HTTP endpoint ------------------------------------------------------------------------


class _Heads(BaseHTTPRequestHandler):
    kept: list[dict[str, object]]
    refuse: bool

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.server.refuse:  # type: ignore[attr-defined]
            self.send_response(503)
            self.end_headers()
            return
        self.server.kept.append(json.loads(body))  # type: ignore[attr-defined]
        self.send_response(204)
        self.end_headers()

    def do_GET(self) -> None:
        kept = self.server.kept  # type: ignore[attr-defined]
        data = json.dumps(kept).encode()
        self.send_response(200 if kept else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        return None


@pytest.fixture
def endpoint() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Heads)
    server.kept = []  # type: ignore[attr-defined]
    server.refuse = False  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_an_http_endpoint_witnesses_the_log(db_url_apart: str,
                                            endpoint: ThreadingHTTPServer) -> None:
    url = f"http://127.0.0.1:{endpoint.server_address[1]}/heads"
    with Ledger.open(db_url_apart, witness=url) as ledger:
        assert ledger.verify().witness == "no head yet"
        for i in range(3):
            ledger.append("s", message(f"m{i}"))
        assert [h["events"] for h in endpoint.kept] == [1, 2, 3]  # type: ignore[attr-defined]
        assert ledger.verify().witness == "ok"
        endpoint.refuse = True  # type: ignore[attr-defined]
        with pytest.raises(WitnessError, match=r"appended at positions 4, but witness"
                                               r" endpoint .* refused the head: HTTP 503"):
            ledger.append("s", message("m3"))
        endpoint.refuse = False  # type: ignore[attr-defined]
        ledger.append("s", message("m4"))  # the next head covers the one that failed
        assert [h["events"] for h in endpoint.kept][-1] == 5  # type: ignore[attr-defined]
        cut_tail(ledger, 2)
        ledger.rebuild()
        report = ledger.verify()
    assert report.witness == "broken"


def test_an_unreachable_endpoint_is_a_verify_problem(db_url_apart: str) -> None:
    with Ledger.open(db_url_apart, witness="http://127.0.0.1:9/heads") as ledger:
        report = ledger.verify()
    assert not report.ok and report.witness == "unreadable"
    assert report.problems[0].startswith("cannot reach witness endpoint http://127.0.0.1:9")


def test_concurrent_appends_send_heads_that_all_hold(db_url_apart: str,
                                                    heads_file: Path) -> None:
    """Threads appending side by side (PostgreSQL commits out of position order): every
    head sent is a prefix no later commit can contradict."""
    with Ledger.open(db_url_apart, witness=f"file://{heads_file}") as ledger:
        def write(stream: str) -> None:
            for i in range(10):
                ledger.append(stream, message(f"{stream}-{i}"))

        threads = [threading.Thread(target=write, args=(f"s{n}",)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        ledger.log.flush_witness()
        report = ledger.verify()
        assert report.ok and report.witness == "ok", report.problems
        assert report.witnessed_position == ledger.head()
    assert len(lines(heads_file)) >= 2


# -- ctxledger serve ------------------------------------------------------------------------


def test_the_service_sends_heads_and_reports_a_failed_witness(
        db_url_apart: str, heads_file: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from helpers.service import client, make_key, running_server

    token = make_key(db_url_apart, ["s"])
    monkeypatch.setenv(WITNESS_ENV, f"file://{heads_file}")
    with running_server(db_url_apart) as base, client(base, token) as http:
        started = http.post("/streams/chat/events", json={"events": [
            {"type": "session.started", "data": {"scope": "s"}}, message("hello")]})
        assert started.status_code == 200, started.text
        assert [h["events"] for h in lines(heads_file)] == [2]
    # A witness the service cannot write: the append is committed and named, as a 502.
    blocked = tmp_path / "blocked"
    blocked.write_text("")
    monkeypatch.setenv(WITNESS_ENV, f"file://{blocked / 'heads.log'}")
    with running_server(db_url_apart) as base, client(base, token) as http:
        failed = http.post("/streams/chat/events", json={"events": [message("again")]})
        assert failed.status_code == 502
        assert failed.headers["content-type"] == "application/problem+json"
        problem = failed.json()
        assert problem["positions"] == [3]
        assert problem["detail"].startswith("appended at positions 3, but cannot write")
        events = http.get("/streams/chat/events").json()["events"]
    assert [e["data"].get("content") for e in events] == [None, "hello", "again"]


def test_events_appended_inside_a_transaction_are_witnessed_at_its_commit(
        db_url_apart: str, heads_file: Path) -> None:
    """A fork writes its copies with ``append_in`` in one transaction: one head after it."""
    with Ledger.open(db_url_apart, witness=f"file://{heads_file}") as ledger:
        ledger.append("s", [message("a"), message("b")])
        done = ledger.fork("s", "s-fork", at=ledger.head())
        assert [h["position"] for h in lines(heads_file)][-1] == done.positions[-1]
        assert [h["events"] for h in lines(heads_file)] == [2, 4]
        with pytest.raises(RuntimeError), ledger.log.transaction() as conn:
            ledger.log.append_in(conn, "t", [message("rolled back")])
            raise RuntimeError("the transaction fails")
        assert [h["events"] for h in lines(heads_file)] == [2, 4]
        assert ledger.verify().witness == "ok"
