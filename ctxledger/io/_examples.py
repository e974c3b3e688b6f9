"""The example sessions' format and loader (``examples/*.jsonl``), and its line reader,
which ``ctxledger import`` shares.

Example files hold one event a line::

    {"stream": "chat-1", "at": "2025-03-14T19:02:00Z", "type": "...", "data": {...}}

with optional ``id`` and ``metadata``. An example ``card.set`` may give
``"card_file": "cards/NAME.png"`` (a card file beside the examples, ``.json`` or ``.png``)
instead of ``data``: the card is read from the file, as ``card import`` reads it. The
loader drives the ledger's injectable clock so
each event's ``recorded_at`` is its ``at``: timelines that span days (tool usage windows,
previous sessions) come out as written. Events of all files are appended in ``at`` order
(ties by file name, then line), so positions and recorded times rise together.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxledger.io._bounded import BoundedInputError, loads_bounded, read_bounded
from ctxledger.store.errors import LedgerError

if TYPE_CHECKING:
    from ctxledger._ledger import Ledger


def _examples_dir() -> Path:
    package = Path(__file__).resolve().parent.parent
    # Inside an installed package if the build ships them there, else the source checkout.
    for candidate in (package / "examples", package.parent / "examples"):
        if candidate.is_dir():
            return candidate
    return package.parent / "examples"


EXAMPLES_DIR = _examples_dir()
"""The example sessions: ``ctxledger/examples`` when packaged, else the checkout's."""


EXAMPLE_ID_NAMESPACE = uuid.UUID("5b0e3c1e-7d4f-4c57-9a43-2f6f1d0c8e21")
"""Event ids default to uuid5(namespace, "file:line"), so loading twice is idempotent."""


_LINE_KEYS = frozenset({"stream", "at", "type", "data", "id", "metadata"})
_CARD_FILE = "card_file"


class ExampleError(LedgerError):
    """An example file is malformed or one of its events is rejected; names file and line."""


@dataclass(frozen=True, slots=True)
class ExampleEvent:
    """One line of an example file, ready to append."""

    file: str
    line: int
    stream: str
    at: datetime
    event: dict[str, Any]
    """``{"type", "data", "id"[, "metadata"]}`` as ``Ledger.append`` takes it."""


class ScriptedClock:
    """A clock that says whatever time it was last set to (the current example's ``at``)."""

    def __init__(self, start: datetime) -> None:
        self._now = start

    def set(self, when: datetime) -> None:
        """Move the clock to ``when`` (an aware UTC datetime)."""
        self._now = when

    def __call__(self) -> datetime:
        return self._now


def parse_at(value: object, where: str, event: str = "the event") -> datetime:
    """An ISO-8601 timestamp with an explicit zone, converted to UTC (``event`` names the
    line's event when the conversion overflows)."""
    if not isinstance(value, str):
        raise ExampleError(f"{where}: 'at' must be an ISO-8601 string")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ExampleError(f"{where}: 'at' is not ISO-8601: {value!r}") from None
    if parsed.tzinfo is None:
        raise ExampleError(f"{where}: 'at' needs a zone, e.g. {value}Z")
    try:
        return parsed.astimezone(UTC)
    except OverflowError:  # a time at the calendar's edge, pushed past it by its zone
        from ctxledger.store.strict import STORED_RANGE

        raise ExampleError(f"{where}: 'at' {value!r} of {event} is outside {STORED_RANGE}"
                           ) from None


def event_name(kind: object, stream: object) -> str:
    """The event a line holds, for an error about it: its type and stream."""
    return f"the {str(kind)[:60]} event of stream {str(stream)[:60]!r}"


@dataclass(frozen=True, slots=True)
class LogLine:
    """One line of a multi-stream JSONL log (an example file, or ``ctxledger import``)."""

    file: str
    line: int
    stream: str
    at: datetime | None
    """The line's ``at`` (None when absent)."""
    event: dict[str, Any]
    """``{"type", "data", "id"[, "metadata"]}`` as ``Ledger.append`` takes it."""


