"""What the commands share of their arguments: ``--db`` (and where it may be written),
``--format``, the one parser of times and positions, the profile checks, input files.

A bad time or position is a domain error (exit 1, one ``error:`` line) with the same
words on every command; only the CLI framework's own checks exit 2.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer
from typer.core import TyperGroup

from ctxledger.cli._errors import fail

if TYPE_CHECKING:
    from ctxledger._ledger import Ledger


class JsonOrText(StrEnum):
    """Output format of commands that print one document."""

    json = "json"
    text = "text"


class JsonJsonlOrText(StrEnum):
    """Output format of a command that prints one document, or its records one per line
    as they are computed."""

    json = "json"
    jsonl = "jsonl"
    text = "text"


class JsonlOrText(StrEnum):
    """Output format of commands that print a stream of records."""

    jsonl = "jsonl"
    text = "text"


FormatOption = Annotated[JsonOrText, typer.Option("--format", help="json (default) or text.")]
Session = Annotated[str, typer.Argument(help="The session stream.", metavar="SESSION")]


# -- --db ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Options:
    """Global options, shared with every command through the click context."""

    db: str | None


DB_OPTION = "--db"


def db_of(ctx: typer.Context) -> str | None:
    """The global ``--db`` given to this invocation (None: ``$CTXLEDGER_DB`` or default)."""
    options = ctx.find_object(Options)
    return options.db if options is not None else None


def _command_index(args: list[str]) -> int | None:
    """Where the command name is in ``args``, past the global options (None: no command)."""
    index = 0
    while index < len(args):
        token = args[index]
        if token == "--":
            return None
        if token == DB_OPTION:
            index += 2
            continue
        if not token.startswith("-"):
            return index
        index += 1
    return None


def hoist_db(args: list[str], group: TyperGroup) -> list[str]:
    """``args`` with every ``--db URL`` given after the command moved before it.

    ``--db`` is a global option, but people write it where they think of it
    (``ctxledger state s1 --db URL``). A command with its own ``--db`` (``demo``) keeps
    it; ``--`` ends the search; a ``--db`` with no value is left for click to report.
    """
    index = _command_index(args)
    if index is None:
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


# -- times and positions ------------------------------------------------------------------


def parse_time(value: str, option: str) -> datetime:
    """``--now`` and the like: the core's one time parser (``ctxledger._times``); a bad
    time is a one-line error (exit 1) naming the option."""
    from ctxledger._times import parse_time as core_parse_time
    from ctxledger.store.errors import InvalidArgument

    try:
        return core_parse_time(value, option)
    except InvalidArgument as exc:
        raise fail(str(exc)) from None


def parse_optional_time(value: str | None, option: str) -> datetime | None:
    """``parse_time``, with an option not given staying None."""
    return None if value is None else parse_time(value, option)


def parse_until(value: str | None) -> int | datetime | None:
    """``--until``: a log position (ASCII digits) or a time (``ctxledger._times``)."""
    from ctxledger._times import parse_until as core_parse_until
    from ctxledger.store.errors import InvalidArgument

    try:
        return core_parse_until(value, "--until")
    except InvalidArgument as exc:
        raise fail(str(exc)) from None


def parse_hhmm(value: str, option: str) -> tuple[int, int]:
    """A time of day ``HH:MM`` (24-hour, UTC); anything else is a one-line error."""
    hour, sep, minute = value.partition(":")
    if (sep and hour.isascii() and hour.isdigit() and len(hour) <= 2 and minute.isascii()
            and minute.isdigit() and len(minute) == 2 and int(hour) < 24 and int(minute) < 60):
        return int(hour), int(minute)
    raise fail(f"{option} {value!r} is not a time of day: expected HH:MM (UTC)")


# -- profiles -----------------------------------------------------------------------------


def check_profile(profile: str | None) -> None:
    """A ``--profile`` that names no registered profile is a usage error (the core's rule,
    ``choose_profile``, asked before a database is opened)."""
    from ctxledger.assembler.setting_check import choose_profile
    from ctxledger.store.errors import LedgerError

    if profile is not None:
        try:
            choose_profile(profile, {})
        except LedgerError as exc:
            raise typer.BadParameter(str(exc), param_hint="'--profile'") from None


_SOURCES = {"given": "--profile", "setting": "the session's profile setting",
            "default": "the default"}
"""How ``assemble --format text`` names where its profile came from."""


def session_profile(ledger: Ledger, session: str, given: str | None, *,
                    fallback: str | None = None) -> tuple[str, str]:
    """The profile a command uses (``Ledger.profile_of``), and where it comes from in the
    CLI's words; with no fallback a session without a ``profile`` setting needs
    ``--profile`` (a usage error)."""
    from ctxledger.assembler.setting_check import PROFILE_SETTING

    if given is None and fallback is None and \
            PROFILE_SETTING not in ledger.view(session).settings:
        raise typer.BadParameter(
            f"is required: the session has no {PROFILE_SETTING!r} setting",
            param_hint="'--profile'")
    choice = ledger.profile_of(session, given, default=fallback)
    return choice.name, _SOURCES[choice.source]


# -- input and streams --------------------------------------------------------------------


def read_input(file: str) -> bytes:
    """The bytes of a ``FILE|-`` argument ('-' reads stdin), within the input size limit
    (``ctxledger.io._bounded``); unreadable or too large is one line."""
    from ctxledger.io._bounded import STDIN, BoundedInputError, read_bounded

    try:
        if file == STDIN:
            return read_bounded(typer.get_binary_stream("stdin"), "stdin")
        return read_bounded(file, f"cannot read {file}")
    except BoundedInputError as exc:
        raise fail(str(exc).replace(": cannot read: ", ": ", 1)) from None


def check_stream(ledger: Ledger, stream: str | None) -> None:
    """Fail when ``stream`` was never written: a typo must not read as an empty stream.

    Called only when nothing was found, so a listing pays nothing for it."""
    if stream is not None and ledger.log.stream_version(stream) == 0:
        raise fail(f"unknown stream {stream!r}: it has no events")
