"""API keys of the HTTP service (``ctxledger serve``).

``api_keys`` holds each key's short public id, the SHA-256 hex of its secret (set to NULL
when the key is revoked), its scopes (a JSON list), whether it is read-only or admin, and
when it was created and revoked.

Keys are operational configuration, not session history, so they are rows here and not
events: revoking a key must be able to forget its secret's hash, while the event log is
immutable and would keep it forever. The secret is 32 random bytes from ``secrets``, so a
fast hash (SHA-256) is enough: a slow password hash (bcrypt) only helps against guessing
low-entropy secrets, and 256 random bits cannot be guessed.

Written out explicitly, not imported from the live tables, so the revision keeps creating
this schema whatever later releases do to the code.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("key_id", sa.String(32), primary_key=True),
        sa.Column("secret_hash", sa.String(64)),
        sa.Column("scopes", sa.Text, nullable=False),
        sa.Column("read_only", sa.Boolean, nullable=False),
        sa.Column("admin", sa.Boolean, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True)),
    )


def downgrade() -> None:
    op.drop_table("api_keys")
