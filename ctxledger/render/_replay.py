"""Rich views of replays, timelines, ``why``, audits and what-ifs (``--format text``)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ctxledger.store.clock import format_utc
from ctxledger.timetravel._audit import AuditReport, WhatIfReport
from ctxledger.timetravel._replay import TimelineStep
from ctxledger.timetravel._why import WhyReport

_STATUS_STYLE = {"match": "green", "copied": "dim", "digest_mismatch": "red",
                 "policy_mismatch": "red", "older_format": "yellow", "superseded": "yellow",
                 "error": "red", "erased": "dim"}


def timeline_record(step: TimelineStep) -> dict[str, object]:
    """One timeline step as JSON-ready data (the assembly's figures, not its text).

    ``message_id`` is null for a step that is not a message; ``step``, ``event_type``
    and ``stream_id`` say which event the step is."""
    a = step.assembly
    return {"message": step.message, "position": step.position, "seq": step.seq,
            "message_id": step.message_id, "now": format_utc(a.now),
            "policy_version": a.policy_version, "tokens": a.tokens.total,
            "decisions": len(a.decisions), "warnings": len(a.warnings), "digest": a.digest,
            "step": step.step, "event_type": step.event_type, "stream_id": step.stream_id}


def timeline_records(steps: Iterable[TimelineStep]) -> Iterator[dict[str, object]]:
    """Each step's ``timeline_record``, with ``changed``: the decisions that differ from
    the step before (``decision_changes``). Reads ``steps`` once, keeping only the
    previous step's decisions by item."""
    from ctxledger.timetravel._markers import decision_changes

    before: dict[str, tuple[str, str]] = {}
    for step in steps:
        before, changed = decision_changes(before, step.assembly)
        yield {**timeline_record(step), "changed": changed}


def timeline_table(steps: Iterable[TimelineStep], *, title: str | None = None) -> Table:
    """One row per step: its event (``message 3``, ``item.put``, ``tool.used in s2``),
    where it is, the context's size, and its digest."""
    table = Table(title=title, title_justify="left")
    for name in ("step", "event", "position", "message id", "now", "tokens", "digest"):
        table.add_column(name, justify="right" if name in ("step", "position", "tokens")
                         else "left", no_wrap=True)
    for step in steps:
        session = step.assembly.session
        event = (f"message {step.message}" if step.is_message
                 else step.event_type + ("" if step.stream_id == session
                                         else f" in {step.stream_id}"))
        table.add_row(str(step.step), event, str(step.position), step.message_id or "",
                      format_utc(step.assembly.now), str(step.assembly.tokens.total),
                      step.assembly.digest[:16])
    return table


def why_view(report: WhyReport) -> RenderableType:
    """Every step of the item's timeline (its run's action and reason on the run's first
    row, each step's own numbers on its row), then the explanation on one line."""
    table = Table(title=f"why {report.item} ({report.session}, {report.profile}, "
                        f"{report.steps} steps, {report.messages} messages)",
                  title_justify="left")
    for name in ("step", "event", "action", "reason", "numbers"):
        table.add_column(name, overflow="fold")
    for run in report.runs:
        via = f" (via {run.covered_by})" if run.covered_by else ""
        for index, step in enumerate(run.steps):
            first = index == 0
            table.add_row(str(step.step), step.label(report.session),
                          run.action if first else "", run.reason + via if first else "",
                          step.numbers)
    return Group(table, Text(report.line()))


def audit_table(report: AuditReport) -> RenderableType:
    """One row per ``context.assembled`` record, then the counts."""
    table = Table(title=f"audit {report.session or '(all sessions)'}", title_justify="left")
    # The predicted and billed tokens only when some call was billed (usage.reported).
    billing = any(e.billed_input_tokens is not None for e in report.entries)
    for name in ("session", "record", "at", "profile", "status",
                 *(("predicted", "billed") if billing else ()), "detail"):
        table.add_column(name, overflow="fold")
    for e in report.entries:
        detail = e.detail or (f"digest {e.derived_digest[:16]}" if e.derived_digest else "")
        billed = Text("" if e.billed_input_tokens is None else str(e.billed_input_tokens))
        if e.over_limit:
            billed = Text(f"{e.billed_input_tokens} > limit {e.context_limit}", style="red")
        cells: tuple[str | Text, ...] = (
            "" if e.predicted_tokens is None else str(e.predicted_tokens), billed
        ) if billing else ()
        table.add_row(e.session, str(e.record_position), str(e.position), e.profile,
                      Text(e.status, style=_STATUS_STYLE[e.status]), *cells, detail)
    counts = ", ".join(f"{n} {status}" for status, n in report.counts().items() if n)
    verdict = "ok" if report.ok else "FAILED"
    lines = [f"{len(report.entries)} record(s): {counts or 'none'} - {verdict}"]
    if report.over_limit:
        lines.append(f"{report.over_limit} context(s) billed above their context_limit")
    lines.extend(f"estimate for {x.model} in scope {x.scope}: {x.error_pct:+.2f}% over "
                 f"{x.records} billed record(s) (predicted {x.predicted}, billed {x.billed}; "
                 f"worst {x.worst_pct:+.2f}%)" for x in report.estimates)
    return Group(table, *(Text(line) for line in lines))


def what_if_table(report: WhatIfReport) -> RenderableType:
    """The decisions that change under the other policy."""
    table = Table(title=f"what if {report.session} ({report.profile}) used "
                        f"{report.new_policy} instead of {report.old_policy}",
                  title_justify="left")
    for name in ("step", "message", "item", "old", "new"):
        table.add_column(name, overflow="fold")
    for c in report.changes:
        table.add_row(str(c.step), str(c.message), c.item, f"{c.old_action} ({c.old_reason})",
                      f"{c.new_action} ({c.new_reason})")
    return Group(table, Text(
        f"{len(report.action_changes)} decision(s) change action and"
        f" {len(report.reason_changes)} only their reason over {report.steps} step(s),"
        f" {report.messages} message(s)"))
