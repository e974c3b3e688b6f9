"""The built-in projections' tables, the usage rollup tables and the token caches.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23

Written out explicitly (not imported from the live table definitions) so this revision
keeps creating exactly this schema whatever later releases do to the code.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_ITEM_FLAGS = ("active", "in_scene", "pov", "evolving", "critical")


def upgrade() -> None:
    position = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    ts = sa.DateTime(timezone=True)

    op.create_table(
        "scope_settings",
        sa.Column("scope", sa.Text, primary_key=True),
        sa.Column("key", sa.Text, primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
        sa.Column("position", position, nullable=False),
    )
    op.create_table(
        "session_settings",
        sa.Column("stream_id", sa.String(200), primary_key=True),
        sa.Column("key", sa.Text, primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
        sa.Column("position", position, nullable=False),
    )

    op.create_table(
        "scope_tools",
        sa.Column("scope", sa.Text, primary_key=True),
        sa.Column("name", sa.Text, primary_key=True),
        sa.Column("tool_type", sa.String(20), nullable=False),
        sa.Column("server_name", sa.Text),
        sa.Column("description", sa.Text),
        sa.Column("position", position, nullable=False),
    )

    for name in ("tool_usage_session_scopes", "observation_session_scopes"):
        op.create_table(
            name,
            sa.Column("stream_id", sa.String(200), primary_key=True),
            sa.Column("scope", sa.Text, nullable=False),
        )
    op.create_table(
        "tool_usage",
        sa.Column("scope", sa.Text, primary_key=True),
        sa.Column("tool_name", sa.Text, primary_key=True),
        sa.Column("server_name", sa.Text),
        sa.Column("lifetime_count", sa.Integer, nullable=False),
        sa.Column("last_used", ts, nullable=False),
    )
    op.create_table(
        "tool_uses",
        sa.Column("scope", sa.Text, primary_key=True),
        sa.Column("tool_name", sa.Text, primary_key=True),
        sa.Column("seq", sa.Integer, primary_key=True),
        sa.Column("used_at", ts, nullable=False),
    )
    op.create_index("ix_tool_uses_window", "tool_uses",
                    ["scope", "tool_name", "used_at", "seq"])

    op.create_table(
        "usage_daily_tools",
        sa.Column("scope", sa.Text, primary_key=True),
        sa.Column("tool_name", sa.Text, primary_key=True),
        sa.Column("day", sa.Date, primary_key=True),
        sa.Column("uses", sa.Integer, nullable=False),
        sa.Column("last_used", ts),
    )
    op.create_index("ix_usage_daily_tools_day", "usage_daily_tools", ["day"])
    op.create_table(
        "usage_daily_messages",
        sa.Column("scope", sa.Text, primary_key=True),
        sa.Column("day", sa.Date, primary_key=True),
        sa.Column("messages", sa.Integer, nullable=False),
        sa.Column("sessions", sa.Integer, nullable=False),
    )
    op.create_index("ix_usage_daily_messages_day", "usage_daily_messages", ["day"])
    op.create_table(
        "usage_daily_tokens",
        sa.Column("scope", sa.Text, primary_key=True),
        sa.Column("profile", sa.String(100), primary_key=True),
        sa.Column("day", sa.Date, primary_key=True),
        sa.Column("assemblies", sa.Integer, nullable=False),
        sa.Column("tokens_total", sa.BigInteger, nullable=False),
        sa.Column("tokens_max", sa.Integer, nullable=False),
    )
    op.create_index("ix_usage_daily_tokens_day", "usage_daily_tokens", ["day"])
    op.create_table(
        "usage_rollup_days",
        sa.Column("day", sa.String(10), primary_key=True),
        sa.Column("rows", sa.Integer, nullable=False),
        sa.Column("digest", sa.Text, nullable=False),
        sa.Column("position", position, nullable=False),
    )

    op.create_table(
        "card_fields",
        sa.Column("stream_id", sa.String(200), primary_key=True),
        sa.Column("field", sa.String(100), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
        sa.Column("position", position, nullable=False),
    )

    op.create_table(
        "context_items",
        sa.Column("stream_id", sa.String(200), primary_key=True),
        sa.Column("item_id", sa.Text, primary_key=True),
        sa.Column("kind", sa.String(40), nullable=False),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column("chapter", sa.Integer),
        *(sa.Column(flag, sa.Boolean) for flag in _ITEM_FLAGS),
        sa.Column("position", position, nullable=False),
    )
    op.create_index("ix_context_items_stream_position", "context_items",
                    ["stream_id", "position"])

    op.create_table(
        "observations",
        sa.Column("scope", sa.Text, primary_key=True),
        sa.Column("position", position, primary_key=True),
        sa.Column("stream_id", sa.String(200), nullable=False),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column("source", sa.Text),
        sa.Column("recorded_at", ts, nullable=False),
    )

    op.create_table(
        "documents",
        sa.Column("stream_id", sa.String(200), primary_key=True),
        sa.Column("doc_id", sa.Text, primary_key=True),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column("position", position, nullable=False),
    )

    op.create_table(
        "knowledge_sources",
        sa.Column("scope", sa.Text, primary_key=True),
        sa.Column("source_id", sa.Text, primary_key=True),
        sa.Column("version", sa.Text, primary_key=True),
        sa.Column("trust", sa.Double, nullable=False),
        sa.Column("neutral", sa.Boolean),
        sa.Column("compliance", sa.Text),
        sa.Column("position", position, nullable=False),
    )
    op.create_table(
        "knowledge_snippets",
        sa.Column("scope", sa.Text, primary_key=True),
        sa.Column("snippet_id", sa.Text, primary_key=True),
        sa.Column("source_id", sa.Text, nullable=False),
        sa.Column("source_version", sa.Text, nullable=False),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("entities", sa.Text, nullable=False),
        sa.Column("position", position, nullable=False),
    )
    op.create_table(
        "knowledge_entities",
        sa.Column("scope", sa.Text, primary_key=True),
        sa.Column("entity_id", sa.Text, primary_key=True),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("facts", sa.Text, nullable=False),
        sa.Column("tags", sa.Text, nullable=False),
        sa.Column("position", position, nullable=False),
    )
    op.create_table(
        "personas",
        sa.Column("stream_id", sa.String(200), primary_key=True),
        sa.Column("agent_id", sa.Text, nullable=False),
        sa.Column("knowledge_scope", sa.Text, nullable=False),
        sa.Column("beliefs", sa.Text),
        sa.Column("position", position, nullable=False),
    )

    op.create_table(
        "token_counts",
        sa.Column("encoding", sa.String(50), primary_key=True),
        sa.Column("content_hash", sa.String(64), primary_key=True),
        sa.Column("tokens", sa.Integer, nullable=False),
        sa.Column("method", sa.String(50), nullable=False),
    )
    op.create_table(
        "history_token_memo",
        sa.Column("stream_id", sa.String(200), primary_key=True),
        sa.Column("encoding", sa.String(50), primary_key=True),
        sa.Column("through_seq", sa.Integer, primary_key=True),
        sa.Column("retracted_count", sa.Integer, nullable=False),
        sa.Column("tokens", sa.Integer, nullable=False),
    )


def downgrade() -> None:
    for name in (
        "history_token_memo", "token_counts", "personas", "knowledge_entities",
        "knowledge_snippets", "knowledge_sources", "documents", "observations",
        "context_items", "card_fields", "usage_rollup_days", "usage_daily_tokens",
        "usage_daily_messages", "usage_daily_tools", "tool_uses", "tool_usage",
        "observation_session_scopes", "tool_usage_session_scopes", "scope_tools",
        "session_settings", "scope_settings",
    ):
        op.drop_table(name)
