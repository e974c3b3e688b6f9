"""PostgreSQL writer scaling: 1, 2, 4 and 8 writer *processes*, each on its own stream.

Each writer is a separate process (``multiprocessing``, spawn) with its own ``Ledger``
(every built-in projection inline, as a user runs it) on one PostgreSQL database at
127.0.0.1, in a throwaway schema. It appends ``--pg-events`` events one per transaction
(a ``session.started``, then messages, every tenth a ``tool.used``) to its own stream,
timing each append. All writers start together; total throughput is every writer's
events over the wall time from the start signal to the last writer's end, and the p50
append latency is over every append of every writer.

The peer is eventsourcing's PostgreSQL recorder (``eventsourcing.postgres``) in the same
run, one aggregate per writer process, one event per ``save``: it serializes writers with
``LOCK TABLE ... IN EXCLUSIVE MODE`` held to commit, as ctxledger did before issue 13.
Both run with the server's ``synchronous_commit`` as it is (on: a flush per commit), so
the durability is the same. The target: 4 writers at least 1.5x one writer (ctxledger).

``CTXLEDGER_BENCH_PG_URL`` names the server (default
``postgresql+psycopg://postgres@127.0.0.1:5432/test``); only 127.0.0.1/localhost is
accepted. Without a reachable server the leg reports nothing.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from registry import AtLeastTimesPeer, Comparison, Context, Measure, leg

PG_URL = os.environ.get("CTXLEDGER_BENCH_PG_URL",
                        "postgresql+psycopg://postgres@127.0.0.1:5432/test")
WRITERS = (1, 2, 4, 8)
EVENTS_PER_WRITER = 1_500
QUICK_EVENTS_PER_WRITER = 60
PEER = "eventsourcing PG"


@dataclass(frozen=True)
class Reported:
    """A figure reported for the table, with no bar of its own."""

    def describe(self) -> str:
        """'reported'."""
        return "reported"

    def judge(self, ours: Measure, peer: Measure | None) -> tuple[float | None, bool]:
        """The ratio when there is a peer; always met."""
        ratio = None if peer is None or peer.value <= 0 else ours.value / peer.value
        return ratio, True


def _check_local(url: str) -> None:
    import sqlalchemy as sa

    host = sa.engine.make_url(url).host
    if host not in ("127.0.0.1", "localhost"):
        raise SystemExit(f"legs_pg_writers: only a local server is benchmarked, not {host!r}")


def _schema_url(schema: str) -> str:
    import sqlalchemy as sa

    url = sa.engine.make_url(PG_URL)
    return url.update_query_dict({"options": f"-csearch_path={schema}"}).render_as_string(
        hide_password=False)


@contextmanager
def _schema() -> Iterator[str]:
    """A fresh schema, dropped afterwards."""
    import sqlalchemy as sa

    name = f"bench_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(PG_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE SCHEMA "{name}"')
        yield name
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        admin.dispose()


def _reachable() -> str | None:
    import sqlalchemy as sa

    try:
        engine = sa.create_engine(PG_URL, connect_args={"connect_timeout": 3})
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
        engine.dispose()
    except Exception as exc:  # any failure: no server to measure
        return f"{type(exc).__name__}"
    return None


def _inputs(stream: str, count: int) -> list[dict[str, Any]]:
    """A writer's events: one session, then messages with a tool use every tenth."""
    out: list[dict[str, Any]] = [{"type": "session.started",
                                  "data": {"scope": "bench", "title": stream}}]
    for n in range(1, count):
        if n % 10 == 0:
            out.append({"type": "tool.used", "data": {"tool_name": f"{stream}-tool"}})
        else:
            out.append({"type": "message.appended",
                        "data": {"role": "user" if n % 2 else "assistant",
                                 "content": f"{stream} message {n} " + "x" * 160}})
    return out


def _ctxledger_writer(url: str, stream: str, count: int, ready: Any, go: Any,
                      results: Any) -> None:
    from ctxledger import Ledger

    ledger = Ledger.open(url, load_vocabulary=False)
    events = _inputs(stream, count)
    append = ledger.append
    ledger.append(f"{stream}-warm", [{"type": "message.appended",
                                      "data": {"role": "user", "content": "warm"}}])
    ready.wait()
    go.wait()
    latencies = []
    clock = time.perf_counter
    for event in events:
        start = clock()
        append(stream, [event])
        latencies.append(clock() - start)
    results.put((time.time(), latencies))
    ledger.close()


