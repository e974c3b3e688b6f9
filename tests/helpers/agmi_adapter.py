"""ctxledger as a target of the agmi tamper suite (``agent-memory-integrity``).

The store is the ledger's database (a SQLite file in its own folder, or one PostgreSQL
schema); the memory is one session's events. Entries are seeded and the store is verified
through the public API only (``Ledger.append``, ``Ledger.verify``); the attacker edits the
``events`` table with raw SQL, taking the immutability triggers down for the edit and
putting them back after, as someone with write access to the database would. A reload is
a new ``Ledger.open``. What the attacker cannot reach: the chain key (``key``), an anchor
kept by the adapter (``anchor``), the witness file in another folder (``witness``).
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from agmi.adapters.base import MemoryAdapter, Record

from ctxledger import Ledger
from ctxledger.store.anchor import Anchor
from ctxledger.store.chain_key import CHAIN_KEY_ENV

MODES = ("plain", "key", "anchor", "witness")
"""What the verifier holds outside the store: nothing, the chain key, an anchor taken
after seeding, a file witness."""

SESSION = "agmi-a"
OTHER = "agmi-b"
COLUMNS = ("position", "stream_id", "stream_version", "event_id", "type", "schema_version",
           "data", "metadata", "recorded_at", "prev_hash", "hash")
CONTENT = ("type", "schema_version", "data", "metadata", "recorded_at", "prev_hash", "hash")
"""What an edit moves between slots; a slot keeps position, stream, version and id."""
KEY = "agmi chain key kept away from the database"


class Store:
    """A fresh database per attack, and the raw access an attacker has to it."""

    def __init__(self, backend: str, pg_admin_url: str | None,
                 schema_url: Callable[[str], str] | None) -> None:
        self.backend = backend
        self._pg_admin_url = pg_admin_url
        self._schema_url = schema_url
        self.url = ""
        self._dir: Path | None = None
        self._schema: str | None = None
        self._admin: sa.Engine | None = None

    def create(self) -> None:
        if self.backend == "sqlite":
            self._dir = Path(tempfile.mkdtemp(prefix="agmi-ctxledger-db-"))
            self.url = f"sqlite:///{self._dir / 'ledger.db'}"
            return
        assert self._pg_admin_url is not None and self._schema_url is not None
        self._schema = f"agmi_{uuid.uuid4().hex[:12]}"
        self._admin = sa.create_engine(self._pg_admin_url, isolation_level="AUTOCOMMIT")
        with self._admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE SCHEMA "{self._schema}"')
        self.url = self._schema_url(self._schema)

    def destroy(self) -> None:
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
        if self._admin is not None:
            with self._admin.connect() as conn:
                for schema in (self._schema, f"{self._schema}_snap"):
                    conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            self._admin.dispose()

    # -- raw SQL, triggers down for the edit -------------------------------------------

    def edit(self, sql: str, params: dict[str, Any]) -> None:
        if self.backend == "sqlite":
            assert self._dir is not None
            conn = sqlite3.connect(self._dir / "ledger.db")
            try:
                triggers = conn.execute("SELECT name, sql FROM sqlite_master WHERE"
                                        " type = 'trigger' AND tbl_name = 'events'").fetchall()
                for name, _ in triggers:
                    conn.execute(f"DROP TRIGGER {name}")
                conn.execute(sql, params)
                for _, create in triggers:
                    conn.execute(create)
                conn.commit()
            finally:
                conn.close()
            return
        engine = sa.create_engine(self.url)
        try:
            with engine.begin() as conn:
                conn.exec_driver_sql("ALTER TABLE events DISABLE TRIGGER USER")
                conn.execute(sa.text(sql), params)
                conn.exec_driver_sql("ALTER TABLE events ENABLE TRIGGER USER")
        finally:
            engine.dispose()

    def rows(self, stream: str) -> list[dict[str, Any]]:
        engine = sa.create_engine(self.url)
        try:
            with engine.connect() as conn:
                found = conn.execute(sa.text(
                    f"SELECT {', '.join(COLUMNS)} FROM events WHERE stream_id = :s"
                    " ORDER BY stream_version"), {"s": stream}).mappings().all()
        finally:
            engine.dispose()
        return [dict(r) for r in found]

    # -- the whole store, copied and put back ------------------------------------------

    def snapshot(self) -> object:
        if self.backend == "sqlite":
            assert self._dir is not None
            token = Path(tempfile.mkdtemp(prefix="agmi-ctxledger-snap-")) / "db"
            shutil.copytree(self._dir, token)
            return token
        assert self._admin is not None and self._schema is not None
        snap = f"{self._schema}_snap"
        with self._admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE SCHEMA "{snap}"')
            for table in self._tables(conn):
                conn.exec_driver_sql(f'CREATE TABLE "{snap}"."{table}" AS'
                                     f' SELECT * FROM "{self._schema}"."{table}"')
            sequences = {name: conn.exec_driver_sql(
                f'SELECT last_value, is_called FROM "{self._schema}"."{name}"').one()
                for name in self._sequences(conn)}
        return sequences

    def restore(self, token: object) -> None:
        if self.backend == "sqlite":
            assert self._dir is not None and isinstance(token, Path)
            shutil.rmtree(self._dir)
            shutil.copytree(token, self._dir)
            shutil.rmtree(token.parent, ignore_errors=True)
            return
        assert self._admin is not None and self._schema is not None
        assert isinstance(token, dict)
        schema, snap = self._schema, f"{self._schema}_snap"
        with self._admin.begin() as conn:
            for table in self._tables(conn):
                conn.exec_driver_sql(f'ALTER TABLE "{schema}"."{table}" DISABLE TRIGGER USER')
                conn.exec_driver_sql(f'DELETE FROM "{schema}"."{table}"')
                conn.exec_driver_sql(f'INSERT INTO "{schema}"."{table}" OVERRIDING SYSTEM'
                                     f' VALUE SELECT * FROM "{snap}"."{table}"')
                conn.exec_driver_sql(f'ALTER TABLE "{schema}"."{table}" ENABLE TRIGGER USER')
            for name, (value, called) in token.items():
                conn.exec_driver_sql(f"SELECT setval('\"{schema}\".\"{name}\"',"
                                     f" {int(value)}, {bool(called)})")
            conn.exec_driver_sql(f'DROP SCHEMA "{snap}" CASCADE')

    def _tables(self, conn: sa.Connection) -> list[str]:
        return list(conn.execute(sa.text(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = :s"
            " AND table_type = 'BASE TABLE' ORDER BY table_name"),
            {"s": self._schema}).scalars())

    def _sequences(self, conn: sa.Connection) -> list[str]:
        return list(conn.execute(sa.text(
            "SELECT sequence_name FROM information_schema.sequences"
            " WHERE sequence_schema = :s ORDER BY sequence_name"),
            {"s": self._schema}).scalars())


class CtxledgerAdapter(MemoryAdapter):
    """One session of a ctxledger database under the at-rest edits T1 to T9."""

    supports_replay = True
    supports_metadata = True
    supports_snapshot = True

    def __init__(self, backend: str, mode: str, *, pg_admin_url: str | None = None,
                 schema_url: Callable[[str], str] | None = None) -> None:
        assert mode in MODES, mode
        self.name = f"ctxledger-{backend}-{mode}"
        self.mode = mode
        self.store = Store(backend, pg_admin_url, schema_url)
        self.ledger: Ledger | None = None
        self.anchor: Anchor | None = None
        self._witness_dir: Path | None = None
        self._key_before: str | None = None
        self._appended = 0

    # -- lifecycle ----------------------------------------------------------------------

    @property
    def witness(self) -> str:
        if self._witness_dir is None:
            return ""
        return f"file://{self._witness_dir / 'heads.log'}"

    def _open(self) -> None:
        self.ledger = Ledger.open(self.store.url, load_vocabulary=False,
                                  witness=self.witness)

    def _close(self) -> None:
        if self.ledger is not None:
            self.ledger.close()
            self.ledger = None

    def setup(self) -> None:
        self.store.create()
        self.anchor = None
        self._appended = 0
        if self.mode == "witness":
            self._witness_dir = Path(tempfile.mkdtemp(prefix="agmi-ctxledger-witness-"))
        if self.mode == "key":
            self._key_before = os.environ.get(CHAIN_KEY_ENV)
            os.environ[CHAIN_KEY_ENV] = KEY
        self._open()

    def teardown(self) -> None:
        self._close()
        self.store.destroy()
        if self._witness_dir is not None:
            shutil.rmtree(self._witness_dir, ignore_errors=True)
            self._witness_dir = None
        if self.mode == "key":
            if self._key_before is None:
                os.environ.pop(CHAIN_KEY_ENV, None)
            else:
                os.environ[CHAIN_KEY_ENV] = self._key_before

    def reload(self) -> None:
        self._close()
        self._open()

    # -- the tool's own write path and its check ---------------------------------------

    def _append(self, stream: str, text: str) -> None:
        assert self.ledger is not None
        self.ledger.append(stream, {"type": "message.appended",
                                    "data": {"role": "user", "content": text}})

    def seed(self, n: int) -> None:
        for i in range(n):
            self._append(SESSION, f"{SESSION}-{i}: the limit is {40 + i}")
        self._appended = n
        if self.mode == "anchor":
            assert self.ledger is not None
            self.anchor = self.ledger.anchor()  # kept here, out of the store's reach

    def seed_other(self, n: int) -> None:
        for i in range(n):
            self._append(OTHER, f"{OTHER}-{i}: the limit is {70 + i}")

    def append_genuine(self) -> None:
        self._append(SESSION, f"{SESSION}-{self._appended}: the limit is"
                              f" {40 + self._appended}")
        self._appended += 1

    def verify(self) -> bool:
        assert self.ledger is not None
        report = self.ledger.verify(anchor=self.anchor)
        self.verify_detail = report.problems[0] if report.problems else None
        return report.ok

    # -- raw access -----------------------------------------------------------------------

    def _records(self, stream: str) -> list[Record]:
        return [Record(seq=i, fields=row) for i, row in enumerate(self.store.rows(stream))]

    def read_all_raw(self) -> list[Record]:
        return self._records(SESSION)

    def read_other_raw(self) -> list[Record]:
        return self._records(OTHER)

    def _slot(self, seq: int) -> dict[str, Any] | None:
        rows = self.store.rows(SESSION)
        return rows[seq] if seq < len(rows) else None

    def _put(self, position: int, fields: dict[str, Any]) -> None:
        sets = ", ".join(f"{c} = :{c}" for c in CONTENT)
        self.store.edit(f"UPDATE events SET {sets} WHERE position = :position",
                        {**{c: fields[c] for c in CONTENT}, "position": position})

    def write_raw(self, record: Record) -> None:
        slot = self._slot(record.seq)
        if slot is not None:
            self._put(slot["position"], record.fields)
            return
        rows = self.store.rows(SESSION)
        engine = sa.create_engine(self.store.url)
        try:
            with engine.connect() as conn:
                head = int(conn.execute(sa.text(
                    "SELECT COALESCE(MAX(position), 0) FROM events")).scalar_one())
        finally:
            engine.dispose()
        values = {**{c: record.fields[c] for c in CONTENT}, "position": head + 1,
                  "stream_id": SESSION, "stream_version": len(rows) + 1,
                  "event_id": str(uuid.uuid4())}
        names = ", ".join(values)
        overriding = "" if self.store.backend == "sqlite" else " OVERRIDING SYSTEM VALUE"
        self.store.edit(f"INSERT INTO events ({names}){overriding} VALUES"
                        f" ({', '.join(':' + n for n in values)})", values)

    def delete_raw(self, seq: int) -> None:
        slot = self._slot(seq)
        assert slot is not None
        self.store.edit("DELETE FROM events WHERE position = :position",
                        {"position": slot["position"]})

    def replay_onto(self, victim_seq: int, donor: Record) -> None:
        slot = self._slot(victim_seq)
        assert slot is not None
        self._put(slot["position"], donor.fields)

    def read_meta(self, seq: int) -> dict[str, Any]:
        slot = self._slot(seq)
        assert slot is not None
        return {"metadata": slot["metadata"], "recorded_at": slot["recorded_at"]}

    def write_meta(self, seq: int, meta: dict[str, Any]) -> None:
        slot = self._slot(seq)
        assert slot is not None
        metadata = json.loads(slot["metadata"])
        if meta.get("agmi_meta_tampered"):
            metadata["actor"] = "agmi-tampered"
        self._put(slot["position"], {**slot, "metadata": json.dumps(metadata)})

    def mutate_payload(self, record: Record) -> Record:
        data = json.loads(record.fields["data"])
        data["content"] += "  [TAMPERED]"
        record.fields["data"] = json.dumps(data)
        return record

    def forge_record(self, template: Record) -> Record:
        fields = dict(template.fields)
        fields["data"] = json.dumps({"role": "user", "content": "agmi-forged: the limit is 999"})
        return Record(seq=template.seq + 1, fields=fields)

    # -- the landed guard ----------------------------------------------------------------

    def identity_of(self, record: Record) -> str:
        return str(record.fields["position"])

    def payload_of(self, record: Record) -> str:
        return f"{record.fields['type']}\x1f{record.fields['data']}"

    def owner_of(self, record: Record) -> str | None:
        return str(record.fields["stream_id"])

    # -- T9 -------------------------------------------------------------------------------

    def snapshot_store(self) -> object:
        self._close()
        token = self.store.snapshot()
        self._open()
        return token

    def restore_store(self, token: object) -> None:
        self._close()
        self.store.restore(token)
        self._open()
