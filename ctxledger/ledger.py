"""``Ledger``: the one object a user needs. It owns the engine, the log and the projections."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any

import sqlalchemy as sa

from ctxledger import migrate
from ctxledger.config import resolve_db_url
from projections.base import Projection
from projections.registry import builtin_projections
from projections.runner import ProjectionRunner, ProjectionStatus
from store.clock import Clock, system_clock
from store.engine import create_engine
from store.log import EventInput, EventLog
from store.records import AppendResult, NewEvent, RecordedEvent
from store.validate import DEFAULT_MAX_EVENT_BYTES
from store.verify import VerifyReport

RebuildProgress = Callable[[int, int], None]


class Ledger:
    """An event-sourced session store with inline projections.

    Open it with ``Ledger.open(url)``; the schema is created or upgraded, and projections
    whose version changed are rebuilt, before it is returned.
    """

    def __init__(self, engine: sa.Engine, *, clock: Clock = system_clock,
                 max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
                 projections: Sequence[Projection] | None = None) -> None:
        self.engine = engine
        self.clock = clock
        self.runner = ProjectionRunner(
            projections if projections is not None else builtin_projections(), clock=clock)
        self.log = EventLog(engine, clock=clock, max_event_bytes=max_event_bytes,
                            in_transaction=self.runner.apply_inline)

    @classmethod
    def open(cls, url: str | None = None, *, clock: Clock = system_clock,
             max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES, upgrade: bool = True,
             progress: RebuildProgress | None = None, **engine_kwargs: Any) -> Ledger:
        """Open (creating or migrating) the database at ``url``.

        ``url`` defaults to ``$CTXLEDGER_DB`` or ``sqlite:///ctxledger.db``. Projections
        that are new, changed or behind are brought up to date before returning.
        """
        engine = create_engine(resolve_db_url(url), **engine_kwargs)
        try:
            if upgrade:
                migrate.upgrade(engine)
            ledger = cls(engine, clock=clock, max_event_bytes=max_event_bytes)
            ledger.refresh_projections(progress=progress)
        except BaseException:
            engine.dispose()
            raise
        return ledger

    # -- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        """Release every database connection."""
        self.engine.dispose()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- writing and reading ------------------------------------------------------------

    def append(self, stream_id: str, events: Sequence[EventInput] | EventInput,
               expected_version: int | None = None) -> AppendResult:
        """Append events atomically to one stream; projections update in the same transaction.

        ``events`` is a list of ``{"type", "data"[, "id", "metadata"]}`` mappings (or one).
        """
        batch: Sequence[EventInput] = (
            [events] if isinstance(events, Mapping | NewEvent) else events)
        return self.log.append(stream_id, batch, expected_version=expected_version)

    def events(self, stream_id: str | None = None, *, after: int = 0,
               limit: int | None = None, until: int | datetime | None = None
               ) -> list[RecordedEvent]:
        """Read events: one stream, or the whole log after a position, up to ``until``."""
        until_position = until if isinstance(until, int) else None
        until_time = until if isinstance(until, datetime) else None
        if stream_id is not None:
            return [e for e in self.log.read_stream(stream_id)
                    if e.position > after
                    and (until_position is None or e.position <= until_position)
                    and (until_time is None or e.recorded_at <= until_time)][:limit]
        return self.log.read_all(after, limit, until_position=until_position,
                                 until_time=until_time)

    def head(self) -> int:
        """The highest position in the log."""
        return self.log.head_position()

    # -- maintenance --------------------------------------------------------------------

    def projection_status(self) -> list[ProjectionStatus]:
        """Every projection's version and checkpoint against the head."""
        with self.log.connection() as conn:
            return self.runner.status(conn)

    def refresh_projections(self, progress: RebuildProgress | None = None) -> list[str]:
        """Rebuild changed projections and catch up lagging ones; returns those rebuilt."""
        with self.log.transaction() as conn:
            return self.runner.bring_up_to_date(conn, progress=progress)

    def rebuild(self, projection: str | None = None,
                progress: RebuildProgress | None = None) -> list[str]:
        """Rebuild one projection (or all) from the log, in one transaction."""
        names = [projection] if projection else [p.name for p in self.runner.projections]
        with self.log.transaction() as conn:
            return self.runner.bring_up_to_date(conn, progress=progress, force=names)

    def verify(self, progress: Callable[[int], None] | None = None) -> VerifyReport:
        """Check every hash chain and the immutability triggers."""
        return self.log.verify(progress=progress)
