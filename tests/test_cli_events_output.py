"""``events`` output: stream ids a terminal can print, pages written as they are read,
and a PostgreSQL schema that does not exist named in one line."""

from __future__ import annotations

import io
import itertools
import json
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa
from conftest import pg_schema_url, require_postgres
from helpers.assertions import one_error_line
from rich.console import Console
from typer.testing import CliRunner

from ctxledger import EventValidationError, Ledger, SchemaMissing
from ctxledger._config import ENV_VAR
from ctxledger.cli import app
from ctxledger.cli._errors import DEBUG_ENV_VAR
from ctxledger.render._common import events_table
from ctxledger.store.log import EventLog
from ctxledger.store.records import RecordedEvent

MESSAGE = {"type": "message.appended", "data": {"role": "user", "content": "hi"}}


@pytest.fixture
def runner() -> CliRunner:
    """No ``CTXLEDGER_DB`` from the developer's shell."""
    return CliRunner(env={ENV_VAR: None, DEBUG_ENV_VAR: None, "COLUMNS": "140"})


# -- stream ids -------------------------------------------------------------------------------

UNPRINTABLE_IDS = [
    ("a\x1b[2Jb", "a control character (\\x1b)"),
    ("tab\tid", "a control character (\\x09)"),
    ("new\nline", "a control character (\\x0a)"),
    ("del\x7f", "a control character (\\x7f)"),
    ("c1\x9b", "a control character (\\x9b)"),
    ("zero\u200bwidth", "an invisible format character (\\u200b)"),
    ("bidi\u202eflip", "an invisible format character (\\u202e)"),
    ("line\u2028sep", "a line separator (\\u2028)"),
    ("para\u2029sep", "a paragraph separator (\\u2029)"),
]


@pytest.mark.parametrize(("stream", "problem"), UNPRINTABLE_IDS)
def test_a_stream_id_that_cannot_print_is_refused(runner: CliRunner, db_url: str,
                                                   stream: str, problem: str) -> None:
    result = runner.invoke(app, ["append", stream, "--db", db_url],
                           input=json.dumps(MESSAGE) + "\n")
    one_error_line(result, f"stream id contains {problem}")
    with Ledger.open(db_url, load_vocabulary=False) as ledger:
        with pytest.raises(EventValidationError, match="stream id contains"):
            ledger.append(stream, MESSAGE)
        assert ledger.head() == 0


def test_printable_stream_ids_are_still_accepted(db_url: str) -> None:
    with Ledger.open(db_url, load_vocabulary=False) as ledger:
        for stream in (" lead", "ünïcödé", "e\u0301", "🦜", "a/b"):
            ledger.append(stream, MESSAGE)
        assert ledger.head() == 5


def _event(stream: str, content: str) -> RecordedEvent:
    return RecordedEvent(
        position=1, stream_id=stream, stream_version=1, event_id="e1",
        type="message.appended", schema_version=1,
        data={"role": "user", "content": content}, metadata={},
        recorded_at=datetime(2026, 1, 1, tzinfo=UTC), prev_hash="0" * 64, hash="1" * 64)


def test_the_events_table_escapes_what_an_older_log_holds() -> None:
    out = io.StringIO()
    console = Console(file=out, width=140, force_terminal=False)
    console.print(events_table([_event("s\x1b[2J", "red\x1b[31m \u202eflip\x07")]))
    text = out.getvalue()
    assert "s\\x1b[2J" in text and "red\\x1b[31m \\u202eflip\\x07" in text
    assert not any(ch in text for ch in "\x1b\x07\u202e")


# -- bounded reading ------------------------------------------------------------------------------

PAGE = 4


def _record_reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Wrap the log's two readers: each call records (events read, stdout bytes so far)."""
    reads: list[tuple[int, int]] = []

    def written() -> int:
        sys.stdout.flush()
        return len(sys.stdout.buffer.getvalue())  # type: ignore[attr-defined]

    def wrap(name: str) -> None:
        original: Callable[..., list[RecordedEvent]] = getattr(EventLog, name)

        def reader(self: EventLog, *args: Any, **kwargs: Any) -> list[RecordedEvent]:
            before = written()
            found = original(self, *args, **kwargs)
            reads.append((len(found), before))
            return found

        monkeypatch.setattr(EventLog, name, reader)

    wrap("read_all")
    wrap("read_stream")
    return reads


@pytest.mark.parametrize("fmt", ["jsonl", "text"])
@pytest.mark.parametrize("stream", [None, "s1"])
def test_events_writes_each_page_before_reading_the_next(
        runner: CliRunner, db_url: str, monkeypatch: pytest.MonkeyPatch,
        fmt: str, stream: str | None) -> None:
    total = PAGE * 5 + 2
    with Ledger.open(db_url, load_vocabulary=False) as ledger:
        ledger.append("s1", [MESSAGE] * total)
    monkeypatch.setattr("ctxledger.io._transfer.EXPORT_PAGE", PAGE)
    reads = _record_reads(monkeypatch)
    args = ["events", *([stream] if stream else []), "--format", fmt, "--db", db_url]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.stderr
    # Every read is one page at most, and together they cover the log...
    assert reads and max(size for size, _ in reads) <= PAGE
    assert sum(size for size, _ in reads) == total
    # ...and the lines of each page are out before the next page is read.
    out_before = [before for _, before in reads]
    assert out_before[0] == 0 and all(a < b for a, b in itertools.pairwise(out_before))
    body = [line for line in result.stdout.splitlines() if "message.appended" in line]
    assert len(body) == total
    if fmt == "text":
        # The pages read as one table: one header, and every row's columns line up.
        assert result.stdout.count("recorded (UTC)") == 1
        assert len({line.index("message.appended") for line in body}) == 1


# -- a missing PostgreSQL schema ------------------------------------------------------------


def test_a_missing_postgres_schema_is_named_in_one_line(runner: CliRunner) -> None:
    require_postgres()
    url = pg_schema_url("ctxledger_no_such_schema")
    with pytest.raises(SchemaMissing, match=r"schema ctxledger_no_such_schema .*CREATE SCHEMA"):
        Ledger.open(url, load_vocabulary=False)
    for command in (["append", "s1"], ["init"], ["state", "s1"], ["events"]):
        result = runner.invoke(app, [*command, "--db", url], input=json.dumps(MESSAGE) + "\n")
        one_error_line(result, "schema ctxledger_no_such_schema", "CREATE SCHEMA")
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        assert conn.exec_driver_sql(
            "SELECT 1 FROM pg_namespace WHERE nspname = 'ctxledger_no_such_schema'").first() is None
    engine.dispose()
