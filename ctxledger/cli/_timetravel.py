"""Time travel (SPEC §4): ``replay``, ``why``, ``audit`` and ``fork``.

Each command is a thin shell over ``Ledger``; the domain logic is in
``ctxledger.timetravel``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ctxledger._open import open_existing
from ctxledger.cli._console import progress_bar, stdout
from ctxledger.cli._errors import fail
from ctxledger.cli._options import (
    FormatOption,
    JsonJsonlOrText,
    JsonOrText,
    Session,
    check_profile,
    db_of,
    parse_optional_time,
    parse_until,
)

if TYPE_CHECKING:
    from datetime import datetime

    from ctxledger._ledger import Ledger
    from ctxledger.timetravel._audit import WhatIfReport

# rich, pydantic and the assembler are imported inside the commands: registering them
# must not slow down ``ctxledger --version``.

TIMELINE_PROGRESS_FROM = 200
"""Timelines at least this many messages long show a progress bar on stderr."""

UntilOption = Annotated[str | None, typer.Option(
    "--until", metavar="POS|ISO",
    help="Stop at this log position, or at the last event recorded by this time"
         " (ISO-8601 with a zone). Default: the head.")]
ProfileOption = Annotated[str | None, typer.Option(
    "--profile", metavar="NAME",
    help="Assembler profile (card, session, novel, brief...). Default: the session's"
         " 'profile' setting (as assemble), else card.")]
PolicyOption = Annotated[Path | None, typer.Option(
    "--policy", metavar="FILE", dir_okay=False,
    help="A whole policy as JSON, instead of the one the prefix's settings give.")]


def _print_what_if(report: WhatIfReport, format: JsonOrText) -> None:
    from ctxledger import render
    from ctxledger.render._replay import what_if_table

    if format is JsonOrText.json:
        typer.echo(render.dumps(report.to_json(), indent=2))
    else:
        stdout().print(what_if_table(report))


def _print_timeline(ledger: Ledger, session: str, profile: str, cut: int | datetime | None,
                    policy: str | None, format: JsonJsonlOrText) -> None:
    """``replay --timeline``: each step printed as it is computed (JSON lines, or the
    JSON array written a record at a time), with a bar for long timelines; nothing of a
    step is kept once it is printed."""
    import textwrap

    from ctxledger import render
    from ctxledger.render._replay import timeline_records, timeline_table

    with progress_bar("replaying") as bar, closing(ledger.iter_timeline(
            session, profile=profile, until=cut, policy=policy,
            progress=lambda done, total: bar(done, total)
            if total >= TIMELINE_PROGRESS_FROM else None)) as steps:
        if format is JsonJsonlOrText.text:
            table = timeline_table(steps, title=f"timeline {session} ({profile})")
        elif format is JsonJsonlOrText.jsonl:
            for line in timeline_records(steps):
                typer.echo(render.dumps(line))
            return
        else:  # the bytes ``render.dumps(records, indent=2)`` gives, a record at a time
            opening = "[\n"
            for found in timeline_records(steps):
                record = render.dumps(found, indent=2)
                typer.echo(opening + textwrap.indent(record, "  "), nl=False)
                opening = ",\n"
            typer.echo("[]" if opening == "[\n" else "\n]")
            return
    stdout().print(table)


@contextmanager
def _answers_erased(session: str, format: JsonOrText) -> Iterator[None]:
    """An erased session is an answer, not a failure: print it and exit 0."""
    from ctxledger import render
    from ctxledger.timetravel._replay import ErasedHistory

    try:
        yield
    except ErasedHistory as exc:
        if format is JsonOrText.json:
            typer.echo(render.dumps({"session": session, "status": "erased",
                                     "detail": str(exc)}))
        else:
            stdout().print(str(exc), markup=False)
        raise typer.Exit(0) from None


def replay(
    ctx: typer.Context,
    session: Session,
    until: UntilOption = None,
    profile: ProfileOption = None,
    policy: PolicyOption = None,
    now: Annotated[str | None, typer.Option(
        "--now", metavar="ISO",
        help="The assembly time (default: the time of the prefix's last event).")] = None,
    timeline: Annotated[bool, typer.Option(
        "--timeline", help="The assembly after each event that changes the profile's"
                           " inputs (messages, items, snippets, tool uses, settings...).")
    ] = False,
    diff: Annotated[Path | None, typer.Option(
        "--diff", metavar="FILE", dir_okay=False,
        help="Replay the timeline under this policy too; list the decisions that"
             " change.")] = None,
    format: Annotated[JsonJsonlOrText, typer.Option(
        "--format", help="json (default), jsonl (one line per record: with --timeline,"
                         " each step as soon as it is computed) or text.")
    ] = JsonJsonlOrText.json,
) -> None:
    """Derive a session's context again from a prefix of the log, in a scratch store."""
    from ctxledger.io._input import read_policy
    from ctxledger.render._assembly import assembly_view

    check_profile(profile)
    cut = parse_until(until)
    when = parse_optional_time(now, "--now")
    policy_text = read_policy(policy)
    diff_text = read_policy(diff)
    document = JsonOrText.text if format is JsonJsonlOrText.text else JsonOrText.json
    with open_existing(db_of(ctx)) as ledger, _answers_erased(session, document):
        profile = ledger.profile_of(session, profile).name
        if diff_text is not None:
            _print_what_if(ledger.what_if(session, diff_text, profile=profile, until=cut),
                           document)
            return
        if timeline:
            _print_timeline(ledger, session, profile, cut, policy_text, format)
            return
        result = ledger.replay(session, until=cut, profile=profile, policy=policy_text,
                               now=when)
    if format is JsonJsonlOrText.json:
        typer.echo(result.model_dump_json(indent=2))
    elif format is JsonJsonlOrText.jsonl:
        typer.echo(result.model_dump_json())
    else:
        stdout().print(assembly_view(result, show_text=True))


