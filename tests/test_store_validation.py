"""Bad input to ``append``: the size limit and malformed events. One-line errors, no writes.

Tests on the default limit share one ledger per backend; "nothing written" compares the
whole log and every projection row before and after, and each test has its own streams.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest
from helpers.assertions import ledger_state, one_line
from helpers.databases import module_database
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxledger import EventValidationError, Ledger, LedgerError
from ctxledger.store.canonical import canonical_json
from ctxledger.store.strict import DEFAULT_MAX_EVENT_BYTES


def message(content: str, **metadata: Any) -> dict[str, Any]:
    """A ``message.appended`` input with optional metadata."""
    return {"type": "message.appended", "data": {"role": "user", "content": content},
            "metadata": metadata}


def stored_size(event: dict[str, Any]) -> int:
    """Bytes an event counts against the limit: its canonical data plus metadata JSON."""
    return (len(canonical_json(event["data"]).encode("utf-8"))
            + len(canonical_json(event["metadata"]).encode("utf-8")))


@pytest.fixture(scope="module",
                params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def ledger(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ledger]:
    """One ledger per backend for the whole module, with the default size limit."""
    with (module_database(request.param, tmp_path_factory.mktemp("validation")) as url,
          Ledger.open(url) as opened):
        yield opened


def test_default_limit_is_one_mebibyte() -> None:
    assert DEFAULT_MAX_EVENT_BYTES == 1024 * 1024


def test_event_over_one_mebibyte_is_rejected_with_its_size(ledger: Ledger) -> None:
    ledger.append("big", message("before"))
    before = ledger_state(ledger)
    big = message("x" * (1024 * 1024))
    with pytest.raises(EventValidationError) as err:
        ledger.append("big", [message("fine"), big])
    text = one_line(err.value)
    size = stored_size(big)
    assert size > 1024 * 1024
    assert f"{size} bytes" in text and "1048576" in text and text.startswith("event 2: ")
    assert ledger_state(ledger) == before


def test_event_just_under_one_mebibyte_is_accepted(ledger: Ledger) -> None:
    overhead = stored_size(message(""))
    event = message("y" * (1024 * 1024 - overhead))
    assert stored_size(event) == 1024 * 1024
    ledger.append("at-limit", event)
    (stored,) = ledger.events("at-limit")
    assert len(stored.data["content"]) == 1024 * 1024 - overhead


def test_max_event_bytes_is_configurable(db_url: str) -> None:
    with Ledger.open(db_url, max_event_bytes=200) as ledger:
        overhead = stored_size(message(""))
        at_limit = message("a" * (200 - overhead))
        over = message("a" * (201 - overhead))
        ledger.append("chat", at_limit)
        with pytest.raises(EventValidationError) as err:
            ledger.append("chat", over)
        assert "201 bytes, over the 200-byte limit" in one_line(err.value)
        assert ledger.head() == 1


def test_limit_counts_utf8_bytes_not_characters(db_url: str) -> None:
    with Ledger.open(db_url, max_event_bytes=300) as ledger:
        event = message("é" * 140)  # 140 characters, 280 bytes of content
        assert stored_size(event) > 300
        with pytest.raises(EventValidationError, match=f"{stored_size(event)} bytes"):
            ledger.append("chat", event)
        assert ledger.head() == 0


def test_metadata_counts_against_the_limit(db_url: str) -> None:
    with Ledger.open(db_url, max_event_bytes=500) as ledger:
        event = message("short", actor="a" * 600)
        with pytest.raises(EventValidationError, match="over the 500-byte limit"):
            ledger.append("chat", event)
        assert ledger.head() == 0


@pytest.mark.parametrize(("event", "fragment"), [
    ("not an event", "must be an object"),
    ({"data": {"role": "user", "content": "x"}}, "missing its 'type'"),
    ({"type": "", "data": {}}, "missing its 'type'"),
    ({"type": "message.appended", "data": ["role", "user"]}, "'data' must be an object"),
    ({"type": "message.appended", "data": {"role": "user", "content": "x"}, "extra": 1},
     "unknown event key"),
    ({"type": "message.appended", "data": {"role": "user", "content": "x"}, "metadata": []},
     "'metadata' must be an object"),
    ({"type": "message.appended", "data": {"role": "user", "content": "x"},
      "metadata": {"actor": 7}}, "metadata.actor must be a string"),
    ({"type": "message.appended", "data": {"role": "user", "content": "x"}, "id": 12},
     "'id' must be a string"),
    ({"type": "message.appended", "data": {"role": "user", "content": "x"},
      "schema_version": "2"}, "'schema_version' must be an integer"),
    ({"type": "message.appended", "data": {"role": "user", "content": "x"},
      "schema_version": 3}, "schema_version 3 is not between 1 and 2"),
    ({"type": "tool.used", "data": {"tool_name": "x"}, "schema_version": 0},
     "schema_version 0 is not between 1 and 2"),
    ({"type": "setting.changed", "data": {"key": "k", "value": math.nan}}, "not JSON"),
    ({"type": "message.appended", "data": {"role": "user", "content": "x"},
      "metadata": {"when": math.inf}}, "not JSON"),
])
def test_malformed_events_are_rejected(ledger: Ledger, event: Any, fragment: str) -> None:
    before = ledger_state(ledger)
    with pytest.raises(EventValidationError) as err:
        ledger.append("malformed", [event])
    assert fragment in one_line(err.value)
    assert ledger_state(ledger) == before


@pytest.mark.parametrize("stream", ["", "   ", "s" * 201])
def test_bad_stream_ids_are_rejected(ledger: Ledger, stream: str) -> None:
    before = ledger_state(ledger)
    with pytest.raises(EventValidationError) as err:
        ledger.append(stream, message("x"))
    one_line(err.value)
    assert ledger_state(ledger) == before


def test_longest_stream_id_is_accepted(ledger: Ledger) -> None:
    stream = "s" * 200
    head = ledger.head()
    ledger.append(stream, message("x"))
    assert [e.stream_id for e in ledger.events(after=head)] == [stream]
    assert len(ledger.events(stream)) == 1


def test_every_rejection_is_a_ledger_error(ledger: Ledger) -> None:
    """Callers can catch one base class for every bad-input error."""
    assert issubclass(EventValidationError, LedgerError)
    before = ledger_state(ledger)
    with pytest.raises(LedgerError):
        ledger.append("any", {"type": "nope.nope", "data": {}})
    assert ledger_state(ledger) == before


@settings(max_examples=2000, deadline=None)
@given(st.text(alphabet=st.characters(exclude_categories=())) | st.text(alphabet="ab\x00\ud800é"))
def test_clean_text_agrees_with_the_forbidden_pattern(text: str) -> None:
    """The ASCII fast path gives the pattern's verdict: NUL and lone surrogates refused."""
    from ctxledger.store.strict import _FORBIDDEN, clean_text, json_value_ok

    assert clean_text(text) is (_FORBIDDEN.search(text) is None)
    assert json_value_ok({"k": text}) is (_FORBIDDEN.search(text) is None)
    assert json_value_ok({text: 1}) is (_FORBIDDEN.search(text) is None)
