"""Rollup leg: the nightly job catching up 30 days of a large log, then a no-op second run.

The log is the benchmark mix at ``--rollup-events`` events (default 300,000; SPEC's
1M-event log takes about 70 s to write on the 2-core reference machine, and the leg must
stay well under a minute there). It is written first, untimed, in batches of 1,000
consecutive mix events, each batch its own session (a ``session.started`` in one of ten
scopes, then the payloads) appended at a clock spread evenly over 30 UTC days.

Measured once (a rolled-up day cannot be rolled up again on the same log):

- ``Ledger.rollup()`` at 03:00 on day 31: every day's tool, server, message and token
  figures, 30 ``rollup.completed`` events (fewer when a small log leaves days empty: a
  stretch of them is one), and the pruning of raw tool uses; reported as log events
  per second.
- the same call again: it must read only the rolled-day list, never the events, so it
  costs about nothing whatever the log's size (target: under 1% of the first run).
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from legs_append import ledger_url, timed
from registry import AtLeast, AtMostTimesPeer, Comparison, Context, Measure, leg
from workload import SCOPES, generate_mix

from ctxledger import Ledger

DAYS = 30
BATCH = 1_000
START = datetime(2026, 1, 1, tzinfo=UTC)


class _Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


@leg("rollup", "nightly rollup of 30 days, then a no-op run")
def rollup(ctx: Context) -> list[Comparison]:
    """Catch-up speed of the rollup job over 30 days, and the cost of running it again."""
    size = ctx.settings.rollup_events
    mix = ctx.mix if size == len(ctx.mix) else generate_mix(size)
    batches = [mix[k:k + BATCH] for k in range(0, len(mix), BATCH)]
    step = timedelta(days=DAYS) / len(batches)
    clock = _Clock()
    with ctx.fresh_dir("ctxledger-rollup") as directory, \
            Ledger.open(ledger_url(directory), clock=clock) as ledger:
        for index, batch in enumerate(batches):
            clock.now = START + step * index
            stream = f"rollup-{index:05d}"
            ledger.append(stream, [{"type": "session.started",
                                    "data": {"scope": f"project-{index % SCOPES}"}},
                                   *(e.as_input() for e in batch
                                     if e.type != "session.started")])
        head = ledger.head()
        now = START + timedelta(days=DAYS, hours=3)
        clock.now = now
        reports = []

        def run() -> None:
            reports.append(ledger.rollup(now))

        first = timed(run)
        second = timed(run)
        rolled, again = reports
        # A stretch of days without events (a small --quick log) is one event.
        days = sum((date.fromisoformat(d.last_day) - date.fromisoformat(d.day)).days + 1
                   for d in rolled.rolled)
        if days != DAYS or again.rolled or ledger.head() != head + len(rolled.rolled):
            raise RuntimeError(f"rolled {days} then {len(again.rolled)} days")
        rows = sum(d.rows for d in rolled.rolled)
    note = (f"{head:,} events over {DAYS} days, {len(batches):,} sessions in {SCOPES} scopes;"
            f" {rows:,} rollup rows; 1 round (a log rolls up once)")
    return [
        Comparison("rollup", "rollup of 30 days (catch-up)", Measure(head / first, "ev/s",
                                                                    (head / first,)),
                   None, None, AtLeast(150_000, "ev/s"), note),
        Comparison("rollup", "second rollup (no-op) vs the first",
                   Measure(second * 1000, "ms", (second * 1000,)),
                   "first run", Measure(first * 1000, "ms", (first * 1000,)),
                   AtMostTimesPeer(0.01), note),
    ]
