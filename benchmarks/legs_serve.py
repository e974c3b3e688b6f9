"""HTTP service legs: chat turns through ``ctxledger serve`` against the in-process Ledger.

A turn is what a chat app behind the service does per user message: append the user's
message, assemble the context as OpenAI's ``messages`` (the card profile at a fixed
``context_limit`` of 8,192 tokens, the turn-loop leg's card and settings), then append
what the model answered (the tool calls with their results, then the reply) in one
batch. Through the service these are three requests:
``POST /streams/{s}/events``, ``GET /sessions/{s}/assemble?format=openai``,
``POST /streams/{s}/events``; in process, the same three ``Ledger`` calls.

- ``serve``: K clients, each with its own session of the turn-loop leg's seeded script,
  run their turns at once. On SQLite, through one ``ctxledger serve`` process and through
  one in-process ``Ledger`` shared by K threads: turns/s, p50 and p99 of a turn; the
  target is the service's p50 at most twice the in-process one. On PostgreSQL, through
  ``serve --workers 1`` and ``--workers 2``: the target is 2 workers at least 1.6x one
  worker's turns/s. Then one client alone runs ``--turns`` turns through the service
  on SQLite: the p50 of a turn at the last turn against turn 100 (at most 1.2x).
- ``serve_memory``: one worker (SQLite) serves sessions of 500 short turns (a
  ``context_limit`` of 1,024), one after another, 100,000 turns in all; its resident
  memory is read from ``/proc`` along the way. Target: after the last turn at
  most 1.1x what it was after a tenth of them (after warm-up); it must not grow with the
  number of turns.

The clients are threads of this process (httpx, one connection each); the server is a
child process, as deployed; the machine's 2 cores are shared by both (and by PostgreSQL).
"""

from __future__ import annotations

import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from legs_append import ledger_url
from legs_pg_writers import PG_URL, _check_local, _reachable, _schema, _schema_url
from legs_turnloop import CONTEXT_LIMIT, REFERENCE, Turn, around, script, setup_events
from registry import (
    AtLeastTimesPeer,
    AtMostTimesPeer,
    Comparison,
    Context,
    Measure,
    Reported,
    leg,
)

from ctxledger import Ledger
from ctxledger._service.keys import create_key

CLIENTS = 4
QUICK_CLIENTS = 2
TURNS_PER_CLIENT = 150
QUICK_TURNS_PER_CLIENT = 12
PG_CLIENTS = 8
MEMORY_TURNS = 100_000
QUICK_MEMORY_TURNS = 100
MEMORY_SESSION_TURNS = 500
"""Turns per session in the memory leg: many sessions, as a real service sees."""
MEMORY_SAMPLES = 10
MEMORY_CONTEXT_LIMIT = 1_024
"""The memory leg's turns are short, with a small context: it counts turns, not tokens."""
SCOPE = "turnloop"
STARTUP_WAIT = 60.0
OVERHEAD = AtMostTimesPeer(2.0)
SCALING = AtLeastTimesPeer(1.6)
FLAT = AtMostTimesPeer(1.2)
NO_GROWTH = AtMostTimesPeer(1.1)
CTXLEDGER_BIN = str(Path(sys.executable).parent / "ctxledger")


# -- the turn, over HTTP and in process --------------------------------------------------


def _user(session: str, number: int, turn: Turn) -> dict[str, Any]:
    return {"type": "message.appended", "data": {
        "message_id": f"{session}-u{number}", "role": "user", "content": turn.user}}


def _answer(session: str, number: int, turn: Turn) -> list[dict[str, Any]]:
    """The model's answer to a turn: its tool calls with their results, then the reply."""
    out: list[dict[str, Any]] = []
    if turn.tools:
        calls = [{"id": t.call_id, "type": "function",
                  "function": {"name": t.name, "arguments": t.arguments}}
                 for t in turn.tools]
        out.append({"type": "message.appended", "data": {
            "message_id": f"{session}-c{number}", "role": "assistant", "content": None,
            "tool_calls": calls}})
        out.extend({"type": "message.appended", "data": {
            "message_id": f"{session}-t{number}-{k}", "role": "tool",
            "tool_call_id": t.call_id, "content": t.result}}
            for k, t in enumerate(turn.tools))
    out.append({"type": "message.appended", "data": {
        "message_id": f"{session}-a{number}", "role": "assistant", "content": turn.reply}})
    return out


TurnRunner = Callable[[str, int, Turn], None]


def _http_runner(http: httpx.Client) -> TurnRunner:
    def run(session: str, number: int, turn: Turn) -> None:
        _ok(http.post(f"/streams/{session}/events",
                      json={"events": [_user(session, number, turn)]}))
        _ok(http.get(f"/sessions/{session}/assemble",
                     params={"profile": "card", "format": "openai"}))
        _ok(http.post(f"/streams/{session}/events",
                      json={"events": _answer(session, number, turn)}))
    return run


