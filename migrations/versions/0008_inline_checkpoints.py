"""Inline projections write no checkpoint per append (fewer writes per commit).

``projection_checkpoints.inline``: true for a projection applied in every append's own
transaction, which is at the head by construction; its ``position`` is then a mark
refreshed now and then (see ``projections/checkpoints.py``). Existing checkpoints at the
head become inline; those behind stay catch-up ones until the next open brings them up.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("projection_checkpoints",
                  sa.Column("inline", sa.Boolean, nullable=False, server_default=sa.false()))
    op.execute(
        "UPDATE projection_checkpoints SET inline = true WHERE position >= "
        "(SELECT coalesce(max(position), 0) FROM events)")


def downgrade() -> None:
    # Inline checkpoints are at the head: write it down before the flag goes.
    op.execute(
        "UPDATE projection_checkpoints SET position = "
        "(SELECT coalesce(max(position), 0) FROM events) WHERE inline")
    with op.batch_alter_table("projection_checkpoints") as batch:
        batch.drop_column("inline")
