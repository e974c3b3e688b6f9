"""Settings: scope defaults (``setting.changed`` in ``scope:<name>``) and session overrides
(``setting.changed`` in a session stream). Values are kept as canonical JSON text.

Resolution (scope defaults overlaid by session overrides) happens when a view is loaded,
so changing a scope default reaches every session of the scope without touching them.
"""

from __future__ import annotations

from typing import Any, ClassVar

import sqlalchemy as sa

from ctxledger.projections.base import Projection, RawEvent, TimeOf, metadata
from ctxledger.projections.rowstore import RowStore
from ctxledger.store.canonical import canonical_json
from ctxledger.store.records import RecordedEvent
from ctxledger.store.schema import PositionType
from ctxledger.store.streams import SCOPE_PREFIX, stream_kind

scope_settings = sa.Table(
    "scope_settings",
    metadata,
    sa.Column("scope", sa.Text, primary_key=True),
    sa.Column("key", sa.Text, primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
    sa.Column("position", PositionType, nullable=False),
    sqlite_with_rowid=False,  # the key is the table: one b-tree per row written
)
"""A scope's default for one setting key (canonical JSON ``value``)."""

session_settings = sa.Table(
    "session_settings",
    metadata,
    sa.Column("stream_id", sa.String(200), primary_key=True),
    sa.Column("key", sa.Text, primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
    sa.Column("position", PositionType, nullable=False),
    sqlite_with_rowid=False,  # the key is the table: one b-tree per row written
)
"""A session's override of one setting key (canonical JSON ``value``)."""


class SettingsProjection(Projection):
    """The latest value of every setting key, per scope and per session (blind writes)."""

    name: ClassVar[str] = "settings"
    version: ClassVar[int] = 1
    tables: ClassVar[tuple[sa.Table, ...]] = (scope_settings, session_settings)
    handles: ClassVar[frozenset[str]] = frozenset({"setting.changed"})

    def apply(self, event: RecordedEvent, rows: RowStore) -> None:
        """Store the value under the scope or the session the stream names."""
        _put_setting(rows, event.stream_id, event.position, event.data)

    def rebuild_fold(self, rows: RowStore, time_of: TimeOf) -> _SettingsRebuildFold:
        """The same rows from the raw event, without a record."""
        return _SettingsRebuildFold(rows)



_COLUMNS = {scope_settings: ("scope", "key", "value", "position"),
            session_settings: ("stream_id", "key", "value", "position")}


def _setting_row(stream_id: str, position: int, data: dict[str, Any]
                 ) -> tuple[sa.Table, tuple[str, str, str, int]] | None:
    """The table and row (in ``_COLUMNS`` order) a ``setting.changed`` sets, if any."""
    kind = stream_kind(stream_id)
    if kind == "scope":
        table, owner = scope_settings, stream_id[len(SCOPE_PREFIX):]
    elif kind == "session":
        table, owner = session_settings, stream_id
    else:
        return None
    return table, (owner, data["key"], canonical_json(data["value"]), position)


def _put_setting(rows: RowStore, stream_id: str, position: int, data: dict[str, Any]) -> None:
    found = _setting_row(stream_id, position, data)
    if found is not None:
        table, values = found
        rows.put(table, dict(zip(_COLUMNS[table], values, strict=True)))


class _SettingsRebuildFold:
    """``settings`` through a rebuild: the last value of each key held aside as a tuple
    (no reducer reads these tables), written as upserts when the fold finishes, in the
    order each key was first set (as the ``RowStore`` would)."""

    __slots__ = ("_held", "_rows")

    def __init__(self, rows: RowStore) -> None:
        self._rows = rows
        self._held: dict[sa.Table, dict[tuple[str, str], tuple[str, str, str, int]]] = {
            scope_settings: {}, session_settings: {}}

    def __call__(self, raw: RawEvent, data: dict[str, Any]) -> bool:
        found = _setting_row(raw[1], raw[0], data)
        if found is not None:
            table, values = found
            held = self._held[table]
            held[values[0], values[1]] = values
            if len(held) >= RowStore.ASIDE_ROWS:
                self.finish()
        return True

    def finish(self) -> None:
        """Write the values held aside."""
        for table, held in self._held.items():
            if held:
                self._rows.insert_new(table, _COLUMNS[table], list(held.values()),
                                      replace=True)
                held.clear()
