"""Commands on the log itself: ``init``, ``append``, ``append-messages`` and ``events``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

import typer

from ctxledger._config import resolve_db_url
from ctxledger._open import database_errors, open_existing, open_ledger, safe_url
from ctxledger.cli._console import progress_bar, stdout
from ctxledger.cli._errors import fail
from ctxledger.cli._options import (
    FormatOption,
    JsonlOrText,
    JsonOrText,
    check_stream,
    db_of,
    read_input,
)


def init(ctx: typer.Context, format: FormatOption = JsonOrText.json) -> None:
    """Create the database or upgrade its schema; print the URL and the schema revision."""
    from ctxledger import _migrate as migrate
    from ctxledger import render

    url = resolve_db_url(db_of(ctx))
    before = _revision(url)
    with progress_bar("rebuilding projections") as progress, \
            open_ledger(url, progress=progress) as ledger:
        after = migrate.current_revision(ledger.engine)
        statuses = ledger.projection_status()
        head = ledger.head()
    record = {"url": safe_url(url), "revision": after, "previous_revision": before,
              "head": head, "projections": [render.status_record(s) for s in statuses]}
    if format is JsonOrText.json:
        typer.echo(render.dumps(record))
        return
    change = ("created" if before is None else "up to date" if before == after
              else f"upgraded from {before}")
    console = stdout()
    console.print(render.info_table([("database", record["url"]),
                                     ("schema revision", f"{after} ({change})"),
                                     ("head position", head)]))
    console.print(render.status_table(statuses))


def _revision(url: str) -> str | None:
    """The schema revision a database is at before opening it (None if it has none)."""
    from ctxledger import _migrate as migrate
    from ctxledger.store.sql_engine import create_engine

    with database_errors(url):
        engine = create_engine(url)
        try:
            return migrate.current_revision(engine)
        finally:
            engine.dispose()


def append(
    ctx: typer.Context,
    stream: Annotated[str, typer.Argument(help="The stream to append to.", metavar="STREAM")],
    expected_version: Annotated[int | None, typer.Option(
        "--expected-version", min=0, metavar="N",
        help="0: the stream must be new; N: it must be exactly at version N.")] = None,
    file: Annotated[str, typer.Option(
        "--file", "-f", metavar="FILE",
        help="JSONL input, one {\"type\",\"data\"[,\"id\",\"metadata\"]} a line;"
             " '-' (default) reads stdin.")] = "-",
) -> None:
    """Append JSONL events to STREAM as one atomic batch; prints the positions written.

    Any bad line writes nothing, and the error names its line number.
    """
    from ctxledger import render
    from ctxledger.io._input import InputError, parse_jsonl, validate_lines
    from ctxledger.store.errors import BatchEventError

    if not stream.strip():
        raise typer.BadParameter("must not be empty", param_hint="STREAM")
    lines = parse_jsonl(read_input(file).splitlines())
    if not lines:
        raise fail("no events in the input (every line is blank)")
    # Every line is checked before the database is opened, so bad input never creates
    # one; only the rules of the stream's history need it (below).
    from ctxledger._setting_checks import check_event
    from ctxledger.store.strict import DEFAULT_MAX_EVENT_BYTES

    validate_lines(stream, lines, DEFAULT_MAX_EVENT_BYTES, check_event)
    with open_ledger(db_of(ctx)) as ledger:
        try:
            result = ledger.append(stream, [line.event for line in lines],
                                   expected_version=expected_version)
        except BatchEventError as exc:
            # A rule of the stream's history (every line passed validation above). The
            # append is atomic, so nothing was written; the store names the event by its
            # index in the batch, the input line is named instead.
            raise InputError(f"line {lines[exc.index].number}: {exc.reason}") from None
    typer.echo(render.dumps(render.append_record(result)))


def append_messages(
    ctx: typer.Context,
    session: Annotated[str, typer.Argument(help="The session to append to.",
                                           metavar="SESSION")],
    file: Annotated[str, typer.Argument(
        help="JSON input: a list of messages (OpenAI's chat-completions shape, or"
             " Anthropic's), or Anthropic's {\"system\": ..., \"messages\": [...]};"
             " '-' reads stdin.", metavar="FILE|-")],
    expected_version: Annotated[int | None, typer.Option(
        "--expected-version", min=0, metavar="N",
        help="0: the session must be new; N: it must be exactly at version N.")] = None,
) -> None:
    """Append chat messages to SESSION as one atomic batch; prints the positions written.

    Each message becomes a message.appended event in the canonical form; an Anthropic
    user turn holding tool results becomes one tool message per result. Any bad message
    writes nothing, and the error names it (messages[2]: ...).
    """
    from ctxledger import render
    from ctxledger._chat_input import check_batch, message_batch, parse_conversation
    from ctxledger._setting_checks import check_event
    from ctxledger.store.strict import DEFAULT_MAX_EVENT_BYTES

    if not session.strip():
        raise typer.BadParameter("must not be empty", param_hint="SESSION")
    messages, system = parse_conversation(read_input(file))
    batch = message_batch(messages, system)
    # Every message is checked before the database is opened: bad input never creates one.
    check_batch(session, batch, DEFAULT_MAX_EVENT_BYTES, check_event)
    with open_ledger(db_of(ctx)) as ledger:
        result = ledger.append_messages(session, messages, system=system,
                                        expected_version=expected_version)
    typer.echo(render.dumps(render.append_record(result)))


def events(
    ctx: typer.Context,
    stream: Annotated[str | None, typer.Argument(
        help="Only this stream (default: the whole log).", metavar="[STREAM]")] = None,
    after: Annotated[int, typer.Option("--after", min=0, metavar="POS",
                                       help="Only events after this position.")] = 0,
    limit: Annotated[int | None, typer.Option("--limit", min=0, metavar="N",
                                              help="At most N events.")] = None,
    format: Annotated[JsonlOrText, typer.Option(
        "--format", help="jsonl (default) or text.")] = JsonlOrText.jsonl,
) -> None:
    """Print events in position order: the whole log, or one stream.

    Both formats write each page of the log before reading the next, so memory stays
    bounded at any log size."""
    from ctxledger import render
    from ctxledger.io._transfer import iter_event_pages
    from ctxledger.store.printable import escape_unprintable

    with open_existing(db_of(ctx)) as ledger:
        pages = iter_event_pages(ledger, stream, after=after, limit=limit)
        printed = False
        if format is JsonlOrText.jsonl:
            for page in pages:
                typer.echo("\n".join(render.dumps(render.event_record(e)) for e in page))
                printed = True
            if not printed:
                check_stream(ledger, stream)
            return
        console = stdout()
        head = ledger.head()
        layout = render.EventsLayout(
            position=len(str(head)), stream=render.STREAM_CAP if stream is None else len(
                escape_unprintable(stream)),
            version=len(str(head if stream is None else ledger.log.stream_version(stream))))
        for page in pages:
            console.print(render.events_table(page, layout=layout, header=not printed))
            printed = True
        if not printed:
            check_stream(ledger, stream)
            console.print(render.events_table([], layout=layout))


COMMANDS: dict[str, Callable[..., None]] = {"init": init, "append": append,
                                             "append-messages": append_messages,
                                             "events": events}
"""This group's commands by name, in ``--help`` order."""
