"""Rich views of an ``Assembly`` for ``ctxledger assemble --format text``."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from assembler.model import Assembly
from assembler.reports import CardReport, SessionReport


def assembly_view(assembly: Assembly) -> RenderableType:
    """The profile's breakdown table followed by a one-line footer with the digest."""
    report = assembly.report
    if isinstance(report, CardReport):
        body: RenderableType = card_table(report)
    elif isinstance(report, SessionReport):
        body = session_table(report)
    else:  # pragma: no cover - every profile has a renderer
        body = Text(assembly.text)
    footer = Text(
        f"{assembly.profile} | policy {assembly.policy_version} | position "
        f"{assembly.position} | now {assembly.now.isoformat()} | {assembly.tokens.total} "
        f"tokens ({assembly.tokens.encoding}) | digest {assembly.digest[:16]}",
        style="dim")
    warnings = [Text(f"warning: {w}", style="yellow") for w in assembly.warnings]
    return Group(body, *warnings, footer)


def card_table(report: CardReport) -> Table:
    """Card fields with their status (expired rows struck through), subtotals, history."""
    table = Table(title=f"card: {report.compression_level} at message {report.message_count}",
                  title_justify="left")
    table.add_column("field")
    table.add_column("label")
    table.add_column("tokens", justify="right")
    table.add_column("status")
    for row in report.breakdown:
        expired = row.status == "expired"
        style = "dim strike" if expired else ""
        status = f"expired @ msg {row.expired_at_message}" if expired else row.status
        table.add_row(Text(row.field_key, style=style), Text(row.label, style=style),
                      Text(str(row.tokens), style=style), Text(status, style=style))
    table.add_section()
    table.add_row("", "Active", str(report.total_tokens), "")
    table.add_row("", "Saved", str(report.saved_tokens), "", style="green")
    table.add_row("", "Chat history", str(report.chat_history.tokens),
                  _history_note(report))
    table.add_section()
    limit = f"of {report.context_limit}" if report.context_limit else ""
    pressure = Text("pressure: over 80%", style="bold red") if report.pressure else Text(limit)
    table.add_row("", Text("Total", style="bold"), Text(str(report.used_tokens), style="bold"),
                  pressure)
    return table


def _history_note(report: CardReport) -> str:
    history = report.chat_history
    if history.summarized_from is None:
        return f"{history.messages} messages"
    return (f"summarized from {history.summarized_from} "
            f"({history.summarized_messages} msgs + {history.messages} verbatim)")


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
