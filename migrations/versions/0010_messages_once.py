"""Each message written once (fewer writes per commit).

``messages`` kept every message's content (and name and time) a second time, in a rowid
table with two indexes: three b-trees per message. Now it is keyed ``(stream_id, seq)``
(``WITHOUT ROWID`` on SQLite), the key the history window reads newest first, and holds
only what the event row lacks: the message id, role, retracted flag and position. The
read view takes content, name and time from ``events`` by position.

``message_ids`` maps app-chosen message ids to their seq; a message without one is known
by its event id, found through the log's own ``event_id`` index.

Rows are carried over: the same messages, retracted flags and counts; nothing is rebuilt.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def _kwargs() -> dict[str, bool]:
    return {"sqlite_with_rowid": False} if op.get_bind().dialect.name == "sqlite" else {}


def upgrade() -> None:
    position = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    op.create_table(
        "messages_v2",
        sa.Column("stream_id", sa.String(200), primary_key=True),
        sa.Column("seq", sa.Integer, primary_key=True),
        sa.Column("message_id", sa.String(200), nullable=False),
        sa.Column("role", sa.String(20), nullable=False),
        sa.Column("retracted", sa.Boolean, nullable=False),
        sa.Column("position", position, nullable=False),
        **_kwargs(),
    )
    op.execute(
        "INSERT INTO messages_v2 (stream_id, seq, message_id, role, retracted, position)"
        " SELECT stream_id, seq, message_id, role, retracted, position FROM messages")
    op.create_table(
        "message_ids",
        sa.Column("stream_id", sa.String(200), primary_key=True),
        sa.Column("message_id", sa.String(200), primary_key=True),
        sa.Column("seq", sa.Integer, nullable=False),
        **_kwargs(),
    )
    # A message whose id is not its event's id had it chosen by the app.
    op.execute(
        "INSERT INTO message_ids (stream_id, message_id, seq)"
        " SELECT m.stream_id, m.message_id, m.seq FROM messages m"
        " JOIN events e ON e.position = m.position WHERE e.event_id <> m.message_id")
    op.drop_index("ix_messages_stream_seq", table_name="messages")
    op.drop_table("messages")
    op.rename_table("messages_v2", "messages")
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER INDEX messages_v2_pkey RENAME TO messages_pkey")


def downgrade() -> None:
    ts = sa.DateTime(timezone=True)
    position = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    op.create_table(
        "messages_v1",
        sa.Column("stream_id", sa.String(200), primary_key=True),
        sa.Column("message_id", sa.String(200), primary_key=True),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("role", sa.String(20), nullable=False),
        sa.Column("name", sa.String(200)),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column("retracted", sa.Boolean, nullable=False),
        sa.Column("position", position, nullable=False),
        sa.Column("recorded_at", ts, nullable=False),
    )
    bind = op.get_bind()
    rows = bind.execute(sa.text(
        "SELECT m.stream_id, m.message_id, m.seq, m.role, e.data, m.retracted, m.position,"
        " e.recorded_at FROM messages m JOIN events e ON e.position = m.position")).all()
    target = sa.table("messages_v1", *(sa.column(c) for c in (
        "stream_id", "message_id", "seq", "role", "name", "content", "retracted",
        "position", "recorded_at")))
    import json

    for row in rows:
        data = json.loads(row.data)
        bind.execute(target.insert().values(
            stream_id=row.stream_id, message_id=row.message_id, seq=row.seq, role=row.role,
            name=data.get("name"), content=data["content"], retracted=row.retracted,
            position=row.position, recorded_at=row.recorded_at))
    op.drop_table("message_ids")
    op.drop_table("messages")
    op.rename_table("messages_v1", "messages")
    if bind.dialect.name == "postgresql":
        op.execute("ALTER INDEX messages_v1_pkey RENAME TO messages_pkey")
    op.create_index("ix_messages_stream_seq", "messages", ["stream_id", "seq"])
