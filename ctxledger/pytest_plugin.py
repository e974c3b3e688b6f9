"""ctxledger's pytest plugin (registered as a ``pytest11`` entry point): fixtures for
testing apps built on ctxledger, including time travel with ``freezegun``.

- ``ctxledger_ledger``: a ledger on a new in-memory database per test (the schema is
  migrated once per process and copied). Its clock reads the time at every append, so
  ``freeze_time``, ``tick()`` and ``move_to()`` (backwards too) decide ``recorded_at``.
- ``ctxledger_events``: event builders for every event type (``ctxledger.testing``).
- ``ctxledger_assert_decisions``: ``(assembly, {item: action | (action, reason)})``.

Names are prefixed so they never shadow a project's own fixtures. This module imports
nothing heavy: the ledger stack loads when a fixture is first used.

Traps: freezegun does not reach other threads, so append from the test's thread;
freezegun also freezes ``time.perf_counter``, which the ledger never reads; and fixture
setup runs before a ``freeze_time`` in the test body, so the ledger reads the clock at
each append rather than when it is created.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from ctxledger._ledger import Ledger
    from ctxledger.testing import EventBuilders


@pytest.fixture
def ctxledger_ledger() -> Iterator[Ledger]:
    """A ledger on a fresh in-memory database, closed after the test."""
    from ctxledger.testing import memory_ledger

    ledger = memory_ledger()
    try:
        yield ledger
    finally:
        ledger.close()


@pytest.fixture
def ctxledger_events() -> EventBuilders:
    """Builders for every event type: ``ctxledger_events.tool_used(tool_name="Bash")``."""
    from ctxledger.testing import EventBuilders

    return EventBuilders()


@pytest.fixture
def ctxledger_assert_decisions() -> Callable[[Any, Mapping[str, Any]], None]:
    """``assert_decisions(assembly, {"mes_example": "expired", ...})``."""
    from ctxledger.testing import assert_decisions

    return assert_decisions
