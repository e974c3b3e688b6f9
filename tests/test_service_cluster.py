"""More than one ``ctxledger serve`` process, crashes and races, over real HTTP.

Two server processes share one PostgreSQL database, with clients spread across both:
every assembly either one returns equals a replay of the log up to its position (so it
equals what a single server gives), no acknowledged event is lost or stored twice, and
the change feed of one server carries what was appended through the other. A server
killed with SIGKILL under load loses no append it acknowledged, and its projections
equal a rebuild. Clients racing on one expected version get exactly one winner.

The servers are ``ctxledger serve`` child processes, as deployed; waits have generous
deadlines that fail a test instead of hanging it, and nothing here measures time.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers.databases import module_database
from helpers.service import ServeProcess, client, make_key, serve_process
from helpers.tables import assert_projections_equal_rebuild

from ctxledger import Ledger

pytestmark = pytest.mark.slow
BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
WAIT = 120.0  # a deadline against hanging on a loaded machine, never an assertion of speed


def eid(name: str) -> str:
    """A client's event id: a UUID derived from a name, so a retry sends the same one."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"ctxledger-test:{name}"))


def _events(session: str, round_: int) -> list[dict[str, Any]]:
    return [
        {"id": eid(f"{session}-r{round_}-tool"), "type": "tool.used",
         "data": {"tool_name": f"tool-{round_ % 3}"}},
        {"id": eid(f"{session}-r{round_}-msg"), "type": "message.appended",
         "data": {"role": "user", "content": f"{session} asks, round {round_}"}},
    ]


@dataclass
class Acknowledged:
    """What the servers answered with a 2xx, collected from every client thread."""

    events: dict[str, tuple[str, int]] = field(default_factory=dict)  # id: (stream, pos)
    turns: list[tuple[str, int]] = field(default_factory=list)  # (stream, first position)
    assemblies: list[dict[str, Any]] = field(default_factory=list)
    by_server: dict[str, set[str]] = field(default_factory=dict)  # base: event ids
    lock: threading.Lock = field(default_factory=threading.Lock)

    def appended(self, base: str, session: str, sent: list[dict[str, Any]],
                 answer: dict[str, Any]) -> None:
        with self.lock:
            for event, position in zip(sent, answer["positions"], strict=True):
                seen = self.events.setdefault(event["id"], (session, position))
                assert seen == (session, position), f"{event['id']} moved: {seen}"
                self.by_server.setdefault(base, set()).add(event["id"])


def _client_run(bases: list[str], token: str, session: str, rounds: int,
                acknowledged: Acknowledged, offset: int) -> None:
    """One client: a session appended and assembled through the servers in turn."""
    https = [client(base, token) for base in bases]
    try:
        start = [{"id": eid(f"{session}-start"), "type": "session.started",
                  "data": {"scope": "team"}}]
        answer = https[offset % len(https)].post(f"/streams/{session}/events",
                                                 json={"events": start})
        assert answer.status_code == 200, answer.text
        acknowledged.appended(bases[offset % len(https)], session, start, answer.json())
        for round_ in range(rounds):
            pick = (offset + round_) % len(https)
            http, base = https[pick], bases[pick]
            sent = _events(session, round_)
            answer = http.post(f"/streams/{session}/events", json={"events": sent})
            assert answer.status_code == 200, answer.text
            acknowledged.appended(base, session, sent, answer.json())
            # The same batch retried through the other server: the same positions.
            other = https[(pick + 1) % len(https)]
            again = other.post(f"/streams/{session}/events", json={"events": sent})
            assert again.status_code == 200, again.text
            assert again.json()["positions"] == answer.json()["positions"]
            assert again.json()["duplicate"] is True
            profile = ("session", "card")[round_ % 2]
            turn = other.post(f"/sessions/{session}/turn", json={
                "messages": [{"role": "assistant", "content": f"answer {round_}"}],
                "profile": profile})
            assert turn.status_code == 200, turn.text
            body = turn.json()
            with acknowledged.lock:
                acknowledged.turns.append((session, body["append"]["positions"][0]))
                # The turn's assembly is recorded too: one more event of the turn's.
                acknowledged.turns.append((session, body["recorded"]["positions"][0]))
                acknowledged.assemblies.append(body["context"])
    finally:
        for http in https:
            http.close()


def _run_clients(bases: list[str], token: str, clients: int, rounds: int,
                 acknowledged: Acknowledged, prefix: str) -> None:
    errors: list[BaseException] = []

    def run(n: int) -> None:
        try:
            _client_run(bases, token, f"{prefix}-{n}", rounds, acknowledged, n)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert not any(t.is_alive() for t in threads), "a client hung"
    if errors:
        raise errors[0]


def _follow(base: str, token: str, want: set[str], seen: list[dict[str, Any]],
            done: threading.Event) -> None:
    """Read ``base``'s change feed from the start until every id in ``want`` came."""
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.stream("GET", f"{base}/events/stream", params={"after": 0},
                      headers=headers, timeout=WAIT) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data:"):
                seen.append(json.loads(line[len("data:"):]))
                if want <= {e["event_id"] for e in seen}:
                    break
            if done.is_set():
                break


@pytest.fixture
def pg_two_servers(pg_url: str) -> Iterator[tuple[ServeProcess, ServeProcess]]:
    """Two ``ctxledger serve`` processes over one PostgreSQL schema."""
    with Ledger.open(pg_url, load_vocabulary=False):
        pass  # migrated once, before either server starts
    with serve_process(pg_url) as first, serve_process(pg_url) as second:
        yield first, second


