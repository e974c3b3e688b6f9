"""The ``novel`` profile's rich view for ``--format text``: a table per tier, the stats
line."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from ctxledger.assembler.profiles.novel.report import NovelReport

COLUMNS: tuple[tuple[str, str], ...] = (
    ("item", "left"), ("kind", "left"), ("priority", "right"), ("tokens", "right"),
    ("action", "left"))


def novel_table(report: NovelReport) -> Group:
    """One table per tier (item, kind, priority, tokens, action; rank order), then the
    stats line. Dropped rows are struck through."""
    where = f"chapter {report.chapter}" + ("" if report.moved else " (no chapter.moved)")
    if report.scene:
        where += f", scene {report.scene}"
    parts: list[Table | Text] = [Text(f"novel: {where}", style="bold")]
    for tier in report.tiers:
        over = ", over budget" if tier.over_budget else ""
        table = Table(
            title=(f"{tier.tier}: {tier.tokens}/{tier.budget} tokens ({tier.items} items, "
                   f"{tier.framing_tokens} of framing, {tier.dropped} dropped{over})"),
            title_justify="left")
        for name, justify in COLUMNS:
            table.add_column(name, justify=justify)  # type: ignore[arg-type]
        for row in report.items:
            if row.tier != tier.tier:
                continue
            style = "dim strike" if row.status == "dropped" else ""
            kind = row.kind + (" (promoted)" if row.promoted else "")
            action = (f"included ({row.placement})" if row.status == "included"
                      else "dropped")
            table.add_row(*(Text(value, style=style) for value in (
                row.item_id, kind, str(row.priority), str(row.tokens), action)))
        parts.append(table)
    parts.append(Text(report.stats))
    return Group(*parts)
