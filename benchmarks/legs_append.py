"""Write legs: single-event appends and 1,000-event batches, against both peers.

ctxledger runs as a user runs it: ``Ledger.open`` on a SQLite file (WAL,
``synchronous=NORMAL``) with every built-in projection updated inline, each append
validated, hash-chained and committed. Inputs are built before the clock starts, for
every contender alike.
"""

from __future__ import annotations

import gc
import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import peer_eventsourcing
import peer_sqlite
import sql_replay
from registry import (
    AtLeastTimesPeer,
    AtMost,
    Comparison,
    Context,
    FasterThanPeer,
    Measure,
    Reported,
    leg,
)
from sqlalchemy import event as sa_event
from workload import MixEvent

from ctxledger import Ledger

RAW = "raw sqlite3"
EVENTSOURCING = "eventsourcing"
OWN_SQL = "ctxledger's SQL alone"
"""ctxledger's recorded statements replayed on plain sqlite3: its design's database floor."""


def timed(run: Callable[[], None]) -> float:
    """Seconds taken by ``run`` (garbage collected first, so no contender pays for another)."""
    gc.collect()
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def ledger_url(directory: Path) -> str:
    """A SQLite URL in ``directory``."""
    return f"sqlite:///{directory / 'ledger.db'}"


def batch_layout(ctx: Context) -> list[tuple[str, Sequence[MixEvent]]]:
    """The mix cut into batches of ``batch_size`` consecutive events.

    An append is atomic to ONE stream, so each batch goes to its own stream
    ``batch-NNN``; the payloads are the mix's, in the mix's order.
    """
    size = ctx.settings.batch_size
    return [(f"batch-{k // size:03d}", ctx.mix[k:k + size])
            for k in range(0, len(ctx.mix), size)]


def batch_inputs(batch: Sequence[MixEvent]) -> list[dict[str, Any]]:
    """A batch's inputs. A batch stream mixes many sessions' events, but a stream may start
    only once, and only with its first event (the scope is fixed by it): every other
    ``session.started`` goes in as a ``setting.changed`` holding the same data, so the
    batch keeps its size, its payload bytes and its projection work."""
    inputs: list[dict[str, Any]] = []
    for event in batch:
        item = event.as_input()
        if item["type"] == "session.started" and inputs:
            item = {"type": "setting.changed",
                    "data": {"key": "session.started", "value": item["data"]}}
        inputs.append(item)
    return inputs