def parse_log_line(file: str, number: int, text: str, *, where: str | None = None,
                   card_files: Path | None = None) -> LogLine:
    """Decode one line ``{stream, type, data[, id, metadata, at]}``; the event itself is
    validated by the store. A missing ``id`` becomes uuid5(namespace, "FILE:LINE"), so
    loading the same file twice is idempotent. ``where`` prefixes errors (default
    ``"FILE line N"``). With ``card_files`` (the examples' folder), a ``card.set`` line
    may name a ``card_file`` there instead of giving ``data``."""
    where = where or f"{file} line {number}"
    try:
        raw = loads_bounded(text, where)
    except BoundedInputError as exc:
        raise ExampleError(str(exc)) from None
    except json.JSONDecodeError as exc:
        raise ExampleError(f"{where}: invalid JSON: {exc.msg} (column {exc.colno})") from None
    if not isinstance(raw, dict):
        raise ExampleError(f"{where}: expected a JSON object")
    allowed = _LINE_KEYS if card_files is None else _LINE_KEYS | {_CARD_FILE}
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise ExampleError(f"{where}: unknown key(s): {', '.join(unknown)}")
    stream = raw.get("stream")
    if not isinstance(stream, str) or not stream:
        raise ExampleError(f"{where}: 'stream' must be a non-empty string")
    at = None if raw.get("at") is None else parse_at(raw.get("at"), where,
                                                     event_name(raw.get("type"), stream))
    data = raw.get("data", {})
    if card_files is not None and _CARD_FILE in raw:
        data = _card_file_data(raw, card_files, where)
    event: dict[str, Any] = {
        "type": raw.get("type"),
        "data": data,
        "id": raw.get("id") or str(uuid.uuid5(EXAMPLE_ID_NAMESPACE, f"{file}:{number}")),
    }
    if "metadata" in raw:
        event["metadata"] = raw["metadata"]
    return LogLine(file, number, stream, at, event)


def _card_file_data(raw: dict[str, Any], folder: Path, where: str) -> dict[str, Any]:
    from ctxledger.io._card_files import card_set_data, read_card
    from ctxledger.store.character_card import CardFileError

    name = raw[_CARD_FILE]
    if raw.get("type") != "card.set" or "data" in raw or not isinstance(name, str):
        raise ExampleError(f"{where}: 'card_file' names a card file for a card.set line "
                           "that gives no 'data'")
    try:
        return card_set_data(read_card(folder / name, name=name))
    except CardFileError as exc:
        raise ExampleError(f"{where}: {exc}") from None


def parse_example_line(file: str, number: int, text: str,
                       folder: Path | None = None) -> ExampleEvent:
    """Decode one example line (``parse_log_line``, with ``at`` required; card files
    are read from ``folder``)."""
    line = parse_log_line(file, number, text, card_files=folder)
    if line.at is None:
        raise ExampleError(f"{file} line {number}: 'at' must be an ISO-8601 string")
    return ExampleEvent(line.file, line.line, line.stream, line.at, line.event)


def read_example_file(path: Path) -> list[ExampleEvent]:
    """Every event of one example file; times must not go backwards within a file."""
    events: list[ExampleEvent] = []
    try:
        content = read_bounded(path, path.name).decode("utf-8")
    except (BoundedInputError, UnicodeDecodeError) as exc:
        raise ExampleError(str(exc) if isinstance(exc, BoundedInputError)
                           else f"{path.name}: not UTF-8") from None
    for number, text in enumerate(content.splitlines(), start=1):
        if not text.strip():
            continue
        event = parse_example_line(path.name, number, text, path.parent)
        if events and event.at < events[-1].at:
            raise ExampleError(f"{path.name} line {number}: 'at' goes back in time"
                               f" (line {events[-1].line} is later)")
        events.append(event)
    return events


def example_files(directory: Path) -> list[Path]:
    """The ``*.jsonl`` files of ``directory`` in name order."""
    if not directory.is_dir():
        raise ExampleError(f"no examples directory at {directory}")
    files = sorted(directory.glob("*.jsonl"))
    if not files:
        raise ExampleError(f"no example files (*.jsonl) in {directory}")
    return files


def read_examples(files: Sequence[Path]) -> list[ExampleEvent]:
    """The events of every file, in append order: by ``at``, then file name, then line."""
    events = [event for path in files for event in read_example_file(path)]
    return sorted(events, key=lambda e: (e.at, e.file, e.line))


def load_examples(ledger: Ledger, clock: ScriptedClock,
                  examples: Sequence[ExampleEvent]) -> dict[int, ExampleEvent]:
    """Append each example at its own time; returns the example behind each position."""
    by_position: dict[int, ExampleEvent] = {}
    for example in examples:
        clock.set(example.at)
        try:
            result = ledger.append(example.stream, [example.event])
        except LedgerError as exc:
            raise ExampleError(f"{example.file} line {example.line}: {exc}") from None
        by_position[result.positions[0]] = example
    return by_position
