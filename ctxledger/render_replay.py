"""Rich views of replays, timelines, ``why``, audits and what-ifs (``--format text``)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ctxledger.audit import AuditReport, WhatIfReport
from ctxledger.replay import TimelineStep
from ctxledger.store.clock import format_utc
from ctxledger.why import WhyReport

_STATUS_STYLE = {"match": "green", "copied": "dim", "digest_mismatch": "red",
                 "policy_mismatch": "red", "superseded": "yellow", "error": "red"}


def timeline_record(step: TimelineStep) -> dict[str, object]:
    """One timeline step as JSON-ready data (the assembly's figures, not its text)."""
    a = step.assembly
    return {"message": step.message, "position": step.position, "seq": step.seq,
            "message_id": step.message_id, "now": format_utc(a.now),
            "policy_version": a.policy_version, "tokens": a.tokens.total,
            "decisions": len(a.decisions), "warnings": len(a.warnings), "digest": a.digest}


def timeline_table(steps: Sequence[TimelineStep], *, title: str | None = None) -> Table:
    """One row per message: where it is, the context's size, and its digest."""
    table = Table(title=title, title_justify="left")
    for name in ("message", "position", "message id", "now", "tokens", "digest"):
        table.add_column(name, justify="right" if name in ("message", "position", "tokens")
                         else "left", no_wrap=True)
    for step in steps:
        table.add_row(str(step.message), str(step.position), step.message_id,
                      format_utc(step.assembly.now), str(step.assembly.tokens.total),
                      step.assembly.digest[:16])
    return table


def why_view(report: WhyReport) -> RenderableType:
    """The runs of one item's decisions, as a table and one line."""
    table = Table(title=f"why {report.item} ({report.session}, {report.profile}, "
                        f"{report.messages} messages)", title_justify="left")
    for name in ("messages", "action", "reason", "numbers"):
        table.add_column(name, overflow="fold")
    for run in report.runs:
        span = str(run.first) if run.first == run.last else f"{run.first}-{run.last}"
        via = f" (via {run.covered_by})" if run.covered_by else ""
        table.add_row(span, run.action, run.reason + via, run.numbers)
    return Group(table, Text(report.line()))


def audit_table(report: AuditReport) -> RenderableType:
    """One row per ``context.assembled`` record, then the counts."""
    table = Table(title=f"audit {report.session or '(all sessions)'}", title_justify="left")
    for name in ("session", "record", "at", "profile", "status", "detail"):
        table.add_column(name, overflow="fold")
    for e in report.entries:
        detail = e.detail or (f"digest {e.derived_digest[:16]}" if e.derived_digest else "")
        table.add_row(e.session, str(e.record_position), str(e.position), e.profile,
                      Text(e.status, style=_STATUS_STYLE[e.status]), detail)
    counts = ", ".join(f"{n} {status}" for status, n in report.counts().items() if n)
    verdict = "ok" if report.ok else "FAILED"
    return Group(table, Text(f"{len(report.entries)} record(s): {counts or 'none'} - {verdict}"))


def what_if_table(report: WhatIfReport) -> RenderableType:
    """The decisions that change under the other policy."""
    table = Table(title=f"what if {report.session} ({report.profile}) used "
                        f"{report.new_policy} instead of {report.old_policy}",
                  title_justify="left")
    for name in ("message", "item", "old", "new"):
        table.add_column(name, overflow="fold")
    for c in report.changes:
        table.add_row(str(c.message), c.item, f"{c.old_action} ({c.old_reason})",
                      f"{c.new_action} ({c.new_reason})")
    return Group(table, Text(f"{len(report.changes)} decision(s) change over "
                             f"{report.messages} message(s)"))
