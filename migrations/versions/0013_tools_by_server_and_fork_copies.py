"""A tool is its name and server; late tool uses kept at their own time; fork copies marked.

- ``tool_usage`` and ``tool_uses`` are keyed by ``server_name`` too (``''`` for a use that
  names none), so ``create_issue`` of ``github`` and of ``linear`` are two tools, each
  credited to its server. ``tool_usage.in_order`` numbers the uses that came in time order.
- ``tool_uses_late`` holds the uses older than their tool's newest one when they came,
  at their own time (they were stamped with the newest time before).
- ``sessions.copied_versions`` and ``sessions.forked_from`` mark a fork's copies, which
  count toward the scope only when the fork was made to count.

Projection rows change meaning: the three projections' checkpoints are dropped, so the
runner rebuilds them from the log on the next open (as for a new projection). Written
out explicitly, not imported from the live tables, so the revision keeps creating this
schema whatever later releases do to the code.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

_REBUILT = ("tool_usage", "session_stats", "observations")


def _kwargs() -> dict[str, bool]:
    return {"sqlite_with_rowid": False} if op.get_bind().dialect.name == "sqlite" else {}


def _forget_checkpoints() -> None:
    names = ", ".join(f"'{name}'" for name in _REBUILT)
    op.execute(f"DELETE FROM projection_checkpoints WHERE name IN ({names})")


def _uses_table(name: str) -> None:
    op.create_table(
        name,
        sa.Column("scope", sa.Text, nullable=False),
        sa.Column("tool_name", sa.Text, nullable=False),
        sa.Column("server_name", sa.Text, nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("used_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("scope", "tool_name", "server_name", "used_at", "seq",
                                name=f"{name}_pkey"),
        **_kwargs(),
    )


def upgrade() -> None:
    op.drop_table("tool_uses")
    op.drop_table("tool_usage")
    op.create_table(
        "tool_usage",
        sa.Column("scope", sa.Text, primary_key=True),
        sa.Column("tool_name", sa.Text, primary_key=True),
        sa.Column("server_name", sa.Text, primary_key=True),
        sa.Column("lifetime_count", sa.Integer, nullable=False),
        sa.Column("last_used", sa.DateTime(timezone=True), nullable=False),
        sa.Column("in_order", sa.Integer, nullable=False),
        **_kwargs(),
    )
    _uses_table("tool_uses")
    _uses_table("tool_uses_late")
    op.add_column("sessions", sa.Column("copied_versions", sa.Integer, nullable=False,
                                        server_default="0"))
    op.add_column("sessions", sa.Column("forked_from", sa.String(200)))
    _forget_checkpoints()


def downgrade() -> None:
    op.drop_table("tool_uses_late")
    op.drop_table("tool_uses")
    op.drop_table("tool_usage")
    op.create_table(
        "tool_usage",
        sa.Column("scope", sa.Text, primary_key=True),
        sa.Column("tool_name", sa.Text, primary_key=True),
        sa.Column("server_name", sa.Text),
        sa.Column("lifetime_count", sa.Integer, nullable=False),
        sa.Column("last_used", sa.DateTime(timezone=True), nullable=False),
        **_kwargs(),
    )
    op.create_table(
        "tool_uses",
        sa.Column("scope", sa.Text, nullable=False),
        sa.Column("tool_name", sa.Text, nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("used_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("scope", "tool_name", "used_at", "seq", name="tool_uses_pkey"),
        **_kwargs(),
    )
    # Native on both backends (SQLite 3.35+): a batch copy would lose WITHOUT ROWID.
    op.execute("ALTER TABLE sessions DROP COLUMN forked_from")
    op.execute("ALTER TABLE sessions DROP COLUMN copied_versions")
    _forget_checkpoints()
