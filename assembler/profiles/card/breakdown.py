"""The ``card`` profile's rich view for ``--format text``: the field breakdown table."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from ctxledger.assembler.profiles.card.report import CardReport, LoreRow


def card_table(report: CardReport) -> Table:
    """Card fields with their status (expired rows struck through), subtotals, history."""
    table = Table(title=f"card: {report.compression_level} at message {report.message_count}",
                  title_justify="left")
    table.add_column("field")
    table.add_column("label")
    table.add_column("tokens", justify="right")
    table.add_column("status")
    for row in report.breakdown:
        gone = row.status in ("expired", "dropped")
        style = "dim strike" if gone else ""
        status = (f"expired @ msg {row.expired_at_message}" if row.status == "expired"
                  else "dropped (over budget)" if row.status == "dropped"
                  else "sent as message 1" if row.status == "in_history" else row.status)
        table.add_row(Text(row.field_key, style=style), Text(row.label, style=style),
                      Text(str(row.tokens), style=style), Text(status, style=style))
    if report.lorebook:
        table.add_section()
        for lore in report.lorebook:
            gone = lore.status != "activated"
            style = "dim strike" if gone else ""
            table.add_row(Text(lore.entry_id, style=style),
                          Text(f"lore: {lore.label}", style=style),
                          Text(str(lore.tokens), style=style),
                          Text(_lore_status(lore), style="dim" if gone else ""))
        table.add_row("", "Lorebook", str(report.lorebook_tokens), "")
    table.add_section()
    table.add_row("", "Active", str(report.total_tokens), "")
    table.add_row("", "Saved", str(report.saved_tokens), "", style="green")
    table.add_row("", "Chat history", str(report.chat_history.tokens),
                  _history_note(report))
    table.add_row("", "Framing/overhead", str(report.overhead_tokens),
                  "template labels, separators, per-message overhead")
    table.add_section()
    budget = ""
    if report.context_limit:
        budget = f"of {report.context_limit}"
        if report.response_reserve:
            budget += f" ({report.budget} after a reserve of {report.response_reserve})"
    pressure = (Text(f"pressure: over {report.pressure_threshold:.0%}", style="bold red")
                if report.pressure else Text(budget))
    table.add_row("", Text("Total", style="bold"), Text(str(report.used_tokens), style="bold"),
                  pressure)
    return table


def _lore_status(row: LoreRow) -> str:
    if row.status != "activated":
        return row.status.replace("_", " ")
    if row.by == "key":
        where = f" in {row.message_id}" if row.message_id else ""
        return f"activated: {row.key!r}{where} ({row.placement})"
    return f"activated: {row.by} ({row.placement})"


def _history_note(report: CardReport) -> str:
    history = report.chat_history
    dropped = f", {history.dropped_messages} dropped" if history.dropped_messages else ""
    if history.summarized_from is None:
        return f"{history.messages} messages{dropped}"
    return (f"summarized from {history.summarized_from} "
            f"({history.summarized_messages} msgs + {history.messages} verbatim{dropped})")
