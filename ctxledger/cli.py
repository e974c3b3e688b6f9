"""The ``ctxledger`` command line: JSON/JSONL for scripts, ``--format text`` for people.

Every command is a thin shell over ``Ledger``: parse arguments, call the ledger, print.
Exit codes: 0 success; 1 a domain error (one ``error: ...`` line on stderr, nothing
written); 2 a usage error.

Start-up time matters (``ctxledger --version`` in well under 150 ms): this module imports
only Typer at the top. rich, SQLAlchemy, pydantic, tiktoken and the ledger are imported
inside the commands that use them.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup

import ctxledger
from ctxledger import cli_seal
from ctxledger.cli_errors import (
    database_errors,
    fail,
    open_existing,
    open_ledger,
    reports_errors,
    safe_url,
)
from ctxledger.config import (
    DEFAULT_DB_URL,
    DEFAULT_RETENTION_DAYS,
    DEFAULT_USAGE_DAYS,
    ENV_VAR,
    MAX_USAGE_DAYS,
    resolve_db_url,
)

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID

    from ctxledger.ledger import Ledger
    from ctxledger.store.clock import Clock


class JsonOrText(StrEnum):
    """Output format of commands that print one document."""

    json = "json"
    text = "text"


class JsonlOrText(StrEnum):
    """Output format of commands that print a stream of records."""

    jsonl = "jsonl"
    text = "text"


@dataclass(frozen=True, slots=True)
class Options:
    """Global options, shared with every command through the click context."""

    db: str | None


DB_OPTION = "--db"


def hoist_db(args: list[str], group: TyperGroup) -> list[str]:
    """``args`` with every ``--db URL`` given after the command moved before it.

    ``--db`` is a global option, but people write it where they think of it
    (``ctxledger state s1 --db URL``). A command with its own ``--db`` (``demo``) keeps
    it; ``--`` ends the search; a ``--db`` with no value is left for click to report.
    """
    index = 0
    while index < len(args):  # find the command name, skipping the global options
        token = args[index]
        if token == "--":
            return args
        if token == DB_OPTION:
            index += 2
            continue
        if not token.startswith("-"):
            break
        index += 1
    else:
        return args
    command = group.commands.get(args[index])
    if command is None or any(DB_OPTION in p.opts for p in command.params):
        return args
    front, rest = args[:index], []
    tail = args[index + 1:]
    position = 0
    while position < len(tail):
        token = tail[position]
        if token == "--":
            rest.extend(tail[position:])
            break
        if token == DB_OPTION and position + 1 < len(tail):
            front += [token, tail[position + 1]]
            position += 2
            continue
        if token.startswith(DB_OPTION + "="):
            front.append(token)
        else:
            rest.append(token)
        position += 1
    return [*front, args[index], *rest]


class CtxledgerGroup(TyperGroup):
    """The root command: accepts ``--db`` after the command name as well as before it."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        """Hoist a trailing ``--db`` before parsing (see ``hoist_db``)."""
        hoisted = hoist_db(list(args), self)
        if hoisted and hoisted[-1] == DB_OPTION and "--" not in hoisted[:-1]:
            # Left after the command without a value, click would call it an unknown option
            # of that command; say what is wrong instead.
            raise typer.BadParameter("needs a value: --db URL", ctx=ctx,
                                     param_hint=f"'{DB_OPTION}'")
        return super().parse_args(ctx, hoisted)


app = typer.Typer(
    name="ctxledger",
    cls=CtxledgerGroup,
    help="Event-sourced session store for LLM applications.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

FormatOption = Annotated[JsonOrText, typer.Option("--format", help="json (default) or text.")]


def _version(value: bool) -> None:
    if value:
        typer.echo(f"ctxledger {ctxledger.__version__}")
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    db: Annotated[str | None, typer.Option(
        "--db", metavar="URL",
        help=f"Database URL (before or after the command). Default: ${ENV_VAR}, else"
             f" {DEFAULT_DB_URL}. PostgreSQL (the postgres extra):"
             " postgresql+psycopg://user@host/db.")] = None,
    version: Annotated[bool, typer.Option(
        "--version", callback=_version, is_eager=True,
        help="Print the version and exit.")] = False,
) -> None:
    """Event-sourced session store for LLM applications."""
    if db is not None and not db.strip():
        raise typer.BadParameter("must not be empty", param_hint="'--db'")
    ctx.obj = Options(db=db)


def _db(ctx: typer.Context) -> str | None:
    options = ctx.find_object(Options)
    return options.db if options is not None else None


PIPE_WIDTH = 120
"""Width of text output written to a file or pipe when ``COLUMNS`` does not say."""


def _stdout() -> Console:
    """A console on the current ``sys.stdout`` (created per call: tests swap the stream)."""
    from rich.console import Console

    console = Console(highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        # Rich assumes 80 columns off a terminal; tables of events read better wider.
        console = Console(highlight=False, width=PIPE_WIDTH)
    return console


class ProgressBar:
    """A rich progress bar on stderr, fed ``(done, total)`` callbacks.

    It appears on the first callback with work to do, so opening a ledger that has
    nothing to catch up prints nothing.
    """

    def __init__(self, description: str) -> None:
        self.description = description
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def __call__(self, done: int, total: int) -> None:
        if self._progress is None:
            if total == 0:
                return  # nothing to do: no bar at all
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self._progress = Progress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("events"), TimeElapsedColumn(), console=Console(stderr=True))
            self._progress.start()
            self._task = self._progress.add_task(self.description, total=total)
        assert self._task is not None
        self._progress.update(self._task, completed=done, total=total)

    def close(self, *, keep: bool = True) -> None:
        """Stop drawing, leaving the final bar on screen unless ``keep`` is false."""
        if self._progress is not None:
            if not keep:
                self._progress.live.transient = True  # erase the bar on a terminal
                self._progress.console.quiet = True  # and print nothing elsewhere
            self._progress.stop()
            self._progress = None


@contextmanager
def _progress(description: str) -> Iterator[ProgressBar]:
    bar = ProgressBar(description)
    try:
        yield bar
    except BaseException:
        # A failure is reported on one line; a half-filled bar above it would only confuse.
        bar.close(keep=False)
        raise
    finally:
        bar.close()


# -- init -------------------------------------------------------------------------------------


@app.command()
@reports_errors
def init(ctx: typer.Context, format: FormatOption = JsonOrText.json) -> None:
    """Create the database or upgrade its schema; print the URL and the schema revision."""
    from ctxledger import migrate, render

    url = resolve_db_url(_db(ctx))
    before = _revision(url)
    with _progress("rebuilding projections") as progress, \
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
    console = _stdout()
    console.print(render.info_table([("database", record["url"]),
                                     ("schema revision", f"{after} ({change})"),
                                     ("head position", head)]))
    console.print(render.status_table(statuses))


def _revision(url: str) -> str | None:
    """The schema revision a database is at before opening it (None if it has none)."""
    from ctxledger import migrate
    from ctxledger.store.engine import create_engine

    with database_errors(url):
        engine = create_engine(url)
        try:
            return migrate.current_revision(engine)
        finally:
            engine.dispose()


# -- append -----------------------------------------------------------------------------------


@app.command()
@reports_errors
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
    from ctxledger.cli_input import InputError, parse_jsonl, validate_lines
    from ctxledger.store.errors import BatchEventError

    if not stream.strip():
        raise typer.BadParameter("must not be empty", param_hint="STREAM")
    lines = parse_jsonl(_read_input(file).splitlines())
    if not lines:
        raise fail("no events in the input (every line is blank)")
    # Every line is checked before the database is opened, so bad input never creates
    # one; only the rules of the stream's history need it (below).
    from ctxledger.setting_checks import check_event
    from ctxledger.store.strict import DEFAULT_MAX_EVENT_BYTES

    validate_lines(stream, lines, DEFAULT_MAX_EVENT_BYTES, check_event)
    with open_ledger(_db(ctx)) as ledger:
        try:
            result = ledger.append(stream, [line.event for line in lines],
                                   expected_version=expected_version)
        except BatchEventError as exc:
            # A rule of the stream's history (every line passed validation above). The
            # append is atomic, so nothing was written; the store names the event by its
            # index in the batch, the input line is named instead.
            raise InputError(f"line {lines[exc.index].number}: {exc.reason}") from None
    typer.echo(render.dumps(render.append_record(result)))


def _read_input(file: str) -> bytes:
    if file == "-":
        return typer.get_binary_stream("stdin").read()
    try:
        return Path(file).read_bytes()
    except OSError as exc:
        raise fail(f"cannot read {file}: {exc.strerror or exc}") from None


# -- events -----------------------------------------------------------------------------------


@app.command()
@reports_errors
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
    from ctxledger.store.printable import escape_unprintable
    from ctxledger.transfer import iter_event_pages

    with open_existing(_db(ctx)) as ledger:
        pages = iter_event_pages(ledger, stream, after=after, limit=limit)
        printed = False
        if format is JsonlOrText.jsonl:
            for page in pages:
                typer.echo("\n".join(render.dumps(render.event_record(e)) for e in page))
                printed = True
            if not printed:
                _check_stream(ledger, stream)
            return
        console = _stdout()
        head = ledger.head()
        layout = render.EventsLayout(
            position=len(str(head)), stream=render.STREAM_CAP if stream is None else len(
                escape_unprintable(stream)),
            version=len(str(head if stream is None else ledger.log.stream_version(stream))))
        for page in pages:
            console.print(render.events_table(page, layout=layout, header=not printed))
            printed = True
        if not printed:
            _check_stream(ledger, stream)
            console.print(render.events_table([], layout=layout))


def as_position(text: str) -> int | None:
    """``text`` as a log position when it is ASCII digits, else None (a time, or bad).
    ASCII only: ``int`` would also read other scripts' digits ("１") as a position."""
    return int(text) if text.isascii() and text.isdigit() else None