def why(
    ctx: typer.Context,
    session: Session,
    item: Annotated[str, typer.Argument(
        help="A decision's item, e.g. mes_example or message:<id>.", metavar="ITEM")],
    profile: ProfileOption = None,
    until: UntilOption = None,
    policy: PolicyOption = None,
    format: FormatOption = JsonOrText.json,
) -> None:
    """Explain an item's decisions across the session's timeline, with every step's numbers.

    The timeline steps on each event that changes the profile's inputs; runs of steps
    with the same decision are grouped, and each step shows its own numbers."""
    from ctxledger import render
    from ctxledger.io._input import read_policy
    from ctxledger.render._replay import why_view

    check_profile(profile)
    cut = parse_until(until)
    policy_text = read_policy(policy)
    with open_existing(db_of(ctx)) as ledger, _answers_erased(session, format):
        profile = ledger.profile_of(session, profile).name
        report = ledger.why(session, item, profile=profile, until=cut, policy=policy_text)
    if format is JsonOrText.json:
        typer.echo(render.dumps(report.to_json(), indent=2))
    else:
        stdout().print(why_view(report))


def audit(
    ctx: typer.Context,
    session: Annotated[str | None, typer.Argument(
        help="Only this session (default: every session).", metavar="[SESSION]")] = None,
    policy: Annotated[Path | None, typer.Option(
        "--policy", metavar="FILE", dir_okay=False,
        help="What-if: replay SESSION's timeline under this policy and list the decisions"
             " that change.")] = None,
    profile: Annotated[str | None, typer.Option(
        "--profile", metavar="NAME",
        help="With --policy: the profile (default: the policy's).")] = None,
    format: FormatOption = JsonOrText.json,
) -> None:
    """Derive every recorded context.assembled again; exit 1 unless all match."""
    from ctxledger import render
    from ctxledger.io._input import read_policy
    from ctxledger.render._replay import audit_table

    policy_text = read_policy(policy)
    if policy_text is not None and session is None:
        raise typer.BadParameter("a what-if (--policy) needs a SESSION", param_hint="SESSION")
    check_profile(profile)
    with open_existing(db_of(ctx)) as ledger:
        if policy_text is not None:
            assert session is not None
            _print_what_if(ledger.what_if(session, policy_text, profile=profile), format)
            return
        report = ledger.audit(session)
    if format is JsonOrText.json:
        typer.echo(render.dumps(report.to_json(), indent=2))
    else:
        stdout().print(audit_table(report))
    if not report.ok:
        bad = sum(1 for e in report.entries if not e.ok)
        raise fail(f"audit: {bad} of {len(report.entries)} record(s) do not match")


def fork(
    ctx: typer.Context,
    session: Session,
    new_session: Annotated[str, typer.Argument(
        help="The new session stream (must not exist).", metavar="NEW_SESSION")],
    at: Annotated[int, typer.Option("--at", metavar="POS", min=0,
                                    help="Copy the events up to this log position.")],
    count: Annotated[bool, typer.Option(
        "--count", help="Count the copies toward the scope as new activity (tool usage, "
        "observations, ended sessions, rollups). By default they count only in the new "
        "session, so the fork changes nothing the original or its scope shows.")] = False,
) -> None:
    """Copy a session's events up to a position into a new session (new ids, the
    original times)."""
    from ctxledger import render

    # A fork copies an existing session, so a missing database is an error, not created.
    with open_existing(db_of(ctx)) as ledger:
        result = ledger.fork(session, new_session, at, count=count)
    typer.echo(render.dumps({**render.append_record(result), "forked_from": session,
                             "at": at, "counted": count}))


COMMANDS: dict[str, Callable[..., None]] = {
    "replay": replay, "why": why, "audit": audit, "fork": fork}
"""This group's commands by name, in ``--help`` order."""
