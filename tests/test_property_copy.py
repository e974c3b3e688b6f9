"""Property: a log written to SQLite and copied event by event to PostgreSQL is the same log.

Same positions, ids and hashes (so the same seal), the same projection state for every
session, and the same assembly digests. Sequences are the rebuild property's, plus
settings with wide values: 64-bit integers, floats, and any text hypothesis draws (one
the contract refuses is refused on SQLite and never reaches the copy).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_property_rebuild import (
    COMMON,
    SESSIONS,
    MovableClock,
    any_step,
    clock_steps,
    postgres_ledger,
    sqlite_ledger,
    sqlite_template,
)

from ctxledger import Ledger
from ctxledger.store.errors import EventValidationError

__all__ = ["sqlite_template"]  # the fixture, imported for this module's tests

pytestmark = pytest.mark.postgres

wide_values = (st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False,
                                                            allow_infinity=False)
               | st.text(max_size=8) | st.lists(st.integers(-(2**63), 2**63 - 1), max_size=3))
wide_setting = st.tuples(st.just(0), st.tuples(
    st.sampled_from(("scope:a", "s1")),
    st.fixed_dictionaries({"type": st.just("setting.changed"),
                           "data": st.fixed_dictionaries({"key": st.text(max_size=4),
                                                          "value": wide_values})})))
sequences = st.lists(st.one_of(st.tuples(clock_steps, any_step), wide_setting),
                     min_size=5, max_size=30)


def fingerprint(ledger: Ledger) -> dict[str, Any]:
    """Everything that must survive the copy."""
    events = ledger.events()
    now = events[-1].recorded_at if events else None
    out: dict[str, Any] = {
        "events": [(e.position, e.stream_id, e.stream_version, e.event_id, e.prev_hash, e.hash)
                   for e in events]}
    for session in SESSIONS:
        if not ledger.view(session).exists:
            continue
        out[f"state {session}"] = ledger.state(session, now=now)
        for profile in ("card", "session"):
            out[f"{profile} {session}"] = ledger.assemble(session, profile, now=now).digest
    return out


def copy_event_by_event(source: Ledger, target: Ledger, clock: MovableClock) -> None:
    for event in source.events():
        clock.now = event.recorded_at
        target.append(event.stream_id, {"type": event.type, "data": event.data,
                                        "id": event.event_id, "metadata": event.metadata,
                                        "schema_version": event.schema_version})


def test_a_sqlite_log_copied_to_postgres_is_the_same_log(sqlite_template: Path) -> None:
    @settings(max_examples=6, **COMMON)  # type: ignore[arg-type]
    @given(sequence=sequences)
    def check(sequence: list[tuple[int, tuple[str, dict[str, Any]]]]) -> None:
        clock = MovableClock()
        with sqlite_ledger(sqlite_template, clock) as lite:
            for seconds, (stream, event) in sequence:
                clock.now += timedelta(seconds=seconds)
                try:
                    lite.append(stream, event)
                except EventValidationError:
                    continue  # refused input (stream rules, NUL...): never in the log
            original = fingerprint(lite)
            copy_clock = MovableClock()
            with postgres_ledger(copy_clock) as pg:
                copy_event_by_event(lite, pg, copy_clock)
                assert fingerprint(pg) == original
                if original["events"]:
                    lite_seal, pg_seal = lite.seal(), pg.seal()
                    assert lite_seal is not None and pg_seal is not None
                    assert (lite_seal.position, lite_seal.hash) == (pg_seal.position,
                                                                    pg_seal.hash)
                    assert pg.verify(anchor=lite.anchor()).ok

    check()
