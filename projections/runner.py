"""Running projections: inline in the append transaction, catch-up, and rebuild."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from ctxledger.projections import checkpoints as cp
from ctxledger.projections.base import Projection, RebuildFold
from ctxledger.projections.rowstore import RowStore
from ctxledger.store.backends import backend_for
from ctxledger.store.clock import Clock, system_clock
from ctxledger.store.gc_pause import cyclic_gc_paused
from ctxledger.store.read import (
    EventDecoder,
    Hashes,
    head_position,
    read_hashes,
    read_raw_pages,
    with_hashes,
)
from ctxledger.store.records import NewEvent, RecordedEvent

Progress = Callable[[int, int], None]
"""A progress callback, called with (done, in all): events applied here; the facade's
long jobs (replay timelines, imports) report their own units through the same type."""

# Rebuild keeps every touched row in memory up to this many, then flushes and forgets.
REBUILD_CACHE_ROWS = 500_000
# Events read per query while folding.
FOLD_PAGE = 20_000

Applier = Callable[[RecordedEvent, RowStore], None]
"""A projection's bound ``apply``."""


@dataclass(frozen=True)
class ProjectionStatus:
    """Where one projection stands against the log."""

    name: str
    version: int
    stored_version: int | None
    position: int
    """The last position applied: the head for an inline projection (or its stored mark,
    when that is past the head: the log lost events the projection has seen)."""
    head: int
    inline: bool = False

    @property
    def needs_rebuild(self) -> bool:
        """True when the stored rows were built by another version of the projection."""
        return self.stored_version is not None and self.stored_version != self.version

    @property
    def behind(self) -> bool:
        """True when events past the checkpoint have not been applied."""
        return self.stored_version is None or self.position < self.head


