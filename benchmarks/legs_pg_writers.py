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
``LOCK TABLE ... IN EXCLUSIVE MODE`` held to commit, as ctxledger once did.
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

from eventsourcing.application import Application
from eventsourcing.domain import Aggregate, event
from registry import AtLeastTimesPeer, Comparison, Context, Measure, Reported, leg

PG_URL = os.environ.get("CTXLEDGER_BENCH_PG_URL",
                        "postgresql+psycopg://postgres@127.0.0.1:5432/test")
WRITERS = (1, 2, 4, 8)
QUICK_WRITERS = (1, 4)
EVENTS_PER_WRITER = 1_500
QUICK_EVENTS_PER_WRITER = 60
PEER = "eventsourcing PG"


def _check_local(url: str) -> None:
    import sqlalchemy as sa

    host = sa.engine.make_url(url).host
    if host not in ("127.0.0.1", "localhost"):
        raise SystemExit(f"legs_pg_writers: only a local server is benchmarked, not {host!r}")


def _schema_url(schema: str) -> str:
    import sqlalchemy as sa

    url = sa.engine.make_url(PG_URL)
    # application_name: pg_stat_activity can tell the writers apart from other sessions.
    return url.update_query_dict({"options": f"-csearch_path={schema}",
                                  "application_name": "ctxledger-bench"}).render_as_string(
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


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of a local process (the writer's server backend)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")  # not on this machine: the figure is left out
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far (every process on it)."""
    with open("/proc/stat") as stat:
        values = [int(v) for v in stat.readline().split()[1:]]
    tick = os.sysconf("SC_CLK_TCK")
    idle = values[3] + values[4]
    return (sum(values) - idle) / tick, sum(values) / tick


def _ctxledger_writer(url: str, stream: str, count: int, ready: Any, go: Any,
                      results: Any) -> None:
    from ctxledger import Ledger

    # One pooled connection: its server backend is the one doing this writer's work.
    ledger = Ledger.open(url, load_vocabulary=False, pool_size=1, max_overflow=0)
    events = _inputs(stream, count)
    append = ledger.append
    ledger.append(f"{stream}-warm", [{"type": "message.appended",
                                      "data": {"role": "user", "content": "warm"}}])
    with ledger.engine.connect() as conn:
        backend = int(conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one())
    ready.wait()
    go.wait()
    latencies = []
    clock = time.perf_counter
    cpu, server = time.process_time(), _cpu_seconds(backend)
    for item in events:
        start = clock()
        append(stream, [item])
        latencies.append(clock() - start)
    cpu, server = time.process_time() - cpu, _cpu_seconds(backend) - server
    results.put((time.time(), latencies, cpu, server))
    ledger.close()


class PeerSession(Aggregate):
    """The peer's stream: one aggregate per writer."""

    @event("Opened")
    def __init__(self, title: str) -> None:
        self.seen = 1

    @event("MessageAppended")
    def append_message(self, role: str, content: str) -> None:
        """message.appended"""
        self.seen += 1

    @event("ToolUsed")
    def use_tool(self, tool_name: str) -> None:
        """tool.used"""
        self.seen += 1


def _peer_application(url: str, create: bool) -> Application[Any]:
    import sqlalchemy as sa

    parsed = sa.engine.make_url(PG_URL)
    schema = str(sa.engine.make_url(url).query["options"]).split("=", 1)[1]
    return Application(env={
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "POSTGRES_DBNAME": parsed.database or "postgres",
        "POSTGRES_HOST": parsed.host or "127.0.0.1", "POSTGRES_PORT": str(parsed.port or 5432),
        "POSTGRES_USER": parsed.username or "postgres",
        "POSTGRES_PASSWORD": parsed.password or "", "POSTGRES_SCHEMA": schema,
        "CREATE_TABLE": "y" if create else "n"})


def _prepare_peer(url: str) -> None:
    _peer_application(url, create=True).close()  # tables first: children racing fail


def _peer_writer(url: str, stream: str, count: int, ready: Any, go: Any,
                 results: Any) -> None:
    app = _peer_application(url, create=False)
    Session = PeerSession
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
    results.put((time.time(), latencies, float("nan"), float("nan")))
    app.close()


@dataclass(frozen=True)
class Run:
    """One measurement: ``writers`` processes appending at once."""

    rate: float
    """Total events per second."""
    p50_ms: float
    client_ms: float
    """Writer-process CPU per event (ms)."""
    server_ms: float
    """Server-backend CPU per event (ms)."""
    machine_busy: float
    """Share of the machine's CPU busy during the run (every process on it)."""


def _run(writer: Callable[..., None], url: str, writers: int, count: int) -> Run:
    """Throughput, p50 latency and CPU per event of ``writers`` processes."""
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
        busy0, total0 = _machine_busy()
        start = time.time()
        go.set()
        outcomes = [results.get(timeout=600) for _ in procs]
        busy1, total1 = _machine_busy()
    finally:
        for proc in procs:
            proc.join(timeout=60)
            if proc.is_alive():
                proc.kill()
    end = max(outcome[0] for outcome in outcomes)
    latencies = [lat for outcome in outcomes for lat in outcome[1]]
    events = len(latencies)
    return Run(events / (end - start), statistics.median(latencies) * 1000,
               sum(o[2] for o in outcomes) / events * 1000,
               sum(o[3] for o in outcomes) / events * 1000,
               (busy1 - busy0) / max(total1 - total0, 1e-9))


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
    counts = QUICK_WRITERS if ctx.settings.quick else WRITERS
    ours: dict[int, list[Run]] = {n: [] for n in counts}
    peer: dict[int, list[Run]] = {n: [] for n in counts}
    for _ in range(ctx.settings.rounds):
        for n in counts:
            with _schema() as schema:
                url = _schema_url(schema)
                _prepare_ctxledger(url)
                ours[n].append(_run(_ctxledger_writer, url, n, count))
            with _schema() as schema:
                url = _schema_url(schema)
                _prepare_peer(url)
                peer[n].append(_run(_peer_writer, url, n, count))
    rows: list[Comparison] = []
    cores = len(os.sched_getaffinity(0))
    note = (f"{count:,} events per writer, one per transaction, {ctx.settings.rounds} round(s);"
            f" synchronous_commit as the server has it, for both; {cores} CPU(s)")
    for n in counts:
        rate = Measure.median_of([r.rate for r in ours[n]], "ev/s")
        peer_rate = Measure.median_of([r.rate for r in peer[n]], "ev/s")
        rows.append(Comparison("pg_writers", f"PG {n} writer(s): total", rate, PEER, peer_rate,
                               Reported(), note))
        rows.append(Comparison("pg_writers", f"PG {n} writer(s): p50 append latency",
                               Measure.median_of([r.p50_ms for r in ours[n]], "ms"), PEER,
                               Measure.median_of([r.p50_ms for r in peer[n]], "ms"), Reported()))
        # Where the floor is: CPU per event (writer + its backend) and how busy the whole
        # machine was; cores / CPU per event is the rate no lock scheme can pass.
        cpu = Measure.median_of([r.client_ms + r.server_ms for r in ours[n]], "ms")
        busy = Measure.median_of([100 * r.machine_busy for r in ours[n]], "%")
        rows.append(Comparison("pg_writers", f"PG {n} writer(s): CPU per event (ctxledger)",
                               cpu, None, None, Reported()))
        rows.append(Comparison("pg_writers", f"PG {n} writer(s): machine CPU busy", busy,
                               None, None, Reported()))
    one = Measure.median_of([r.rate for r in ours[1]], "ev/s")
    four = Measure.median_of([r.rate for r in ours[4]], "ev/s")
    rows.append(Comparison("pg_writers", "PG 4 writers vs 1 writer (ctxledger)", four,
                           "ctxledger, 1 writer", one, AtLeastTimesPeer(1.5)))
    print("  per round (ctxledger | peer): " + "; ".join(
        f"{n}w " + "/".join(f"{r.rate:,.0f}" for r in ours[n]) + " | "
        + "/".join(f"{r.rate:,.0f}" for r in peer[n]) for n in counts))
    return rows
