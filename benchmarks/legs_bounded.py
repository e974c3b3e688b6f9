"""Bounded leg: a long session's timeline and ``why`` through ``ctxledger serve``.

One card session of ``--bounded-messages`` messages (5,000 by default), with the
4,000-token window a deployed chat app gives its model (``context_limit``), is written
straight to a SQLite file; one ``ctxledger serve`` child process (its time limit raised,
so the whole answer is measured) is asked for its timeline (NDJSON, read as it streams)
and for the ``why`` of one card field. Its resident memory is read from ``/proc`` every
20 ms; the figure is the peak above its memory at rest after a warm-up replay. Target:
at most 300 MB above idle for either. The times are reported next to the same calls on
an in-process ``Ledger``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import httpx
from legs_append import ledger_url
from legs_serve import Server, _server
from registry import AtMost, Comparison, Context, Measure, Reported, leg

from ctxledger import Ledger
from ctxledger._service.keys import create_key

SCOPE = "bounded"
SESSION = "long-chat"
ITEM = "description"
CONTEXT_LIMIT = 4_000
"""The session's window: each step assembles what fits it, as a live turn does."""
MEMORY_BOUND_MB = 300.0
"""The stated bound: what a timeline or ``why`` may add to the server's memory."""
CARD = {"name": "Mara", "description": "A lighthouse keeper on Gull Point.",
        "personality": "Dry, patient, suspicious of strangers.",
        "scenario": "A storm has cut the island off for three days.",
        "first_mes": "*The door creaks.* Shut it behind you, the wind bites.",
        "mes_example": "{{user}}: Who keeps the light?\n{{char}}: I do. Always have."}


def _write_session(url: str, messages: int) -> str:
    """The long session; an API key of its scope."""
    with Ledger.open(url, load_vocabulary=False) as ledger:
        ledger.append(SESSION, [{"type": "session.started", "data": {"scope": SCOPE}},
                                {"type": "card.set", "data": CARD},
                                {"type": "setting.changed", "data": {
                                    "key": "context_limit", "value": CONTEXT_LIMIT}}])
        for start in range(0, messages, 500):
            ledger.append(SESSION, [
                {"type": "message.appended", "data": {
                    "role": "user" if n % 2 == 0 else "assistant",
                    "content": f"Turn {n}: the tide turns at six and the wind comes round"
                               f" with it; the lamp needs oil before dark. " * 3}}
                for n in range(start, min(start + 500, messages))])
        return create_key(ledger.engine, [SCOPE], read_only=True)[1]


def _peak_above(server: Server, idle: float, call: Callable[[], None]) -> tuple[float, float]:
    """(peak RSS above ``idle`` in MB, seconds) while ``call`` runs."""
    peak = idle
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, server.rss_mb())
            time.sleep(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    started = time.perf_counter()
    try:
        call()
    finally:
        elapsed = time.perf_counter() - started
        done.set()
        sampler.join()
    return peak - idle, elapsed


@leg("bounded", "a long session's timeline and why through the service: memory and time")
def bounded(ctx: Context) -> list[Comparison]:
    """Peak RSS above idle (<= 300 MB) and time, service against in process."""
    messages = ctx.settings.bounded_messages
    with ctx.fresh_dir("bounded") as directory:
        url = ledger_url(directory)
        token = _write_session(url, messages)
        steps: list[int] = []
        with _server(url, 1, "--request-timeout", "86400") as server, httpx.Client(
                base_url=server.base, timeout=None,
                headers={"Authorization": f"Bearer {token}"}) as http:
            assert http.get(f"/sessions/{SESSION}/replay").status_code == 200  # warm-up
            idle = server.rss_mb()

            def timeline() -> None:
                with http.stream("GET", f"/sessions/{SESSION}/replay",
                                 params={"timeline": "true"},
                                 headers={"Accept": "application/x-ndjson"}) as response:
                    steps.append(sum(1 for line in response.iter_lines() if line))

            def why() -> None:
                answer = http.get(f"/sessions/{SESSION}/why", params={"item": ITEM})
                assert answer.status_code == 200, answer.text[:300]

            timeline_mb, timeline_s = _peak_above(server, idle, timeline)
            why_mb, why_s = _peak_above(server, idle, why)
        with Ledger.open(url) as ledger:
            ledger.replay(SESSION)  # the same warm-up as the server's
            started = time.perf_counter()
            local_steps = sum(1 for _ in ledger.iter_timeline(SESSION))
            local_timeline = time.perf_counter() - started
            started = time.perf_counter()
            ledger.why(SESSION, ITEM)
            local_why = time.perf_counter() - started
    assert steps == [local_steps], (steps, local_steps)
    note = (f"one card session of {messages:,} messages ({local_steps:,} timeline steps,"
            f" context_limit {CONTEXT_LIMIT:,}),"
            f" one serve process on SQLite, idle at {idle:.0f} MB after a warm-up replay")
    label = f"{messages:,} messages"
    return [
        Comparison("bounded", f"timeline of {label} through the service: peak RSS above"
                              " idle", Measure(timeline_mb, "MB"), None, None,
                   AtMost(MEMORY_BOUND_MB, "MB"), note=note),
        Comparison("bounded", f"why of {label} through the service: peak RSS above idle",
                   Measure(why_mb, "MB"), None, None, AtMost(MEMORY_BOUND_MB, "MB"),
                   note=note),
        Comparison("bounded", f"timeline of {label}: service vs in process",
                   Measure(timeline_s, "s"), "in-process Ledger",
                   Measure(local_timeline, "s"), Reported(), note=note),
        Comparison("bounded", f"why of {label}: service vs in process",
                   Measure(why_s, "s"), "in-process Ledger", Measure(local_why, "s"),
                   Reported(), note=note),
    ]

