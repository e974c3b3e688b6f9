"""Seals: the whole log as one chain, built after the fact instead of on every append.

Stream chains (``store.canonical``) link each event to the one before it *in its stream*;
they cannot show a whole stream deleted, a stream's tail cut, or events inserted between
streams. The global chain links every event to the one before it *in position order*:

    link(prev, position, hash) = SHA-256(prev | position | hash)   (HMAC with a chain key)

starting from 64 zeros. Positions are part of each link, so holes (positions PostgreSQL
skipped) are covered too: filling one later changes every link after it. Computing this on
each append would serialize all writers, so it is computed by *sealing*: a seal stores the
chain's value at a position no open transaction can still fill, continuing from the
previous seal. Deleting, reordering or inserting anything up to the last seal breaks it;
events after the last seal are covered by their stream links until the next seal.

Seals are written by ``ctxledger seal``, by ``anchor``, and automatically every N events
by the append that crosses the mark (``SealSettings``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, Field

from ctxledger.store.backends import backend_for, locks
from ctxledger.store.chain_key import CHAIN_KEY_ENV, ChainKey
from ctxledger.store.errors import LedgerError
from ctxledger.store.hash_chain import GENESIS_HASH
from ctxledger.store.read import head_position
from ctxledger.store.schema import events, seals
from ctxledger.store.sql_engine import driver_statement

SEAL_PAGE = 50_000
"""Events read per query while folding the chain."""


class SealSettings(BaseModel):
    """When appends seal the log on their own."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    every: int | None = Field(default=10_000, ge=1)
    """An append that leaves this many events or more unsealed seals them in its own
    transaction (it already holds the write lock, so the bound is free). None: never."""


@dataclass(frozen=True, slots=True)
class Seal:
    """One stored seal: the chain's ``hash`` after every event up to ``position``."""

    seq: int
    position: int
    events: int
    hash: str
    key_id: str | None
    sealed_at: datetime


def list_seals(conn: sa.Connection) -> list[Seal]:
    """Every seal, oldest first."""
    rows = conn.execute(sa.select(seals).order_by(seals.c.seq)).all()
    return [Seal(r.seq, r.position, r.events, r.hash, r.key_id, r.sealed_at) for r in rows]


def last_seal(conn: sa.Connection) -> Seal | None:
    """The newest seal, if any."""
    row = conn.execute(sa.select(seals).order_by(seals.c.seq.desc()).limit(1)).first()
    return None if row is None else Seal(row.seq, row.position, row.events, row.hash,
                                         row.key_id, row.sealed_at)


def _page_statement() -> sa.Select[tuple[int, str]]:
    return (sa.select(events.c.position, events.c.hash)
            .where(events.c.position > sa.bindparam("after", type_=sa.Integer),
                   events.c.position <= sa.bindparam("until", type_=sa.Integer))
            .order_by(events.c.position).limit(sa.bindparam("size", type_=sa.Integer)))


def _links(conn: sa.Connection, after: int, until: int) -> Iterator[tuple[int, str]]:
    """(position, hash) of every event in ``(after, until]``, in position order."""
    stmt = driver_statement(conn.dialect, ("ctxledger.store.seal.page",), _page_statement)
    cursor = after
    while True:
        rows = stmt.execute(conn, {"after": cursor, "until": until,
                                   "size": SEAL_PAGE}).fetchall()
        for position, digest in rows:
            yield int(position), digest
        if len(rows) < SEAL_PAGE:
            return
        cursor = int(rows[-1][0])


@dataclass(frozen=True, slots=True)
class ChainPoint:
    """The chain's value after every event up to ``position``, and how many there were."""

    position: int
    hash: str
    events: int


def extend_chain(point: ChainPoint, links: Iterable[tuple[int, str]],
                 key: ChainKey | None) -> ChainPoint:
    """``point`` extended by (position, hash) links in position order, as ``fold_chain``
    folds them (for events already in memory, such as an append's own)."""
    prev, count, position = point.hash, point.events, point.position
    for position, digest in links:
        text = f"{prev}\x1f{position}\x1f{digest}"
        prev = hashlib.sha256(text.encode()).hexdigest() if key is None else key.link(text)
        count += 1
    return ChainPoint(position, prev, count)


