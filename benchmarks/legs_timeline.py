"""Timeline leg: a timeline, ``why`` and ``audit`` against the work they derive again.

Three figures, side by side in one run, each in its own SQLite log:

- **why**: a card session built by live turns (``--timeline-why`` messages, default
  10,000; each turn one ``append`` and one ``assemble`` with a 4,000-token context limit,
  as an app makes them), then ``why`` of the card's ``description`` over its whole
  timeline. Its time against the live turns' (<= 1.2x); its peak memory (the process's
  ``VmHWM``, reset before each call) against that of one replay at the head (one
  assembly derived from the log: the fold it needs plus one assembly), <= 1.2x plus
  ``MEMORY_CONSTANT`` (the memos two steps share and the token counts of the session's
  texts, which a lone assembly does not keep).
- **timeline**: the timeline of a 2,000-message card session with no context limit
  (``--timeline-messages``; the replay leg's session), every step read as it streams
  (``iter_timeline``), <= 30 s.
- **audit**: a session with 1,000 recorded assemblies (``--timeline-records``: one
  message, one assembly and its record per turn, 4,000-token limit), audited
  (``Ledger.audit``) against its fold alone: the one fold that derives every record
  again (the session's events folded once into a scratch store, assembled at each
  record's position and ``now``), without the audit's reading of the records, comparing
  and billing, <= 2x. Reported beside it: the audit against the reducers alone (the same
  events folded with no assembly at all), which no audit can come near, since each of its
  records is an assembly of a 4,000-token window.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from legs_append import ledger_url
from legs_replay import SESSION, build
from registry import (
    AtMost,
    AtMostTimesPeer,
    AtMostTimesPeerPlus,
    Comparison,
    Context,
    Measure,
    Reported,
    leg,
)

from ctxledger import Ledger
from ctxledger.timetravel._audit import _fold_records, _records
from ctxledger.timetravel._replay import read_prefix, scratch_projections

CONTEXT_LIMIT = 4_000
MEMORY_CONSTANT = 32.0
"""MB that ``why`` may hold beyond 1.2x one replay's peak (see the module docstring)."""
QUICK = {"why": 60, "timeline": 30, "records": 20}
CARD = {"name": "Elias", "description": "A lighthouse keeper.", "personality": "Gruff.",
        "scenario": "A storm.", "mes_example": "{{char}}: Shut the door.",
        "first_mes": "Inside, quick."}


def _head(session: str) -> list[dict[str, Any]]:
    return [{"type": "session.started", "data": {"scope": f"scope-{session}"}},
            {"type": "card.set", "data": CARD},
            {"type": "setting.changed", "data": {"key": "context_limit",
                                                 "value": CONTEXT_LIMIT}}]


def _message(n: int) -> dict[str, Any]:
    return {"type": "message.appended",
            "data": {"role": ("user", "assistant")[n % 2],
                     "content": f"Turn {n}: the tide turns at six and the wind comes round "
                                f"with it; the lamp needs oil before dark ({n})."}}


def _kb(field: str) -> float:
    """``VmRSS`` or ``VmHWM`` of this process, in kB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return float(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def _peak_mb(call: Callable[[], object]) -> tuple[float, float]:
    """(peak RSS above the RSS before, in MB; seconds) of ``call``: the peak is the
    kernel's ``VmHWM``, reset first (``/proc/self/clear_refs``), so nothing is missed
    between samples."""
    Path("/proc/self/clear_refs").write_text("5")
    before = _kb("VmRSS")
    started = time.perf_counter()
    call()
    elapsed = time.perf_counter() - started
    # A call that allocates nothing new can read a few pages below ``before`` (pages the
    # reading itself touched and freed); a peak is never below where it started.
    return max(0.0, _kb("VmHWM") - before) / 1024.0, elapsed


def _live_turns(url: str, session: str, messages: int, *, record: bool) -> float:
    """Seconds of ``messages`` live turns (append, assemble, and ``record`` it)."""
    with Ledger.open(url) as ledger:
        ledger.append(session, _head(session))
        started = time.perf_counter()
        for n in range(messages):
            ledger.append(session, _message(n))
            assembly = ledger.assemble(session, "card")
            if record:
                ledger.record_assembly(session, assembly)
        return time.perf_counter() - started


def _assembling_fold(ledger: Ledger, session: str) -> float:
    """Seconds of the audit's fold alone: every record of ``session`` derived again by one
    fold (``_fold_records``), without comparing or billing them."""
    with ledger.engine.connect() as conn:
        records, _ = _records(conn, session)
        started = time.perf_counter()
        derived = _fold_records(conn, records, ledger.clock(), None)
        elapsed = time.perf_counter() - started
    assert len(derived) == len(records), (len(derived), len(records))
    return elapsed


def _fold_alone(ledger: Ledger, session: str) -> float:
    """Seconds to read the session's streams and fold them into a scratch store once."""
    started = time.perf_counter()
    with ledger.engine.connect() as conn:
        prefix = read_prefix(conn, session, ledger.head(), "card", every_scope=True)
        with scratch_projections() as scratch:
            scratch.fold(prefix.events)
            scratch.settle(prefix.position)
    return time.perf_counter() - started