def _ledger_runner(ledger: Ledger) -> TurnRunner:
    def run(session: str, number: int, turn: Turn) -> None:
        ledger.append(session, _user(session, number, turn))
        ledger.assemble(session, "card").to_openai()
        ledger.append(session, _answer(session, number, turn))
    return run


def _ok(response: httpx.Response) -> None:
    if response.status_code != 200:
        raise RuntimeError(f"{response.request.method} {response.request.url.path}: "
                           f"{response.status_code} {response.text[:200]}")


@dataclass
class Run:
    """What K clients measured together: every turn's time, and the wall time."""

    times_ms: list[float] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def turns_per_s(self) -> float:
        """Turns of every client per second of wall time."""
        return len(self.times_ms) / self.wall_s

    def pct(self, q: float) -> float:
        """The ``q`` quantile of a turn's time, ms."""
        ordered = sorted(self.times_ms)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _clients(runners: list[TurnRunner], turns: list[Turn], prefix: str) -> Run:
    """Every runner takes its own session through ``turns`` at once; one ``Run``."""
    run = Run()
    lock = threading.Lock()
    errors: list[BaseException] = []
    gate = threading.Barrier(len(runners) + 1)

    def client(index: int, runner: TurnRunner) -> None:
        session = f"{prefix}-{index}"
        mine: list[float] = []
        try:
            gate.wait()
            for number, turn in enumerate(turns, start=1):
                start = time.perf_counter()
                runner(session, number, turn)
                mine.append((time.perf_counter() - start) * 1000)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
        with lock:
            run.times_ms.extend(mine)

    threads = [threading.Thread(target=client, args=(n, r)) for n, r in enumerate(runners)]
    for thread in threads:
        thread.start()
    gate.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    run.wall_s = time.perf_counter() - started
    if errors:
        raise errors[0]
    return run


def _open_sessions(url: str, prefix: str, count: int,
                   context_limit: int = CONTEXT_LIMIT) -> str:
    """Open ``count`` sessions with the turn loop's card and settings (``context_limit``
    replacing its own); an API key."""
    setup = [e for e in setup_events() if e["data"].get("key") != "context_limit"]
    setup.append({"type": "setting.changed",
                  "data": {"key": "context_limit", "value": context_limit}})
    with Ledger.open(url, load_vocabulary=False) as ledger:
        for n in range(count):
            ledger.append(f"{prefix}-{n}", setup)
        return create_key(ledger.engine, [SCOPE])[1]


def short_script(turns: int) -> list[Turn]:
    """Short messages and no tools: the memory leg's many turns stay cheap."""
    return [Turn(f"Question {n}: when does the tide turn at the point?",
                 f"Answer {n}: at six, and the wind comes round with it.")
            for n in range(1, turns + 1)]


# -- the server process ------------------------------------------------------------------


