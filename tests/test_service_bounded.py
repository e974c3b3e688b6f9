"""Requests that cannot exhaust the server, against a real uvicorn server on SQLite and
PostgreSQL: the timeline streams (NDJSON or a JSON array) and equals independent
replays; a key's expensive requests beyond its limit get a 429; pages of events are
capped by bytes; the time limit and a client going away stop the work in the worker
thread; and a ``ctxledger serve`` process stays within its memory bound through a long
session's timeline and ``why``."""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from helpers.service import client, make_key, running_server, serve_process
from helpers.service_fixtures import Served, fresh, served

from ctxledger import Ledger
from ctxledger._service.app import SHUTDOWN_GRACE

__all__ = ["served"]  # the fixture, used by name

NDJSON = {"Accept": "application/x-ndjson"}
STOP_WITHIN = 2.0
"""Seconds within which the work must stop once its time is up or its client is gone."""
MEMORY_BOUND_MB = 150
"""RSS above idle a server may reach for the timeline and ``why`` of this file's long
session (the stated bound for 10,000 messages is 300 MB; this session is shorter)."""


def _long_session(url: str, scope: str, messages: int, *, size: int = 200) -> str:
    """A card session of ``messages`` messages, appended straight to the database."""
    session = fresh("long")
    with Ledger.open(url, load_vocabulary=False) as ledger:
        ledger.append(session, {"type": "session.started", "data": {"scope": scope}})
        for start in range(0, messages, 250):
            ledger.append(session, [
                {"type": "message.appended",
                 "data": {"role": "user" if i % 2 == 0 else "assistant",
                          "content": f"turn {i}: " + "lorem ipsum dolor " * (size // 18)}}
                for i in range(start, min(start + 250, messages))])
    return session


def _lines(response: httpx.Response) -> list[dict[str, Any]]:
    return [json.loads(line) for line in response.text.splitlines() if line]


def test_the_timeline_streams_each_step_as_an_independent_replay(served: Served) -> None:
    scope = fresh("scope")
    token = make_key(served.url, [scope])
    session = _long_session(served.url, scope, 6, size=40)
    with client(served.base, token) as http:
        streamed = http.get(f"/sessions/{session}/replay", params={"timeline": "true"},
                            headers=NDJSON)
        assert streamed.status_code == 200, streamed.text
        assert streamed.headers["content-type"].startswith("application/x-ndjson")
        records = _lines(streamed)
        array = http.get(f"/sessions/{session}/replay", params={"timeline": "true"})
        assert array.headers["content-type"].startswith("application/json")
        assert array.json() == records and len(records) == 6
        before: dict[str, tuple[str, str]] = {}
        for record in records:
            again = http.get(f"/sessions/{session}/replay",
                             params={"until": str(record["position"])}).json()
            assert again["digest"] == record["digest"]
            assert len(again["decisions"]) == record["decisions"]
            now = {d["item"]: (d["action"], d["reason"]) for d in again["decisions"]}
            assert {c["item"]: (c["action"], c["reason"]) for c in record["changed"]} == {
                item: now.get(item, ("absent", "not_a_candidate"))
                for item in now.keys() | before.keys() if now.get(item) != before.get(item)}
            before = now
        # Bad input is still a 4xx before any line is sent.
        bad = http.get(f"/sessions/{session}/replay",
                       params={"timeline": "true", "until": "999999999"}, headers=NDJSON)
        assert bad.status_code == 400 and "beyond the head" in bad.json()["detail"]


@contextmanager
def _held_stream(base: str, token: str, session: str) -> Iterator[None]:
    """An NDJSON timeline whose first line has come, left unread (it holds its slot)
    until the block ends and it is closed."""
    with client(base, token) as http, http.stream(
            "GET", f"/sessions/{session}/replay", params={"timeline": "true"},
            headers=NDJSON) as response:
        assert response.status_code == 200
        lines = response.iter_lines()
        first = json.loads(next(lines))
        assert first["step"] == 1, first
        yield


def test_expensive_requests_beyond_the_keys_limit_are_429(db_url: str) -> None:
    scope = fresh("scope")
    token, other = make_key(db_url, [scope]), make_key(db_url, [scope])
    long = _long_session(db_url, scope, 1_500)
    short = _long_session(db_url, scope, 3, size=20)
    with running_server(db_url, max_expensive=1) as base:
        with _held_stream(base, token, long):
            with client(base, token) as again:
                for path in (f"/sessions/{short}/why?item=description",
                             f"/sessions/{short}/audit",
                             f"/sessions/{short}/replay?timeline=true"):
                    refused = again.get(path)
                    assert refused.status_code == 429, (path, refused.text)
                    assert refused.headers["content-type"] == "application/problem+json"
                    assert int(refused.headers["retry-after"]) >= 1
                    assert "limit is 1" in refused.json()["detail"]
                assert again.get(f"/sessions/{short}/state").status_code == 200
            with client(base, other) as elsewhere:  # the limit is per key
                assert elsewhere.get(f"/sessions/{short}/audit").status_code == 200
        # Closing the stream gives the slot back once the worker thread stops.
        deadline = time.monotonic() + 10 * STOP_WITHIN
        with client(base, token) as again:
            while (status := again.get(f"/sessions/{short}/audit").status_code) == 429:
                assert time.monotonic() < deadline, "the slot was never given back"
                time.sleep(0.1)
            assert status == 200


def test_pages_of_events_are_capped_by_bytes_and_lose_nothing(db_url: str) -> None:
    scope = fresh("scope")
    token, admin = make_key(db_url, [scope]), make_key(db_url, admin=True)
    session = fresh("big")
    sizes = [90_000, 90_000, 90_000, 300_000, 10, 120_000, 50_000, 50_000, 50_000]
    with Ledger.open(db_url, load_vocabulary=False) as ledger:
        ledger.append(session, {"type": "session.started", "data": {"scope": scope}})
        for size in sizes:
            ledger.append(session, {"type": "message.appended",
                                    "data": {"role": "user", "content": "x" * size}})
    cap = 200_000
    with running_server(db_url, page_bytes=cap) as base:
        for path, key in ((f"/streams/{session}/events", token), ("/events", admin)):
            seen: list[int] = []
            pages = 0
            after: int | None = 0
            with client(base, key) as http:
                while after is not None:
                    page = http.get(path, params={"after": after, "limit": 5})
                    assert page.status_code == 200, page.text
                    body = page.json()
                    events, after = body["events"], body["next"]
                    pages += 1
                    assert 1 <= len(events) <= 5 or (not events and after is None)
                    total = sum(len(json.dumps(e, separators=(",", ":"))) for e in events)
                    assert len(events) == 1 or total <= cap, (path, pages)
                    seen += [e["position"] for e in events]
                    if after is not None:
                        assert after == events[-1]["position"]
            assert seen == sorted(set(seen))  # none twice, in order
            assert len(seen) >= len(sizes) + 1 and pages >= 5, path


def _wait_for(records: list[logging.LogRecord], needle: str, seconds: float) -> float:
    """Seconds until a log record containing ``needle`` appears (fails after ``seconds``)."""
    start = time.monotonic()
    while not any(needle in r.getMessage() for r in records):
        assert time.monotonic() - start < seconds, f"no {needle!r} in the log"
        time.sleep(0.02)
    return time.monotonic() - start


def test_the_time_limit_stops_the_work_in_its_thread(
        db_url: str, caplog: pytest.LogCaptureFixture) -> None:
    scope = fresh("scope")
    token = make_key(db_url, [scope])
    long = _long_session(db_url, scope, 1_500)
    caplog.set_level(logging.INFO, logger="ctxledger.timetravel")
    with running_server(db_url, request_timeout=1.5) as base, client(base, token) as http:
        slow = http.get(f"/sessions/{long}/why", params={"item": "description"})
        assert slow.status_code == 503 and "longer than" in slow.json()["detail"]
        _wait_for(caplog.records, f"timeline of {long!r} stopped", STOP_WITHIN)
        assert "took longer than 1.5 s" in caplog.text
        # A streaming timeline past its time ends with an error line.
        streamed = http.get(f"/sessions/{long}/replay", params={"timeline": "true"},
                            headers=NDJSON)
        last = _lines(streamed)[-1]
        assert last["error"]["status"] == 503, last


def _raw_get(base: str, path: str, token: str) -> socket.socket:
    """A GET sent on a socket of our own (so the test can hang up mid-request)."""
    where = urlsplit(base)
    sock = socket.create_connection((where.hostname or "", where.port or 80))
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {where.netloc}\r\n"
                 f"Authorization: Bearer {token}\r\n\r\n".encode())
    return sock


def test_a_client_going_away_stops_the_work(
        db_url: str, caplog: pytest.LogCaptureFixture) -> None:
    scope = fresh("scope")
    token = make_key(db_url, [scope])
    long = _long_session(db_url, scope, 1_500)
    caplog.set_level(logging.INFO, logger="ctxledger.timetravel")
    with running_server(db_url, max_expensive=1) as base:
        for path in (f"/sessions/{long}/why?item=description",
                     f"/sessions/{long}/replay?timeline=true"):
            caplog.clear()
            sock = _raw_get(base, path, token)
            time.sleep(1.0)  # well into the fold
            sock.close()
            _wait_for(caplog.records, f"timeline of {long!r} stopped", STOP_WITHIN)
            # The slot came back: the next request is not a 429.
            with client(base, token) as http:
                deadline = time.monotonic() + STOP_WITHIN
                while http.get(f"/sessions/{long}/audit").status_code == 429:
                    assert time.monotonic() < deadline
                    time.sleep(0.05)


# -- a server process: its memory and its CPU ----------------------------------------------

def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class _Sampler:
    """The peak RSS of a process, sampled every 20 ms in a thread."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, _rss_mb(self.pid))
            time.sleep(0.02)

    def __enter__(self) -> _Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _stops_within(pid: int, action: Callable[[], None]) -> float:
    """CPU seconds the process spends in the second after ``STOP_WITHIN`` seconds past
    ``action`` (an idle server spends next to none)."""
    action()
    time.sleep(STOP_WITHIN)
    before = _cpu_seconds(pid)
    time.sleep(1.0)
    return _cpu_seconds(pid) - before


@pytest.fixture
def long_served(db_url: str) -> Iterator[tuple[Any, str, str]]:
    """A ``ctxledger serve`` process over a database holding a long session."""
    scope = fresh("scope")
    token = make_key(db_url, [scope])
    session = _long_session(db_url, scope, 150, size=400)
    with serve_process(db_url, "--request-timeout", "120") as process:
        yield process, token, session


def test_a_server_stays_within_its_memory_bound_and_stops_when_the_client_goes(
        long_served: tuple[Any, str, str]) -> None:
    process, token, session = long_served
    pid = process.proc.pid
    with client(process.base, token) as http:
        assert http.get(f"/sessions/{session}/replay").status_code == 200  # warm
        idle = _rss_mb(pid)
        with _Sampler(pid) as sampler:
            timeline = http.get(f"/sessions/{session}/replay", params={"timeline": "true"},
                                headers=NDJSON)
            records = _lines(timeline)
            why = http.get(f"/sessions/{session}/why", params={"item": "description"})
        assert len(records) == 150 and "error" not in records[-1]
        assert why.status_code == 200 and why.json()["steps"] == 150
    grew = sampler.peak - idle
    assert grew <= MEMORY_BOUND_MB, f"the server grew {grew:.0f} MB above idle"
    # A client that goes away mid-request: the server's CPU goes quiet within 2 s.
    for path in (f"/sessions/{session}/why?item=description",
                 f"/sessions/{session}/replay?timeline=true"):
        sock = _raw_get(process.base, path, token)
        time.sleep(0.5)
        busy = _stops_within(pid, sock.close)
        assert busy < 0.3, f"{path}: {busy:.2f} CPU s after the client went away"


def test_a_stopping_server_stops_its_long_reads(db_url: str) -> None:
    # SIGTERM while a why is running for a client that stays connected: after the grace
    # period the request is cancelled and its token tripped, so the process exits long
    # before the work (tens of seconds here) would have ended by itself.
    scope = fresh("scope")
    token = make_key(db_url, [scope])
    session = _long_session(db_url, scope, 1200, size=400)
    with serve_process(db_url, "--request-timeout", "600") as process:
        sock = _raw_get(process.base, f"/sessions/{session}/why?item=description", token)
        try:
            time.sleep(1.0)
            assert process.proc.poll() is None
            started = time.monotonic()
            process.proc.terminate()
            process.proc.wait(SHUTDOWN_GRACE + 10)
            took = time.monotonic() - started
        finally:
            sock.close()
    assert took < SHUTDOWN_GRACE + 5, f"the server took {took:.1f} s to stop"
