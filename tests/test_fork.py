"""``fork`` is exact (SPEC §4), on SQLite and PostgreSQL: copies keep their times, the
fork assembles like the original for every profile, and a fork changes nothing the
original or its scope shows unless it is made to count."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from typer.testing import CliRunner

from ctxledger import Ledger
from ctxledger._config import ENV_VAR
from ctxledger._demo import example_assemblies
from ctxledger.assembler.model import Assembly
from ctxledger.cli import app
from ctxledger.io._examples import (
    EXAMPLES_DIR,
    ScriptedClock,
    example_files,
    load_examples,
    read_examples,
)
from ctxledger.store.clock import format_utc

FORK_TIME = datetime(2026, 11, 24, 10, 0, tzinfo=UTC)
SESSION = "acme-billing-2025-05-11"
SCOPE = "acme-billing"
# Every part of an assembly but those naming the session or the log's position.
SAME = ("text", "sections", "decisions", "tokens", "report", "policy_version", "now",
        "format_version")


@pytest.fixture
def examples(db_url: str) -> Iterator[tuple[Ledger, ScriptedClock, dict[str, Any]]]:
    """Every example loaded at its own time; the clock then stands at ``FORK_TIME``."""
    loaded = read_examples(example_files(EXAMPLES_DIR))
    clock = ScriptedClock(loaded[0].at)
    with Ledger.open(db_url, clock=clock) as ledger:
        found = example_assemblies(ledger, load_examples(ledger, clock, loaded))
        clock.set(FORK_TIME)
        yield ledger, clock, found


def _same(one: Assembly, other: Assembly, where: str,
          positions: dict[int, int] | None = None) -> None:
    """Equal in every part; with ``positions`` (a copy's position -> its original's), the
    log positions ``one`` names (where an item was put) are read as the originals'."""
    def plain(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: positions.get(v, v) if positions and "position" in k
                    and isinstance(v, int) else plain(v) for k, v in value.items()}
        if isinstance(value, list):
            return [plain(v) for v in value]
        return value

    for part in SAME:
        mine, theirs = one.model_dump()[part], other.model_dump()[part]
        assert plain(mine) == theirs, (where, part)


def _copied_positions(ledger: Ledger, fork: str) -> dict[int, int]:
    originals = {e.event_id: e.position for e in ledger.events()}
    return {e.position: originals[e.metadata["causation_id"]] for e in ledger.events(fork)}


def _tool_line(assembly: Assembly, name: str) -> str:
    return next(line for line in assembly.text.splitlines() if name in line)


def _usage(ledger: Ledger, now: datetime) -> list[dict[str, Any]]:
    report = ledger.usage(SCOPE, days=14, now=now).model_dump()
    # Rolled-up days and raw days must give the same figures.
    return [{k: v for k, v in day.items() if k != "source"} for day in report["days"]] + [
        {"tools": report["tools"], "servers": report["servers"]}]


def _state(ledger: Ledger, now: datetime) -> dict[str, Any]:
    return {k: v for k, v in ledger.state(SESSION, now=now).items() if k != "position"}


def test_a_fork_keeps_times_and_assembles_like_the_original_for_every_profile(
        examples: tuple[Ledger, ScriptedClock, dict[str, Any]]) -> None:
    ledger, _, found = examples
    assert sorted(found) == ["brief.jsonl", "card.jsonl", "lorebook.jsonl", "novel.jsonl",
                             "session.jsonl", "tools.jsonl"]
    session_now = found["session.jsonl"][1].now
    usage_before = _usage(ledger, session_now)
    state_before = _state(ledger, session_now)
    assert state_before["top_tools"]
    for name, (session, before) in found.items():
        original = ledger.events(session)
        ledger.fork(session, f"{session}-fork", original[-1].position)
        copies = ledger.events(f"{session}-fork")
        assert [e.recorded_at for e in copies] == [e.recorded_at for e in original], name
        assert {e.metadata["fork_time"] for e in copies} == {format_utc(FORK_TIME)}
        assert all(e.metadata["forked_from"] == session and "fork_counts" not in e.metadata
                   for e in copies)
        profile = before.profile
        # The fork at the original's now is the original; the original is unchanged.
        _same(ledger.assemble(f"{session}-fork", profile, now=before.now), before, name,
              _copied_positions(ledger, f"{session}-fork"))
        _same(ledger.assemble(session, profile, now=before.now), before, name)
    session_assembly = found["session.jsonl"][1]
    assert _tool_line(session_assembly, "github") == "- MCP: github (4x)"
    assert _tool_line(session_assembly, "openapi-lint") == "- openapi-lint (3x)"
    # Every fork is made: the scope's usage, the original's state and (below) every
    # profile's assembly of the originals still read as before.
    assert _usage(ledger, session_now) == usage_before
    assert _state(ledger, session_now) == state_before
    for name, (session, before) in found.items():
        _same(ledger.assemble(session, before.profile, now=before.now), before, name)
    # Nor do the rollups count the copies: rolled-up days read as the raw ones did.
    ledger.rollup(now=FORK_TIME)
    assert _usage(ledger, session_now) == usage_before


