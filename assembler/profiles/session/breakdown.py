"""The ``session`` profile's rich view for ``--format text``: the ranked tools."""

from __future__ import annotations

from rich.table import Table

from ctxledger.assembler.profiles.session.report import SessionReport


def session_table(report: SessionReport) -> Table:
    """The ranked tools with their score, window usage and whether they were shown."""
    window = (f"{report.usage_window_start:%Y-%m-%d %H:%M} .. "
              f"{report.usage_window_end:%Y-%m-%d %H:%M} UTC")
    table = Table(title=f"session: {report.chars}/{report.max_chars} chars, tools "
                        f"{report.tool_section_chars}/{report.tool_section_budget} chars, "
                        f"window {window}", title_justify="left")
    for name, justify in (("#", "right"), ("tool", "left"), ("type", "left"),
                          ("score", "right"), ("uses (window)", "right"),
                          ("age (days)", "right"), ("uses (lifetime)", "right"),
                          ("shown", "left")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for tool in report.tools:
        style = "" if tool.shown else "dim"
        age = "" if tool.age_days is None else f"{tool.age_days:.2f}"
        table.add_row(str(tool.rank), tool.name, tool.tool_type, f"{tool.score:.4f}",
                      str(tool.window_count), age, str(tool.lifetime_count),
                      "yes" if tool.shown else "no", style=style)
    if report.more_available:
        table.caption = f"({report.more_available} more available)"
    return table
