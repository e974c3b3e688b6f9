"""The rebuild's fast path (``Projection.rebuild_fold``) folds to exactly what ``apply`` folds.

``test_property_rebuild`` checks a rebuild against the inline state at every prefix of
short logs. Here whole logs are rebuilt three ways and must agree: through the folds,
through ``apply`` alone (every fold turned off), and through the folds with a tiny page
and cache, so the folds' held-aside rows are flushed, forgotten and read back mid-log.
Hand-written cases cover what random logs rarely draw: a message whose app-chosen id is
an earlier message's event id, ids reused after retraction, and events in streams of
the wrong kind.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from test_property_rebuild import (
    COMMON,
    SQLITE_EXAMPLES,
    MovableClock,
    dump,
    postgres_ledger,
    sqlite_ledger,
    sqlite_template,  # noqa: F401 (the fixture)
    steps,
)

from ctxledger import Ledger
from ctxledger.projections import runner as runner_module
from ctxledger.projections.registry import BUILTIN_PROJECTION_TYPES
from ctxledger.projections.rowstore import RowStore
from ctxledger.store.errors import StreamRuleError

Sequence_ = list[tuple[int, tuple[str, dict[str, Any]]]]


def append_all(ledger: Ledger, clock: MovableClock, sequence: Sequence_) -> None:
    for seconds, (stream, ev) in sequence:
        clock.now += timedelta(seconds=seconds)
        try:
            ledger.append(stream, ev)
        except StreamRuleError:
            continue


def three_ways(ledger: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rebuilt with folds, without them, and with folds in tiny pages: all equal inline."""
    inline = dump(ledger)
    ledger.rebuild()
    assert dump(ledger) == inline, "the folds differ from the inline state"
    with monkeypatch.context() as patch:
        for cls in BUILTIN_PROJECTION_TYPES:
            patch.setattr(cls, "rebuild_fold", lambda self, rows, time_of: None)
        ledger.rebuild()
    assert dump(ledger) == inline, "apply alone differs from the inline state"
    with monkeypatch.context() as patch:
        patch.setattr(runner_module, "FOLD_PAGE", 3)
        patch.setattr(runner_module, "REBUILD_CACHE_ROWS", 4)
        ledger.rebuild()
    assert dump(ledger) == inline, "folds flushed mid-log differ from the inline state"
    with monkeypatch.context() as patch:
        patch.setattr(RowStore, "ASIDE_ROWS", 2)  # every fold that holds rows aside
        ledger.rebuild()
    assert dump(ledger) == inline, "rows written aside mid-log differ from the inline state"


def test_folds_equal_apply_sqlite(sqlite_template: Path,  # noqa: F811 (the fixture)
                                  monkeypatch: pytest.MonkeyPatch
                                  ) -> None:
    @settings(max_examples=SQLITE_EXAMPLES, **COMMON)  # type: ignore[arg-type]
    @given(sequence=steps)
    def check(sequence: Sequence_) -> None:
        clock = MovableClock()
        with sqlite_ledger(sqlite_template, clock) as ledger:
            append_all(ledger, clock, sequence * 2)  # repeated: ids and tools met again
            three_ways(ledger, monkeypatch)

    check()


@pytest.mark.postgres
def test_folds_equal_apply_postgres(monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import require_postgres

    require_postgres()

    @settings(max_examples=max(1, SQLITE_EXAMPLES // 5), **COMMON)  # type: ignore[arg-type]
    @given(sequence=steps)
    def check(sequence: Sequence_) -> None:
        clock = MovableClock()
        with postgres_ledger(clock) as ledger:
            append_all(ledger, clock, sequence * 2)
            three_ways(ledger, monkeypatch)

    check()


@pytest.fixture
def chat(ledger: Ledger) -> Iterator[Ledger]:
    ledger.append("chat", {"type": "session.started", "data": {"scope": "team"}})
    yield ledger


def test_chosen_id_equal_to_an_earlier_event_id(chat: Ledger,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    first = "0192f000-0000-7000-8000-000000000001"
    chat.append("chat", {"type": "message.appended", "event_id": first,
                         "data": {"role": "user", "content": "hi"}})
    chat.append("chat", {"type": "message.appended",
                         "data": {"role": "assistant", "content": "hello"}})
    # Replaces the first message (found by its event id), then retracts the replacement.
    chat.append("chat", {"type": "message.appended",
                         "data": {"role": "tool", "content": "x", "tool_call_id": "c1",
                                  "message_id": first}})
    chat.append("chat", {"type": "history.summarized",
                         "data": {"through_message_id": first, "summary": "s"}})
    chat.append("chat", {"type": "message.retracted", "data": {"message_id": first}})
    chat.append("chat", {"type": "message.appended",
                         "data": {"role": "user", "content": "again", "message_id": first}})
    chat.append("chat", {"type": "message.appended",
                         "data": {"role": "user", "content": "plain"}})
    chat.append("chat", {"type": "item.put", "data": {"item_id": "i", "kind": "summary",
                                                     "content": "c"}})
    chat.append("chat", {"type": "item.removed", "data": {"item_id": "i"}})
    chat.append("chat", {"type": "tool.used", "data": {"tool_name": "grep"}})
    three_ways(chat, monkeypatch)


def test_a_message_looked_up_before_it_is_logged(chat: Ledger,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # A rebuild finds a later event's id in the log before folding that event (inline,
    # the id is not logged yet): the chosen id replaces nothing either way, and the later
    # message, held aside and written mid-log, carries the same id.
    later = "0192f000-0000-7000-8000-0000000000aa"
    chat.append("chat", {"type": "message.appended",
                         "data": {"role": "user", "content": "hi", "message_id": later}})
    chat.append("chat", {"type": "message.appended", "event_id": later,
                         "data": {"role": "user", "content": "hi"}})
    for _ in range(3):
        chat.append("chat", {"type": "message.appended",
                             "data": {"role": "assistant", "content": "more"}})
    chat.append("chat", {"type": "message.retracted", "data": {"message_id": later}})
    chat.append("chat", {"type": "message.appended",
                         "data": {"role": "user", "content": "again", "message_id": later}})
    three_ways(chat, monkeypatch)


def test_a_prune_mid_log_leaves_the_folded_session_rows_alone(
        chat: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    # The prune flushes the rows its DELETE reads; the session row the fold is still
    # counting into (its last activity set at the end) must not be written half done.
    for _ in range(3):
        chat.append("chat", {"type": "message.appended",
                             "data": {"role": "user", "content": "hi"}})
    chat.append("chat", {"type": "tool.used", "data": {"tool_name": "grep"}})
    chat.append("system", {"type": "rollup.completed", "data": {
        "day": "2026-01-01", "rows": 0, "digest": "d", "prune_before": "2026-01-01"}})
    chat.append("chat", {"type": "message.appended",
                         "data": {"role": "assistant", "content": "after"}})
    three_ways(chat, monkeypatch)


def test_session_events_in_other_streams_are_ignored_alike(
        chat: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    chat.append("scope:team", {"type": "setting.changed",
                               "data": {"key": "k", "value": {"b": 1, "a": [1.5, None]}}})
    chat.append("chat", {"type": "setting.changed", "data": {"key": "k", "value": 2}})
    chat.append("chat", {"type": "message.appended",
                         "data": {"role": "user", "content": "hi"}})
    three_ways(chat, monkeypatch)
