"""An index on knowledge snippets by (scope, position), for the ``brief`` profile's
incremental snippet index (the scope's latest snippet, and the snippets after one).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-22
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_knowledge_snippets_scope_position", "knowledge_snippets",
                    ["scope", "position"])


def downgrade() -> None:
    op.drop_index("ix_knowledge_snippets_scope_position", table_name="knowledge_snippets")
