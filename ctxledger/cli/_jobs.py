"""The usage jobs and their reports: ``rollup``, ``scheduler``, ``usage``, ``brief-stats``."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Annotated

import typer

from ctxledger._config import (
    DEFAULT_RETENTION_DAYS,
    DEFAULT_USAGE_DAYS,
    MAX_USAGE_DAYS,
    resolve_db_url,
)
from ctxledger._open import database_errors, open_existing, open_ledger
from ctxledger.cli._console import stdout
from ctxledger.cli._options import (
    FormatOption,
    JsonOrText,
    db_of,
    parse_hhmm,
    parse_optional_time,
)


def rollup(
    ctx: typer.Context,
    now: Annotated[str | None, typer.Option(
        "--now", metavar="ISO",
        help="Roll up the complete UTC days before this time (default: now). It may not"
             " be later than the ledger's clock, nor before the log's first event.")] = None,
    retention_days: Annotated[int, typer.Option(
        "--retention-days", min=1, metavar="N",
        help="Keep raw tool-usage rows of the last N rolled days (at least the largest"
             " usage window + 1).")] = DEFAULT_RETENTION_DAYS,
    format: FormatOption = JsonOrText.json,
) -> None:
    """Roll up every complete UTC day not rolled up yet, oldest first.

    Writes each day's usage rows and one rollup.completed event on the stream 'system'
    in one transaction (one event for a whole stretch of days with nothing to roll up),
    rolls up again the days that received events since, then prunes old raw tool-usage
    rows. Running it again writes nothing.
    """
    from ctxledger.jobs._rollup import RollupPolicy
    from ctxledger.render._usage import rollup_view

    when = parse_optional_time(now, "--now")
    with open_ledger(db_of(ctx)) as ledger:
        report = ledger.rollup(when, policy=RollupPolicy(retention_days=retention_days))
    if format is JsonOrText.json:
        typer.echo(report.model_dump_json())
    else:
        stdout().print(rollup_view(report))


def scheduler(
    ctx: typer.Context,
    at: Annotated[str, typer.Option(
        "--at", metavar="HH:MM", envvar="CTXLEDGER_ROLLUP_AT",
        help="Time of day (UTC) of the nightly rollup.")] = "03:00",
    retention_days: Annotated[int, typer.Option(
        "--retention-days", min=1, metavar="N",
        help="Passed to the rollup job (see 'rollup').")] = DEFAULT_RETENTION_DAYS,
) -> None:
    """Run the nightly rollup on APScheduler in the foreground until SIGINT or SIGTERM.

    The job is stored in the ledger's database; a start after missed nights runs it
    once and it catches up every missing day. Logs go to stderr.
    """
    from ctxledger.jobs._scheduler import SchedulerSettings, run_scheduler

    hour, minute = parse_hhmm(at, "--at")
    settings = SchedulerSettings(hour=hour, minute=minute, retention_days=retention_days)
    url = resolve_db_url(db_of(ctx))
    with open_ledger(url):  # creates or upgrades the schema, job table included
        pass
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)  # each run opens the ledger
    with database_errors(url):
        run_scheduler(url, settings)


def usage(
    ctx: typer.Context,
    scope: Annotated[str, typer.Option("--scope", metavar="S", help="The scope to report.")],
    days: Annotated[int, typer.Option(
        "--days", min=1, max=MAX_USAGE_DAYS, metavar="N",
        help="How many UTC days, ending today.")] = DEFAULT_USAGE_DAYS,
    now: Annotated[str | None, typer.Option(
        "--now", metavar="ISO", help="The end of the report (default: now).")] = None,
    format: FormatOption = JsonOrText.json,
) -> None:
    """Daily message, tool and token figures of a scope: rolled-up days plus today's raw
    rows. The text format adds a sparkline per tool and per MCP server."""
    from ctxledger.render._usage import usage_view

    when = parse_optional_time(now, "--now")
    with open_existing(db_of(ctx)) as ledger:
        report = ledger.usage(scope, days=days, now=when)
    if format is JsonOrText.json:
        typer.echo(report.model_dump_json(indent=2))
    else:
        stdout().print(usage_view(report))


def report_usage(
    ctx: typer.Context,
    session: Annotated[str, typer.Argument(help="The session the call belongs to.")],
    model: Annotated[str, typer.Option("--model", metavar="M",
                                       help="The model the provider billed.")],
    input_tokens: Annotated[int, typer.Option(
        "--input", min=0, metavar="N",
        help="Input (prompt) tokens billed, cached ones included.")],
    output_tokens: Annotated[int, typer.Option(
        "--output", min=0, metavar="N", help="Output (completion) tokens billed.")],
    cached_tokens: Annotated[int, typer.Option(
        "--cached", min=0, metavar="N",
        help="Of the input tokens, those read from the provider's cache.")] = 0,
    cost: Annotated[float | None, typer.Option(
        "--cost", min=0, metavar="X", help="The call's price, when known.")] = None,
    digest: Annotated[str | None, typer.Option(
        "--digest", metavar="SHA256",
        help="The digest of the recorded assembly the call sent.")] = None,
    position: Annotated[int | None, typer.Option(
        "--position", min=0, metavar="N",
        help="Or the position of the recorded assembly the call sent.")] = None,
    event_id: Annotated[str | None, typer.Option(
        "--id", metavar="ID", help="Event id: reporting the same call again is a no-op.")
    ] = None,
) -> None:
    """Record what the provider billed for one call (a usage.reported event), against the
    recorded assembly it sent (--digest or --position) or the session alone; prints the
    position written."""
    from ctxledger import render
    from ctxledger.store.errors import InvalidArgument

    if digest is not None and position is not None:
        raise InvalidArgument("give --digest or --position, not both")
    with open_ledger(db_of(ctx)) as ledger:
        result = ledger.report_usage(
            session, model=model, input_tokens=input_tokens, output_tokens=output_tokens,
            cached_tokens=cached_tokens, cost=cost,
            assembly=digest if digest is not None else position, event_id=event_id)
    typer.echo(render.dumps(render.append_record(result)))


def brief_stats(
    ctx: typer.Context,
    scope: Annotated[str, typer.Option("--scope", metavar="S", help="The scope.")],
    format: FormatOption = JsonOrText.json,
) -> None:
    """Print the nearest-rank P95 of brief tokens recorded (context.assembled) in a scope."""
    from ctxledger import render
    from ctxledger.jobs._brief_stats import brief_stats as compute

    with open_existing(db_of(ctx)) as ledger:
        stats = compute(ledger, scope)
    if format is JsonOrText.json:
        typer.echo(render.dumps(stats.record()))
    else:
        stdout().print(render.info_table(list(stats.record().items()),
                                          title=f"brief stats {scope}"))


COMMANDS: dict[str, Callable[..., None]] = {
    "rollup": rollup, "scheduler": scheduler, "usage": usage, "report-usage": report_usage,
    "brief-stats": brief_stats}
"""This group's commands by name, in ``--help`` order."""