@dataclass
class Server:
    """A ``ctxledger serve`` child process."""

    base: str
    proc: subprocess.Popen[bytes]

    def rss_mb(self) -> float:
        """Resident memory of the serving process (``VmRSS``), MB."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError("no VmRSS")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def _server(url: str, workers: int = 1, *options: str) -> Iterator[Server]:
    """A ``ctxledger serve`` child process on a free port, with ``options`` added."""
    port = _free_port()
    proc = subprocess.Popen([CTXLEDGER_BIN, "--db", url, "serve", "--port", str(port),
                             "--workers", str(workers), *options],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_WAIT
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"ctxledger serve exited ({proc.returncode})")
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("ctxledger serve did not start")
            time.sleep(0.05)
        yield Server(base, proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STARTUP_WAIT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _http_clients(base: str, token: str, count: int) -> list[httpx.Client]:
    return [httpx.Client(base_url=base, timeout=120.0,
                         headers={"Authorization": f"Bearer {token}"})
            for _ in range(count)]


def _through_server(url: str, turns: list[Turn], clients: int, prefix: str,
                    workers: int = 1) -> Run:
    token = _open_sessions(url, prefix, clients)
    with _server(url, workers) as server:
        https = _http_clients(server.base, token, clients)
        try:
            return _clients([_http_runner(h) for h in https], turns, prefix)
        finally:
            for http in https:
                http.close()


def _in_process(url: str, turns: list[Turn], clients: int, prefix: str) -> Run:
    _open_sessions(url, prefix, clients)
    with Ledger.open(url) as ledger:
        return _clients([_ledger_runner(ledger)] * clients, turns, prefix)


def _rows(label: str, ours: Run, ours_name: str, peer: Run, peer_name: str) -> list[Comparison]:
    """Reported rows: turns/s and p99 side by side."""
    return [
        Comparison("serve", f"{label}: turns/s, {ours_name} vs {peer_name}",
                   Measure(ours.turns_per_s, "turns/s"), peer_name,
                   Measure(peer.turns_per_s, "turns/s"), Reported()),
        Comparison("serve", f"{label}: p99 of a turn, {ours_name} vs {peer_name}",
                   Measure(ours.pct(0.99), "ms"), peer_name, Measure(peer.pct(0.99), "ms"),
                   Reported()),
    ]


@leg("serve", "HTTP service: chat turns through ctxledger serve vs in process")
def serve(ctx: Context) -> list[Comparison]:
    """SQLite: the service against the in-process Ledger (K clients); PostgreSQL: 2
    workers against 1; one client's turn at the last turn against turn 100."""
    quick = ctx.settings.quick
    clients = QUICK_CLIENTS if quick else CLIENTS
    per_client = QUICK_TURNS_PER_CLIENT if quick else TURNS_PER_CLIENT
    turns = script(per_client)
    rows: list[Comparison] = []

    with ctx.fresh_dir("serve-http") as http_dir, ctx.fresh_dir("serve-inproc") as in_dir:
        http = _through_server(ledger_url(http_dir), turns, clients, "http")
        local = _in_process(ledger_url(in_dir), turns, clients, "local")
    rows.append(Comparison(
        "serve", f"SQLite, {clients} clients: p50 of a turn through the service vs in "
        f"process", Measure(http.pct(0.5), "ms"), "in-process Ledger",
        Measure(local.pct(0.5), "ms"), OVERHEAD,
        note=f"{per_client} turns per client, context_limit {CONTEXT_LIMIT}"))
    rows += _rows(f"SQLite, {clients} clients", http, "serve", local, "in-process")

    problem = _reachable()
    if problem is None:
        _check_local(PG_URL)
        pg_clients = QUICK_CLIENTS if quick else PG_CLIENTS
        runs: dict[int, Run] = {}
        for workers in (1, 2):
            with _schema() as schema:
                runs[workers] = _through_server(_schema_url(schema), turns, pg_clients,
                                                f"pg{workers}", workers)
        rows.append(Comparison(
            "serve", f"PostgreSQL, {pg_clients} clients: turns/s with 2 workers vs 1",
            Measure(runs[2].turns_per_s, "turns/s"), "1 worker",
            Measure(runs[1].turns_per_s, "turns/s"), SCALING,
            note=f"p50 {runs[1].pct(0.5):.1f} / {runs[2].pct(0.5):.1f} ms, "
                 f"p99 {runs[1].pct(0.99):.1f} / {runs[2].pct(0.99):.1f} ms (1 / 2 workers)"))
        with _schema() as schema:
            local_pg = _in_process(_schema_url(schema), turns, pg_clients, "pglocal")
        rows.append(Comparison(
            "serve", f"PostgreSQL, {pg_clients} clients: p50 of a turn, 1 worker vs in "
            "process", Measure(runs[1].pct(0.5), "ms"), "in-process Ledger",
            Measure(local_pg.pct(0.5), "ms"), Reported()))
    else:
        print(f"  PostgreSQL rows skipped: no server at {PG_URL} ({problem})")

    total = ctx.settings.turns
    long_script = script(total)
    with ctx.fresh_dir("serve-flat") as flat_dir:
        flat = _through_server(ledger_url(flat_dir), long_script, 1, "flat")
    reference = min(REFERENCE, total // 2)
    rows.append(Comparison(
        "serve", f"one client: turn {total:,} vs turn {reference} through the service",
        around(flat.times_ms, total - 10), f"turn {reference}",
        around(flat.times_ms, reference), FLAT))
    return rows


@leg("serve_memory", "HTTP service: one worker's memory over many turns")
def serve_memory(ctx: Context) -> list[Comparison]:
    """The serving process's resident memory after a tenth of the turns and at the end."""
    total = QUICK_MEMORY_TURNS if ctx.settings.quick else MEMORY_TURNS
    per_session = min(MEMORY_SESSION_TURNS, total)
    turns = short_script(per_session)
    samples: list[tuple[int, float]] = []
    with ctx.fresh_dir("serve-memory") as directory:
        url = ledger_url(directory)
        sessions = -(-total // per_session)
        token = _open_sessions(url, "mem", sessions, MEMORY_CONTEXT_LIMIT)
        with _server(url) as server, httpx.Client(
                base_url=server.base, timeout=120.0,
                headers={"Authorization": f"Bearer {token}"}) as http:
            runner = _http_runner(http)
            every = max(1, total // MEMORY_SAMPLES)
            done = 0
            for n in range(sessions):
                for number, turn in enumerate(turns, start=1):
                    if done == total:
                        break
                    runner(f"mem-{n}", number, turn)
                    done += 1
                    if done % every == 0:
                        samples.append((done, server.rss_mb()))
                        print(f"  {done:,} turns: {samples[-1][1]:.1f} MB", flush=True)
    first = samples[0]
    last = samples[-1]
    return [Comparison(
        "serve_memory", f"one worker's memory after {last[0]:,} turns vs after "
        f"{first[0]:,}", Measure(last[1], "MB"), f"after {first[0]:,} turns",
        Measure(first[1], "MB"), NO_GROWTH,
        note=f"{sessions} sessions of {per_session} turns; samples "
             + ", ".join(f"{t // 1000}k: {m:.0f}" for t, m in samples)
             + f"; median {statistics.median(m for _, m in samples):.0f} MB")]