@pytest.mark.postgres
def test_two_servers_on_one_postgres_agree_with_one(
        pg_url: str, pg_two_servers: tuple[ServeProcess, ServeProcess]) -> None:
    first, second = pg_two_servers
    token = make_key(pg_url, ["team"])
    admin = make_key(pg_url, admin=True)
    acknowledged = Acknowledged()
    clients, rounds = 6, 8
    # The feed of the first server, followed while clients write through both.
    want = {eid(f"c-{n}-r{rounds - 1}-msg") for n in range(clients)}
    seen: list[dict[str, Any]] = []
    done = threading.Event()
    follower = threading.Thread(target=_follow, args=(first.base, admin, want, seen, done))
    follower.start()
    _run_clients([first.base, second.base], token, clients, rounds, acknowledged, "c")
    follower.join(WAIT)
    done.set()
    assert not follower.is_alive(), "the feed never carried every append"

    with Ledger.open(pg_url, load_vocabulary=False) as ledger:
        stored = list(ledger.events())
        # Nothing lost, nothing stored twice: each acknowledged id once, where it was told.
        ids = [e.event_id for e in stored]
        assert len(ids) == len(set(ids))
        where = {e.event_id: (e.stream_id, e.position) for e in stored}
        for event_id, place in acknowledged.events.items():
            assert where[event_id] == place
        turn_events = {(e.stream_id, e.position) for e in stored
                       if e.event_id not in acknowledged.events}
        assert {(s, p) for s, p in acknowledged.turns} <= turn_events
        assert len(stored) == len(acknowledged.events) + len(acknowledged.turns)
        # Every assembly either server gave equals the log's replay up to its position.
        assert len(acknowledged.assemblies) == clients * rounds
        for assembly in acknowledged.assemblies:
            replayed = ledger.replay(assembly["session"], until=assembly["position"],
                                     profile=assembly["profile"],
                                     now=datetime.fromisoformat(assembly["now"]))
            assert replayed.digest == assembly["digest"], assembly["session"]
        assert_projections_equal_rebuild(ledger)
        assert ledger.verify().ok
    # The first server's feed carried what went through the second, in order, once.
    through_second = acknowledged.by_server[second.base]
    fed = [e["event_id"] for e in seen]
    assert through_second & want and (through_second & set(acknowledged.events)) <= set(fed)
    positions = [e["position"] for e in seen]
    assert positions == sorted(set(positions))


@pytest.fixture(params=BACKENDS)
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with module_database(request.param, tmp_path) as url:
        with Ledger.open(url, load_vocabulary=False):
            pass
        yield url


def test_kill_9_under_load_loses_no_acknowledged_append(database: str) -> None:
    token = make_key(database, ["team"])
    acknowledged = Acknowledged()
    server = ServeProcess(database)
    stop = threading.Event()
    errors: list[BaseException] = []

    def load(n: int) -> None:
        session = f"k-{n}"
        with client(server.base, token) as http:
            try:
                start = [{"id": eid(f"{session}-start"), "type": "session.started",
                          "data": {"scope": "team"}}]
                answer = http.post(f"/streams/{session}/events", json={"events": start})
                acknowledged.appended(server.base, session, start, answer.json())
                round_ = 0
                while not stop.is_set():
                    sent = _events(session, round_)
                    answer = http.post(f"/streams/{session}/events", json={"events": sent})
                    if answer.status_code == 200:
                        acknowledged.appended(server.base, session, sent, answer.json())
                    round_ += 1
            except httpx.TransportError:
                return  # the server died under this request: not acknowledged
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)

    threads = [threading.Thread(target=load, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    while len(acknowledged.events) < 60 and not errors:
        threading.Event().wait(0.01)
    server.kill()
    stop.set()
    for thread in threads:
        thread.join(WAIT)
    assert errors == []
    with serve_process(database) as restarted, client(restarted.base, token) as http:
        for event_id, (session, position) in acknowledged.events.items():
            page = http.get(f"/streams/{session}/events").json()["events"]
            assert (event_id, position) in {(e["event_id"], e["position"]) for e in page}
    with Ledger.open(database, load_vocabulary=False) as ledger:
        assert_projections_equal_rebuild(ledger)
        assert ledger.verify().ok


def test_racing_clients_with_one_expected_version_get_one_winner(database: str) -> None:
    token = make_key(database, ["team"])
    racers, races = 6, 5
    with serve_process(database) as server:
        with client(server.base, token) as http:
            first = http.post("/streams/race/events", json={"events": [
                {"type": "session.started", "data": {"scope": "team"}}]})
            assert first.status_code == 200, first.text
        for race in range(races):
            version = race + 1
            statuses: list[int] = []
            gate = threading.Barrier(racers)

            def race_once(n: int, version: int = version,
                          statuses: list[int] = statuses,
                          gate: threading.Barrier = gate) -> None:
                with client(server.base, token) as http:
                    gate.wait()
                    answer = http.post(
                        "/streams/race/events",
                        headers={"If-Match": f'"{version}"'},
                        json={"events": [{"type": "message.appended", "data": {
                            "role": "user", "content": f"racer {n}"}}]})
                    statuses.append(answer.status_code)
                    if answer.status_code == 409:
                        assert answer.json()["actual_version"] == version + 1

            threads = [threading.Thread(target=race_once, args=(n,)) for n in range(racers)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(WAIT)
            assert sorted(statuses) == [200] + [409] * (racers - 1)
    with Ledger.open(database, load_vocabulary=False) as ledger:
        assert len(list(ledger.events("race"))) == 1 + races
