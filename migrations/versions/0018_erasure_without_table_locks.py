"""Erasure without table locks: the update guard lets the owner tombstone a row, and the
tables an erase deletes from by stream are indexed by stream.

Until now an erase lifted the update guard on ``events`` with ``ALTER TABLE ... DISABLE
TRIGGER``, whose ACCESS EXCLUSIVE lock kept every reader and writer of ``events`` waiting
until the erase committed. On PostgreSQL the guard's function now lets one kind of update
through: a live row turned into an ``event.erased`` tombstone (every column but ``type``,
``data`` and ``metadata`` unchanged), by a member of the table owner's role, in a
transaction that set ``ctxledger.erasing`` (``Backend.erasing``). Any other update is
refused as before. SQLite keeps its trigger: it drops and recreates it inside the
erasing transaction, which holds the whole database anyway.

An erase deletes the erased sessions' rows from ``observations`` and ``scope_members``,
whose keys start with the scope: ``stream_id`` gets an index on both, so the delete costs
the session's rows, not a scan.

Written out explicitly, not imported from the live code, so the revision keeps doing
this whatever later releases change.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-27
"""

from __future__ import annotations

from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

_MESSAGE = "events are immutable: UPDATE and DELETE are rejected"

_ERASABLE = f"""
CREATE OR REPLACE FUNCTION ctxledger_events_tombstone_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF current_setting('ctxledger.erasing', true) = 'on'
     AND pg_has_role(current_user, (SELECT relowner FROM pg_class WHERE oid = TG_RELID),
                     'USAGE')
     AND OLD.type <> 'event.erased' AND NEW.type = 'event.erased'
     AND NEW.position = OLD.position AND NEW.stream_id = OLD.stream_id
     AND NEW.stream_version = OLD.stream_version AND NEW.event_id = OLD.event_id
     AND NEW.schema_version = OLD.schema_version AND NEW.recorded_at = OLD.recorded_at
     AND NEW.prev_hash = OLD.prev_hash AND NEW.hash = OLD.hash
     AND NEW.txid IS NOT DISTINCT FROM OLD.txid
  THEN
    RETURN NEW;
  END IF;
  RAISE EXCEPTION '{_MESSAGE}';
END $$
"""


def _guard(function: str) -> None:
    op.execute("DROP TRIGGER events_no_update ON events")
    op.execute("CREATE TRIGGER events_no_update BEFORE UPDATE ON events FOR EACH ROW "
               f"EXECUTE FUNCTION {function}()")


def upgrade() -> None:
    op.create_index("ix_observations_stream_id", "observations", ["stream_id"])
    op.create_index("ix_scope_members_stream_id", "scope_members", ["stream_id"])
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_ERASABLE)
        _guard("ctxledger_events_tombstone_only")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        _guard("ctxledger_events_immutable")
        op.execute("DROP FUNCTION ctxledger_events_tombstone_only()")
    op.drop_index("ix_scope_members_stream_id", "scope_members")
    op.drop_index("ix_observations_stream_id", "observations")
