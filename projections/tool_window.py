"""The tool-usage window: tools are ranked by their uses over the days ending at ``now``.

Seven days unless a policy says otherwise (SPEC: usage is counted over the last 7 days, a
setting). ``ctxledger state`` ranks its top tools over this default window; the
``session`` profile's ``usage_window_days`` defaults to it; the rollup job keeps raw uses
for the longest window any setting asks for. The counts themselves are two seeks per tool
(``tool_usage.load_tool_usage``). Plain datetimes: the assembler may import this module.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from ctxledger.store.clock import ensure_utc
from ctxledger.store.errors import LedgerError

TOOL_WINDOW_DAYS = 7
"""The default length of the tool-usage window, in days."""

TOOL_WINDOW = timedelta(days=TOOL_WINDOW_DAYS)
"""``TOOL_WINDOW_DAYS`` as a duration."""

Window = tuple[datetime, datetime]
"""``(lo, hi)``: the uses at or after ``lo`` and at or before ``hi`` count."""


def window_bounds(now: datetime | None, length: timedelta | None) -> Window | None:
    """The window of ``length`` ending at ``now`` (None without a length).

    Raises ``LedgerError`` for a window without ``now``, a negative length or a naive
    ``now``.
    """
    if length is None:
        return None
    if now is None:
        raise LedgerError("a usage window needs 'now': set ViewRequest.now")
    if length.total_seconds() < 0:
        raise LedgerError("the usage window must not be negative")
    try:
        end = ensure_utc(now, "now")
    except ValueError as exc:
        raise LedgerError(str(exc)) from None
    return end - length, end