def _check_stream(ledger: Ledger, stream: str | None) -> None:
    """Fail when ``stream`` was never written: a typo must not read as an empty stream.

    Called only when nothing was found, so a listing pays nothing for it."""
    if stream is not None and ledger.log.stream_version(stream) == 0:
        raise fail(f"unknown stream {stream!r}: it has no events")


# -- state ------------------------------------------------------------------------------------


@app.command()
@reports_errors
def state(
    ctx: typer.Context,
    session: Annotated[str, typer.Argument(help="The session stream.", metavar="SESSION")],
    now: Annotated[str | None, typer.Option(
        "--now", metavar="ISO",
        help="The time the state is taken at, e.g. 2025-05-11T10:00:00Z (default: now)."
             " It anchors time windows such as the 7-day tool usage.")] = None,
    agent: Annotated[str | None, typer.Option(
        "--agent", metavar="A",
        help="Scope the state to agent type A's manifest (defaults plus the setting"
             " agent_manifests); an agent without one gets the full state plus _agent and a"
             " _warning.")] = None,
    format: FormatOption = JsonOrText.json,
) -> None:
    """Print the session's projection state (counts, chapter, settings, tools, documents
    in compact form)."""
    from ctxledger import render

    if agent is not None and not agent.strip():
        raise typer.BadParameter("must not be empty", param_hint="'--agent'")
    options: dict[str, Any] = {"load_vocabulary": False}  # state counts no tokens
    if now is not None:
        options["clock"] = _fixed_clock(_parse_now(now))
    with open_existing(_db(ctx), **options) as ledger:
        found = ledger.state(session, agent=agent)
    if format is JsonOrText.json:
        typer.echo(render.dumps(found, indent=2))
    else:
        _stdout().print(render.state_table(found, title=f"state {session}"))


