"""Rolled-up spans: ``usage_rollup_days`` keys a span of days and keeps what the job read.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-24

``rollup.completed`` may now cover a stretch of empty days (``last_day``) and says up to
which log position the job read every event (``read_through``), so a run re-rolls a day
that received events later. The table is keyed ``(day, last_day)`` and gains
``read_through`` and ``prune_before``. It is a projection of the ``system`` stream: it is
recreated empty here and the projection (version 2) is rebuilt from the events when the
ledger opens. The job's ``usage_daily_*`` tables are untouched.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

_POSITION = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.drop_table("usage_rollup_days")
    op.create_table(
        "usage_rollup_days",
        sa.Column("day", sa.String(10), primary_key=True),
        sa.Column("last_day", sa.String(10), primary_key=True),
        sa.Column("rows", sa.Integer, nullable=False),
        sa.Column("digest", sa.Text, nullable=False),
        sa.Column("position", _POSITION, nullable=False),
        sa.Column("read_through", _POSITION, nullable=False),
        sa.Column("prune_before", sa.String(10)),
        sqlite_with_rowid=False,
    )


def downgrade() -> None:
    op.drop_table("usage_rollup_days")
    op.create_table(
        "usage_rollup_days",
        sa.Column("day", sa.String(10), primary_key=True),
        sa.Column("rows", sa.Integer, nullable=False),
        sa.Column("digest", sa.Text, nullable=False),
        sa.Column("position", _POSITION, nullable=False),
        sqlite_with_rowid=False,
    )
