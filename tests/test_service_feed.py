"""The live change feed over a real uvicorn server on 127.0.0.1, on SQLite and PostgreSQL.

A minimal FastAPI app mounts ``feed_router`` over a ``Ledger`` of the test's database; an
httpx client reads the ``text/event-stream`` and parses it line by line (heartbeats are
comment lines, which SSE client libraries drop). Polling is fast, heartbeats frequent;
nothing here measures time: a wait has a generous deadline that fails the test instead of
hanging it.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI, Request

from ctxledger import Ledger
from ctxledger._service.feed import (
    GAVE_UP_COMMENT,
    HEARTBEAT_COMMENT,
    FeedItem,
    feed_router,
    follow,
)
from ctxledger._times import MAX_POSITION
from ctxledger.store.records import RecordedEvent

POLL = 0.02
HEARTBEAT = 0.05
WAIT = 60.0  # a deadline against hanging on a loaded machine, never an assertion of speed
GIVE_UP = 2.0  # a stream's feed that brought none of its events ends after this
SECRET = "secret-"  # streams the test filter hides


def message(text: str) -> dict[str, Any]:
    return {"type": "message.appended", "data": {"role": "user", "content": text}}


# -- a tiny SSE reader ------------------------------------------------------------------


@dataclass
class Sse:
    """One parsed block: an event (id, event, data) or a comment."""

    id: str | None = None
    event: str | None = None
    data: list[str] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)

    @property
    def record(self) -> dict[str, Any]:
        return dict(json.loads("\n".join(self.data)))


def parse(lines: Iterator[str]) -> Iterator[Sse]:
    """The blocks of an event stream, each ended by a blank line (the SSE format)."""
    block = Sse()
    for line in lines:
        if line == "":
            if block.data or block.comments or block.id is not None:
                yield block
            block = Sse()
        elif line.startswith(":"):
            block.comments.append(line[1:].removeprefix(" "))
        else:
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "id":
                block.id = value
            elif name == "event":
                block.event = value
            elif name == "data":
                block.data.append(value)


class Feed:
    """An open event stream; ``events(n)`` reads until ``n`` events came (heartbeats are
    counted apart)."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.blocks = parse(response.iter_lines())
        self.heartbeats = 0

    def next_block(self) -> Sse:
        block = next(self.blocks)
        if HEARTBEAT_COMMENT in block.comments:
            self.heartbeats += 1
        return block

    def events(self, count: int) -> list[Sse]:
        got: list[Sse] = []
        while len(got) < count:
            block = self.next_block()
            if block.data:
                got.append(block)
        return got

    def until_heartbeat(self) -> list[Sse]:
        """The events before the next heartbeat."""
        got: list[Sse] = []
        while True:
            block = self.next_block()
            if block.data:
                got.append(block)
            if HEARTBEAT_COMMENT in block.comments:
                return got


# -- the server -------------------------------------------------------------------------


class Reads:
    """Counts the reads the server's ledger finished, per kind (whole log, one stream)."""

    def __init__(self, ledger: Ledger) -> None:
        self.counts = {"log": 0, "stream": 0}
        self._lock = threading.Lock()
        log = ledger.log
        read_all, read_stream = log.read_all, log.read_stream

        def counted(kind: str, read: Callable[..., list[RecordedEvent]]
                    ) -> Callable[..., list[RecordedEvent]]:
            def wrapper(*args: Any, **kwargs: Any) -> list[RecordedEvent]:
                result = read(*args, **kwargs)
                with self._lock:
                    self.counts[kind] += 1
                return result
            return wrapper

        log.read_all = counted("log", read_all)  # type: ignore[method-assign]
        log.read_stream = counted("stream", read_stream)  # type: ignore[method-assign]

    def wait_past(self, kind: str, count: int) -> None:
        """Wait until more than ``count`` reads of ``kind`` have finished."""
        deadline = time.monotonic() + WAIT
        while self.counts[kind] <= count:
            assert time.monotonic() < deadline, f"the feed stopped reading ({kind})"
            time.sleep(POLL / 2)


@dataclass
class Server:
    base: str
    ledger: Ledger  # the server's own, apart from the test's
    reads: Reads
    uvicorn: uvicorn.Server

    def requests_running(self) -> int:
        """Requests whose handling (for a feed: its follower) has not ended."""
        return len(self.uvicorn.server_state.tasks)

    def stream(self, client: httpx.Client, path: str, **kwargs: Any
               ) -> Any:
        return client.stream("GET", self.base + path, **kwargs)


