"""Tool calls are tool uses; the developer role is counted.

- ``tool_usage_calls`` remembers the tool-call ids each session reported (an assistant
  message's ``tool_calls``, ``tool.used``'s ``call_id``), so a call reported both ways
  counts once. The tool-usage projection's version changes (its uses now include every
  tool call), so the runner rebuilds it from the log on the next open.
- ``sessions.messages_developer`` counts the session's ``developer`` messages.

Written out explicitly, not imported from the live tables, so the revision keeps creating
this schema whatever later releases do to the code.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def _kwargs() -> dict[str, bool]:
    return {"sqlite_with_rowid": False} if op.get_bind().dialect.name == "sqlite" else {}


def upgrade() -> None:
    op.create_table(
        "tool_usage_calls",
        sa.Column("stream_id", sa.String(200), primary_key=True),
        sa.Column("call_id", sa.String(200), primary_key=True),
        **_kwargs(),
    )
    op.add_column("sessions", sa.Column("messages_developer", sa.Integer, nullable=False,
                                        server_default="0"))


def downgrade() -> None:
    op.drop_table("tool_usage_calls")
    # Native on both backends (SQLite 3.35+): a batch copy would lose WITHOUT ROWID.
    op.execute("ALTER TABLE sessions DROP COLUMN messages_developer")
