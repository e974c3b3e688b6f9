"""Erase leg: erasing one session of ``SESSION`` messages from a log of that session alone,
and from a log of ``--events`` events (the mix size), on SQLite.

The issue asks for O(session): the large log's erase against the small one's. ctxledger's
erase rebuilds every projection from the whole log and VACUUMs the whole file
(docs/erasure.md), so it is O(log); this leg measures by how much. The other sessions'
events are inserted as raw rows (untimed, as the seal leg does: writing a million events
through appends would take minutes); the erased session is appended for real.
``--events 1000000`` is the issue's size.
"""

from __future__ import annotations

from legs_append import ledger_url, timed
from legs_seal import _fill
from registry import AtMostTimesPeer, Comparison, Context, Measure, leg

from ctxledger import Ledger

SESSION = 10_000
"""Messages in the erased session (the issue's 10k); the quick run uses 500."""


def _erase_time(ctx: Context, others: int, size: int) -> float:
    """Seconds to erase a ``size``-message session from a log with ``others`` more events."""
    with ctx.fresh_dir("ctxledger-erase") as directory, \
            Ledger.open(ledger_url(directory), load_vocabulary=False) as ledger:
        if others:
            _fill(ledger, 1, others, [f"other-{n}" for n in range(100)])
        messages = [{"role": "user" if n % 2 == 0 else "assistant",
                     "content": f"message {n} of the session to erase"} for n in range(size)]
        for start in range(0, size, 1_000):
            ledger.append_messages("erased", messages[start:start + 1_000])

        def run(ledger: Ledger = ledger) -> None:
            done = ledger.erase(session="erased", reason="benchmark")
            assert done.events == size

        return timed(run)


@leg("erase", "erasing a session on a small and a large log")
def erase(ctx: Context) -> list[Comparison]:
    """The same session's erase alone in its log and inside ``--events`` more events."""
    size = 500 if ctx.settings.quick else SESSION
    large = ctx.settings.events
    small_times: list[float] = []
    large_times: list[float] = []
    for _ in range(ctx.settings.rounds):
        small_times.append(_erase_time(ctx, 0, size) * 1_000)
        large_times.append(_erase_time(ctx, large, size) * 1_000)
    note = (f"a {size:,}-message session erased from a log of {size:,} events and from one"
            f" with {large:,} more; ratio: large / small (O(session) would be ~1x)")
    return [Comparison("erase", f"erase {size:,} events in a {large + size:,}-event log",
                       Measure.median_of(large_times, "ms"), f"{size:,}-event log",
                       Measure.median_of(small_times, "ms"), AtMostTimesPeer(2.0), note)]
