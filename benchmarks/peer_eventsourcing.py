"""The ``eventsourcing`` peer: its Application, an aggregate per stream, its SQLite recorder.

The library turns WAL on but leaves ``synchronous`` at SQLite's default (FULL: an fsync
per commit). For equal durability its connections get the same pragmas as ctxledger's
(``synchronous=NORMAL`` and the busy timeout), through a connection-pool subclass, which
is the only seam the library offers for per-connection settings.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eventsourcing.application import Application
from eventsourcing.domain import Aggregate, event
from eventsourcing.sqlite import SQLiteConnection, SQLiteConnectionPool, SQLiteDatastore
from workload import MixEvent

PRAGMAS = ("PRAGMA synchronous=NORMAL", "PRAGMA busy_timeout=30000")


class _NormalSyncPool(SQLiteConnectionPool):
    """The library's pool, with ctxledger's durability pragmas on each new connection."""

    def _create_connection(self) -> SQLiteConnection:
        connection = super()._create_connection()
        cursor = connection.cursor()
        for pragma in PRAGMAS:
            cursor.execute(pragma)
        return connection


class BenchSession(Aggregate):
    """One stream. Its first event creates it; every mix type has its own event class."""

    @event("Opened")
    def __init__(self, kind: str, data: dict[str, Any]) -> None:
        self.events_seen = 1

    @event("SessionStarted")
    def start(self, scope: str, title: str | None = None) -> None:
        """session.started"""
        self.events_seen += 1

    @event("MessageAppended")
    def append_message(self, role: str, content: str | None,
                       tool_calls: list[dict[str, Any]] | None = None,
                       tool_call_id: str | None = None) -> None:
        """message.appended (a tool call, a tool result: the mix's message fields)"""
        self.events_seen += 1

    @event("ToolUsed")
    def use_tool(self, tool_name: str, ok: bool | None = None,
                 server_name: str | None = None) -> None:
        """tool.used"""
        self.events_seen += 1

    @event("SettingChanged")
    def change_setting(self, key: str, value: Any) -> None:
        """setting.changed"""
        self.events_seen += 1


class BenchApplication(Application[Any]):
    """A plain eventsourcing application (no snapshots, no aggregate cache)."""


def open_application(path: Path) -> BenchApplication:
    """An application on a new SQLite file, with ctxledger's durability settings."""
    app = BenchApplication(env={"PERSISTENCE_MODULE": "eventsourcing.sqlite",
                                "SQLITE_DBNAME": str(path)})
    datastore = app.factory.datastore  # type: ignore[attr-defined]
    assert isinstance(datastore, SQLiteDatastore)
    datastore.pool.close()
    datastore.pool = _NormalSyncPool(db_name=str(path))
    return app


def apply_event(streams: dict[str, BenchSession], stream_id: str, mix: MixEvent) -> BenchSession:
    """Trigger ``mix`` on the stream's aggregate (creating it with its first event)."""
    aggregate = streams.get(stream_id)
    if aggregate is None:
        aggregate = streams[stream_id] = BenchSession(kind=mix.type, data=mix.data)
    elif mix.type == "message.appended":
        aggregate.append_message(**mix.data)
    elif mix.type == "tool.used":
        aggregate.use_tool(**mix.data)
    elif mix.type == "setting.changed":
        aggregate.change_setting(**mix.data)
    elif mix.type == "session.started":
        aggregate.start(**mix.data)
    else:
        raise ValueError(f"the eventsourcing peer does not model {mix.type}")
    return aggregate


def save_one_each(app: BenchApplication, events: Sequence[MixEvent]) -> None:
    """One ``save`` (one transaction, one event) per mix event."""
    streams: dict[str, BenchSession] = {}
    save = app.save
    for mix in events:
        save(apply_event(streams, mix.stream_id, mix))


def save_batches(app: BenchApplication, batches: Sequence[tuple[str, Sequence[MixEvent]]]
                 ) -> None:
    """One ``save`` of an aggregate holding a whole batch of pending events per batch."""
    streams: dict[str, BenchSession] = {}
    for stream_id, batch in batches:
        aggregate = None
        for mix in batch:
            aggregate = apply_event(streams, stream_id, mix)
        app.save(aggregate)
