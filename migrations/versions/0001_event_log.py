"""The event log, its immutability triggers, and projection checkpoints.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_MESSAGE = "events are immutable: UPDATE and DELETE are rejected"


def upgrade() -> None:
    position = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    op.create_table(
        "events",
        sa.Column("position", position, sa.Identity(), primary_key=True),
        sa.Column("stream_id", sa.String(200), nullable=False),
        sa.Column("stream_version", sa.Integer, nullable=False),
        sa.Column("event_id", sa.String(36), nullable=False),
        sa.Column("type", sa.String(100), nullable=False),
        sa.Column("schema_version", sa.Integer, nullable=False),
        sa.Column("data", sa.Text, nullable=False),
        sa.Column("metadata", sa.Text, nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("prev_hash", sa.String(64), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
        sa.UniqueConstraint("stream_id", "stream_version", name="uq_events_stream_version"),
        sa.UniqueConstraint("event_id", name="uq_events_event_id"),
    )
    op.create_index("ix_events_recorded_at", "events", ["recorded_at"])
    op.create_table(
        "projection_checkpoints",
        sa.Column("name", sa.String(100), primary_key=True),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("position", position, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        for action, name in (("UPDATE", "events_no_update"), ("DELETE", "events_no_delete")):
            op.execute(
                f"CREATE TRIGGER {name} BEFORE {action} ON events "
                f"BEGIN SELECT RAISE(ABORT, '{_MESSAGE}'); END"
            )
    else:
        op.execute(
            "CREATE OR REPLACE FUNCTION ctxledger_events_immutable() RETURNS trigger "
            f"LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION '{_MESSAGE}'; END $$"
        )
        for action, name in (("UPDATE", "events_no_update"), ("DELETE", "events_no_delete")):
            op.execute(
                f"CREATE TRIGGER {name} BEFORE {action} ON events FOR EACH ROW "
                "EXECUTE FUNCTION ctxledger_events_immutable()"
            )
        op.execute(
            "CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events "
            "FOR EACH STATEMENT EXECUTE FUNCTION ctxledger_events_immutable()"
        )


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "sqlite":
        op.execute("DROP FUNCTION IF EXISTS ctxledger_events_immutable() CASCADE")
    op.drop_table("projection_checkpoints")
    op.drop_table("events")
