"""Anchors: the last seal as one line, kept outside the database, and checking against it.

A seal stored in the database can be rewritten by whoever can rewrite the events. A copy
of it kept elsewhere (a file, a ticket, a transparency log) cannot: ``verify`` with an
anchor recomputes the global chain from the events alone, up to the anchored position,
and proves that the log still extends it (nothing before it changed, its tail not cut).
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from ctxledger.store.chain_key import CHAIN_KEY_ENV, ChainKey
from ctxledger.store.clock import format_utc
from ctxledger.store.errors import LedgerError
from ctxledger.store.read import head_position
from ctxledger.store.seal import Seal, fold_chain, list_seals

ANCHOR_FORMAT = "ctxledger-anchor/1"


@dataclass(frozen=True, slots=True)
class Anchor:
    """A seal as kept outside the database."""

    seal: int
    position: int
    events: int
    hash: str
    key_id: str | None
    sealed_at: str

    @classmethod
    def of(cls, seal: Seal) -> Anchor:
        """The anchor of a stored seal."""
        return cls(seal.seq, seal.position, seal.events, seal.hash, seal.key_id,
                   format_utc(seal.sealed_at))

    def line(self) -> str:
        """The anchor as one line of JSON."""
        return json.dumps({"anchor": ANCHOR_FORMAT, "seal": self.seal,
                           "position": self.position, "events": self.events,
                           "hash": self.hash, "key_id": self.key_id,
                           "sealed_at": self.sealed_at}, separators=(",", ":"))


def parse_anchor(text: str) -> Anchor:
    """An anchor from its line (``LedgerError`` naming the problem when it is not one)."""
    try:
        value: Any = json.loads(text)
    except RecursionError:
        raise LedgerError("not an anchor line: it is nested too deeply") from None
    except ValueError:
        raise LedgerError("not an anchor line: it is not JSON") from None
    if not isinstance(value, dict) or value.get("anchor") != ANCHOR_FORMAT:
        raise LedgerError(f"not an anchor line: expected {{\"anchor\": \"{ANCHOR_FORMAT}\", ...}}")
    ints = ("seal", "position", "events")
    if any(type(value.get(k)) is not int or value[k] < 0 for k in ints):
        raise LedgerError("not an anchor line: seal, position and events must be integers")
    digest, key_id, sealed_at = value.get("hash"), value.get("key_id"), value.get("sealed_at")
    if not (isinstance(digest, str) and len(digest) == 64
            and all(c in "0123456789abcdef" for c in digest)):
        raise LedgerError("not an anchor line: hash must be 64 hex digits")
    if key_id is not None and not isinstance(key_id, str):
        raise LedgerError("not an anchor line: key_id must be a string or null")
    return Anchor(value["seal"], value["position"], value["events"], digest, key_id,
                  str(sealed_at))


def read_anchor(line_or_file: str) -> Anchor:
    """An anchor given as its line, or as a file whose last non-blank line is one."""
    text = line_or_file.strip()
    if not text.startswith("{"):
        try:
            content = Path(line_or_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8"
            raise LedgerError(f"cannot read anchor file {line_or_file!r}: {reason}") from None
        lines = [ln for ln in content.splitlines() if ln.strip()]
        if not lines:
            raise LedgerError(f"anchor file {line_or_file!r} is empty")
        text = lines[-1]
    return parse_anchor(text)


def check_anchor(conn: sa.Connection, anchor: Anchor, key: ChainKey | None) -> list[str]:
    """Prove the log still extends ``anchor``; the problems found (empty: it does)."""
    if anchor.key_id is not None and key is None:
        return [f"the anchor was made with chain key {anchor.key_id}:"
                f" set {CHAIN_KEY_ENV} to verify against it"]
    if anchor.key_id is not None and key is not None and key.key_id != anchor.key_id:
        return [f"{CHAIN_KEY_ENV} (key id {key.key_id}) is not the key the anchor was made"
                f" with ({anchor.key_id})"]
    problems: list[str] = []
    head = head_position(conn)
    if head < anchor.position:
        problems.append(f"the log ends at position {head}, before the anchor's position"
                        f" {anchor.position}: its tail was cut")
    stored = {s.seq: s for s in list_seals(conn)}
    mine = stored.get(anchor.seal)
    if mine is None or (mine.position, mine.hash) != (anchor.position, anchor.hash):
        problems.append(f"seal {anchor.seal} in the database is not the anchored one:"
                        " the seals were removed or rewritten")
    # Segments follow the stored seals' keys (whatever an attacker changed there changes
    # the result); positions past them use the anchor's own mode.
    anchor_key = key if anchor.key_id is not None else None
    segments: list[tuple[int, ChainKey | None]] = [
        (s.position, key if s.key_id is not None else None)
        for s in sorted(stored.values(), key=lambda s: s.seq)
        if s.position < anchor.position]
    if any(b[0] <= a[0] for a, b in itertools.pairwise(segments)):
        segments = []  # rewritten seals: fold the whole prefix in the anchor's mode
    segments.append((anchor.position, anchor_key))
    point = fold_chain(conn, segments)[-1]
    if (point.hash, point.events) != (anchor.hash, anchor.events):
        problems.append(f"the log does not extend the anchor (seal {anchor.seal}, position"
                        f" {anchor.position}): events up to it were changed, removed or"
                        " inserted")
    return problems

