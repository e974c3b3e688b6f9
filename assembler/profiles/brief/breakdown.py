"""The ``brief`` profile's rich view for ``--format text``: the retrieved snippets."""

from __future__ import annotations

from rich.table import Table

from ctxledger.assembler.profiles.brief.report import BriefReport


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.4f}"


def brief_table(report: BriefReport) -> Table:
    """Retrieved snippets with scores, provenance and outcome; filter counts below."""
    who = report.agent_id or "(no persona)"
    table = Table(title=f"brief for {who}: {report.tokens}/{report.max_tokens} tokens, "
                        f"kb_mode {report.kb_mode}, {report.shown_snippets} of "
                        f"{report.indexed_snippets} snippets shown", title_justify="left")
    for name, justify in (("snippet", "left"), ("provenance", "left"), ("bm25", "right"),
                          ("trust", "right"), ("relevance", "right"), ("mmr", "right"),
                          ("#", "right"), ("decision", "left")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for row in report.snippets:
        kept = row.action in ("included", "rewritten", "truncated")
        table.add_row(row.snippet_id, row.provenance, f"{row.retrieval:.4f}",
                      _number(row.trust), _number(row.relevance), _number(row.mmr),
                      "" if row.mmr_rank is None else str(row.mmr_rank),
                      f"{row.action} ({row.reason})", style="" if kept else "dim")
    table.caption = (f"masked: {report.masked_entities} entities, {report.masked_snippets} "
                     f"snippets | rejected: {report.rejected_snippets} | removals: "
                     f"{report.removals}, redactions: {report.redactions} | facts: "
                     f"{report.facts_shown} shown, {report.facts_dropped} dropped | "
                     f"summaries: {report.summaries} ({report.summaries_shortened} shortened)")
    table.caption_justify = "left"
    return table
