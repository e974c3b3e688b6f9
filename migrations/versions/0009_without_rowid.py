"""Fewer b-trees per commit.

- SQLite: the projection tables keyed by text, with small rows, become ``WITHOUT ROWID``:
  the primary key *is* the table, so a row written costs one b-tree instead of two (the
  rowid table and the key's own index). Tables holding free text (items, documents,
  knowledge, observations) keep their rowid.
- ``tool_uses`` is keyed ``(scope, tool_name, used_at, seq)``: the window seeks read that
  key directly, so ``ix_tool_uses_window`` (the same columns) goes. ``seq`` still rises
  with ``used_at`` per tool, so the old key stays unique.

Rows are copied as they are: no projection changes meaning, nothing is rebuilt.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-23
"""

from __future__ import annotations

import re

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

TABLES = (
    "sessions", "session_settings", "scope_settings", "tool_usage", "tool_uses",
    "tool_usage_session_scopes", "observation_session_scopes", "scope_tools",
    "scope_members", "card_fields", "usage_daily_tools", "usage_daily_servers",
    "usage_daily_messages", "usage_daily_tokens", "usage_rollup_days", "token_counts",
    "history_token_memo",
)
"""The tables written on the hot paths (or small and keyed by text)."""

_OLD_TOOL_USES_KEY = "PRIMARY KEY (scope, tool_name, seq)"
_NEW_TOOL_USES_KEY = "PRIMARY KEY (scope, tool_name, used_at, seq)"


def _rebuild_sqlite(table: str, *, with_rowid: bool, key: tuple[str, str] | None = None,
                    drop_indexes: tuple[str, ...] = ()) -> None:
    """Recreate ``table`` from its own CREATE statement (same columns, types, defaults),
    as or as not ``WITHOUT ROWID``, copying every row and its named indexes."""
    bind = op.get_bind()
    create = bind.exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).scalar()
    indexes = [sql for name, sql in bind.exec_driver_sql(
        "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ?"
        " AND sql IS NOT NULL", (table,)).all() if name not in drop_indexes]
    assert create is not None, table
    body = re.sub(r"\s*WITHOUT ROWID\s*$", "", create.strip())
    if key is not None:
        old, new = key
        assert old in body, (table, body)
        body = body.replace(old, new)
    body = body.replace(f"CREATE TABLE {table}", "CREATE TABLE _ctxledger_new", 1)
    body = body.replace(f'CREATE TABLE "{table}"', "CREATE TABLE _ctxledger_new", 1)
    op.execute(body + ("" if with_rowid else " WITHOUT ROWID"))
    op.execute(f"INSERT INTO _ctxledger_new SELECT * FROM {table}")
    op.execute(f"DROP TABLE {table}")
    op.execute(f"ALTER TABLE _ctxledger_new RENAME TO {table}")
    for sql in indexes:
        op.execute(sql)


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for table in TABLES:
            if table == "tool_uses":
                _rebuild_sqlite(table, with_rowid=False,
                                key=(_OLD_TOOL_USES_KEY, _NEW_TOOL_USES_KEY),
                                drop_indexes=("ix_tool_uses_window",))
            else:
                _rebuild_sqlite(table, with_rowid=False)
        return
    op.drop_index("ix_tool_uses_window", table_name="tool_uses")
    op.drop_constraint("tool_uses_pkey", "tool_uses", type_="primary")
    op.create_primary_key("tool_uses_pkey", "tool_uses",
                          ["scope", "tool_name", "used_at", "seq"])


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for table in TABLES:
            if table == "tool_uses":
                _rebuild_sqlite(table, with_rowid=True,
                                key=(_NEW_TOOL_USES_KEY, _OLD_TOOL_USES_KEY))
            else:
                _rebuild_sqlite(table, with_rowid=True)
    else:
        op.drop_constraint("tool_uses_pkey", "tool_uses", type_="primary")
        op.create_primary_key("tool_uses_pkey", "tool_uses", ["scope", "tool_name", "seq"])
    op.create_index("ix_tool_uses_window", "tool_uses",
                    ["scope", "tool_name", "used_at", "seq"])
