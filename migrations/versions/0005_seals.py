"""Seals: the whole log as one chain, sealed up to positions no open transaction can fill.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22

Written out explicitly (not imported from the live table definitions) so this revision
keeps creating exactly this schema whatever later releases do to the code. Existing logs
need no data migration: their first ``seal`` covers every event from the start.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_MESSAGE = "seals are immutable: UPDATE and DELETE are rejected"


def upgrade() -> None:
    position = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    op.create_table(
        "seals",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("position", position, nullable=False),
        sa.Column("events", position, nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
        sa.Column("key_id", sa.String(16)),
        sa.Column("sealed_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("position", name="uq_seals_position"),
    )
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        for action, name in (("UPDATE", "seals_no_update"), ("DELETE", "seals_no_delete")):
            op.execute(
                f"CREATE TRIGGER {name} BEFORE {action} ON seals "
                f"BEGIN SELECT RAISE(ABORT, '{_MESSAGE}'); END"
            )
    else:
        op.execute(
            "CREATE OR REPLACE FUNCTION ctxledger_seals_immutable() RETURNS trigger "
            f"LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION '{_MESSAGE}'; END $$"
        )
        for action, name in (("UPDATE", "seals_no_update"), ("DELETE", "seals_no_delete")):
            op.execute(
                f"CREATE TRIGGER {name} BEFORE {action} ON seals FOR EACH ROW "
                "EXECUTE FUNCTION ctxledger_seals_immutable()"
            )
        op.execute(
            "CREATE TRIGGER seals_no_truncate BEFORE TRUNCATE ON seals "
            "FOR EACH STATEMENT EXECUTE FUNCTION ctxledger_seals_immutable()"
        )


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "sqlite":
        op.execute("DROP FUNCTION IF EXISTS ctxledger_seals_immutable() CASCADE")
    op.drop_table("seals")
