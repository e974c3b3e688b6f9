"""One b-tree per tool use: ``ix_tool_uses_used_at`` goes.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-23

Fewer b-trees per commit: a ``tool.used`` append wrote the events table's four
b-trees, the session row, ``tool_usage``, ``tool_uses`` and this index: one page more than
any other event of the mix. The nightly job's two readers of the index (one day of uses,
and pruning the uses before a day) now seek the ``tool_uses`` key per known
``(scope, tool_name)`` pair (``tool_usage`` holds one row per pair ever used), so a day
still costs what it holds plus one seek per tool, never the retention. Rows are untouched.
"""

from __future__ import annotations

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_tool_uses_used_at", table_name="tool_uses")


def downgrade() -> None:
    op.create_index("ix_tool_uses_used_at", "tool_uses", ["used_at"])