def test_events_appended_to_a_fork_after_it_count(
        examples: tuple[Ledger, ScriptedClock, dict[str, Any]]) -> None:
    ledger, clock, found = examples
    before = found["session.jsonl"][1]
    ledger.fork(SESSION, "fork-1", ledger.events(SESSION)[-1].position)
    clock.set(before.now)
    ledger.append("fork-1", {"type": "tool.used",
                             "data": {"tool_name": "openapi-lint", "ok": True}})
    after = ledger.assemble(SESSION, "session", now=before.now)
    assert _tool_line(after, "openapi-lint") == "- openapi-lint (4x)"
    _same(ledger.assemble("fork-1", "session", now=before.now), after, "fork-1")


def test_a_counted_fork_counts_toward_the_scope(
        examples: tuple[Ledger, ScriptedClock, dict[str, Any]]) -> None:
    ledger, _, found = examples
    before = found["session.jsonl"][1]
    usage_before = ledger.usage(SCOPE, days=14, now=before.now)
    ledger.fork(SESSION, "fork-counted", ledger.events(SESSION)[-1].position, count=True)
    assert all(e.metadata["fork_counts"] == "true" for e in ledger.events("fork-counted"))
    after = ledger.assemble(SESSION, "session", now=before.now)
    # The session's own uses (openapi-lint 2, github 1) count twice now.
    assert _tool_line(after, "github") == "- MCP: github (5x)"
    assert _tool_line(after, "openapi-lint") == "- openapi-lint (5x)"
    _same(ledger.assemble("fork-counted", "session", now=before.now), after, "fork")
    usage_after = ledger.usage(SCOPE, days=14, now=before.now)
    copied = [e.type for e in ledger.events(SESSION)]
    assert usage_after.days[-1].appended == \
        usage_before.days[-1].appended + copied.count("message.appended")
    assert sum(d.tool_uses for d in usage_after.days) == \
        sum(d.tool_uses for d in usage_before.days) + copied.count("tool.used")


def test_the_cli_forks_with_and_without_count(
        examples: tuple[Ledger, ScriptedClock, dict[str, Any]], db_url: str) -> None:
    ledger, _, _ = examples
    last = str(ledger.events(SESSION)[-1].position)
    runner = CliRunner(env={ENV_VAR: None})
    plain = runner.invoke(app, ["--db", db_url, "fork", SESSION, "cli-1", "--at", last])
    counted = runner.invoke(app, ["--db", db_url, "fork", SESSION, "cli-2", "--at", last,
                                  "--count"])
    assert plain.exit_code == counted.exit_code == 0, (plain.stderr, counted.stderr)
    assert json.loads(plain.stdout)["counted"] is False
    assert json.loads(counted.stdout)["counted"] is True
    assert "fork_counts" not in ledger.events("cli-1")[0].metadata
    assert ledger.events("cli-2")[0].metadata["fork_counts"] == "true"
    assert "--count" in runner.invoke(app, ["fork", "--help"]).stdout


def test_a_fork_of_an_ended_session_is_not_the_scopes_previous_session(db_url: str) -> None:
    """A fork copying its original's end is neither the original's previous session nor
    has the original as its own: both see the session that ended before."""
    clock = ScriptedClock(datetime(2026, 1, 1, tzinfo=UTC))
    with Ledger.open(db_url, clock=clock) as ledger:
        for session, summary in (("one", "first summary"), ("two", "second summary")):
            ledger.append(session, [{"type": "session.started", "data": {"scope": "s"}},
                                    {"type": "session.ended", "data": {"summary": summary}}])
            clock.set(clock() + timedelta(hours=1))
        ledger.append("three", {"type": "session.started", "data": {"scope": "s"}})
        now = clock()
        before = {s: ledger.assemble(s, "session", now=now) for s in ("two", "three")}
        ledger.fork("two", "two-b", ledger.events("two")[-1].position)
        ledger.fork("two-b", "two-c", ledger.events("two-b")[-1].position)
        for session in ("two", "three"):
            _same(ledger.assemble(session, "session", now=now), before[session], session)
        assert "first summary" in before["two"].text
        assert "second summary" in before["three"].text
        for fork in ("two-b", "two-c"):
            _same(ledger.assemble(fork, "session", now=now), before["two"], fork)
