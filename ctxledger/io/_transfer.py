"""Moving a log between databases: ``export`` writes multi-stream JSONL, ``import`` loads it.

A line is ``{"stream", "type", "data"[, "id", "metadata", "at"]}``: the format of the
files in ``examples/``, read by the demo's own reader (``ctxledger.io._examples.parse_log_line``).
``export`` writes every field, so that ``export | import --trust-timestamps`` into an empty
database reproduces every event's id, metadata, recorded time and stream version, and so
every hash, on SQLite and PostgreSQL alike.

**Import is all or nothing.** Every line is decoded and validated (the store's own
validation) before the database is touched; then every event is appended inside **one
transaction**, so a rule of a stream's history or an id reused with other content found
there rolls back the whole import. Events whose id is already stored are skipped (the
store checks their content is the same), so importing a file twice writes nothing the
second time.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import groupby
from pathlib import Path
from typing import Any

from ctxledger._ledger import Ledger
from ctxledger._setting_checks import check_event
from ctxledger.io._examples import ExampleError, LogLine, ScriptedClock, parse_log_line
from ctxledger.io._examples import event_name as line_event
from ctxledger.io._input import InputLine, decoded_lines, validate_lines
from ctxledger.projections.runner import Progress
from ctxledger.store.clock import format_utc
from ctxledger.store.errors import BatchEventError, EventValidationError, LedgerError
from ctxledger.store.read import stored_event_ids
from ctxledger.store.records import RecordedEvent
from ctxledger.store.strict import DEFAULT_MAX_EVENT_BYTES, check_time

EXPORT_PAGE = 1000
"""Events read per query when exporting or listing the whole log (flat memory)."""

class TransferError(LedgerError):
    """An import line is unusable or rejected; names the line, and nothing was written."""


@dataclass(frozen=True, slots=True)
class ImportReport:
    """What an import did."""

    events: int
    """Events in the input."""
    written: int
    """Events appended."""
    already_stored: int
    """Events skipped because their id was already stored with the same content."""
    streams: int

    def record(self) -> dict[str, int]:
        """JSON-ready figures."""
        return {"events": self.events, "written": self.written,
                "already_stored": self.already_stored, "streams": self.streams}


def iter_events(ledger: Ledger, stream: str | None = None, *, after: int = 0,
                limit: int | None = None, until: int | datetime | None = None
                ) -> Iterator[RecordedEvent]:
    """Events in position order (one stream, or the whole log), read a page at a time."""
    for page in iter_event_pages(ledger, stream, after=after, limit=limit, until=until):
        yield from page


def iter_event_pages(ledger: Ledger, stream: str | None = None, *, after: int = 0,
                     limit: int | None = None, until: int | datetime | None = None
                     ) -> Iterator[list[RecordedEvent]]:
    """Events in position order in non-empty pages of at most ``EXPORT_PAGE``: a caller
    that writes each page before asking for the next runs in bounded memory."""
    if stream is not None:
        yield from _stream_pages(ledger, stream, after, limit, until)
        return
    remaining = limit
    cursor = after
    while remaining is None or remaining > 0:
        size = EXPORT_PAGE if remaining is None else min(EXPORT_PAGE, remaining)
        page = ledger.events(after=cursor, limit=size, until=until)
        if page:
            yield page
        if len(page) < size:
            return
        cursor = page[-1].position
        if remaining is not None:
            remaining -= len(page)


def _stream_pages(ledger: Ledger, stream: str, after: int, limit: int | None,
                  until: int | datetime | None) -> Iterator[list[RecordedEvent]]:
    """One stream's pages, read by version range (an indexed look-up each)."""
    # The same prefix of the log as the whole-log read, even if the clock stepped back.
    bound = ledger.log.position_at(check_time(until, "until")) if isinstance(
        until, datetime) else until
    remaining = limit
    version = 1
    while remaining is None or remaining > 0:
        page = ledger.log.read_stream(stream, version, version + EXPORT_PAGE - 1)
        kept = [e for e in page if e.position > after and (bound is None or e.position <= bound)]
        if remaining is not None:
            kept = kept[:remaining]
            remaining -= len(kept)
        if kept:
            yield kept
        if len(page) < EXPORT_PAGE or (bound is not None and page[-1].position > bound):
            return
        version += EXPORT_PAGE


def export_record(event: RecordedEvent) -> dict[str, Any]:
    """One export line: what ``import`` needs to write the same event again."""
    return {"stream": event.stream_id, "type": event.type, "data": event.data,
            "id": event.event_id, "metadata": event.metadata,
            "at": format_utc(event.recorded_at)}


def export_records(ledger: Ledger, stream: str | None = None, *,
                   until: int | datetime | None = None) -> Iterator[dict[str, Any]]:
    """The log (or one stream), up to ``until``, as export lines in position order."""
    for event in iter_events(ledger, stream, until=until):
        yield export_record(event)


def read_import(text_lines: Sequence[bytes], source: str, *, trust_timestamps: bool,
                max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
                card_files: Path | None = None) -> list[LogLine]:
    """Decode and validate every line (``source`` names the input in default ids; a
    ``card_file`` is read from ``card_files``, the folder of the file imported).

    Raises ``TransferError`` naming the first bad line (``line N: ...``).
    """
    lines: list[LogLine] = []
    for number, text in decoded_lines(text_lines):
        where = f"line {number}"
        try:
            line = parse_log_line(source, number, text, where=where, card_files=card_files)
        except ExampleError as exc:
            raise TransferError(str(exc)) from None
        if trust_timestamps:
            if line.at is None:
                raise TransferError(f"{where}: 'at' is required with --trust-timestamps")
            try:  # the clock's range, checked here so a bad time creates no database
                check_time(line.at, "'at'")
            except EventValidationError as exc:
                named = line_event(line.event["type"], line.stream)
                raise TransferError(f"{where}: {exc} ({named})") from None
        # The store's own validation, so the verdict is the one append would give.
        validate_lines(line.stream, [InputLine(number, line.event)], max_event_bytes,
                       check_event)
        lines.append(line)
    return lines


def import_lines(ledger: Ledger, lines: Sequence[LogLine], *,
                 clock: ScriptedClock | None = None,
                 progress: Progress | None = None) -> ImportReport:
    """Append ``lines`` in order, in one transaction, skipping ids already stored.

    With ``clock`` (the ledger's clock, with ``--trust-timestamps``) each event is
    recorded at its line's ``at``; otherwise at the ledger clock's time.
    """
    with ledger.log.transaction() as conn:
        stored = stored_event_ids(conn, (line.event["id"] for line in lines))
        # Consecutive lines of one stream (and one time, and all stored or all new) are
        # one append: the store takes a batch per stream, stamped with one clock reading.
        runs = [list(run) for _, run in groupby(
            lines, key=lambda x: (x.stream, x.at if clock else None, x.event["id"] in stored))]
        done = written = 0
        for run in runs:
            if clock is not None and run[0].at is not None:
                clock.set(run[0].at)
            try:
                result = ledger.log.append_in(conn, run[0].stream, [x.event for x in run])
            except BatchEventError as exc:
                raise TransferError(f"line {run[exc.index].line}: {exc.reason}") from None
            except LedgerError as exc:
                raise TransferError(f"line {run[0].line}: {exc}") from None
            if not result.duplicate:
                written += len(run)
            done += len(run)
            if progress is not None:
                progress(done, len(lines))
    return ImportReport(events=len(lines), written=written, already_stored=len(lines) - written,
                        streams=len({line.stream for line in lines}))
