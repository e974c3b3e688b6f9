"""Moving events in and out: ``import``, ``export``, and ``demo`` (the examples loaded)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Annotated, Any, TextIO

import typer

from ctxledger._open import open_existing, open_ledger
from ctxledger.cli._console import progress_bar, stdout
from ctxledger.cli._errors import fail
from ctxledger.cli._options import (
    FormatOption,
    JsonOrText,
    check_stream,
    db_of,
    parse_until,
    read_input,
)


def import_(
    ctx: typer.Context,
    file: Annotated[str, typer.Argument(
        metavar="FILE|-", help="Multi-stream JSONL, one {stream, type, data[, id, metadata,"
                               " at]} a line (the format of 'export'); '-' reads stdin.")],
    trust_timestamps: Annotated[bool, typer.Option(
        "--trust-timestamps",
        help="Record each event at its line's 'at' (then required on every line) instead"
             " of now: 'export | import --trust-timestamps' reproduces every hash.")] = False,
    format: FormatOption = JsonOrText.json,
) -> None:
    """Load events of many streams, all or nothing, with a progress bar on stderr.

    Every line is validated before anything is written, and the events are appended in
    one transaction. Lines without an id get one derived from the file name and line, and
    ids already stored are skipped, so importing the same file twice writes nothing.
    """
    from ctxledger import render
    from ctxledger.io._examples import ScriptedClock
    from ctxledger.io._transfer import import_lines, read_import

    raw = read_input(file)
    source = "stdin" if file == "-" else Path(file).name
    # Everything is decoded and validated before the database is opened (or created).
    lines = read_import(raw.splitlines(), source, trust_timestamps=trust_timestamps,
                        card_files=None if file == "-" else Path(file).parent)
    if not lines:
        raise fail("no events in the input (every line is blank)")
    # With --trust-timestamps the ledger's clock says each line's 'at' as it is appended.
    clock = ScriptedClock(lines[0].at) if trust_timestamps and lines[0].at else None
    options: dict[str, Any] = {} if clock is None else {"clock": clock}
    with open_ledger(db_of(ctx), **options) as ledger:
        with progress_bar("importing") as progress:
            report = import_lines(ledger, lines, clock=clock, progress=progress)
        head = ledger.head()
    record = {**report.record(), "head": head}
    if format is JsonOrText.json:
        typer.echo(render.dumps(record))
    else:
        stdout().print(render.info_table(list(record.items()), title=f"import {file}"))


def export(
    ctx: typer.Context,
    stream: Annotated[str | None, typer.Argument(
        help="Only this stream (default: the whole log).", metavar="[STREAM]")] = None,
    until: Annotated[str | None, typer.Option(
        "--until", metavar="POS|ISO",
        help="Stop at this position, or at the last event recorded at or before this"
             " time.")] = None,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", metavar="FILE", dir_okay=False,
        help="Write the JSONL to FILE, readable by its owner only (default: stdout).")
    ] = None,
) -> None:
    """Write the log (or one stream) as multi-stream JSONL that 'import' reads back:
    {stream, type, data, id, metadata, at} a line, in position order."""
    from ctxledger import render
    from ctxledger.io._private import open_private
    from ctxledger.io._transfer import export_records

    bound = parse_until(until)
    with open_existing(db_of(ctx)) as ledger, ExitStack() as files:
        out: TextIO | None = None
        if output is not None:
            try:
                out = files.enter_context(open_private(output))
            except OSError as exc:
                raise fail(f"cannot write {output}: {exc.strerror or exc}") from None
        exported = 0
        for record in export_records(ledger, stream, until=bound):
            if out is None:
                typer.echo(render.dumps(record))
            else:
                out.write(render.dumps(record) + "\n")
            exported += 1
        if not exported:
            check_stream(ledger, stream)


def demo(
    ctx: typer.Context,
    db: Annotated[str | None, typer.Option(
        "--db", metavar="URL",
        help="Where to load the examples (default: a temporary SQLite file).")] = None,
    examples: Annotated[Path | None, typer.Option(
        "--examples", metavar="DIR", file_okay=False,
        help="Folder of example *.jsonl files (default: the bundled examples).")] = None,
) -> None:
    """Load the example sessions into embedded SQLite; print their events and state."""
    from ctxledger._demo import run_demo
    from ctxledger.io._examples import EXAMPLES_DIR

    # ``$CTXLEDGER_DB`` is deliberately ignored: the demo must not write into a real ledger
    # unless asked to with --db.
    run_demo(stdout(), db_url=db or db_of(ctx), examples_dir=examples or EXAMPLES_DIR)


COMMANDS: dict[str, Callable[..., None]] = {"import": import_, "export": export, "demo": demo}
"""This group's commands by name, in ``--help`` order."""
