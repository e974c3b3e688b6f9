"""JSONL input (``ctxledger append``; each line of ``import``): decode it, and name the
line of a bad event.

The whole input is one atomic batch. Decoding errors (not UTF-8, not JSON, not an object)
are found here, and event errors by ``validate_lines``, which names the offending line,
both before the database is opened. Only a rule of the stream's history is found by the
append itself, which then writes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxledger.io._bounded import BoundedInputError, InputLimits, loads_bounded, read_bounded
from ctxledger.store.errors import EventValidationError
from ctxledger.store.log import EventCheck
from ctxledger.store.strict import json_kind
from ctxledger.store.validate import coerce_new_event, validate_event


class InputError(EventValidationError):
    """A line of JSONL input is unusable; the message names the line."""


@dataclass(frozen=True, slots=True)
class InputLine:
    """One non-blank line of input: its 1-based line number and the decoded event."""

    number: int
    event: dict[str, Any]


def decoded_lines(raw_lines: Iterable[bytes]) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of every non-blank line, decoded as UTF-8.

    Raises ``InputError`` naming the first line that is not UTF-8.
    """
    for number, raw in enumerate(raw_lines, start=1):
        try:
            # A byte-order mark is legal only at the very start of the input.
            text = raw.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"line {number}: not valid UTF-8 (byte {exc.start + 1})") from None
        if text.strip():
            yield number, text


def parse_jsonl(raw_lines: Iterable[bytes]) -> list[InputLine]:
    """Decode JSONL bytes into events, skipping blank lines.

    Raises ``InputError`` naming the first line that is not UTF-8 or not a JSON object,
    or passes the input limits (nesting, a number's range: ``ctxledger.io._bounded``).
    """
    limits = InputLimits.from_env()
    parsed: list[InputLine] = []
    for number, text in decoded_lines(raw_lines):
        try:
            value = loads_bounded(text, f"line {number}", limits)
        except BoundedInputError as exc:
            raise InputError(str(exc)) from None
        except json.JSONDecodeError as exc:
            raise InputError(
                f"line {number}: invalid JSON: {exc.msg} (column {exc.colno})") from None
        if not isinstance(value, dict):
            raise InputError(
                f"line {number}: expected a JSON object, got {json_kind(value)}")
        parsed.append(InputLine(number, value))
    return parsed


def validate_lines(stream_id: str, lines: Iterable[InputLine], max_event_bytes: int,
                   check: EventCheck | None = None) -> None:
    """Validate each line as an event of ``stream_id``.

    Uses the store's own validation (the same that ``append`` runs, with the log's
    ``check`` of setting values), so the error is the store's, prefixed with the line
    number. Also rejects an event id used twice, naming both lines.
    """
    first_line_of_id: dict[str, int] = {}
    for line in lines:
        try:
            event = coerce_new_event(line.event)
            normalized, _, _ = validate_event(stream_id, event, max_event_bytes)
            if check is not None:
                check(stream_id, normalized)
        except EventValidationError as exc:
            raise InputError(f"line {line.number}: {exc}") from None
        if event.event_id is not None:
            assert normalized.event_id is not None
            earlier = first_line_of_id.setdefault(normalized.event_id, line.number)
            if earlier != line.number:
                raise InputError(f"line {line.number}: event id {normalized.event_id}"
                                 f" is already used on line {earlier}")


def read_policy(path: Path | None) -> str | None:
    """The text of a ``--policy`` file (None without one), within the input limits
    (``ctxledger.io._bounded``); unreadable files are one-line errors."""
    if path is None:
        return None
    try:
        raw = read_bounded(path, f"cannot read policy file {str(path)!r}")
    except BoundedInputError as exc:
        raise InputError(str(exc).replace(": cannot read: ", ": ", 1)) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"policy file {str(path)!r} is not UTF-8 text") from None
    try:  # only the limits here: the policy's own parser words a syntax error
        loads_bounded(text, f"policy file {str(path)!r}", check_numbers=False)
    except BoundedInputError as exc:
        raise InputError(str(exc)) from None
    except ValueError:
        pass
    return text
