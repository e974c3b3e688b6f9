"""The scope_members projection: sessions by scope, with the position each joined.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-22

Written out explicitly (not imported from the live table definitions) so this revision
keeps creating exactly this schema whatever later releases do to the code. The rows are
filled by the projection runner, which rebuilds a projection it has no checkpoint for.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "scope_members",
        sa.Column("scope", sa.Text, primary_key=True),
        sa.Column("stream_id", sa.String(200), primary_key=True),
        sa.Column("position", sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                  nullable=False),
    )


def downgrade() -> None:
    op.drop_table("scope_members")
