"""Nightly usage rollups: retracted messages, per-server tool figures, the scheduler's jobs.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22

- ``usage_daily_messages.messages`` becomes ``appended`` and gains ``retracted``;
- ``usage_daily_servers`` holds MCP tool uses summed per server;
- ``tool_uses`` gets an index on ``used_at`` (the job reads and prunes by day);
- ``apscheduler_jobs`` is APScheduler 3's ``SQLAlchemyJobStore`` table, created here so
  the schema stays Alembic's (the job store's own ``create`` then finds it).

Written out explicitly (not imported from the live table definitions) so this revision
keeps creating exactly this schema whatever later releases do to the code.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    ts = sa.DateTime(timezone=True)

    with op.batch_alter_table("usage_daily_messages") as batch:
        batch.alter_column("messages", new_column_name="appended",
                           existing_type=sa.Integer, existing_nullable=False)
        # The default only fills rows written before this revision; new rows name it.
        batch.add_column(sa.Column("retracted", sa.Integer, nullable=False,
                                   server_default="0"))
    with op.batch_alter_table("usage_daily_messages") as batch:
        batch.alter_column("retracted", server_default=None, existing_type=sa.Integer,
                           existing_nullable=False)

    op.create_index("ix_tool_uses_used_at", "tool_uses", ["used_at"])

    op.create_table(
        "usage_daily_servers",
        sa.Column("scope", sa.Text, primary_key=True),
        sa.Column("server_name", sa.Text, primary_key=True),
        sa.Column("day", sa.Date, primary_key=True),
        sa.Column("uses", sa.Integer, nullable=False),
        sa.Column("last_used", ts),
    )
    op.create_index("ix_usage_daily_servers_day", "usage_daily_servers", ["day"])

    op.create_table(
        "apscheduler_jobs",
        sa.Column("id", sa.Unicode(191), primary_key=True),
        sa.Column("next_run_time", sa.Float(25)),
        sa.Column("job_state", sa.LargeBinary, nullable=False),
    )
    op.create_index("ix_apscheduler_jobs_next_run_time", "apscheduler_jobs",
                    ["next_run_time"])


def downgrade() -> None:
    op.drop_table("apscheduler_jobs")
    op.drop_table("usage_daily_servers")
    op.drop_index("ix_tool_uses_used_at", "tool_uses")
    with op.batch_alter_table("usage_daily_messages") as batch:
        batch.drop_column("retracted")
        batch.alter_column("appended", new_column_name="messages",
                           existing_type=sa.Integer, existing_nullable=False)