def _parse_now(value: str, hint: str = "'--now'") -> datetime:
    """``--now``: ISO-8601 with an explicit zone (a usage error otherwise)."""
    from ctxledger.store.errors import EventValidationError
    from ctxledger.store.strict import check_time

    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise typer.BadParameter(f"not an ISO-8601 time: {value!r}",
                                 param_hint=hint) from None
    if parsed.tzinfo is None:
        raise typer.BadParameter("needs a zone, such as Z or +00:00", param_hint=hint)
    try:
        return check_time(parsed, "time")
    except EventValidationError as exc:
        raise typer.BadParameter(str(exc), param_hint=hint) from None


def _fixed_clock(when: datetime) -> Clock:
    return lambda: when


# -- assemble ------------------------------------------------------------------------------


@app.command()
@reports_errors
def assemble(
    ctx: typer.Context,
    session: Annotated[str, typer.Argument(help="The session stream.", metavar="SESSION")],
    profile: Annotated[str | None, typer.Option(
        "--profile", metavar="NAME",
        help="Assembler profile (card, session, brief...). Default: the session's"
             " 'profile' setting; one of the two is required.")] = None,
    now: Annotated[str | None, typer.Option(
        "--now", metavar="ISO",
        help="The assembly time, e.g. 2025-05-11T10:00:00Z (default: now).")] = None,
    policy: Annotated[Path | None, typer.Option(
        "--policy", metavar="FILE", dir_okay=False,
        help="A whole policy as JSON, instead of the one the session's settings give.")] = None,
    agent: Annotated[str | None, typer.Option(
        "--agent", metavar="A",
        help="Scope the state section to agent type A's manifest (only for profiles that"
             " show state).")] = None,
    format: FormatOption = JsonOrText.json,
    text: Annotated[bool, typer.Option(
        "--text/--no-text",
        help="With --format text: show the context text after the breakdown.")] = True,
) -> None:
    """Build a session's context with a profile; JSON prints the whole Assembly.

    The profile is --profile, else the session's 'profile' setting; --format text says
    which, then shows the breakdown and (unless --no-text) the context text."""
    from ctxledger.assembler.profiles import profile_names, profiles_showing_state
    from ctxledger.cli_input import read_policy
    from ctxledger.render_assembly import assembly_view

    if profile is not None and profile not in profile_names():
        raise typer.BadParameter(f"{profile!r} is not one of {', '.join(profile_names())}",
                                 param_hint="'--profile'")
    when = None if now is None else _parse_now(now)
    policy_text = read_policy(policy)
    with open_existing(_db(ctx)) as ledger:
        if not ledger.view(session).exists:
            raise fail(f"unknown session {session!r}")
        profile, source = session_profile(ledger, session, profile)
        if agent is not None:
            # Agent scoping filters a state section; a profile without one has nothing to
            # scope, and silently ignoring --agent would suggest that it did something.
            showing = profiles_showing_state()
            which = (f"only {', '.join(showing)} shows state" if showing
                     else "no registered profile shows state")
            raise typer.BadParameter(
                f"profile {profile!r} (from {source}) shows no state for an agent manifest"
                f" to scope ({which}); use 'ctxledger state SESSION --agent {agent}'",
                param_hint="'--agent'")
        result = ledger.assemble(session, profile, now=when, policy=policy_text)
    if format is JsonOrText.json:
        typer.echo(result.model_dump_json(indent=2))
    else:
        console = _stdout()
        console.print(f"profile {profile} (from {source})", markup=False)
        console.print(assembly_view(result, show_text=text))


