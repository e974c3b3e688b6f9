"""The one reader of times and log positions given as text: the CLI's ``--now`` and
``--until``, the HTTP service's ``now`` and ``until`` query parameters and its version
headers.

A position is ASCII digits (``int`` would also read " 1", "+1", "1_0" and other scripts'
digits) of at most 19 characters, up to 2**63 - 1, what every backend stores: a longer
run of digits is refused before ``int`` sees it (Python refuses to convert more than
4,300 digits, and nothing past the range names an event). A time is ISO-8601 with a
zone, inside the range every backend stores, returned in UTC. Anything else is an
``InvalidArgument`` with one line naming the parameter, so the CLI exits 1 and the
service answers 400 with the same words.
"""

from __future__ import annotations

import re
from datetime import datetime

from ctxledger.store.errors import InvalidArgument
from ctxledger.store.strict import INT64_MAX, STORED_RANGE, stored_utc

MAX_POSITION = INT64_MAX
"""The largest log position or stream version a backend stores."""
_DIGITS = re.compile(r"[0-9]{1,19}")
_SHOWN = 40  # characters of a bad value an error message repeats
_MAX_TIME_TEXT = 64  # longer than any ISO-8601 time with a fraction and a zone


def shown(value: str) -> str:
    """``value`` quoted for an error message, cut short when long (one short line)."""
    if len(value) <= _SHOWN:
        return repr(value)
    return f"{value[:_SHOWN]!r}... ({len(value)} characters)"


def parse_position(value: str, name: str) -> int:
    """``value`` as a position or version (0 to 2**63 - 1); anything else is an
    ``InvalidArgument`` naming ``name``."""
    text = value.strip()
    if _DIGITS.fullmatch(text) is None or int(text) > MAX_POSITION:
        raise InvalidArgument(f"{name} must be an integer from 0 to {MAX_POSITION},"
                              f" got {shown(value)}")
    return int(text)


def parse_time(value: str, name: str, not_a_time: str = "not an ISO-8601 time"
               ) -> datetime:
    """``value`` as an ISO-8601 time with a zone, in the range every backend stores, in
    UTC; anything else is an ``InvalidArgument`` naming ``name``."""
    text = value.strip()
    try:
        if len(text) > _MAX_TIME_TEXT:
            raise ValueError(text)
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidArgument(f"{name} {shown(value)} is {not_a_time}") from None
    utc = stored_utc(parsed)
    if utc == "naive":
        raise InvalidArgument(f"{name} {shown(value)} needs a zone, such as Z or +00:00")
    if utc == "out of range":
        raise InvalidArgument(f"{name} {shown(value)} is outside {STORED_RANGE}")
    return utc


def parse_optional_time(value: str | None, name: str) -> datetime | None:
    """``parse_time``, with a parameter not given staying None."""
    return None if value is None else parse_time(value, name)


def parse_until(value: str | None, name: str) -> int | datetime | None:
    """An ``until``: a log position (ASCII digits) or a time (``parse_time``); None when
    not given."""
    if value is None:
        return None
    text = value.strip()
    if text.isascii() and text.isdigit():
        if _DIGITS.fullmatch(text) is None or int(text) > MAX_POSITION:
            raise InvalidArgument(f"{name} {shown(value)} is past the largest log position"
                                  f" ({MAX_POSITION})")
        return int(text)
    return parse_time(value, name, "neither a log position nor an ISO-8601 time")
