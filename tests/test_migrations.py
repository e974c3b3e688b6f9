"""Migrations: a database made at an old revision upgrades with its data kept and its
projections rebuilt; opening a database that is already at head changes nothing.

(Whether the migrated schema matches the SQLAlchemy tables is ``test_schema_drift.py``.)
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.script import ScriptDirectory
from helpers.databases import sibling_database
from helpers.legacy import LegacyEvent, append_through_api, insert_legacy
from helpers.tables import assert_projections_equal_rebuild, dump_projections, raw_events

from ctxledger import Ledger
from ctxledger._migrate import alembic_config, current_revision, head_revision, upgrade
from ctxledger.projections.checkpoints import checkpoints
from ctxledger.projections.session_view import ViewRequest
from ctxledger.store.sql_engine import create_engine


@pytest.fixture
def db_url(empty_db_url: str) -> str:
    """Migrations are tested from scratch: a database nothing has been created in."""
    return empty_db_url


T0 = datetime(2026, 1, 5, 8, 0, tzinfo=UTC)


def revisions() -> list[str]:
    """Every revision, oldest first."""
    script = ScriptDirectory.from_config(alembic_config())
    return [rev.revision for rev in reversed(list(script.walk_revisions()))]


FIRST = revisions()[0]
# The columns every revision has (0011 adds txid, NULL for rows written before it).
EVENT_COLUMNS = ("SELECT position, stream_id, stream_version, event_id, type, schema_version,"
                 " data, metadata, recorded_at, prev_hash, hash FROM events ORDER BY position")
OLD_REVISIONS = revisions()[:-1]


def corpus() -> list[tuple[str, LegacyEvent]]:
    """Events an older release could have written: many types, three interleaved streams.

    Payloads are already in today's normalized form (except the v1 ``tool.used``), so the
    same events appended through today's API give the reference state.
    """
    specs: list[tuple[str, str, dict[str, Any], int]] = [
        ("scope:team", "setting.changed", {"key": "temperature", "value": 0.7}, 1),
        ("chat-1", "session.started", {"scope": "team", "title": "First"}, 1),
        ("scope:team", "tool.registered", {"name": "grep", "tool_type": "builtin"}, 1),
        ("chat-1", "message.appended", {"role": "user", "content": "hi", "message_id": "m1"},
         1),
        ("chat-2", "session.started", {"scope": "team"}, 1),
        ("chat-1", "message.appended",
         {"role": "assistant", "content": "hello", "message_id": "m2"}, 1),
        ("chat-1", "tool.used", {"tool": "grep", "success": True}, 1),
        ("chat-2", "message.appended", {"role": "user", "content": "yo", "message_id": "n1"},
         1),
        ("chat-1", "message.retracted", {"message_id": "m1"}, 1),
        ("chat-2", "tool.used", {"tool_name": "grep", "ok": False}, 2),
        ("chat-1", "chapter.moved", {"chapter": 2, "scene": "harbor"}, 1),
        ("chat-1", "setting.changed", {"key": "temperature", "value": 0.2}, 1),
        ("scope:team", "source.registered", {"source_id": "wiki", "version": "3",
                                             "trust": 0.8}, 1),
        ("chat-2", "card.set", {"name": "Ann", "description": "a sailor"}, 1),
        ("chat-1", "observation.recorded", {"kind": "finding", "content": "tide is high"}, 1),
        ("scope:team", "entity.put", {"entity_id": "ann", "name": "Ann",
                                      "facts": [{"text": "sails", "critical": True}],
                                      "tags": ["crew"]}, 1),
        ("chat-2", "item.put", {"item_id": "i1", "kind": "world", "content": "the sea"}, 1),
        ("chat-1", "history.summarized", {"through_message_id": "m2", "summary": "greeted"},
         1),
        ("chat-2", "document.put", {"doc_id": "plan", "kind": "text", "content": "sail"}, 1),
        ("chat-1", "session.ended", {"summary": "bye"}, 1),
    ]
    return [(stream, LegacyEvent(kind, data, T0 + timedelta(minutes=i), schema_version=sv,
                                 metadata={"actor": "old-release"}))
            for i, (stream, kind, data, sv) in enumerate(specs)]


def build_old_database(url: str, revision: str,
                       items: Sequence[tuple[str, LegacyEvent]]) -> list[str]:
    """Create ``url`` at ``revision`` and write ``items`` as that release would; hashes."""
    engine = create_engine(url)
    try:
        upgrade(engine, revision)
        assert current_revision(engine) == revision
        hashes: list[str] = []
        with engine.begin() as conn:
            for stream, event in items:
                hashes.extend(row.hash for row in insert_legacy(conn, stream, [event]))
        return hashes
    finally:
        engine.dispose()


def test_revisions_form_one_chain_from_0001() -> None:
    assert FIRST == "0001"
    assert revisions()[-1] == head_revision()
    script = ScriptDirectory.from_config(alembic_config())
    assert script.get_heads() == [head_revision()]


@pytest.mark.parametrize("revision", OLD_REVISIONS)
def test_old_database_upgrades_with_data_kept(db_url: str, tmp_path: Path,
                                              revision: str) -> None:
    items = corpus()
    hashes = build_old_database(db_url, revision, items)
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            stored_before = conn.exec_driver_sql(
                EVENT_COLUMNS).all()
    finally:
        engine.dispose()

    with Ledger.open(db_url) as ledger:
        assert current_revision(ledger.engine) == head_revision()
        after = raw_events(ledger)
        assert len(after) == len(items) == ledger.head()
        assert [row[-1] for row in after] == hashes
        with ledger.engine.connect() as conn:
            assert conn.exec_driver_sql(
                EVENT_COLUMNS).all() == stored_before
        report = ledger.verify()
        assert report.ok, report.problems
        assert (report.events, report.streams) == (len(items), 3)
        assert [e.event_id for e in ledger.events()] == [e.event_id for _, e in items]
        assert all(s.position == len(items) and not s.needs_rebuild
                   for s in ledger.projection_status())
        migrated = assert_projections_equal_rebuild(ledger)
        with ledger.engine.connect() as conn:
            session = conn.execute(sa.text(
                "SELECT scope, messages_user, messages_assistant, messages_total,"
                " messages_retracted, chapter, scene, summary_text"
                " FROM sessions WHERE stream_id = 'chat-1'")).one()
        assert tuple(session) == ("team", 0, 1, 1, 1, 2, "harbor", "greeted")

    # Correct, not just self-consistent: a database that always ran today's release.
    with sibling_database(db_url, tmp_path) as reference_url:
        append_through_api(reference_url, items)
        with Ledger.open(reference_url) as reference:
            assert dump_projections(reference) == migrated


def test_upgrading_one_revision_at_a_time_keeps_the_log(db_url: str) -> None:
    items = corpus()
    build_old_database(db_url, FIRST, items)
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            before = conn.exec_driver_sql(EVENT_COLUMNS).all()
        for revision in revisions()[1:]:
            upgrade(engine, revision)
            assert current_revision(engine) == revision
            with engine.connect() as conn:
                assert conn.exec_driver_sql(
                    EVENT_COLUMNS).all() == before
    finally:
        engine.dispose()
    with Ledger.open(db_url) as ledger:
        assert ledger.verify().ok
        assert_projections_equal_rebuild(ledger)


def schema_snapshot(engine: sa.Engine) -> dict[str, Any]:
    """Table and column names, indexes, the Alembic version and every checkpoint row."""
    with engine.connect() as conn:
        inspector = sa.inspect(conn)
        tables = {name: (sorted(c["name"] for c in inspector.get_columns(name)),
                         sorted(str(i["name"]) for i in inspector.get_indexes(name)))
                  for name in sorted(inspector.get_table_names())}
        version = conn.exec_driver_sql("SELECT version_num FROM alembic_version").all()
        marks = conn.execute(sa.select(checkpoints).order_by(checkpoints.c.name)).all()
    return {"tables": tables, "version": version, "checkpoints": marks}


def test_opening_a_migrated_database_again_is_a_no_op(db_url: str) -> None:
    def first_clock() -> datetime:
        return T0

    def later_clock() -> datetime:
        return T0 + timedelta(days=3)

    with Ledger.open(db_url, clock=first_clock) as ledger:
        ledger.append("chat", [{"type": "session.started", "data": {"scope": "x"}},
                               {"type": "message.appended",
                                "data": {"role": "user", "content": "hi"}}])
        events_before = raw_events(ledger)
        projections_before = dump_projections(ledger)
        schema_before = schema_snapshot(ledger.engine)
    # Checkpoints carry updated_at from the clock: a later clock would show any rewrite.
    with Ledger.open(db_url, clock=later_clock) as again:
        assert raw_events(again) == events_before
        assert dump_projections(again) == projections_before
        assert schema_snapshot(again.engine) == schema_before
        assert again.refresh_projections() == []
        assert current_revision(again.engine) == head_revision()


def test_empty_database_is_created_at_head(db_url: str) -> None:
    with Ledger.open(db_url) as ledger:
        assert current_revision(ledger.engine) == head_revision()
        assert ledger.head() == 0 and ledger.verify().ok
        names = {s.name for s in ledger.projection_status()}
        assert names == {p.name for p in ledger.runner.projections}


def _downgrade(engine: sa.Engine, revision: str) -> None:
    from alembic import command

    with engine.begin() as conn:
        command.downgrade(alembic_config(conn), revision)


def test_database_at_0007_with_projections_upgrades_keeping_its_state(db_url: str) -> None:
    """Fewer writes per commit (0008-0010): a database at 0007 *with its projection rows*
    (not rebuilt on open) keeps its log, hashes and state, and reads the same history afterwards.

    The 0007 state is made by today's release, then downgraded: the downgrades put back the
    0007 layout (content in ``messages``, rowid tables, checkpoints at the head)."""
    items = corpus()
    append_through_api(db_url, items)
    with Ledger.open(db_url) as ledger:
        ledger.append("chat-3", [{"type": "session.started", "data": {}},
                                 *({"type": "message.appended",
                                    "data": {"role": "user", "content": f"text {i}"}}
                                   for i in range(4)),
                                 {"type": "message.appended",
                                  "data": {"role": "assistant", "content": "named",
                                           "message_id": "x1"}}])
        first = ledger.events("chat-3")[1].event_id
        ledger.append("chat-3", [{"type": "message.retracted", "data": {"message_id": first}},
                                 {"type": "message.appended",
                                  "data": {"role": "assistant", "content": "again",
                                           "message_id": "x1"}}])
        events_before = raw_events(ledger)
        state_before = dump_projections(ledger)
        history_before = ledger.view("chat-3", ViewRequest(history="full")).history
        assert [m.content for m in history_before.messages] == [
            "text 1", "text 2", "text 3", "again"]
    engine = create_engine(db_url)
    try:
        _downgrade(engine, "0007")
        assert current_revision(engine) == "0007"
        with engine.connect() as conn:
            old = conn.exec_driver_sql(
                "SELECT message_id, seq, content, retracted FROM messages"
                " WHERE stream_id = 'chat-3' ORDER BY seq").all()
            marks = {row[0] for row in conn.exec_driver_sql(
                "SELECT position FROM projection_checkpoints").all()}
        assert [tuple(r) for r in old] == [
            (first, 2, "text 0", 1), (old[1][0], 3, "text 1", 0), (old[2][0], 4, "text 2", 0),
            (old[3][0], 5, "text 3", 0), ("x1", 8, "again", 0)]
        assert marks == {len(events_before)}  # every checkpoint at the head, as 0007 kept them
    finally:
        engine.dispose()
    with Ledger.open(db_url) as ledger:
        assert current_revision(ledger.engine) == head_revision()
        assert raw_events(ledger) == events_before
        assert ledger.verify().ok
        assert all(s.inline and not s.behind for s in ledger.projection_status())
        assert dump_projections(ledger) == state_before
        assert ledger.view("chat-3", ViewRequest(history="full")).history == history_before
        assert_projections_equal_rebuild(ledger)


def _tool_use_indexes(engine: sa.Engine) -> set[str]:
    with engine.connect() as conn:
        return {str(i["name"]) for i in sa.inspect(conn).get_indexes("tool_uses")}


def test_database_at_0011_upgrades_to_one_btree_per_tool_use(db_url: str) -> None:
    """One b-tree for tool uses (0012): ``ix_tool_uses_used_at`` goes; the log, the
    projection rows and the rollup's day reads stay the same."""
    items = corpus()
    append_through_api(db_url, items)
    with Ledger.open(db_url) as ledger:
        ledger.append("chat-1", [{"type": "tool.used", "data": {"tool_name": "grep"}},
                                 {"type": "tool.used", "data": {"tool_name": "grep"}}])
        events_before = raw_events(ledger)
        state_before = dump_projections(ledger)
        assert state_before["tool_uses"]
    engine = create_engine(db_url)
    try:
        _downgrade(engine, "0011")
        assert "ix_tool_uses_used_at" in _tool_use_indexes(engine)
    finally:
        engine.dispose()
    with Ledger.open(db_url) as ledger:
        assert current_revision(ledger.engine) == head_revision()
        assert "ix_tool_uses_used_at" not in _tool_use_indexes(ledger.engine)
        assert raw_events(ledger) == events_before
        assert ledger.verify().ok
        assert dump_projections(ledger) == state_before
        assert_projections_equal_rebuild(ledger)
