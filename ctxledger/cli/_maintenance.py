"""Keeping the derived state honest: ``rebuild`` and ``verify``."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Annotated

import typer

from ctxledger._open import open_existing
from ctxledger.cli._console import progress_bar, stdout
from ctxledger.cli._errors import fail
from ctxledger.cli._options import FormatOption, JsonOrText, db_of


def rebuild(
    ctx: typer.Context,
    projection: Annotated[str | None, typer.Option(
        "--projection", metavar="NAME", help="Only this projection (default: all).")] = None,
    format: FormatOption = JsonOrText.json,
) -> None:
    """Rebuild projections from the log, with a progress bar on stderr."""
    from ctxledger import render
    from ctxledger.projections.registry import builtin_names

    known = builtin_names()
    if projection is not None and projection not in known:
        raise fail(f"unknown projection {projection!r}; known: {', '.join(known)}")
    # A rebuild reads the log: with no database there is nothing to rebuild from.
    with progress_bar("catching up") as catching_up, \
            open_existing(db_of(ctx), progress=catching_up) as ledger:
        started = time.perf_counter()
        with progress_bar(f"rebuilding {projection or 'all'}") as rebuilding:
            rebuilt = ledger.rebuild(projection, progress=rebuilding)
        seconds = time.perf_counter() - started
        statuses = ledger.projection_status()
    head = statuses[0].head if statuses else 0
    if format is JsonOrText.json:
        typer.echo(render.dumps({"rebuilt": rebuilt, "head": head,
                                 "seconds": round(seconds, 3)}))
    else:
        console = stdout()
        console.print(f"rebuilt {len(rebuilt)} projection(s) from {head} events"
                      f" in {seconds:.2f}s", markup=False)
        console.print(render.status_table([s for s in statuses if s.name in rebuilt]))


def verify(
    ctx: typer.Context,
    format: FormatOption = JsonOrText.json,
    anchor: Annotated[str | None, typer.Option(
        "--anchor", metavar="LINE|FILE",
        help="An anchor line (from `ctxledger anchor`) or a file ending with one: also"
             " prove the log still extends it.")] = None,
    deep: Annotated[bool, typer.Option(
        "--deep", help="Also rebuild the projections in a scratch store and compare them"
                       " table by table with the live ones.")] = False,
) -> None:
    """Check every stream's hash chain, every seal and the immutability triggers; with
    --anchor, that the log extends the anchor; with --deep, the projections (exit 1 on a
    problem)."""
    from ctxledger import render

    if anchor is not None and not anchor.strip().startswith("{"):
        anchor = _anchor_line(anchor)
    with open_existing(db_of(ctx)) as ledger:
        report = ledger.verify(anchor=anchor, deep=deep)
    if format is JsonOrText.json:
        typer.echo(render.dumps(render.verify_record(report)))
    else:
        stdout().print(render.verify_view(report))
    if not report.ok:
        raise fail(f"verify found {len(report.problems)} problem(s)")


def _anchor_line(path: str) -> str:
    """The last non-blank line of an anchor file, read within the input size limit
    (``ctxledger.io._bounded``)."""
    from ctxledger.io._bounded import BoundedInputError, read_bounded

    label = f"cannot read anchor file {path!r}"
    try:
        text = read_bounded(path, label).decode("utf-8")
    except BoundedInputError as exc:
        raise fail(str(exc).replace(": cannot read: ", ": ", 1)) from None
    except UnicodeDecodeError:
        raise fail(f"{label}: not UTF-8") from None
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise fail(f"anchor file {path!r} is empty")
    return lines[-1]


COMMANDS: dict[str, Callable[..., None]] = {"rebuild": rebuild, "verify": verify}
"""This group's commands by name, in ``--help`` order."""
