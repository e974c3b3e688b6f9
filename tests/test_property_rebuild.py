"""Invariant: for any sequence of events, at every prefix, the projections built one event
at a time equal the projections rebuilt from scratch.

Random sequences cover every event type over several sessions and scopes: retractions of
real and unknown ids, summaries, repeated message ids, tool uses, settings in both kinds of
stream, and a clock that moves forward (sometimes not at all, once in a while backwards).
After each append the incremental tables are dumped, every projection is rebuilt in place,
and the dumps must match. Equal states mean the next step continues from the same state.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import closing, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from conftest import PG_URL, pg_schema_url, require_postgres
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxledger import Ledger
from ctxledger.projections.checkpoints import checkpoints
from ctxledger.projections.registry import builtin_projections
from ctxledger.projections.session_stats import ROLES, messages, sessions
from ctxledger.projections.tool_usage_tables import tool_usage, tool_uses, tool_uses_late
from ctxledger.store.errors import StreamRuleError

SESSIONS = ("s1", "s2")
SCOPES = ("a", "b")
MESSAGE_IDS = ("m1", "m2")
UNKNOWN_ID = "ghost"
T0 = datetime(2026, 1, 1, tzinfo=UTC)

# -- event strategies ---------------------------------------------------------------------

words = st.text(alphabet="abc xyz", max_size=6)
maybe = st.none() | st.booleans()
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | words,
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(words, inner, max_size=2),
    max_leaves=4)

OMIT = object()
"""Drawn for an optional field that the event leaves out."""


def event(type_: str, **fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """``{"type", "data"}`` where a field drawn as the ``OMIT`` marker is left out."""
    def build(data: dict[str, Any]) -> dict[str, Any]:
        return {"type": type_, "data": {k: v for k, v in data.items() if v is not OMIT}}
    return st.fixed_dictionaries(fields).map(build)


def optional(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.just(OMIT) | strategy


message_ids = st.sampled_from(MESSAGE_IDS)
any_message_id = st.sampled_from((*MESSAGE_IDS, UNKNOWN_ID))
card_text = st.sampled_from(("", "Ava", "A pilot", None))

def at(streams: tuple[str, ...], events: st.SearchStrategy[dict[str, Any]]
       ) -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
    return st.tuples(st.sampled_from(streams), events)


CALL_IDS = ("c1", "c2", "c3")
"""Few call ids, so a call reported by a message and by ``tool.used`` meets itself."""


def chat_message(role: str) -> st.SearchStrategy[dict[str, Any]]:
    """A message of ``role``: a tool result names a call; an assistant message may call
    tools (each call a tool use, counted once per call id)."""
    extra: dict[str, st.SearchStrategy[Any]] = {}
    if role == "tool":
        extra["tool_call_id"] = st.sampled_from(CALL_IDS)
    if role == "assistant":
        calls = st.lists(st.tuples(st.sampled_from(CALL_IDS),
                                   st.sampled_from(("grep", "mcp__gh__issues"))),
                         min_size=1, max_size=2, unique_by=lambda call: call[0])
        extra["tool_calls"] = optional(calls.map(lambda drawn: [
            {"id": call_id, "type": "function",
             "function": {"name": name, "arguments": "{}"}} for call_id, name in drawn]))
    return event("message.appended", role=st.just(role), content=words,
                 message_id=optional(message_ids), **extra)


SCOPE_STREAMS = tuple(f"scope:{s}" for s in SCOPES)
setting_changed = event("setting.changed", key=st.sampled_from(("k1", "k2")), value=json_values)

# (weight, stream and event): the events whose folding reads prior state (retractions,
# repeated ids, summaries, tool uses, scope moves) are drawn most often. The first entry
# is drawn a little more than its weight says.
WEIGHTED = [
    (8, at(SESSIONS, st.sampled_from(ROLES).flatmap(chat_message))),
    (2, at(SESSIONS, event("session.started", scope=optional(st.sampled_from(SCOPES)),
                           title=optional(words)))),
    (1, at(SESSIONS, event("session.ended", summary=optional(words)))),
    (3, at(SESSIONS, event("message.retracted", message_id=any_message_id))),
    (2, at(SESSIONS, event("history.summarized", through_message_id=any_message_id,
                           summary=words))),
    (5, at(SESSIONS, event("tool.used", call_id=optional(st.sampled_from(CALL_IDS)),
                           tool_name=st.sampled_from(("grep", "grep", "mcp__gh__issues")),
                           server_name=optional(st.sampled_from(("gh", "fs"))),
                           ok=optional(st.booleans())))),
    (2, at(SESSIONS, setting_changed)),
    (2, at(SCOPE_STREAMS, setting_changed)),
    (1, at(SESSIONS, event("card.set", name=optional(card_text), scenario=optional(card_text),
                           tags=optional(st.lists(words, max_size=2))))),
    (1, at(SESSIONS, event("chapter.moved", chapter=st.integers(1, 4),
                           scene=optional(words)))),
    (1, at(SESSIONS, event("item.put", item_id=st.sampled_from(("i1", "i2")),
                           kind=st.sampled_from(("character", "summary", "exemplar")),
                           content=words, chapter=optional(st.integers(1, 3)),
                           in_scene=optional(maybe), pov=optional(maybe)))),
    (1, at(SESSIONS, event("item.removed", item_id=st.sampled_from(("i1", "i2", "i9"))))),
    (2, at(SESSIONS, event("observation.recorded", kind=st.sampled_from(("change", "finding")),
                           content=words, source=optional(words)))),
    (1, at(SESSIONS, event("document.put", doc_id=st.sampled_from(("d1", "d2")),
                           kind=st.sampled_from(("text", "dep_graph")),
                           content=words | st.dictionaries(words, st.integers(0, 3),
                                                           max_size=2)))),
    (1, at(SESSIONS, event("persona.set", agent_id=st.sampled_from(("ava", "bo")),
                           knowledge_scope=st.lists(words, max_size=2),
                           beliefs=optional(words)))),
    (1, at(SESSIONS, event("context.assembled", profile=st.just("card"),
                           policy_version=st.just("1"), position=st.integers(0, 50),
                           now=st.just("2026-01-01T00:00:00Z"), digest=st.just("0" * 64)))),
    (1, at(SCOPE_STREAMS, event("tool.registered",
                                name=st.sampled_from(("grep", "mcp__gh__issues")),
                                tool_type=st.sampled_from(("builtin", "mcp_tool")),
                                server_name=optional(st.just("gh")),
                                description=optional(words)))),
    (1, at(SCOPE_STREAMS, event("tool.removed",
                                name=st.sampled_from(("grep", "mcp__gh__issues", "nope"))))),
    (1, at(SCOPE_STREAMS, event("source.registered", source_id=st.sampled_from(("canon", "wiki")),
                                version=st.sampled_from(("1", "2")),
                                trust=st.sampled_from((0.0, 0.25, 1.0)),
                                neutral=optional(maybe)))),
    (1, at(SCOPE_STREAMS, event("snippet.added", snippet_id=st.sampled_from(("n1", "n2")),
                                source_id=st.just("canon"),
                                source_version=st.sampled_from(("1", "2")), text=words,
                                entities=st.lists(st.sampled_from(("e1", "e2")), max_size=2)))),
    (1, at(SCOPE_STREAMS, event("entity.put", entity_id=st.sampled_from(("e1", "e2")),
                                name=st.just("E"),
                                facts=st.lists(st.fixed_dictionaries(
                                    {"text": words, "critical": st.booleans()}), max_size=2),
                                tags=st.lists(words, max_size=2)))),
    (1, at(("system",), event("rollup.completed",
                              day=st.sampled_from(("2026-01-01", "2026-01-02")),
                              rows=st.integers(0, 3), digest=st.just("d"),
                              # Prunes tool uses: days the clock steps reach.
                              prune_before=optional(st.sampled_from(
                                  ("2026-01-01", "2026-01-02", "2026-01-05", "2026-01-20")))))),
]
# A fork's copies (counting or not) of the events whose scope-wide effect a copy changes.
_fork_marks = st.sampled_from(({"forked_from": "elsewhere"},
                               {"forked_from": "elsewhere", "fork_counts": "true"}))
_copyable = st.one_of(
    event("tool.used", tool_name=st.sampled_from(("grep", "mcp__gh__issues")),
          server_name=optional(st.just("gh"))),
    event("observation.recorded", kind=st.just("change"), content=words),
    event("message.appended", role=st.just("user"), content=words),
    event("session.started", scope=optional(st.sampled_from(SCOPES))),
    event("session.ended", summary=optional(words)))
WEIGHTED.append((3, at(SESSIONS, st.tuples(_copyable, _fork_marks).map(
    lambda pair: {**pair[0], "metadata": pair[1]}))))

# sampled_from over a weighted list of indices draws branches close to their weights
# (one_of leans towards its first branches).
_BRANCHES = [strategy for _, strategy in WEIGHTED]
any_step = st.sampled_from(
    [i for i, (weight, _) in enumerate(WEIGHTED) for _ in range(weight)]
).flatmap(lambda i: _BRANCHES[i])

# Seconds the clock moves before an append: often not at all, across a window edge, and
# now and then backwards (the tool-usage clamp must fold the same way in both modes).
clock_steps = st.sampled_from((0, 0, 1, 60, 3600, 86_400, 8 * 86_400, -60, -3600))

steps = st.lists(st.tuples(clock_steps, any_step), min_size=12, max_size=40)

# -- the check ----------------------------------------------------------------------------


class MovableClock:
    """The ledger's clock, frozen until the test moves it."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def projection_tables() -> list[sa.Table]:
    return sorted({t for p in builtin_projections() for t in p.tables}, key=lambda t: t.name)


