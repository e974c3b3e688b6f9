"""Replay leg: replaying a session costs the events of its streams, not the log (SPEC §4).

One 1,000-event card session (``session.started``, ``card.set``, a compression setting
and 997 messages) is written into two SQLite logs: alone (about 1k events), and spread
evenly through a large log of other sessions in other scopes (``--replay-log`` events,
default 250,000; try 1,000,000 where the run has room). Each database is opened in a
fresh ``Ledger`` and assembled live once, so the token-count cache holds every text (a
replay reads counts from it), then replayed at the head again and again, the two sizes
interleaved. The figure is the median replay at the large log against the small one
(<= 1.5x): a replay reads its streams through ``(stream_id, stream_version)``, so the
rest of the log must not show.
"""

from __future__ import annotations

import statistics
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from legs_append import ledger_url
from registry import AtMostTimesPeer, Comparison, Context, Measure, leg

from ctxledger import Ledger

SESSION = "replayed-chat"
SESSION_EVENTS = 1_000
QUICK_LOG = 5_000
QUICK_SESSION_EVENTS = 200
FULL_REPEATS = 15
QUICK_REPEATS = 2
NOISE_BATCH = 1_000
NOISE_STREAM_EVENTS = 5_000
"""Noise sessions get this many events each (5 batches), like busy sessions."""
START = datetime(2026, 2, 1, 9, 0, tzinfo=UTC)


class _Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        self.now += timedelta(milliseconds=1)
        return self.now


def _session_events(count: int) -> list[dict[str, Any]]:
    head: list[dict[str, Any]] = [
        {"type": "session.started", "data": {"scope": "replay-bench"}},
        {"type": "card.set", "data": {"name": "Elias", "description": "A lighthouse keeper.",
                                      "personality": "Gruff.", "scenario": "A storm.",
                                      "mes_example": "{{char}}: Shut the door.",
                                      "first_mes": "Inside, quick."}},
        {"type": "setting.changed", "data": {"key": "compression_level",
                                             "value": "chat_dialogue"}},
    ]
    messages = [{"type": "message.appended",
                 "data": {"role": ("user", "assistant")[i % 2],
                          "content": f"Turn {i}: the lamp, the storm and the tide, again {i}."}}
                for i in range(count - len(head))]
    return head + messages


def _noise(count: int, offset: int) -> list[tuple[str, list[dict[str, Any]]]]:
    """``count`` events of other sessions (other scopes), as (stream, batch) appends."""
    out: list[tuple[str, list[dict[str, Any]]]] = []
    done = 0
    while done < count:
        serial = offset + done
        stream = f"noise-{serial // NOISE_STREAM_EVENTS:05d}"
        size = min(NOISE_BATCH, count - done)
        batch: list[dict[str, Any]] = []
        if serial % NOISE_STREAM_EVENTS == 0:
            batch.append({"type": "session.started",
                          "data": {"scope": f"other-{serial // NOISE_STREAM_EVENTS % 7}"}})
        batch += [{"type": "message.appended",
                   "data": {"role": "user", "content": f"noise {serial + k}"}}
                  for k in range(size - len(batch))]
        out.append((stream, batch))
        done += size
    return out


def build(directory: Path, total: int, session_events: int) -> str:
    """A log of ``total`` events holding the session's events spread evenly through it."""
    url = ledger_url(directory)
    session = _session_events(session_events)
    noise_total = max(0, total - len(session))
    chunks = 50
    clock = _Clock()
    with Ledger.open(url, clock=clock, load_vocabulary=False) as ledger:
        written = 0
        for k in range(chunks):
            share = noise_total * (k + 1) // chunks - written
            for stream, batch in _noise(share, written):
                ledger.append(stream, batch)
            written += share
            part = session[len(session) * k // chunks:len(session) * (k + 1) // chunks]
            if part:
                ledger.append(SESSION, part)
    return url


def _timed_replay(ledger: Ledger) -> float:
    started = time.perf_counter()
    ledger.replay(SESSION, profile="card")
    return (time.perf_counter() - started) * 1000.0


@leg("replay", "replay of one 1,000-event session: small log vs a large one")
def replay_cost(ctx: Context) -> list[Comparison]:
    """Median replay time at the large log against the small one (<= 1.5x)."""
    quick = ctx.settings.quick
    session_events = QUICK_SESSION_EVENTS if quick else SESSION_EVENTS
    large = QUICK_LOG if quick else ctx.settings.replay_log
    repeats = QUICK_REPEATS if quick else FULL_REPEATS
    with ctx.fresh_dir("replay-small") as small_dir, ctx.fresh_dir("replay-large") as big_dir:
        urls = {"small": build(small_dir, session_events, session_events),
                "large": build(big_dir, large, session_events)}
        ledgers = {name: Ledger.open(url) for name, url in urls.items()}
        try:
            sizes = {name: ledger.head() for name, ledger in ledgers.items()}
            for ledger in ledgers.values():
                ledger.assemble(SESSION, "card")  # fills the token-count cache
                _timed_replay(ledger)  # warm-up: vocabulary, statement caches
            times: dict[str, list[float]] = {"small": [], "large": []}
            for _ in range(repeats * ctx.settings.rounds):
                for name, ledger in ledgers.items():
                    times[name].append(_timed_replay(ledger))
        finally:
            for ledger in ledgers.values():
                ledger.close()
    small, big = (Measure(statistics.median(times[n]), "ms", tuple(times[n]))
                  for n in ("small", "large"))
    label = f"replay at {sizes['large']:,} vs {sizes['small']:,} events"
    return [Comparison("replay", label, big, f"{sizes['small']:,} events", small,
                       AtMostTimesPeer(1.5),
                       note=f"one {session_events:,}-event card session; median of "
                            f"{len(times['small'])} replays each")]
