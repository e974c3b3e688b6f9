"""Rich views of the rollup job's report and of ``ctxledger usage`` (no database access)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ctxledger.jobs._rollup import RolledDay, RollupReport
from ctxledger.jobs._usage import Series, UsageReport
from ctxledger.store.clock import format_utc

SPARK_LEVELS = "▁▂▃▄▅▆▇█"
"""Bars of a sparkline, lowest to highest; a day with no use shows ``·``."""


def sparkline(values: Sequence[int]) -> str:
    """One character per value, scaled to the largest (0 is ``·``, any use at least ▁)."""
    top = max(values, default=0)
    if top <= 0:
        return "·" * len(values)
    steps = len(SPARK_LEVELS) - 1
    return "".join("·" if v <= 0 else SPARK_LEVELS[round(v * steps / top)] for v in values)


def _days(spans: list[RolledDay]) -> int:
    return sum((date.fromisoformat(d.last_day) - date.fromisoformat(d.day)).days + 1
               for d in spans)


def rollup_summary(report: RollupReport) -> Text:
    """One line: how many days were rolled up, their span and rows, the retention."""
    days = report.rolled
    span = (f" ({days[0].day} .. {days[-1].last_day}, {sum(d.rows for d in days)} rows)"
            if days else "")
    again = (f"; {len(report.rerolled)} day(s) rolled up again for later events"
             if report.rerolled else "")
    return Text(f"rolled up {_days(days)} day(s) before {format_utc(report.now)[:10]}{span};"
                f" retention {report.retention_days} days{again}"
                + (f"; {len(report.skipped)} already done elsewhere" if report.skipped else "")
                + ("; stopped early" if report.stopped else ""))


def rollup_view(report: RollupReport) -> RenderableType:
    """The days one rollup run wrote (a summary line when there were none)."""
    head = rollup_summary(report)
    written = [*report.rolled, *report.rerolled]
    if not written:
        return head
    table = Table(title_justify="left")
    for name, justify in (("day", "left"), ("rows", "right"), ("position", "right"),
                          ("pruned before", "left"), ("digest", "left")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for day in written:
        label = day.day if day.last_day == day.day else f"{day.day} .. {day.last_day}"
        if day in report.rerolled:
            label += " (again)"
        table.add_row(label, str(day.rows), str(day.position), day.prune_before,
                      day.digest[:12])
    return Group(head, table)


def usage_view(report: UsageReport) -> RenderableType:
    """Daily figures, then each tool's and MCP server's uses as a sparkline over the days."""
    days = Table(title=f"usage of {report.scope}, {report.days[0].day} .. {report.days[-1].day}"
                       f" (now {format_utc(report.now)[:16]}Z)", title_justify="left")
    billing = any(day.calls for day in report.days)  # the columns only when there is any
    for name in ("day", "source", "messages", "retracted", "sessions", "tool uses",
                 "assemblies", "tokens", *(("billed in", "billed out", "cost") if billing
                                           else ())):
        days.add_column(name, justify="left" if name in ("day", "source") else "right")
    for day in report.days:
        cells: tuple[str, ...] = (str(day.billed_input), str(day.billed_output),
                                  "" if day.cost is None else f"{day.cost:.6f}"
                                  ) if billing else ()
        days.add_row(day.day, day.source if day.complete else f"{day.source} (so far)",
                     str(day.appended), str(day.retracted), str(day.sessions),
                     str(day.tool_uses), str(day.assemblies), str(day.tokens), *cells)
    parts: list[RenderableType] = [days]
    if report.models:
        billed = Table(title="billed by the providers (usage.reported)", title_justify="left")
        for name in ("model", "calls", "input", "cached", "output", "cost"):
            billed.add_column(name, justify="left" if name == "model" else "right")
        for model in report.models:
            billed.add_row(Text(model.model), str(model.calls), str(model.input_tokens),
                           str(model.cached_tokens), str(model.output_tokens),
                           "" if model.cost is None else f"{model.cost:.6f}")
        parts.append(billed)
    for title, series in (("tool", report.tools), ("MCP server", report.servers)):
        if series:
            parts.append(_series_table(title, series))
    return Group(*parts)


def _series_table(title: str, series: Sequence[Series]) -> Table:
    table = Table(title_justify="left")
    table.add_column(title)
    table.add_column("uses", justify="right")
    table.add_column("per day (oldest first)", no_wrap=True)
    for item in series:
        table.add_row(Text(item.name), str(item.total), sparkline(item.daily))
    return table
