"""Invariant: every step of a timeline (one fold, each step reusing the memos of the step
before) is the assembly an independent replay makes at that step's position.

Random sessions mix what changes each profile's inputs: messages (tool calls and their
answers), retractions, summaries, tool uses (also in a peer session of the scope), settings
in the session and its scope (a context limit, a compression level, an unknown key), card
fields, novel items and chapter moves, and the scope's sources, snippets and entities. For
each of the four profiles, every step's digest, policy version and decisions must equal
those of ``replay(until=step.position)`` (a cold assembly from its own fold).
"""

from __future__ import annotations

from contextlib import suppress
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import require_postgres
from hypothesis import given, settings
from hypothesis import strategies as st
from test_property_rebuild import (
    COMMON,
    T0,
    MovableClock,
    event,
    optional,
    postgres_ledger,
    sqlite_ledger,
    sqlite_template,  # noqa: F401 (a fixture)
)

from ctxledger import Ledger
from ctxledger.store.errors import LedgerError

SESSION, PEER, SCOPE = "s1", "s2", "scope:a"
PROFILES = ("card", "session", "novel", "brief")
words = st.sampled_from(("the lamp", "a storm", "tide and rope", "grep the log", ""))
message_ids = st.sampled_from(("m1", "m2", "m3"))
CALLS = ("c1", "c2")


def _message(role: str) -> st.SearchStrategy[dict[str, Any]]:
    extra: dict[str, st.SearchStrategy[Any]] = {}
    if role == "tool":
        extra["tool_call_id"] = st.sampled_from(CALLS)
    if role == "assistant":
        extra["tool_calls"] = optional(st.sampled_from(CALLS).map(lambda call: [
            {"id": call, "type": "function",
             "function": {"name": "grep", "arguments": "{}"}}]))
    return event("message.appended", role=st.just(role), content=words,
                 message_id=optional(message_ids), **extra)


# Only values each policy accepts: a timeline of settings no policy takes stops at that
# step (a tested error of its own, not this invariant).
_settings = st.one_of(
    event("setting.changed", key=st.just("context_limit"), value=st.sampled_from((40, 90, 400))),
    event("setting.changed", key=st.just("compression_level"),
          value=st.sampled_from(("none", "chat_only", "chat_dialogue", "aggressive"))),
    event("setting.changed", key=st.just("brief_recent_messages"), value=st.integers(0, 3)),
    event("setting.changed", key=st.just("warm_window"), value=st.integers(0, 2)),
    event("setting.changed", key=st.just("session_max_chars"),
          value=st.sampled_from((80, 6000))),
    event("setting.changed", key=st.just("mystery_key"), value=st.integers(0, 2)))

_own = st.one_of(
    st.sampled_from(("user", "assistant", "tool")).flatmap(_message),
    st.sampled_from(("user", "assistant")).flatmap(_message),
    event("message.retracted", message_id=message_ids),
    event("history.summarized", through_message_id=message_ids, summary=words),
    event("tool.used", tool_name=st.sampled_from(("grep", "mcp__gh__issues")),
          server_name=optional(st.just("gh")), ok=optional(st.booleans())),
    _settings,
    event("card.set", name=st.just("Ava"), description=optional(words),
          mes_example=optional(st.just("{{char}}: hold fast.")), scenario=optional(words)),
    event("item.put", item_id=st.sampled_from(("i1", "i2")),
          kind=st.sampled_from(("character", "summary", "exemplar")), content=words,
          chapter=optional(st.integers(1, 3)), in_scene=optional(st.booleans())),
    event("item.removed", item_id=st.sampled_from(("i1", "i2"))),
    event("chapter.moved", chapter=st.integers(1, 3), scene=optional(words)),
    event("observation.recorded", kind=st.sampled_from(("change", "finding")), content=words))
_scope = st.one_of(
    _settings,
    event("tool.registered", name=st.sampled_from(("grep", "mcp__gh__issues")),
          tool_type=st.just("builtin"), description=optional(words)),
    event("source.registered", source_id=st.just("canon"), version=st.just("1"),
          trust=st.sampled_from((0.25, 1.0))),
    event("snippet.added", snippet_id=st.sampled_from(("n1", "n2")), source_id=st.just("canon"),
          source_version=st.just("1"), text=words, entities=st.just(["e1"])),
    event("entity.put", entity_id=st.just("e1"), name=st.just("E"),
          facts=st.just([{"text": "the lamp is lit", "critical": True}]), tags=st.just([])))
_peer = st.one_of(
    event("tool.used", tool_name=st.just("grep")),
    st.just("user").flatmap(_message),
    event("observation.recorded", kind=st.just("change"), content=words))

any_step = st.one_of(
    st.tuples(st.just(SESSION), _own), st.tuples(st.just(SESSION), _own),
    st.tuples(st.just(SESSION), _own), st.tuples(st.just(SCOPE), _scope),
    st.tuples(st.just(PEER), _peer))
clock_steps = st.sampled_from((0, 1, 60, 3600, 86_400))
sequences = st.lists(st.tuples(clock_steps, any_step), min_size=6, max_size=24)


def _write(ledger: Ledger, clock: MovableClock,
           sequence: list[tuple[int, tuple[str, dict[str, Any]]]]) -> None:
    ledger.append(SESSION, {"type": "session.started", "data": {"scope": "a"}})
    ledger.append(PEER, {"type": "session.started", "data": {"scope": "a"}})
    ledger.append(SESSION, {"type": "message.appended",
                            "data": {"role": "user", "content": "hello"}})
    for seconds, (stream, drawn) in sequence:
        clock.now += timedelta(seconds=seconds)
        # An event the log refuses (say, a summary of an unknown id) writes nothing.
        with suppress(LedgerError):
            ledger.append(stream, drawn)


def _check(ledger: Ledger) -> None:
    """Every step of every profile's timeline equals a replay at its position."""
    for profile in PROFILES:
        for step in ledger.iter_timeline(SESSION, profile=profile):
            again = ledger.replay(SESSION, step.position, profile=profile)
            assert step.assembly.digest == again.digest, (profile, step.step)
            assert step.assembly.policy_version == again.policy_version
            assert step.assembly.decisions == again.decisions, (profile, step.step)


EXAMPLES = 12


def test_every_timeline_step_equals_its_replay_sqlite(sqlite_template: Path) -> None:  # noqa: F811
    @settings(max_examples=EXAMPLES, **COMMON)  # type: ignore[arg-type]
    @given(sequence=sequences)
    def check(sequence: list[tuple[int, tuple[str, dict[str, Any]]]]) -> None:
        clock = MovableClock()
        clock.now = T0
        with sqlite_ledger(sqlite_template, clock) as ledger:
            _write(ledger, clock, sequence)
            _check(ledger)

    check()


@pytest.mark.postgres
def test_every_timeline_step_equals_its_replay_postgres() -> None:
    require_postgres()

    @settings(max_examples=max(2, EXAMPLES // 3), **COMMON)  # type: ignore[arg-type]
    @given(sequence=sequences)
    def check(sequence: list[tuple[int, tuple[str, dict[str, Any]]]]) -> None:
        clock = MovableClock()
        with postgres_ledger(clock) as ledger:
            _write(ledger, clock, sequence)
            _check(ledger)

    check()