def hide_secrets(request: Request) -> Callable[[str], bool]:
    return lambda stream: not stream.startswith(SECRET)


@pytest.fixture
def server(db_url: str) -> Iterator[Server]:
    """A uvicorn server (a thread, a free port) serving the feed over ``db_url``."""
    with Ledger.open(db_url, load_vocabulary=False) as ledger:
        app = FastAPI()
        app.include_router(feed_router(lambda request: ledger, hide_secrets,
                                       poll=POLL, heartbeat=HEARTBEAT, wait=GIVE_UP))
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", lifespan="off",
                                timeout_graceful_shutdown=10)
        uv = uvicorn.Server(config)
        thread = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        deadline = time.monotonic() + WAIT
        while not uv.started:
            assert thread.is_alive() and time.monotonic() < deadline, "no server"
            time.sleep(0.01)
        try:
            yield Server(f"http://127.0.0.1:{port}", ledger, Reads(ledger), uv)
        finally:
            uv.should_exit = True
            thread.join(WAIT)
            sock.close()


@pytest.fixture
def writer(db_url: str, server: Server) -> Iterator[Ledger]:
    """The test's own ledger on the same database (appends commit apart from the server)."""
    with Ledger.open(db_url, load_vocabulary=False) as ledger:
        yield ledger


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=httpx.Timeout(WAIT)) as opened:
        yield opened


# -- tests --------------------------------------------------------------------------------