def fold_chain(conn: sa.Connection, segments: Sequence[tuple[int, ChainKey | None]], *,
               start: ChainPoint | None = None) -> list[ChainPoint]:
    """Fold the events after ``start`` (default: the beginning) into the global chain.

    ``segments`` are (end position, key) in increasing order: events up to each end are
    linked with that segment's key. Returns the chain's value at each end.
    """
    point = start or ChainPoint(0, GENESIS_HASH, 0)
    out: list[ChainPoint] = []
    prev, count, after = point.hash, point.events, point.position
    for end, key in segments:
        if end < after:
            raise ValueError("segments must end in increasing positions")
        if key is None:
            sha = hashlib.sha256
            for position, digest in _links(conn, after, end):
                prev = sha(f"{prev}\x1f{position}\x1f{digest}".encode()).hexdigest()
                count += 1
        else:
            for position, digest in _links(conn, after, end):
                prev = key.link(f"{prev}\x1f{position}\x1f{digest}")
                count += 1
        out.append(ChainPoint(end, prev, count))
        after = end
    return out


def seal_in_transaction(conn: sa.Connection, now: datetime, key: ChainKey | None, *,
                        upto: int | None = None) -> Seal | None:
    """Seal every event up to the head (or ``upto``); None when there is nothing new.

    The bound: a seal may only cover positions that no open transaction can still fill.
    Without ``upto`` the seal takes the log's write lock (``BEGIN IMMEDIATE`` on SQLite,
    ``LOCK TABLE events IN EXCLUSIVE MODE`` on PostgreSQL, after the sealers' own lock),
    so no append is in flight and the head is that bound. An append sealing on its own
    (PostgreSQL) cannot wait for the others: it passes ``upto`` =
    ``Backend.settled_position``, below every append still in progress, holding the
    sealers' lock. Rolled-back appends leave holes, which the chain covers.
    """
    if upto is None:
        backend = backend_for(conn)
        backend.lock(conn, locks.SEAL)
        backend.lock_log(conn)
    last = last_seal(conn)
    if last is not None and last.key_id is not None and (
            key is None or key.key_id != last.key_id):
        held = "is not set" if key is None else f"has key id {key.key_id}"
        raise LedgerError(f"the log is sealed with chain key {last.key_id} but"
                          f" {CHAIN_KEY_ENV} {held}; set it to that key to seal")
    head = head_position(conn) if upto is None else upto
    start = (ChainPoint(last.position, last.hash, last.events) if last is not None
             else None)
    if head <= (last.position if last is not None else 0):
        return None
    (point,) = fold_chain(conn, [(head, key)], start=start)
    seal = Seal(seq=(last.seq if last is not None else 0) + 1, position=head,
                events=point.events, hash=point.hash,
                key_id=key.key_id if key is not None else None, sealed_at=now)
    conn.execute(seals.insert().values(
        seq=seal.seq, position=seal.position, events=seal.events, hash=seal.hash,
        key_id=seal.key_id, sealed_at=seal.sealed_at))
    return seal


def check_seals(conn: sa.Connection, key: ChainKey | None) -> list[str]:
    """Recompute the global chain at every seal; the problems found (empty: all hold)."""
    found = list_seals(conn)
    if not found:
        return []
    problems: list[str] = []
    if [s.seq for s in found] != list(range(1, len(found) + 1)):
        problems.append("seal numbers are not 1..N: seals were removed")
    keyed = [s for s in found if s.key_id is not None]
    if keyed and key is None:
        return [*problems, f"the log is sealed with chain key {keyed[-1].key_id}"
                           f" (seal {keyed[-1].seq}): set {CHAIN_KEY_ENV} to verify it"]
    if key is not None:
        wrong = [s for s in keyed if s.key_id != key.key_id]
        if wrong:
            return [*problems, f"{CHAIN_KEY_ENV} (key id {key.key_id}) is not the key"
                               f" seal {wrong[0].seq} was made with ({wrong[0].key_id})"]
        if found[-1].key_id is None:
            problems.append(f"{CHAIN_KEY_ENV} is set but the last seal ({found[-1].seq}) was"
                            " made without it: seal again to protect the log with the key")
        if keyed:
            plain_after = [s for s in found if s.key_id is None and s.seq > keyed[0].seq]
            if plain_after:
                problems.append(f"seal {plain_after[0].seq} was made without the chain key"
                                " after keyed seals: the seals were rewritten")
    positions = [s.position for s in found]
    if positions != sorted(set(positions)):
        return [*problems, "seal positions do not increase: the seals were rewritten"]
    head = head_position(conn)
    points = fold_chain(conn, [(s.position, key if s.key_id is not None else None)
                               for s in found])
    for seal, point in zip(found, points, strict=True):
        if seal.position > head:
            problems.append(f"seal {seal.seq} covers position {seal.position} but the log"
                            f" ends at {head}: events were removed")
        elif (point.hash, point.events) != (seal.hash, seal.events):
            # Every later seal continues from this one: the first break is the finding.
            problems.append(f"seal {seal.seq} (position {seal.position}) does not match:"
                            " events up to it were changed, removed or inserted")
            break
    return problems
