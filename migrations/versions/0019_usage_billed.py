"""What providers billed, rolled up: ``usage_daily_billed``.

The nightly job sums ``usage.reported`` events per scope, model and UTC day: the calls,
input, output and cached tokens, and their cost (NULL when no report of the day gave
one). Like the other ``usage_daily_*`` tables, the job owns it; rebuilds never touch it.

Written out explicitly, not imported from the live tables, so the revision keeps creating
this schema whatever later releases do to the code.

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    op.create_table(
        "usage_daily_billed",
        sa.Column("scope", sa.Text, primary_key=True),
        sa.Column("model", sa.String(200), primary_key=True),
        sa.Column("day", sa.Date, primary_key=True),
        sa.Column("calls", sa.Integer, nullable=False),
        sa.Column("input_tokens", sa.BigInteger, nullable=False),
        sa.Column("output_tokens", sa.BigInteger, nullable=False),
        sa.Column("cached_tokens", sa.BigInteger, nullable=False),
        sa.Column("cost", sa.Float),
        **({"sqlite_with_rowid": False} if sqlite else {}),
    )
    op.create_index("ix_usage_daily_billed_day", "usage_daily_billed", ["day"])


def downgrade() -> None:
    op.drop_table("usage_daily_billed")
