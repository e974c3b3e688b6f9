"""Verification: every stream's hash chain (``store.hash_chain``) read through, and the
immutability triggers in place."""

from __future__ import annotations

from dataclasses import dataclass, field

import sqlalchemy as sa

from ctxledger.store.backends import backend_for
from ctxledger.store.chain_key import ChainKey
from ctxledger.store.erase import check_erasures
from ctxledger.store.hash_chain import ChainCheck
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
    witness: str | None = None
    """With a witness (``store.witness``): "ok" when the log extends every head it holds,
    "broken" when not, "no head yet" when it holds none."""
    witnessed_position: int = 0
    """The highest position the witness holds a head for."""

    @property
    def ok(self) -> bool:
        """True when every chain verified and the immutability triggers are in place."""
        return not self.problems and self.triggers_ok


def check_triggers(conn: sa.Connection) -> list[str]:
    """Names of immutability triggers that are missing (or disabled)."""
    backend = backend_for(conn)
    found = backend.enabled_triggers(conn, ("events", "seals"))
    return [name for name in backend.immutability_triggers if name not in found]


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
    report = VerifyReport()
    missing = check_triggers(conn)
    if missing:
        report.triggers_ok = False
        report.problems.append(f"immutability trigger(s) missing: {', '.join(missing)}")
    cols = (events.c.stream_id, events.c.stream_version, events.c.event_id, events.c.type,
            events.c.schema_version, events.c.data, events.c.metadata, events.c.recorded_at,
            events.c.prev_hash, events.c.hash, events.c.position)
    chain = ChainCheck(key, check_hashes=check_hashes)
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
            chain.check(r)
        if rows:
            last_key = (rows[-1].stream_id, rows[-1].stream_version)
            if callable(progress):
                progress(chain.events)
        if len(rows) < chunk:
            break
    report.events, report.streams = chain.events, chain.streams
    report.problems += chain.finish()
    # Erased rows are proven by the erasure events that list them (``store.erase``).
    report.problems += check_erasures(conn, chain.erased)
    return report