def session_profile(ledger: Ledger, session: str, given: str | None, *,
                    fallback: str | None = None) -> tuple[str, str]:
    """The profile a command uses, and where it comes from: ``--profile``, else the
    session's ``profile`` setting (at the head), else ``fallback``; with no fallback a
    missing setting is a usage error. A setting that names no profile is an error."""
    from ctxledger.assembler.profiles import profile_names
    from ctxledger.assembler.setting_check import PROFILE_SETTING

    if given is not None:
        return given, "--profile"
    value = ledger.view(session).settings.get(PROFILE_SETTING)
    if value is None and fallback is not None:
        return fallback, "the default"
    if value is None:
        raise typer.BadParameter(
            f"is required: the session has no {PROFILE_SETTING!r} setting",
            param_hint="'--profile'")
    known = profile_names()
    if not isinstance(value, str) or value not in known:
        raise fail(f"the session's {PROFILE_SETTING!r} setting is {value!r},"
                   f" not one of {', '.join(known)}")
    return value, "the session's profile setting"


# -- schema ---------------------------------------------------------------------------------


class SchemaKind(StrEnum):
    """What ``ctxledger schema`` exports."""

    assembly = "assembly"
    events = "events"


@app.command()
@reports_errors
def schema(
    kind: Annotated[SchemaKind, typer.Argument(
        help="assembly (default): the output of 'assemble', its report one of the"
             " registered profiles' reports; events: the input of 'append'.",
        metavar="[assembly|events]")] = SchemaKind.assembly,
) -> None:
    """Print a JSON Schema: of an Assembly, or of the events the log accepts."""
    from ctxledger import render

    if kind is SchemaKind.assembly:
        from ctxledger.assembler.schema import assembly_schema

        found = assembly_schema()
    else:
        from ctxledger.store.json_schema import events_schema

        found = events_schema()
    typer.echo(render.dumps(found, indent=2))


