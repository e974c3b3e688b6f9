"""Verification: recompute every stream's hash chain and check that the log is immutable."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from ctxledger.store.backends import backend_for
from ctxledger.store.canonical import GENESIS_HASH, event_hash
from ctxledger.store.chain_key import CHAIN_KEY_ENV, ChainKey
from ctxledger.store.clock import format_utc
from ctxledger.store.schema import events


@dataclass
class VerifyReport:
    """What ``verify`` found. ``ok`` is true when there are no problems."""

    events: int = 0
    streams: int = 0
    problems: list[str] = field(default_factory=list)
    triggers_ok: bool = True
    seals: int = 0
    """How many seals the log has (``store.seal``)."""
    sealed_position: int = 0
    """The last seal's position: the global chain covers every event up to it."""
    anchor: str | None = None
    """With an anchor: "ok" when the log extends it, else "broken"."""
    deep: str | None = None
    """With ``deep``: "ok" when the projections equal a rebuild, else "differs"."""

    @property
    def ok(self) -> bool:
        """True when every chain verified and the immutability triggers are in place."""
        return not self.problems and self.triggers_ok


def check_triggers(conn: sa.Connection) -> list[str]:
    """Names of immutability triggers that are missing (or disabled)."""
    backend = backend_for(conn)
    found = backend.enabled_triggers(conn, ("events", "seals"))
    return [name for name in backend.immutability_triggers if name not in found]


def _row_hash(r: Any, key: ChainKey | None) -> str:
    return event_hash(
        prev_hash=r.prev_hash, stream_id=r.stream_id, stream_version=r.stream_version,
        event_id=r.event_id, type=r.type, schema_version=r.schema_version, data_json=r.data,
        metadata_json=r.metadata, recorded_at=format_utc(r.recorded_at), key=key)


def verify_log(conn: sa.Connection, *, progress: object | None = None,
               chunk: int = 10_000, key: ChainKey | None = None,
               check_hashes: bool = True) -> VerifyReport:
    """Recompute every hash in stream order and report each break in the chain.

    Reads the log in (stream_id, stream_version) order in chunks so memory stays flat.
    ``progress`` may be a callable taking the number of events checked so far. With
    ``key``, links are HMACs; plain links are accepted only before the first keyed event
    (a log that adopted the key later). ``check_hashes=False`` checks versions and links
    only (for a keyed log verified without its key).
    """
    first_keyed: int | None = None
    plain: list[int] = []
    report = VerifyReport()
    missing = check_triggers(conn)
    if missing:
        report.triggers_ok = False
        report.problems.append(f"immutability trigger(s) missing: {', '.join(missing)}")
    cols = (events.c.stream_id, events.c.stream_version, events.c.event_id, events.c.type,
            events.c.schema_version, events.c.data, events.c.metadata, events.c.recorded_at,
            events.c.prev_hash, events.c.hash, events.c.position)
    current: str | None = None
    expected_prev = GENESIS_HASH
    expected_version = 0
    last_key: tuple[str, int] | None = None
    while True:
        query = sa.select(*cols)
        if last_key is not None:
            query = query.where(sa.tuple_(events.c.stream_id, events.c.stream_version)
                                > sa.tuple_(*last_key))
        rows = conn.execute(
            query.order_by(events.c.stream_id, events.c.stream_version).limit(chunk)
        ).all()
        for r in rows:
            if r.stream_id != current:
                current, expected_prev, expected_version = r.stream_id, GENESIS_HASH, 0
                report.streams += 1
            expected_version += 1
            where = f"stream {r.stream_id!r} v{r.stream_version} (position {r.position})"
            if r.stream_version != expected_version:
                report.problems.append(f"{where}: version gap, expected v{expected_version}")
                expected_version = r.stream_version
            if r.prev_hash != expected_prev:
                report.problems.append(f"{where}: prev_hash does not match the previous event")
            if check_hashes:
                if _row_hash(r, key) == r.hash:
                    if key is not None and (first_keyed is None or r.position < first_keyed):
                        first_keyed = r.position
                elif key is not None and _row_hash(r, None) == r.hash:
                    plain.append(r.position)
                else:
                    report.problems.append(f"{where}: hash mismatch, content was altered")
            expected_prev = r.hash
            report.events += 1
        if rows:
            last_key = (rows[-1].stream_id, rows[-1].stream_version)
            if callable(progress):
                progress(report.events)
        if len(rows) < chunk:
            break
    late = sorted(p for p in plain if first_keyed is not None and p > first_keyed)
    if late:
        report.problems.append(
            f"{len(late)} event(s) after the first keyed one (position {first_keyed}) are not"
            f" linked with the chain key, first at position {late[0]}: forged, or appended"
            f" without {CHAIN_KEY_ENV}")
    return report