def _peer_writer(url: str, stream: str, count: int, ready: Any, go: Any,
                 results: Any) -> None:
    import sqlalchemy as sa
    from eventsourcing.application import Application
    from eventsourcing.domain import Aggregate, event

    class Session(Aggregate):
        @event("Opened")
        def __init__(self, title: str) -> None:
            self.seen = 1

        @event("MessageAppended")
        def append_message(self, role: str, content: str) -> None:
            self.seen += 1

        @event("ToolUsed")
        def use_tool(self, tool_name: str) -> None:
            self.seen += 1

    parsed = sa.engine.make_url(PG_URL)
    schema = str(sa.engine.make_url(url).query["options"]).split("=", 1)[1]
    app: Application[Any] = Application(env={
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "POSTGRES_DBNAME": parsed.database or "postgres",
        "POSTGRES_HOST": parsed.host or "127.0.0.1", "POSTGRES_PORT": str(parsed.port or 5432),
        "POSTGRES_USER": parsed.username or "postgres",
        "POSTGRES_PASSWORD": parsed.password or "", "POSTGRES_SCHEMA": schema,
        "CREATE_TABLE": "y"})
    events = _inputs(stream, count)
    aggregate = Session(title=stream)
    app.save(aggregate)
    ready.wait()
    go.wait()
    latencies = []
    clock = time.perf_counter
    for item in events[1:] + events[:1]:  # the same count; the first is already saved
        if item["type"] == "tool.used":
            aggregate.use_tool(**item["data"])
        elif item["type"] == "message.appended":
            aggregate.append_message(**item["data"])
        else:
            aggregate.append_message(role="system", content=str(item["data"]))
        start = clock()
        app.save(aggregate)
        latencies.append(clock() - start)
    results.put((time.time(), latencies))
    app.close()


def _run(writer: Callable[..., None], url: str, writers: int, count: int
         ) -> tuple[float, float]:
    """(total events per second, p50 append latency in ms) for ``writers`` processes."""
    ctx = mp.get_context("spawn")
    ready = ctx.Barrier(writers + 1)
    go = ctx.Event()
    results = ctx.Queue()
    procs = [ctx.Process(target=writer, args=(url, f"w{n}", count, ready, go, results))
             for n in range(writers)]
    for proc in procs:
        proc.start()
    try:
        ready.wait(timeout=120)
        start = time.time()
        go.set()
        outcomes = [results.get(timeout=600) for _ in procs]
    finally:
        for proc in procs:
            proc.join(timeout=60)
            if proc.is_alive():
                proc.kill()
    end = max(finished for finished, _ in outcomes)
    latencies = [lat for _, lats in outcomes for lat in lats]
    return len(latencies) / (end - start), statistics.median(latencies) * 1000


def _prepare_ctxledger(url: str) -> None:
    from ctxledger import Ledger

    Ledger.open(url, load_vocabulary=False).close()  # schema first, outside the timing


@leg("pg_writers", "PostgreSQL: 1/2/4/8 writer processes on their own streams")
def pg_writers(ctx: Context) -> list[Comparison]:
    """Throughput and p50 latency per writer count, ctxledger and eventsourcing's recorder."""
    _check_local(PG_URL)
    problem = _reachable()
    if problem is not None:
        print(f"  skipped: PostgreSQL not reachable at {PG_URL} ({problem})")
        return []
    count = QUICK_EVENTS_PER_WRITER if ctx.settings.quick else EVENTS_PER_WRITER
    ours: dict[int, list[tuple[float, float]]] = {n: [] for n in WRITERS}
    peer: dict[int, list[tuple[float, float]]] = {n: [] for n in WRITERS}
    for _ in range(ctx.settings.rounds):
        for n in WRITERS:
            with _schema() as schema:
                url = _schema_url(schema)
                _prepare_ctxledger(url)
                ours[n].append(_run(_ctxledger_writer, url, n, count))
            with _schema() as schema:
                peer[n].append(_run(_peer_writer, _schema_url(schema), n, count))
    rows: list[Comparison] = []
    note = (f"{count:,} events per writer, one per transaction, {ctx.settings.rounds} round(s);"
            " synchronous_commit as the server has it, for both")
    for n in WRITERS:
        rate = Measure.median_of([r for r, _ in ours[n]], "ev/s")
        peer_rate = Measure.median_of([r for r, _ in peer[n]], "ev/s")
        rows.append(Comparison("pg_writers", f"PG {n} writer(s): total", rate, PEER, peer_rate,
                               Reported(), note))
        rows.append(Comparison("pg_writers", f"PG {n} writer(s): p50 append latency",
                               Measure.median_of([p for _, p in ours[n]], "ms"), PEER,
                               Measure.median_of([p for _, p in peer[n]], "ms"), Reported()))
    one = Measure.median_of([r for r, _ in ours[1]], "ev/s")
    four = Measure.median_of([r for r, _ in ours[4]], "ev/s")
    rows.append(Comparison("pg_writers", "PG 4 writers vs 1 writer (ctxledger)", four,
                           "ctxledger, 1 writer", one, AtLeastTimesPeer(1.5)))
    return rows