# -- maintenance ------------------------------------------------------------------------------


@app.command()
@reports_errors
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
    with _progress("catching up") as catching_up, \
            open_existing(_db(ctx), progress=catching_up) as ledger:
        started = time.perf_counter()
        with _progress(f"rebuilding {projection or 'all'}") as rebuilding:
            rebuilt = ledger.rebuild(projection, progress=rebuilding)
        seconds = time.perf_counter() - started
        statuses = ledger.projection_status()
    head = statuses[0].head if statuses else 0
    if format is JsonOrText.json:
        typer.echo(render.dumps({"rebuilt": rebuilt, "head": head,
                                 "seconds": round(seconds, 3)}))
    else:
        console = _stdout()
        console.print(f"rebuilt {len(rebuilt)} projection(s) from {head} events"
                      f" in {seconds:.2f}s", markup=False)
        console.print(render.status_table([s for s in statuses if s.name in rebuilt]))


@app.command()
@reports_errors
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

    with open_existing(_db(ctx)) as ledger:
        report = ledger.verify(anchor=anchor, deep=deep)
    if format is JsonOrText.json:
        typer.echo(render.dumps(render.verify_record(report)))
    else:
        _stdout().print(render.verify_view(report))
    if not report.ok:
        raise fail(f"verify found {len(report.problems)} problem(s)")


# -- usage rollups ----------------------------------------------------------------------------


@app.command()
@reports_errors
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
    from ctxledger.render_usage import rollup_view
    from ctxledger.rollup import RollupPolicy

    when = None if now is None else _parse_now(now)
    with open_ledger(_db(ctx)) as ledger:
        report = ledger.rollup(when, policy=RollupPolicy(retention_days=retention_days))
    if format is JsonOrText.json:
        typer.echo(report.model_dump_json())
    else:
        _stdout().print(rollup_view(report))


@app.command()
@reports_errors
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
    from ctxledger.scheduler import SchedulerSettings, run_scheduler

    hour, minute = _parse_hhmm(at)
    settings = SchedulerSettings(hour=hour, minute=minute, retention_days=retention_days)
    url = resolve_db_url(_db(ctx))
    with open_ledger(url):  # creates or upgrades the schema, job table included
        pass
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)  # each run opens the ledger
    with database_errors(url):
        run_scheduler(url, settings)


def _parse_hhmm(value: str) -> tuple[int, int]:
    """``--at``: ``HH:MM`` in 24-hour time (a usage error otherwise)."""
    hour, sep, minute = value.partition(":")
    if (sep and hour.isdigit() and minute.isdigit() and len(minute) == 2
            and int(hour) < 24 and int(minute) < 60):
        return int(hour), int(minute)
    raise typer.BadParameter(f"expected HH:MM (UTC), got {value!r}", param_hint="'--at'")