def dump(ledger: Ledger) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every projection table (plus checkpoints), in a canonical order."""
    out = {}
    with ledger.engine.connect() as conn:
        for table in projection_tables():
            out[table.name] = sorted((tuple(r) for r in conn.execute(sa.select(table))),
                                     key=repr)
        # An inline projection is at the head (its stored position is only a mark).
        head = conn.exec_driver_sql("SELECT coalesce(max(position), 0) FROM events").scalar()
        out["checkpoints"] = sorted(
            (name, version, head if inline else position, inline)
            for name, version, position, inline in conn.execute(
                sa.select(checkpoints.c.name, checkpoints.c.version, checkpoints.c.position,
                          checkpoints.c.inline)))
    return out


def check_counts(state: dict[str, list[tuple[Any, ...]]]) -> None:
    """Counters agree with the rows they summarize (no retracted message is counted)."""
    msg_cols = [c.name for c in messages.columns]
    live: dict[tuple[str, str], int] = {}
    for row in state["messages"]:
        m = dict(zip(msg_cols, row, strict=True))
        if not m["retracted"]:
            live[(m["stream_id"], m["role"])] = live.get((m["stream_id"], m["role"]), 0) + 1
    session_cols = [c.name for c in sessions.columns]
    for row in state["sessions"]:
        s = dict(zip(session_cols, row, strict=True))
        by_role = {role: live.get((s["stream_id"], role), 0) for role in ROLES}
        assert {role: s[f"messages_{role}"] for role in ROLES} == by_role
        assert s["messages_total"] == sum(by_role.values())
    uses: dict[tuple[str, str, str], list[tuple[int, datetime]]] = {}
    for scope, name, server, seq, used_at in state["tool_uses"]:
        uses.setdefault((scope, name, server), []).append((seq, used_at))
    late: dict[tuple[str, str, str], list[tuple[int, datetime]]] = {}
    for scope, name, server, seq, used_at in state["tool_uses_late"]:
        late.setdefault((scope, name, server), []).append((seq, used_at))
    for scope, name, server, count, last_used, in_order in state["tool_usage"]:
        key = (scope, name, server)
        # Pruning (rollup.completed prune_before) drops the oldest uses: a suffix is left.
        numbered = sorted(uses.get(key, []))
        assert [seq for seq, _ in numbered] == list(
            range(in_order - len(numbered) + 1, in_order + 1))
        assert [t for _, t in numbered] == sorted(t for _, t in numbered)  # in time order
        if numbered:
            assert numbered[-1][1] == last_used
        # A late use is older than the newest use and numbered by the lifetime count.
        assert all(seq <= count and t < last_used for seq, t in late.get(key, []))
        assert in_order + len(late.get(key, [])) <= count


def run_sequence(ledger: Ledger, clock: MovableClock,
                 sequence: list[tuple[int, tuple[str, dict[str, Any]]]]) -> None:
    for seconds, (stream, ev) in sequence:
        clock.now += timedelta(seconds=seconds)
        try:
            ledger.append(stream, ev)
        except StreamRuleError:
            continue  # refused by the stream's rules (checked in test_stream_rules)
        incremental = dump(ledger)
        check_counts(incremental)
        ledger.rebuild()
        assert dump(ledger) == incremental, f"diverged after {ev['type']} in {stream}"


# Column order of these tables is relied on by check_counts.
assert [c.name for c in tool_usage.columns] == [
    "scope", "tool_name", "server_name", "lifetime_count", "last_used", "in_order"]
assert [c.name for c in tool_uses.columns] == [c.name for c in tool_uses_late.columns] == [
    "scope", "tool_name", "server_name", "seq", "used_at"]

# -- backends -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated, empty SQLite database; each example starts from a copy (no migration)."""
    path = tmp_path_factory.mktemp("template") / "ledger.db"
    Ledger.open(f"sqlite:///{path}").close()
    return path


