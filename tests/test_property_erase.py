"""Invariant: after erasing any session or scope, at any point of any log, every projection
table equals a rebuild of the log from scratch.

An erase no longer rebuilds: each projection forgets only what the erased streams left
(their rows go; a tool's figures per scope are counted again). The logs are the random
ones of ``test_property_rebuild`` (every event type, forks' copies, rollups that prune,
a clock that steps back); erasures fall between their steps, and the erased sessions may
be appended to again afterwards. After each erase the tables are dumped, every
projection is rebuilt in place, and the dumps must match.
"""

from __future__ import annotations

import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import closing, contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import require_postgres
from hypothesis import given, settings
from hypothesis import strategies as st
from test_property_rebuild import (
    COMMON,
    POSTGRES_EXAMPLES,
    SCOPES,
    SESSIONS,
    SQLITE_EXAMPLES,
    MovableClock,
    check_counts,
    dump,
    postgres_ledger,
    steps,
)

from ctxledger import Ledger
from ctxledger.store.errors import InvalidArgument, StreamRuleError

Erasure = tuple[str, str]
"""("session" or "scope", its name)."""

targets = st.sampled_from([*(("session", s) for s in SESSIONS),
                           *(("scope", s) for s in SCOPES)])
# Where each erasure falls: the index of the step it comes before.
erasures = st.lists(st.tuples(st.integers(0, 40), targets), min_size=1, max_size=3)


def run_with_erasures(ledger: Ledger, clock: MovableClock,
                      sequence: list[tuple[int, tuple[str, dict[str, Any]]]],
                      planned: list[tuple[int, Erasure]]) -> int:
    """Append ``sequence``, erasing as ``planned``; after each erase the tables must equal
    a rebuild. Returns how many erases erased something."""
    erased = 0
    for index in range(len(sequence) + 1):
        for _, (target, name) in [p for p in planned if min(p[0], len(sequence)) == index]:
            try:
                done = ledger.erase(reason="property", **{target: name})
            except InvalidArgument:
                continue  # nothing of that name yet
            erased += bool(done.events)
            incremental = dump(ledger)
            check_counts(incremental)
            ledger.rebuild()
            assert dump(ledger) == incremental, f"diverged after erasing {target} {name}"
        if index == len(sequence):
            break
        seconds, (stream, ev) = sequence[index]
        clock.now += timedelta(seconds=seconds)
        try:
            ledger.append(stream, ev)
        except StreamRuleError:
            continue
    return erased


@pytest.fixture(scope="module")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated, empty SQLite database; each example starts from a copy."""
    path = tmp_path_factory.mktemp("template") / "ledger.db"
    Ledger.open(f"sqlite:///{path}").close()
    return path


@contextmanager
def sqlite_ledger(template: Path, clock: MovableClock) -> Iterator[Ledger]:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "ledger.db"
        with closing(sqlite3.connect(template)) as source, \
                closing(sqlite3.connect(path)) as target:
            source.backup(target)
        path.chmod(0o600)
        with Ledger.open(f"sqlite:///{path}", clock=clock, upgrade=False) as ledger:
            yield ledger


def test_erase_equals_rebuild_sqlite(sqlite_template: Path) -> None:
    erased: list[int] = []

    @settings(max_examples=SQLITE_EXAMPLES, **COMMON)  # type: ignore[arg-type]
    @given(sequence=steps, planned=erasures)
    def check(sequence: list[tuple[int, tuple[str, dict[str, Any]]]],
              planned: list[tuple[int, Erasure]]) -> None:
        clock = MovableClock()
        with sqlite_ledger(sqlite_template, clock) as ledger:
            erased.append(run_with_erasures(ledger, clock, sequence, planned))

    check()
    assert sum(erased) > 0  # the examples did erase events


def test_erase_equals_rebuild_postgres() -> None:
    require_postgres()
    erased: list[int] = []

    @settings(max_examples=POSTGRES_EXAMPLES, **COMMON)  # type: ignore[arg-type]
    @given(sequence=steps, planned=erasures)
    def check(sequence: list[tuple[int, tuple[str, dict[str, Any]]]],
              planned: list[tuple[int, Erasure]]) -> None:
        clock = MovableClock()
        with postgres_ledger(clock) as ledger:
            erased.append(run_with_erasures(ledger, clock, sequence, planned))

    check()
    assert sum(erased) > 0