class ProjectionRunner:
    """Applies a fixed set of projections to events."""

    def __init__(self, projections: Sequence[Projection], *, clock: Clock = system_clock) -> None:
        names = [p.name for p in projections]
        if len(set(names)) != len(names):
            raise ValueError("projection names must be unique")
        self.projections = tuple(projections)
        self.clock = clock
        self._by_name = {p.name: p for p in projections}
        self._names = tuple(names)
        self._appliers: dict[frozenset[str] | None, dict[str, tuple[Applier, ...]]] = {}
        self._mark: int | None = None  # inline marks are known to be at least here

    def get(self, name: str) -> Projection:
        """The projection called ``name`` (KeyError if unknown)."""
        return self._by_name[name]

    def appliers(self, only: frozenset[str] | None = None) -> dict[str, tuple[Applier, ...]]:
        """Event type -> the ``apply`` methods to call, in projection order.

        ``only`` restricts it to some projections. Built once per subset, so dispatch is
        one dict lookup per event.
        """
        found = self._appliers.get(only)
        if found is None:
            table: dict[str, tuple[Applier, ...]] = {}
            for p in self.projections:
                if only is not None and p.name not in only:
                    continue
                for t in sorted(p.handles):
                    table[t] = (*table.get(t, ()), p.apply)
            found = self._appliers[only] = table
        return found

    def dispatch(self, events: Iterable[RecordedEvent], rows: RowStore,
                 only: frozenset[str] | None = None) -> int:
        """Fold ``events`` into ``rows``; returns how many events were read."""
        appliers = self.appliers(only)
        count = 0
        for event in events:
            count += 1
            for apply in appliers.get(event.type, ()):
                apply(event, rows)
        return count

    # -- inline ---------------------------------------------------------------------------

    def apply_inline(self, conn: sa.Connection, events: Sequence[RecordedEvent]) -> None:
        """Update every projection in the append's own transaction.

        No checkpoint is written: an inline projection commits with the events, so it is
        at the head by construction. Inline projections this runner lacks are demoted to
        catch-up (a zero-row UPDATE when there are none), and the marks ``verify`` checks
        are refreshed every ``MARK_EVERY`` positions (and on a runner's first append).
        Their ``updated_at`` is the append's own ``recorded_at``.
        """
        rows = RowStore(conn)
        self.dispatch(events, rows)
        rows.flush()
        first, last = events[0], events[-1]
        cp.demote_others(conn, self._names, first.position - 1, last.recorded_at)
        mark = self._mark
        if mark is None or last.position - mark >= cp.MARK_EVERY:
            cp.advance(conn, self._names, last.position, last.recorded_at)
            # Kept in memory only once committed would be exact; a rolled-back append
            # only delays the next refresh, and marks are lower bounds either way.
            self._mark = last.position

    def shared_keys(self, stream_id: str, events: Sequence[NewEvent]) -> list[str]:
        """Lock keys of the rows ``events`` would update that other streams' events also
        update (``Projection.shared_keys``): the append takes them before its positions,
        so such appends apply in position order, as a rebuild does."""
        keys: list[str] = []
        for p in self.projections:
            for event in events:
                if event.type in p.handles:
                    keys.extend(f"{p.name}\x1f{k}" for k in p.shared_keys(stream_id, event))
        return keys

    # -- erasure ---------------------------------------------------------------------------

    def erased_content(self) -> frozenset[str]:
        """Event types some projection needs the content of to forget them
        (``Projection.erased_content``)."""
        return frozenset().union(*(p.erased_content for p in self.projections))

    def forget_streams(self, conn: sa.Connection, streams: Sequence[str],
                       erased: Sequence[RecordedEvent], types: Iterable[str]) -> set[str]:
        """Remove from every projection what ``streams`` left there, now that all their
        events (of ``types``) are erased (``Projection.forget_streams``); ``erased``
        holds their events of ``erased_content`` types as they were. A projection that
        keeps the default but has a table keyed by neither stream nor scope, and handles
        one of ``types``, is rebuilt instead: the default cannot tell which of its rows
        the streams wrote. Returns the tables changed."""
        kinds = set(types)
        changed: set[str] = set()
        rebuild: list[str] = []
        for p in self.projections:
            if (type(p).forget_streams is Projection.forget_streams and p.handles & kinds
                    and any("stream_id" not in t.c and "scope" not in t.c for t in p.tables)):
                rebuild.append(p.name)
                changed.update(t.name for t in p.tables)
                continue
            changed |= p.forget_streams(
                conn, streams, [e for e in erased if e.type in p.erased_content])
        if rebuild:
            backend_for(conn).lock_log(conn)
            self._rebuild(conn, rebuild, None)
        return changed

    # -- status, catch-up, rebuild ---------------------------------------------------------

    def status(self, conn: sa.Connection) -> list[ProjectionStatus]:
        """Version and checkpoint of every projection against the log head."""
        stored = cp.read_checkpoints(conn)
        head = head_position(conn)
        out = []
        for p in self.projections:
            found = stored.get(p.name)
            if found is None:
                out.append(ProjectionStatus(p.name, p.version, None, 0, head))
                continue
            version, position, inline = found
            if inline:
                position = max(position, head)
            out.append(ProjectionStatus(p.name, p.version, version, position, head, inline))
        return out

    def bring_up_to_date(self, conn: sa.Connection, *, progress: Progress | None = None,
                         force: Iterable[str] = ()) -> list[str]:
        """Rebuild changed (or ``force``d) projections and catch up lagging ones.

        Runs in the caller's transaction after taking the append lock, so no append can
        slip in between the read and the checkpoint. Returns the names rebuilt.
        """
        backend_for(conn).lock_log(conn)
        forced = set(force)
        unknown = forced - set(self._by_name)
        if unknown:
            raise KeyError(sorted(unknown)[0])
        statuses = self.status(conn)
        rebuild = [s.name for s in statuses if s.needs_rebuild or s.name in forced
                   or s.stored_version is None]
        if rebuild:
            # Resumed once the rebuild's rows are freed, so no pass walks them.
            with cyclic_gc_paused():
                self._rebuild(conn, rebuild, progress)
        lagging = [s for s in statuses if s.name not in rebuild and s.behind]
        if lagging:
            self._catch_up(conn, lagging, progress)
        # Everything here is at the head now, under the write lock: inline from now on.
        cp.mark_inline(conn, [s.name for s in statuses if not s.inline or s.name in rebuild],
                       statuses[0].head if statuses else 0, self.clock())
        return rebuild

    def _rebuild(self, conn: sa.Connection, names: Sequence[str],
                 progress: Progress | None) -> None:
        chosen = [self._by_name[n] for n in names]
        tables = [t for p in chosen for t in p.tables]
        # Children first so foreign keys (if any) never block the wipe.
        for table in reversed(tables):
            conn.execute(table.delete())
        head = head_position(conn)
        rows = RowStore(conn, empty=tables)
        with backend_for(conn).bulk_writes(conn):
            self._fold(conn, rows, after=0, head=head, only=frozenset(names),
                       progress=progress, fast=True)
        now = self.clock()
        for p in chosen:
            cp.reset(conn, p.name, p.version, head, now)

    def _catch_up(self, conn: sa.Connection, lagging: Sequence[ProjectionStatus],
                  progress: Progress | None) -> None:
        after = min(s.position for s in lagging)
        head = lagging[0].head
        for status in lagging:
            # Each projection starts from its own checkpoint; group by start position.
            rows = RowStore(conn)
            self._fold(conn, rows, after=status.position, head=head,
                       only=frozenset({status.name}), progress=progress if
                       status.position == after else None)
            cp.advance(conn, [status.name], head, self.clock())

    def _fold(self, conn: sa.Connection, rows: RowStore, *, after: int, head: int,
              only: frozenset[str], progress: Progress | None, fast: bool = False) -> None:
        """Apply the events in ``(after, head]`` to the ``only`` projections.

        Rows of types no chosen projection handles are skipped before being decoded.
        With ``fast`` (a rebuild), projections offering a ``rebuild_fold`` fold the raw
        rows themselves; a ``RecordedEvent`` is only built for an ``apply`` that needs it.
        """
        total = max(0, head - after)
        decode = EventDecoder(conn.dialect)
        folds: list[RebuildFold] = []
        plan: dict[str, list[tuple[RebuildFold | None, Applier]]] = {}
        for p in self.projections:
            if p.name not in only:
                continue
            fold = p.rebuild_fold(rows, decode.recorded_at) if fast else None
            if fold is not None:
                folds.append(fold)
            for t in sorted(p.handles):
                plan.setdefault(t, []).append((fold, p.apply))
        steps = {t: tuple(chosen) for t, chosen in plan.items()}
        # Types some projection always folds through apply: their hashes are read a page
        # at a time, when a page first needs one (a record carries them); a fold
        # declining an event of another type has its own read then.
        records = [t for t, chosen in steps.items() if any(f is None for f, _ in chosen)]
        payload, make_event = decode.payload, decode.event
        for page in read_raw_pages(conn, after, until_position=head, chunk=FOLD_PAGE,
                                   hashes=not folds):
            known: Hashes | None = None
            for raw in page:
                chosen = steps.get(raw[4])
                if chosen is None:
                    continue
                version, data = payload(raw)
                event: RecordedEvent | None = None
                for fold, apply in chosen:
                    if fold is None or not fold(raw, data):
                        if event is None:
                            if known is None and folds:
                                known = read_hashes(conn, page[0][0], page[-1][0], records)
                            event = make_event(with_hashes(conn, raw, known), version, data)
                        apply(event, rows)
            if rows.cached_rows() > REBUILD_CACHE_ROWS:
                _flush(rows, folds)
                rows.forget()
            if progress is not None:
                progress(int(page[-1][0]) - after, total)
        _flush(rows, folds)
        if progress is not None:
            progress(total, total)


def _flush(rows: RowStore, folds: Sequence[RebuildFold]) -> None:
    for fold in folds:
        fold.finish()
    rows.flush()


