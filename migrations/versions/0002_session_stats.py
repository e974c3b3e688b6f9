"""Session stats and messages.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    position = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    ts = sa.DateTime(timezone=True)
    op.create_table(
        "sessions",
        sa.Column("stream_id", sa.String(200), primary_key=True),
        sa.Column("scope", sa.String(200), nullable=False),
        sa.Column("title", sa.Text),
        sa.Column("agent", sa.String(200)),
        sa.Column("started_at", ts),
        sa.Column("ended_at", ts),
        sa.Column("ended_position", position),
        sa.Column("end_summary", sa.Text),
        *(sa.Column(f"messages_{role}", sa.Integer, nullable=False, server_default="0")
          for role in ("system", "user", "assistant", "tool")),
        sa.Column("messages_total", sa.Integer, nullable=False, server_default="0"),
        sa.Column("messages_retracted", sa.Integer, nullable=False, server_default="0"),
        sa.Column("last_activity", ts),
        sa.Column("last_position", position, nullable=False),
        sa.Column("chapter", sa.Integer),
        sa.Column("scene", sa.Text),
        sa.Column("summary_text", sa.Text),
        sa.Column("summary_through_message_id", sa.String(200)),
        sa.Column("summary_through_seq", sa.Integer),
        sa.Column("summary_position", position),
    )
    op.create_index("ix_sessions_scope_ended", "sessions", ["scope", "ended_position"])
    op.create_table(
        "messages",
        sa.Column("stream_id", sa.String(200), primary_key=True),
        sa.Column("message_id", sa.String(200), primary_key=True),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("role", sa.String(20), nullable=False),
        sa.Column("name", sa.String(200)),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column("retracted", sa.Boolean, nullable=False),
        sa.Column("position", position, nullable=False),
        sa.Column("recorded_at", ts, nullable=False),
    )
    op.create_index("ix_messages_stream_seq", "messages", ["stream_id", "seq"])


def downgrade() -> None:
    op.drop_table("messages")
    op.drop_table("sessions")
