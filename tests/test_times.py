"""The core's one reader of times and positions given as text (``ctxledger._times``), the
parser the CLI and the HTTP service share: its bounds, checked before ``int()``."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ctxledger._times import MAX_POSITION, parse_position, parse_time, parse_until, shown
from ctxledger.store.errors import InvalidArgument


def test_positions_up_to_the_largest_stored_one() -> None:
    assert parse_position(" 0 ", "after") == 0
    assert parse_position(str(MAX_POSITION), "after") == MAX_POSITION == 2**63 - 1
    assert parse_until(str(MAX_POSITION), "until") == MAX_POSITION
    for bad in (str(2**63), "9" * 5000, "-1", "+1", "1_0", "\uff11", "", "1.0"):
        with pytest.raises(InvalidArgument, match=r"^after must be an integer from 0 to "):
            parse_position(bad, "after")


def test_until_is_a_position_or_a_zoned_time_in_range() -> None:
    assert parse_until("2025-05-01T12:00:00+02:00", "until") == datetime(
        2025, 5, 1, 10, tzinfo=UTC)
    assert parse_until(None, "until") is None
    cases = {"9" * 5000: "past the largest log position",
             str(2**63): "past the largest log position",
             "-5": "neither a log position nor an ISO-8601 time",
             "2025-05-01T12:00:00": "needs a zone",
             "0001-01-01T00:00:00+05:00": "is outside 1900-01-01 .. 9999-01-01",
             "9999-12-31T23:59:59-05:00": "is outside 1900-01-01 .. 9999-01-01",
             "2025-05-01T12:00:00+02:00" + " " * 100 + "x": "neither a log position"}
    for value, words in cases.items():
        with pytest.raises(InvalidArgument) as caught:
            parse_until(value, "until")
        message = str(caught.value)
        assert message.startswith("until ") and words in message and "\n" not in message
        assert len(message) < 200  # a long value is cut short


def test_a_bare_number_is_no_time() -> None:
    for value in ("1700000000", "-5", "9" * 5000):
        with pytest.raises(InvalidArgument, match="is not an ISO-8601 time"):
            parse_time(value, "now")


def test_shown_cuts_long_values() -> None:
    assert shown("abc") == "'abc'"
    assert shown("9" * 5000) == f"{'9' * 40!r}... (5000 characters)"
