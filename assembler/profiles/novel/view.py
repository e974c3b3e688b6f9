"""The ``novel`` profile's rich view for ``--format text``: items by tier, the stats line."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from assembler.profiles.novel.report import NovelReport


def novel_table(report: NovelReport) -> Table:
    """One row per item (tier, then rank order); dropped rows struck through."""
    where = f"chapter {report.chapter}" if report.chapter is not None else "no chapter"
    if report.scene:
        where += f", scene {report.scene}"
    table = Table(title=f"novel: {where}", title_justify="left", caption=report.stats,
                  caption_justify="left")
    for name, justify in (("tier", "left"), ("item", "left"), ("kind", "left"),
                          ("priority", "right"), ("tokens", "right"), ("placement", "left")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for row in report.items:
        style = "dim strike" if row.status == "dropped" else ""
        kind = row.kind + (" (promoted)" if row.promoted else "")
        placement = row.placement or "dropped"
        table.add_row(*(Text(value, style=style) for value in (
            row.tier, row.item_id, kind, str(row.priority), str(row.tokens), placement)))
    return table