@leg("timeline", "timeline, why and audit: one fold, each step what it changed")
def timeline_leg(ctx: Context) -> list[Comparison]:
    """``why`` vs the live turns, a long timeline's time, ``audit`` vs the fold alone."""
    sizes = QUICK if ctx.settings.quick else {
        "why": ctx.settings.timeline_why, "timeline": ctx.settings.timeline_messages,
        "records": ctx.settings.timeline_records}
    rows: list[Comparison] = []
    with ctx.fresh_dir("timeline-why") as folder:
        url = ledger_url(folder)
        live = _live_turns(url, "why-chat", sizes["why"], record=False)
        with Ledger.open(url) as ledger:
            ledger.replay("why-chat")  # warm-up: statement caches, the vocabulary
            one_mb, _ = _peak_mb(lambda: ledger.replay("why-chat"))
            why_mb, why_s = _peak_mb(lambda: ledger.why("why-chat", "description"))
        note = (f"{sizes['why']:,} messages, context limit {CONTEXT_LIMIT:,}; memory: "
                f"VmHWM above VmRSS before the call")
        rows += [
            Comparison("timeline", f"why over {sizes['why']:,} messages vs the live turns",
                       Measure(why_s, "s"), "live turns", Measure(live, "s"),
                       AtMostTimesPeer(1.2), note=note),
            Comparison("timeline", f"why over {sizes['why']:,} messages: peak memory vs one"
                                   " replay's", Measure(why_mb, "MB"), "one replay",
                       Measure(one_mb, "MB"), AtMostTimesPeerPlus(1.2, MEMORY_CONSTANT, "MB"),
                       note=note),
        ]
    with ctx.fresh_dir("timeline-long") as folder:
        messages = sizes["timeline"]
        url = build(folder, messages + 3, messages + 3)
        with Ledger.open(url) as ledger:
            ledger.assemble(SESSION, "card")  # the token-count cache, as a live app has
            started = time.perf_counter()
            steps = sum(1 for _ in ledger.iter_timeline(SESSION, profile="card"))
            elapsed = time.perf_counter() - started
        rows.append(Comparison(
            "timeline", f"timeline of {messages:,} messages ({steps:,} steps), no context"
                        " limit", Measure(elapsed, "s"), None, None, AtMost(30, "s"),
            note="every step read as it streams (iter_timeline)"))
    with ctx.fresh_dir("timeline-audit") as folder:
        url = ledger_url(folder)
        records = sizes["records"]
        built = _live_turns(url, "audited", records, record=True)
        with Ledger.open(url) as ledger:
            reducers = min(_fold_alone(ledger, "audited") for _ in range(2))
            fold = _assembling_fold(ledger, "audited")
            started = time.perf_counter()
            report = ledger.audit("audited")
            audit = time.perf_counter() - started
        assert report.ok and len(report.entries) == records, report.counts()
        rows += [
            Comparison("timeline", f"audit of {records:,} recorded assemblies in one session"
                                   " vs its fold alone", Measure(audit, "s"),
                       "its fold", Measure(fold, "s"),
                       AtMostTimesPeer(2.0),
                       note=f"{records:,} turns of message, assembly and record, context "
                            f"limit {CONTEXT_LIMIT:,}; its fold: the one fold deriving the "
                            "records, without comparing or billing them"),
            Comparison("timeline", "... the audit vs the reducers alone (no assembly)",
                       Measure(audit, "s"), "reducers alone", Measure(reducers, "s"),
                       Reported()),
            Comparison("timeline", "... the audit vs the live turns that recorded them",
                       Measure(audit, "s"), "live turns", Measure(built, "s"), Reported()),
        ]
    return rows