def _count_raw(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT count(*) FROM events").fetchone()[0])


def _check(who: str, written: int, expected: int) -> None:
    if written != expected:
        raise RuntimeError(f"{who} wrote {written} events, expected {expected}")


# -- the contenders -----------------------------------------------------------------------

def single_inputs(events: Sequence[MixEvent]) -> list[tuple[str, Any]]:
    """(stream, event) per event: one ``Ledger.append`` each."""
    return [(e.stream_id, e.as_input()) for e in events]


def batched_inputs(batches: Sequence[tuple[str, Sequence[MixEvent]]]
                   ) -> list[tuple[str, Any]]:
    """(stream, events) per batch: one ``Ledger.append`` each."""
    return [(stream, batch_inputs(batch)) for stream, batch in batches]


def appending(inputs: Sequence[tuple[str, Any]]) -> Callable[[Ledger], None]:
    """What a ctxledger write contender runs: ``Ledger.append(stream, item)`` for each
    input, in order (timed by the contender, recorded for the SQL-alone replay)."""

    def run(ledger: Ledger) -> None:
        append = ledger.append
        for stream, item in inputs:
            append(stream, item)

    return run


def ctxledger_appends(ctx: Context, label: str, inputs: Sequence[tuple[str, Any]],
                      events: int) -> float:
    """Events per second of ``Ledger.append`` over ``inputs`` (one transaction a call)."""
    write = appending(inputs)
    with ctx.fresh_dir(label) as directory, Ledger.open(ledger_url(directory)) as ledger:
        seconds = timed(lambda: write(ledger))
        _check("ctxledger", ledger.head(), events)
    return events / seconds


def own_sql(ctx: Context, label: str, appends: Callable[[Ledger], None],
            events: int) -> Callable[[], float]:
    """Record what ``appends`` sends SQLite (once, untimed); the contender replays it."""
    directory = ctx.scratch_root / f"{label}-recorded"
    directory.mkdir()
    recording = sql_replay.record(directory, appends)

    def run() -> float:
        with ctx.fresh_dir(f"{label}-replay") as replay_dir:
            gc.collect()
            return events / sql_replay.replay(recording, replay_dir)

    return run


def raw_single(ctx: Context, events: Sequence[MixEvent]) -> float:
    """Events per second of raw sqlite3: one INSERT and one COMMIT per event."""
    rows = peer_sqlite.prepare_rows(events)
    with ctx.fresh_dir("raw-single") as directory:
        path = directory / "raw.db"
        conn = peer_sqlite.open_database(path)
        try:
            seconds = timed(lambda: peer_sqlite.insert_one_commit_each(conn, rows))
        finally:
            conn.close()
        _check(RAW, _count_raw(path), len(rows))
    return len(rows) / seconds


def raw_batches(ctx: Context, batches: Sequence[tuple[str, Sequence[MixEvent]]]) -> float:
    """Events per second of raw sqlite3 ``executemany``, one COMMIT per batch."""
    events = [e for _, batch in batches for e in batch]
    streams = [stream for stream, batch in batches for _ in batch]
    rows = peer_sqlite.prepare_rows(events, streams)
    chunks: list[list[peer_sqlite.Row]] = []
    start = 0
    for _, batch in batches:
        chunks.append(rows[start:start + len(batch)])
        start += len(batch)
    with ctx.fresh_dir("raw-batch") as directory:
        path = directory / "raw.db"
        conn = peer_sqlite.open_database(path)
        try:
            seconds = timed(lambda: peer_sqlite.insert_batches(conn, chunks))
        finally:
            conn.close()
        _check(RAW, _count_raw(path), len(rows))
    return len(rows) / seconds


def _es_count(app: Any) -> int:
    return int(app.recorder.max_notification_id() or 0)


def eventsourcing_single(ctx: Context, events: Sequence[MixEvent]) -> float:
    """Events per second of eventsourcing's ``Application.save``, one event per save."""
    with ctx.fresh_dir("eventsourcing-single") as directory:
        app = peer_eventsourcing.open_application(directory / "es.db")
        try:
            seconds = timed(lambda: peer_eventsourcing.save_one_each(app, events))
            _check(EVENTSOURCING, _es_count(app), len(events))
        finally:
            app.close()
    return len(events) / seconds


def eventsourcing_batches(ctx: Context,
                          batches: Sequence[tuple[str, Sequence[MixEvent]]]) -> float:
    """Events per second of eventsourcing saving an aggregate with a batch of pending events."""
    total = sum(len(b) for _, b in batches)
    with ctx.fresh_dir("eventsourcing-batch") as directory:
        app = peer_eventsourcing.open_application(directory / "es.db")
        try:
            seconds = timed(lambda: peer_eventsourcing.save_batches(app, batches))
            _check(EVENTSOURCING, _es_count(app), total)
        finally:
            app.close()
    return total / seconds


# -- WAL frames per commit (pages written per append: what a commit costs the disk) ------

WAL_HEADER = 32
WAL_FRAME_HEADER = 24
WAL_CHUNK = 500
"""Appends between two truncating checkpoints while frames are counted (bounds the WAL)."""


def wal_frames(wal: Path, page_size: int) -> int:
    """Frames in a WAL file that was empty (truncated) before them."""
    size = wal.stat().st_size if wal.exists() else 0
    return max(0, size - WAL_HEADER) // (WAL_FRAME_HEADER + page_size)


def _no_autocheckpoint(dbapi_conn: Any, _record: Any) -> None:
    dbapi_conn.execute("PRAGMA wal_autocheckpoint=0")


def ctxledger_wal_frames(ctx: Context, events: Sequence[MixEvent]) -> float:
    """WAL frames per single append, after a warm-up of a quarter of ``events``.

    Automatic checkpoints are off and the WAL is truncated every ``WAL_CHUNK`` appends, so
    its size counts exactly the frames the commits wrote (not timed)."""
    inputs = single_inputs(events)
    warm = len(inputs) // 4
    with ctx.fresh_dir("ctxledger-wal") as directory, \
            Ledger.open(ledger_url(directory), load_vocabulary=False) as ledger:
        sa_event.listen(ledger.engine, "connect", _no_autocheckpoint)
        ledger.engine.dispose()  # every connection from now on has the pragma
        for stream, item in inputs[:warm]:
            ledger.append(stream, item)
        wal = directory / "ledger.db-wal"
        # A driver connection: a checkpoint cannot run inside the BEGIN SQLAlchemy issues.
        raw = ledger.engine.raw_connection()
        try:
            page = int(raw.execute("PRAGMA page_size").fetchone()[0])  # type: ignore[attr-defined]
            frames = 0
            for start in range(warm, len(inputs), WAL_CHUNK):
                raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # type: ignore[attr-defined]
                for stream, item in inputs[start:start + WAL_CHUNK]:
                    ledger.append(stream, item)
                frames += wal_frames(wal, page)
        finally:
            raw.close()
    return frames / max(1, len(inputs) - warm)


def raw_wal_frames(ctx: Context, events: Sequence[MixEvent]) -> float:
    """The raw sqlite3 peer's WAL frames per commit, counted the same way."""
    rows = peer_sqlite.prepare_rows(events)
    warm = len(rows) // 4
    with ctx.fresh_dir("raw-wal") as directory:
        path = directory / "raw.db"
        conn = peer_sqlite.open_database(path)
        try:
            _no_autocheckpoint(conn, None)
            page = int(conn.execute("PRAGMA page_size").fetchone()[0])
            peer_sqlite.insert_one_commit_each(conn, rows[:warm])
            frames = 0
            for start in range(warm, len(rows), WAL_CHUNK):
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                peer_sqlite.insert_one_commit_each(conn, rows[start:start + WAL_CHUNK])
                frames += wal_frames(Path(f"{path}-wal"), page)
        finally:
            conn.close()
    return frames / max(1, len(rows) - warm)


def interleaved(ctx: Context, contenders: dict[str, Callable[[], float]]) -> dict[str, Measure]:
    """Run every contender once per round, rotating who goes first; medians per contender."""
    names = list(contenders)
    results: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(ctx.settings.rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            results[name].append(contenders[name]())
    return {name: Measure.median_of(values, "ev/s") for name, values in results.items()}


def floor_rows(name: str, what: str, got: dict[str, Measure], note: str) -> list[Comparison]:
    """The database floor beside the peer, and how much of ctxledger's time it is."""
    return [
        Comparison(name, f"{what}: ctxledger's SQL alone (replayed) vs eventsourcing",
                   got[OWN_SQL], EVENTSOURCING, got[EVENTSOURCING], Reported(),
                   f"{note}; the statements, parameters and commits ctxledger sent, run "
                   "on plain sqlite3 with no Python of its own: no append can be faster"),
        Comparison(name, f"{what}: ctxledger vs its own SQL alone", got["ctxledger"],
                   OWN_SQL, got[OWN_SQL], Reported(),
                   f"{note}; the share of an append's time that is SQLite's"),
    ]


# -- the legs -------------------------------------------------------------------------------

@leg("single", "single-event appends (one transaction each)")
def single_appends(ctx: Context) -> list[Comparison]:
    """ctxledger vs raw sqlite3 (commit per row) vs eventsourcing (save per event)."""
    events = ctx.mix[:ctx.settings.single_events]
    inputs = single_inputs(events)
    got = interleaved(ctx, {
        "ctxledger": lambda: ctxledger_appends(ctx, "ctxledger-single", inputs, len(events)),
        RAW: lambda: raw_single(ctx, events),
        EVENTSOURCING: lambda: eventsourcing_single(ctx, events),
        OWN_SQL: own_sql(ctx, "single", appending(inputs), len(events)),
    })
    note = f"first {len(events):,} events of the mix"
    # Pages per commit: counted once, untimed (deterministic for a given mix).
    frames = Measure(ctxledger_wal_frames(ctx, events), "frames")
    raw_frames = raw_wal_frames(ctx, events)
    return [
        Comparison("single", "single appends vs raw sqlite3 (commit per row)",
                   got["ctxledger"], RAW, got[RAW], AtLeastTimesPeer(0.5), note),
        Comparison("single", "single appends vs eventsourcing (save per event)",
                   got["ctxledger"], EVENTSOURCING, got[EVENTSOURCING], FasterThanPeer(), note),
        *floor_rows("single", "single appends", got, note),
        # An absolute bar: the raw peer's frames are context, not a ratio to meet.
        Comparison("single", "WAL frames per single append", frames, None, None,
                   AtMost(6, "frames"),
                   f"after {len(events) // 4:,} warm-up appends, automatic checkpoints off;"
                   f" raw sqlite3: {raw_frames:.2f} per commit"),
    ]


@leg("batch", "batches of 1,000 events (one transaction each)")
def batch_appends(ctx: Context) -> list[Comparison]:
    """ctxledger vs raw sqlite3 executemany vs eventsourcing batch save."""
    batches = batch_layout(ctx)
    inputs = batched_inputs(batches)
    total = sum(len(items) for _, items in inputs)
    got = interleaved(ctx, {
        "ctxledger": lambda: ctxledger_appends(ctx, "ctxledger-batch", inputs, total),
        RAW: lambda: raw_batches(ctx, batches),
        EVENTSOURCING: lambda: eventsourcing_batches(ctx, batches),
        OWN_SQL: own_sql(ctx, "batch", appending(inputs), total),
    })
    note = f"{len(ctx.mix):,} events in {len(batches)} batches"
    size = ctx.settings.batch_size
    return [
        Comparison("batch", f"{size}-event batches vs raw sqlite3 executemany",
                   got["ctxledger"], RAW, got[RAW], AtLeastTimesPeer(0.5), note),
        Comparison("batch", f"{size}-event batches vs eventsourcing batch save",
                   got["ctxledger"], EVENTSOURCING, got[EVENTSOURCING], FasterThanPeer(), note),
        *floor_rows("batch", f"{size}-event batches", got, note),
    ]
