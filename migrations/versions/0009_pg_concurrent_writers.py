"""PostgreSQL writers without a table lock: each event's transaction id, and checkpoint lanes.

Revision ID: 0009
Revises: 0007
Create Date: 2026-11-23

``events.txid``: on PostgreSQL, the id of the transaction that appended the event (taken
inside the short position lock, see ``store.pg_writes``), or when that transaction had an
id before its append, the snapshot's next id at the insert. Positions and ``txid`` rise
together, so a reader takes only events with ``txid`` below its snapshot's ``xmin`` and
never skips one that commits late. Rows written before this revision (and every SQLite
row) keep NULL: they are committed, so readers treat them as settled. No existing row is
rewritten (events are immutable).

``projection_checkpoint_lanes``: inline appends on PostgreSQL advance a projection's
checkpoint in one of 256 lanes (by stream) instead of its single row, so writers on other
streams do not queue on that row until commit. A checkpoint's position is the highest
of its row and its lanes.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    position = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    op.add_column("events", sa.Column("txid", sa.BigInteger))
    op.create_table(
        "projection_checkpoint_lanes",
        sa.Column("name", sa.String(100), primary_key=True),
        sa.Column("lane", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("position", position, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("projection_checkpoint_lanes")
    # Plain ALTER on both (SQLite >= 3.35): a batch copy would drop the events triggers.
    op.execute("ALTER TABLE events DROP COLUMN txid")
