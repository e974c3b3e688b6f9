"""Seal leg: sealing a log of ``--events`` events (the mix size), in events per second.

An existing database is sealed by its first ``seal``, which folds every event from the
start; that is what is timed, plainly and with a chain key (HMAC links), followed by the
seal check ``verify`` runs and one more seal over 10,000 new events (what an automatic
seal costs the append that triggers it). The events are inserted as raw rows first
(untimed): a seal reads only each event's position and hash, so how they were written
does not change what is measured, and writing 1M events through appends would take
minutes. ``--events 1000000`` gives the figures in ``benchmarks/README.md``. The bar,
100,000 events/s (a million in ten seconds), is this project's own: the SPEC sets none.
"""

from __future__ import annotations

import hashlib
from typing import Any

from legs_append import ledger_url, timed
from registry import AtLeast, AtMost, Comparison, Context, Measure, leg

from ctxledger import Ledger
from ctxledger.store.chain_key import ChainKey
from ctxledger.store.seal import check_seals, seal_in_transaction

INCREMENT = 10_000
"""Events added before the incremental seal (the default ``SealSettings.every``)."""
_STAMP = "2026-01-01 00:00:00.000000"
_FILL_CHUNK = 50_000


def _fill(ledger: Ledger, first: int, count: int, streams: list[str]) -> None:
    """Insert ``count`` raw event rows at positions ``first..``; each stream's versions go up."""
    raw: Any = ledger.engine.raw_connection()
    try:
        cursor = raw.cursor()
        cursor.execute("PRAGMA synchronous=OFF")  # untimed set-up; durability is not measured
        versions: dict[str, int] = {}
        if first > 1:
            for stream, version in cursor.execute(
                    "SELECT stream_id, max(stream_version) FROM events GROUP BY stream_id"):
                versions[stream] = version
        for start in range(first, first + count, _FILL_CHUNK):
            rows = []
            for position in range(start, min(start + _FILL_CHUNK, first + count)):
                stream = streams[position % len(streams)]
                versions[stream] = versions.get(stream, 0) + 1
                digest = hashlib.sha256(str(position).encode()).hexdigest()
                rows.append((position, stream, versions[stream],
                             f"00000000-0000-4000-8000-{position:012d}", "session.ended", 1,
                             "{}", "{}", _STAMP, "0" * 64, digest))
            cursor.executemany(
                "INSERT INTO events (position, stream_id, stream_version, event_id, type,"
                " schema_version, data, metadata, recorded_at, prev_hash, hash)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
        raw.commit()
    finally:
        raw.close()


@leg("seal", "sealing the whole log")
def seal(ctx: Context) -> list[Comparison]:
    """First seal of an unsealed log (plain and keyed), its check, and an incremental seal."""
    size = ctx.settings.events
    streams = sorted({event.stream_id for event in ctx.mix}) or ["s"]
    plain: list[float] = []
    keyed: list[float] = []
    checks: list[float] = []
    increments: list[float] = []
    key = ChainKey(b"benchmark key")
    for _ in range(ctx.settings.rounds):
        for mode, rates in ((None, plain), (key, keyed)):
            with ctx.fresh_dir("ctxledger-seal") as directory, \
                    Ledger.open(ledger_url(directory)) as ledger:
                _fill(ledger, 1, size, streams)

                def first_seal(ledger: Ledger = ledger, mode: ChainKey | None = mode) -> None:
                    with ledger.log.transaction() as conn:
                        made = seal_in_transaction(conn, ledger.clock(), mode)
                    assert made is not None and made.events == size

                rates.append(size / timed(first_seal))
                if mode is not None:
                    continue

                def check(ledger: Ledger = ledger) -> None:
                    with ledger.log.connection() as conn:
                        problems = check_seals(conn, None)
                    assert problems == [], problems

                checks.append(size / timed(check))
                _fill(ledger, size + 1, INCREMENT, streams)
                increments.append(timed(lambda ledger=ledger: _seal_more(ledger)))
    note = (f"{size:,} events in {len(streams):,} streams, then {INCREMENT:,} more for the"
            " incremental seal")
    return [
        Comparison("seal", f"first seal of {size:,} events", Measure.median_of(plain, "ev/s"),
                   None, None, AtLeast(100_000, "ev/s"), note),
        Comparison("seal", "first seal, keyed (HMAC)", Measure.median_of(keyed, "ev/s"),
                   None, None, AtLeast(100_000, "ev/s")),
        Comparison("seal", "seal check (verify)", Measure.median_of(checks, "ev/s"),
                   None, None, AtLeast(100_000, "ev/s")),
        Comparison("seal", f"incremental seal of {INCREMENT:,} events",
                   Measure.median_of(increments, "s"), None, None, AtMost(0.1, "s")),
    ]


def _seal_more(ledger: Ledger) -> None:
    with ledger.log.transaction() as conn:
        made = seal_in_transaction(conn, ledger.clock(), None)
    assert made is not None and made.seq == 2