@contextmanager
def sqlite_ledger(template: Path, clock: MovableClock) -> Iterator[Ledger]:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "ledger.db"
        path.touch(mode=0o600)  # owner-only, as Ledger.open makes its files
        # The backup API copies committed pages wherever they are (main file or WAL).
        with closing(sqlite3.connect(template)) as source, \
                closing(sqlite3.connect(path)) as target:
            source.backup(target)
        with Ledger.open(f"sqlite:///{path}", clock=clock, upgrade=False) as ledger:
            yield ledger


@contextmanager
def postgres_ledger(clock: MovableClock) -> Iterator[Ledger]:
    schema = f"p_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(PG_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
        try:
            with Ledger.open(pg_schema_url(schema), clock=clock) as ledger:
                yield ledger
        finally:
            with admin.connect() as conn:
                conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
    finally:
        admin.dispose()


COMMON = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
# Sized for CI; set CTXLEDGER_PROPERTY_EXAMPLES for a deeper run (PostgreSQL gets a fifth).
SQLITE_EXAMPLES = int(os.environ.get("CTXLEDGER_PROPERTY_EXAMPLES", "40"))
POSTGRES_EXAMPLES = max(1, SQLITE_EXAMPLES // 5)


def test_rebuild_equals_incremental_sqlite(sqlite_template: Path) -> None:
    @settings(max_examples=SQLITE_EXAMPLES, **COMMON)  # type: ignore[arg-type]
    @given(sequence=steps)
    def check(sequence: list[tuple[int, tuple[str, dict[str, Any]]]]) -> None:
        clock = MovableClock()
        with sqlite_ledger(sqlite_template, clock) as ledger:
            run_sequence(ledger, clock, sequence)

    check()


@pytest.mark.postgres
def test_rebuild_equals_incremental_postgres() -> None:
    require_postgres()

    @settings(max_examples=POSTGRES_EXAMPLES, **COMMON)  # type: ignore[arg-type]
    @given(sequence=steps)
    def check(sequence: list[tuple[int, tuple[str, dict[str, Any]]]]) -> None:
        clock = MovableClock()
        with postgres_ledger(clock) as ledger:
            run_sequence(ledger, clock, sequence)

    check()

