"""Scope lorebooks; cards on scope streams.

- ``scope_lorebooks`` holds each scope's lorebooks (``lorebook.set``).
- ``card_fields`` now also holds scope cards and a whole card's empty fields: the card
  projection's version changes, so the runner rebuilds it from the log on the next open.

Written out explicitly, not imported from the live tables, so the revision keeps creating
this schema whatever later releases do to the code.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    kwargs = {"sqlite_with_rowid": False} if op.get_bind().dialect.name == "sqlite" else {}
    position = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    op.create_table(
        "scope_lorebooks",
        sa.Column("scope", sa.Text, primary_key=True),
        sa.Column("book_id", sa.String(200), primary_key=True),
        sa.Column("book", sa.Text, nullable=False),
        sa.Column("position", position, nullable=False),
        **kwargs,
    )


def downgrade() -> None:
    op.drop_table("scope_lorebooks")