@app.command()
@reports_errors
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
    from ctxledger.render_usage import usage_view

    when = None if now is None else _parse_now(now)
    with open_existing(_db(ctx)) as ledger:
        report = ledger.usage(scope, days=days, now=when)
    if format is JsonOrText.json:
        typer.echo(report.model_dump_json(indent=2))
    else:
        _stdout().print(usage_view(report))
# -- brief-stats ------------------------------------------------------------------------------


@app.command("brief-stats")
@reports_errors
def brief_stats(
    ctx: typer.Context,
    scope: Annotated[str, typer.Option("--scope", metavar="S", help="The scope.")],
    format: FormatOption = JsonOrText.json,
) -> None:
    """Print the nearest-rank P95 of brief tokens recorded (context.assembled) in a scope."""
    from ctxledger import render
    from ctxledger.brief_stats import brief_stats as compute

    with open_existing(_db(ctx)) as ledger:
        stats = compute(ledger, scope)
    if format is JsonOrText.json:
        typer.echo(render.dumps(stats.record()))
    else:
        _stdout().print(render.info_table(list(stats.record().items()),
                                          title=f"brief stats {scope}"))




# -- import and export ------------------------------------------------------------------------


@app.command("import")
@reports_errors
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
    from ctxledger.demo import ScriptedClock
    from ctxledger.transfer import import_lines, read_import

    raw = _read_input(file)
    source = "stdin" if file == "-" else Path(file).name
    # Everything is decoded and validated before the database is opened (or created).
    lines = read_import(raw.splitlines(), source, trust_timestamps=trust_timestamps)
    if not lines:
        raise fail("no events in the input (every line is blank)")
    # With --trust-timestamps the ledger's clock says each line's 'at' as it is appended.
    clock = ScriptedClock(lines[0].at) if trust_timestamps and lines[0].at else None
    options: dict[str, Any] = {} if clock is None else {"clock": clock}
    with open_ledger(_db(ctx), **options) as ledger:
        with _progress("importing") as progress:
            report = import_lines(ledger, lines, clock=clock, progress=progress)
        head = ledger.head()
    record = {**report.record(), "head": head}
    if format is JsonOrText.json:
        typer.echo(render.dumps(record))
    else:
        _stdout().print(render.info_table(list(record.items()), title=f"import {file}"))


@app.command()
@reports_errors
def export(
    ctx: typer.Context,
    stream: Annotated[str | None, typer.Argument(
        help="Only this stream (default: the whole log).", metavar="[STREAM]")] = None,
    until: Annotated[str | None, typer.Option(
        "--until", metavar="POS|ISO",
        help="Stop at this position, or at the last event recorded at or before this"
             " time.")] = None,
) -> None:
    """Write the log (or one stream) as multi-stream JSONL that 'import' reads back:
    {stream, type, data, id, metadata, at} a line, in position order."""
    from ctxledger import render
    from ctxledger.transfer import export_records

    bound: int | datetime | None = None
    if until is not None:
        position = as_position(until)
        bound = position if position is not None else _parse_now(until, "'--until'")
    with open_existing(_db(ctx)) as ledger:
        exported = 0
        for record in export_records(ledger, stream, until=bound):
            typer.echo(render.dumps(record))
            exported += 1
        if not exported:
            _check_stream(ledger, stream)


# -- demo -------------------------------------------------------------------------------------


@app.command()
@reports_errors
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
    from ctxledger.demo import EXAMPLES_DIR, run_demo

    # ``$CTXLEDGER_DB`` is deliberately ignored: the demo must not write into a real ledger
    # unless asked to with --db.
    run_demo(_stdout(), db_url=db or _db(ctx), examples_dir=examples or EXAMPLES_DIR)


cli_seal.register(app)
# SPEC §4 commands (replay, why, audit, fork) register themselves on ``app``.
from ctxledger import cli_replay as _cli_replay  # noqa: E402,F401


def main() -> None:
    """Console-script entry point (``ctxledger``)."""
    app()


if __name__ == "__main__":
    main()
