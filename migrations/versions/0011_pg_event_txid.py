"""PostgreSQL writers without a table lock: each event's transaction id.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-23

``events.txid``: on PostgreSQL, the id of the transaction that appended the event (taken
inside the short position lock, see ``store.backends.pg_writes``), or when that
transaction had an id before its append, the snapshot's next id at the insert. Positions
and ``txid`` rise together, so a catch-up reader stops below any append still in progress
and never skips one that commits late. Rows written before this revision (and every SQLite row) keep
NULL: they are committed, so readers treat them as settled. No existing row is rewritten
(events are immutable).

Inline projections write no checkpoint per append (0008), so concurrent writers on other
streams share no checkpoint row either.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("events", sa.Column("txid", sa.BigInteger))


def downgrade() -> None:
    # Plain ALTER on both (SQLite >= 3.35): a batch copy would drop the events triggers.
    op.execute("ALTER TABLE events DROP COLUMN txid")