def test_replay_from_after_then_live_in_position_order(
        server: Server, writer: Ledger, client: httpx.Client) -> None:
    first = writer.append("s1", [message("a"), message("b")]).positions
    second = writer.append("s2", message("c")).positions
    with server.stream(client, "/events/stream", params={"after": first[0]}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["cache-control"] == "no-cache"
        assert response.headers["x-accel-buffering"] == "no"
        feed = Feed(response)
        replayed = feed.events(2)
        assert [int(b.id or 0) for b in replayed] == [first[1], second[0]]
        # Appended after the client connected: they come live, in position order.
        live = [*writer.append("s2", [message("d"), message("e")]).positions,
                *writer.append("s1", message("f")).positions]
        got = feed.events(3)
    assert [int(b.id or 0) for b in got] == live
    assert all(b.event == "message.appended" for b in [*replayed, *got])
    record = got[-1].record
    event = writer.events("s1")[-1]
    assert record["position"] == event.position == live[-1]
    assert record["stream_id"] == "s1"
    assert record["stream_version"] == 3
    assert record["type"] == "message.appended"
    assert record["data"] == {"role": "user", "content": "f"}
    assert record["event_id"] == event.event_id
    assert record["metadata"] == event.metadata
    assert record["recorded_at"].endswith("Z")


def test_one_stream_replays_then_follows_only_that_stream(
        server: Server, writer: Ledger, client: httpx.Client) -> None:
    kept = writer.append("s1", [message("a"), message("b")]).positions
    writer.append("s2", message("other"))
    with server.stream(client, "/streams/s1/events/stream") as response:
        feed = Feed(response)
        assert [int(b.id or 0) for b in feed.events(2)] == list(kept)
        writer.append("s2", message("other again"))
        later = writer.append("s1", message("c")).positions
        got = feed.events(1)
    assert [int(b.id or 0) for b in got] == list(later)
    assert got[0].record["stream_id"] == "s1"


@pytest.mark.parametrize("path", ["/events/stream", "/streams/s1/events/stream"])
def test_last_event_id_resumes_with_nothing_twice_and_nothing_lost(
        server: Server, writer: Ledger, client: httpx.Client, path: str) -> None:
    writer.append("s1", [message(str(n)) for n in range(3)])
    with server.stream(client, path) as response:
        seen = Feed(response).events(2)
    # The client went away after two events; three more come while it is away.
    writer.append("s1", [message(str(n)) for n in range(3, 6)])
    last = seen[-1].id or ""
    # Last-Event-ID wins over an (older) after, as a reconnecting EventSource sends both.
    with server.stream(client, path, params={"after": 0},
                       headers={"Last-Event-ID": last}) as response:
        seen += Feed(response).events(4)
    positions = [int(b.id or 0) for b in seen]
    assert positions == [e.position for e in writer.events("s1")]
    assert [b.record["data"]["content"] for b in seen] == [str(n) for n in range(6)]


def test_heartbeats_arrive_when_idle(server: Server, writer: Ledger,
                                    client: httpx.Client) -> None:
    writer.append("s1", message("a"))
    with server.stream(client, "/events/stream") as response:
        feed = Feed(response)
        assert len(feed.events(1)) == 1
        idle = [feed.next_block(), feed.next_block()]
    # A heartbeat is a comment line alone: no id (Last-Event-ID stays), no data, no event.
    for block in idle:
        assert block.comments == [HEARTBEAT_COMMENT]
        assert block.id is None and block.event is None and block.data == []


def test_a_client_going_away_stops_its_follower(
        server: Server, writer: Ledger, client: httpx.Client) -> None:
    writer.append("s1", message("a"))
    with server.stream(client, "/events/stream") as response:
        feed = Feed(response)
        feed.events(1)
        feed.until_heartbeat()
        assert server.requests_running() == 1
    # The request's task (the follower runs in it) ends once the disconnect is seen.
    deadline = time.monotonic() + WAIT
    while server.requests_running():
        assert time.monotonic() < deadline, "the follower did not stop"
        time.sleep(POLL)
    reads = server.reads.counts["log"]
    with httpx.Client(timeout=WAIT) as other:  # the server still serves
        assert other.get(server.base + "/events/stream?after=x").status_code == 400
    assert server.reads.counts["log"] == reads


def test_the_stream_filter_skips_other_streams(
        server: Server, writer: Ledger, client: httpx.Client) -> None:
    writer.append(SECRET + "a", message("hidden"))
    shown = writer.append("open", message("shown")).positions
    with server.stream(client, "/events/stream") as response:
        feed = Feed(response)
        got = feed.events(1)
        writer.append(SECRET + "a", message("hidden again"))
        shown += writer.append("open", message("shown again")).positions
        got += feed.events(1)
    assert [int(b.id or 0) for b in got] == list(shown)
    assert {b.record["stream_id"] for b in got} == {"open"}
    # Following a stream the filter rejects is a 404, as for a stream that is not there.
    response = client.get(server.base + f"/streams/{SECRET}a/events/stream")
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"


def test_a_feed_of_a_stream_that_never_comes_ends(server: Server, writer: Ledger,
                                                  client: httpx.Client) -> None:
    """Waiting is bounded: heartbeats, then the closing comment, then the end; a stream
    that shows an event in time is followed on past the bound."""
    started = time.monotonic()
    with server.stream(client, "/streams/never/events/stream") as response:
        blocks = list(parse(response.iter_lines()))  # ends: the server closes the feed
    assert time.monotonic() - started >= GIVE_UP
    assert blocks[-1].comments == [GAVE_UP_COMMENT] and blocks[-1].id is None
    assert all(b.comments == [HEARTBEAT_COMMENT] for b in blocks[:-1])
    with server.stream(client, "/streams/late/events/stream") as response:
        feed = Feed(response)
        feed.until_heartbeat()
        writer.append("late", message("in time"))
        assert [b.record["data"]["content"] for b in feed.events(1)] == ["in time"]
        time.sleep(GIVE_UP)
        writer.append("late", message("long after"))
        assert [b.record["data"]["content"] for b in feed.events(1)] == ["long after"]


def test_a_bad_wait_is_refused() -> None:
    with pytest.raises(ValueError, match="wait must be positive"):
        feed_router(lambda request: None, wait=0)  # type: ignore[arg-type,return-value]


@pytest.mark.parametrize(("params", "headers", "name"), [
    ({"after": "abc"}, {}, "after"),
    ({"after": "-1"}, {}, "after"),
    ({"after": "1.5"}, {}, "after"),
    ({"after": str(2**63)}, {}, "after"),
    ({}, {"Last-Event-ID": "x"}, "Last-Event-ID"),
])
@pytest.mark.parametrize("path", ["/events/stream", "/streams/s1/events/stream"])
def test_a_bad_after_is_a_400_problem(server: Server, client: httpx.Client, path: str,
                                      params: dict[str, str], headers: dict[str, str],
                                      name: str) -> None:
    response = client.get(server.base + path, params=params, headers=headers)
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/problem+json"
    assert "\n" not in response.text
    body = response.json()
    assert set(body) == {"type", "title", "status", "detail"}
    assert body["status"] == 400
    assert body["detail"].startswith(f"{name} must be an integer from 0 to {MAX_POSITION}, got ")


@pytest.mark.postgres
@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_a_late_commit_is_never_skipped(server: Server, writer: Ledger,
                                        client: httpx.Client) -> None:
    """A takes positions and stays open; B, on another stream, commits later positions.
    The followers (whole log, and B's stream) deliver nothing past A until A commits,
    then A's and B's events in position order."""
    before = writer.append("earlier", message("0")).positions
    with server.stream(client, "/events/stream", params={"after": 0}) as whole, \
            server.stream(client, "/streams/B/events/stream") as only_b:
        log_feed, b_feed = Feed(whole), Feed(only_b)
        assert [int(b.id or 0) for b in log_feed.events(1)] == list(before)
        with writer.log.transaction() as conn:
            held = writer.log.append_in(conn, "A", [message("a1"), message("a2")])
            late = writer.append("B", [message("b1"), message("b2")])
            assert late.positions[0] > held.positions[-1]
            # Both followers read the log at least once wholly after B committed.
            log_reads, stream_reads = server.reads.counts.values()
            server.reads.wait_past("log", log_reads + 1)
            server.reads.wait_past("stream", stream_reads + 1)
        # Had a follower sent B's events early, A's would now come after them (whole log)
        # or its cursor would be past A's positions: either fails below.
        got = log_feed.events(4)
        got_b = b_feed.events(2)
    assert [int(b.id or 0) for b in got] == [*held.positions, *late.positions]
    assert [b.record["stream_id"] for b in got] == ["A", "A", "B", "B"]
    assert [int(b.id or 0) for b in got_b] == list(late.positions)


@pytest.mark.postgres
@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
@pytest.mark.parametrize("stream", [None, "B"], ids=["log", "stream"])
def test_follow_sends_nothing_past_an_append_in_progress(
        server: Server, writer: Ledger, stream: str | None) -> None:
    """``follow`` itself, stepped by hand: an item asked for after B committed comes from
    a read made after it, so a heartbeat there means B was held back."""

    async def scenario() -> list[FeedItem]:
        items = follow(server.ledger, after=0, stream=stream, poll=POLL, heartbeat=1e-6)
        try:
            assert (await anext(items)).comment == HEARTBEAT_COMMENT  # the empty log
            with writer.log.transaction() as conn:
                held = writer.log.append_in(conn, "A", [message("a1")])
                late = writer.append("B", [message("b1")])
                assert (await anext(items)).comment == HEARTBEAT_COMMENT
                assert (await anext(items)).comment == HEARTBEAT_COMMENT
            got = []
            expected = [*([] if stream else held.positions), *late.positions]
            while len(got) < len(expected):
                item = await anext(items)
                if item.id is not None:
                    got.append(item)
            assert [int(i.id or 0) for i in got] == expected
            return got
        finally:
            await items.aclose()  # type: ignore[attr-defined]

    got = asyncio.run(scenario())
    assert got[-1].event == "message.appended"
    assert json.loads(got[-1].data or "")["stream_id"] == "B"


@pytest.mark.parametrize("stream", [None, "s1"], ids=["log", "stream"])
def test_follow_reads_page_by_page_from_any_position(db_url: str, stream: str | None) -> None:
    """Small pages, a start inside the stream, a filter: every event once, in order."""
    with Ledger.open(db_url, load_vocabulary=False) as ledger:
        for n in range(7):
            ledger.append("s1", message(f"s1 {n}"))
            ledger.append(SECRET + "x", message(f"hidden {n}"))
        start = ledger.events("s1")[1].position
        expected = [e.position for e in ledger.events(after=start)
                    if not e.stream_id.startswith(SECRET)
                    and (stream is None or e.stream_id == stream)]

        async def scenario() -> list[int]:
            items = follow(ledger, after=start, stream=stream, page=2, poll=POLL,
                           heartbeat=1e-6, streams=lambda s: not s.startswith(SECRET))
            got: list[int] = []
            try:
                while True:
                    item = await anext(items)
                    if item.id is None:  # idle: everything there has been sent
                        return got
                    got.append(int(item.id))
            finally:
                await items.aclose()  # type: ignore[attr-defined]

        assert asyncio.run(scenario()) == expected
        assert len(expected) == 5
