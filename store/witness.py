"""Witnesses: the log's head, sent after commits to somewhere its writers cannot rewrite.

An anchor (``store.anchor``) proves the log still extends a point someone copied out by
hand. A witness does the same without the manual step: after a commit the log sends its
*head* (the global chain's value at a position, the same fold a seal stores, and how many
events it covers) to a witness, and ``verify`` checks the log against every head the
witness holds. A whole-store rollback or a cut tail then fails: the restored log does not
reach the last witnessed position, or reaches it with another hash.

Each witness is one small class behind ``Witness``: an append-only file (one fsynced line
per head), a table in a second database, or an HTTP endpoint (``POST`` one head as JSON;
``GET`` returns every head). ``witness_from_spec`` makes one from a URL-ish spec
(``CTXLEDGER_WITNESS``).

When heads go out is ``WitnessSettings``: after every commit (the default), or once
``every`` events or ``interval_ms`` milliseconds have piled up. Events committed since the
last head sent are the *gap*: a cut or rollback that removes only them is not seen by the
witness check (everything up to the last head is).
"""

from __future__ import annotations

import itertools
import json
import os
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ctxledger.store.chain_key import CHAIN_KEY_ENV, ChainKey
from ctxledger.store.errors import LedgerError
from ctxledger.store.read import head_position
from ctxledger.store.seal import ChainPoint, fold_chain, list_seals

HEAD_FORMAT = "ctxledger-head/1"
WITNESS_ENV = "CTXLEDGER_WITNESS"
"""The witness spec ``Ledger.open`` uses when it is given none."""
HTTP_TIMEOUT_SECONDS = 5.0
"""How long an HTTP witness may take to answer before the append reports it."""


class WitnessError(LedgerError):
    """A witness could not be written or read. On an append, the events are committed
    (``result`` says where); the head was not witnessed and goes out with the next one."""

    def __init__(self, message: str, result: Any = None) -> None:
        self.result = result
        super().__init__(message)


class WitnessSettings(BaseModel):
    """When heads are sent to the witness."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    every: int | None = Field(default=1, ge=1)
    """Send the head after the commit that leaves this many events unwitnessed (1: after
    every commit). None: only ``interval_ms`` counts."""
    interval_ms: int | None = Field(default=None, ge=0)
    """Send it after the first commit once this long (by the ledger's clock) has passed
    since the last head was sent. None: only ``every`` counts."""

    @model_validator(mode="after")
    def _one_cadence(self) -> WitnessSettings:
        if self.every is None and self.interval_ms is None:
            raise ValueError("give every, interval_ms or both")
        return self


@dataclass(frozen=True, slots=True)
class Head:
    """The global chain's value ``hash`` after every event up to ``position``."""

    position: int
    events: int
    hash: str
    key_id: str | None
    at: str = ""
    """When it was witnessed (the ledger clock, ISO 8601), for people reading the file."""

    def line(self) -> str:
        """The head as one line of JSON."""
        return json.dumps({"witness": HEAD_FORMAT, "position": self.position,
                           "events": self.events, "hash": self.hash, "key_id": self.key_id,
                           "at": self.at}, separators=(",", ":"))


def parse_head(value: Any, where: str) -> Head:
    """A head from its JSON value (``WitnessError`` naming ``where`` when it is not one)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise WitnessError(f"{where}: not a witnessed head (not JSON)") from None
    if not isinstance(value, dict) or value.get("witness") != HEAD_FORMAT:
        raise WitnessError(f"{where}: not a witnessed head"
                           f" (expected {{\"witness\": \"{HEAD_FORMAT}\", ...}})")
    if any(type(value.get(k)) is not int or value[k] < 0 for k in ("position", "events")):
        raise WitnessError(f"{where}: position and events must be integers >= 0")
    digest, key_id = value.get("hash"), value.get("key_id")
    if not (isinstance(digest, str) and len(digest) == 64
            and all(c in "0123456789abcdef" for c in digest)):
        raise WitnessError(f"{where}: hash must be 64 hex digits")
    if key_id is not None and not isinstance(key_id, str):
        raise WitnessError(f"{where}: key_id must be a string or null")
    return Head(value["position"], value["events"], digest, key_id, str(value.get("at", "")))


class Witness(ABC):
    """Somewhere heads are kept out of reach of the database's writers."""

    @property
    @abstractmethod
    def name(self) -> str:
        """What it is, for messages (no password)."""

    @abstractmethod
    def record(self, head: Head) -> None:
        """Keep ``head`` durably before returning; ``WitnessError`` when it cannot."""

    @abstractmethod
    def heads(self) -> list[Head]:
        """Every head kept, in the order received; ``WitnessError`` when unreadable."""

    def check_database(self, database_dir: Path | None) -> None:
        """Refuse (``WitnessError``) a witness the database's writers could reach."""
        return None  # an HTTP endpoint is elsewhere by nature

    def close(self) -> None:
        """Release what it holds."""
        return None  # nothing held between heads


class FileWitness(Witness):
    """An append-only file: one line per head, written with ``O_APPEND`` and fsynced.

    Its path must lie outside the database's folder: whoever copies or restores that
    folder would take the witness along."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path).expanduser().absolute()

    @property
    def name(self) -> str:
        return f"witness file {self.path}"

    def check_database(self, database_dir: Path | None) -> None:
        if database_dir is None:
            return
        folder = database_dir.resolve()
        mine = self.path.parent.resolve() / self.path.name
        if mine.is_relative_to(folder):
            raise WitnessError(f"{self.name} is inside the database's folder {folder}:"
                               " keep it where the database's writers cannot reach")

    def record(self, head: Head) -> None:
        data = (head.line() + "\n").encode()
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                # One write of a short line with O_APPEND: lines of several processes
                # never interleave within a line.
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise WitnessError(f"cannot write {self.name}: {exc.strerror}") from None

    def heads(self) -> list[Head]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8"
            raise WitnessError(f"cannot read {self.name}: {reason}") from None
        lines = text.split("\n")
        out: list[Head] = []
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            if number == len(lines):
                # A last line without its newline was torn by a crash mid-write: its
                # head was never reported as witnessed.
                continue
            out.append(parse_head(line, f"{self.name} line {number}"))
        return out


witness_heads = sa.Table(
    "ctxledger_witness_heads",
    sa.MetaData(),
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("position", sa.BigInteger, nullable=False),
    sa.Column("events", sa.BigInteger, nullable=False),
    sa.Column("hash", sa.String(64), nullable=False),
    sa.Column("key_id", sa.String(64)),
    sa.Column("at", sa.String(40), nullable=False),
)
"""The second database's table of heads, one row per head (created on first use)."""


class DatabaseWitness(Witness):
    """A table in a second database (any URL SQLAlchemy opens: SQLite, PostgreSQL)."""

    def __init__(self, url: str) -> None:
        from ctxledger.store.sql_engine import create_engine, safe_url

        self.url = url
        self.engine = create_engine(url)
        self._safe = safe_url(self.engine.url)
        self._ready = False

    @property
    def name(self) -> str:
        return f"witness database {self._safe}"

    def check_database(self, database_dir: Path | None) -> None:
        from ctxledger.store.backends import backend_for

        mine = backend_for(self.engine).database_dir(self.engine)
        if database_dir is not None and mine is not None and (
                mine.resolve().is_relative_to(database_dir.resolve())):
            raise WitnessError(f"{self.name} is inside the database's folder"
                               f" {database_dir.resolve()}: keep it where the database's"
                               " writers cannot reach")

    def _prepare(self) -> None:
        if not self._ready:
            witness_heads.create(self.engine, checkfirst=True)
            self._ready = True

    def record(self, head: Head) -> None:
        try:
            self._prepare()
            with self.engine.begin() as conn:
                conn.execute(witness_heads.insert().values(
                    position=head.position, events=head.events, hash=head.hash,
                    key_id=head.key_id, at=head.at))
        except sa.exc.SQLAlchemyError as exc:
            raise WitnessError(f"cannot write {self.name}: {_first_line(exc)}") from None

    def heads(self) -> list[Head]:
        try:
            with self.engine.connect() as conn:
                if not sa.inspect(conn).has_table(witness_heads.name):
                    return []
                rows = conn.execute(sa.select(witness_heads)
                                    .order_by(witness_heads.c.seq)).all()
        except sa.exc.SQLAlchemyError as exc:
            raise WitnessError(f"cannot read {self.name}: {_first_line(exc)}") from None
        return [Head(int(r.position), int(r.events), r.hash, r.key_id, r.at) for r in rows]

    def close(self) -> None:
        self.engine.dispose()


class HttpWitness(Witness):
    """An HTTP endpoint: each head is ``POST``ed to it as JSON (any 2xx keeps it), and a
    ``GET`` of the same URL returns every head kept, as a JSON array (404: none yet).

    Plain ``urllib`` (imported on first use): one small request per head needs no client
    library, and ``import ctxledger`` stays free of the optional extras."""

    def __init__(self, url: str, timeout: float = HTTP_TIMEOUT_SECONDS) -> None:
        self.url = url
        self.timeout = timeout

    @property
    def name(self) -> str:
        return f"witness endpoint {_strip_credentials(self.url)}"

    def record(self, head: Head) -> None:
        import urllib.error
        import urllib.request

        request = urllib.request.Request(
            self.url, data=head.line().encode(), method="POST",
            headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                response.read()
        except urllib.error.HTTPError as exc:
            raise WitnessError(f"{self.name} refused the head: HTTP {exc.code}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise WitnessError(f"cannot reach {self.name}: {reason}") from None

    def heads(self) -> list[Head]:
        import urllib.error
        import urllib.request

        request = urllib.request.Request(self.url, method="GET",
                                         headers={"Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                body = response.read()
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return []
            raise WitnessError(f"cannot read {self.name}: HTTP {exc.code}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise WitnessError(f"cannot reach {self.name}: {reason}") from None
        try:
            value = json.loads(body)
        except ValueError:
            raise WitnessError(f"{self.name} did not answer with JSON") from None
        if not isinstance(value, list):
            raise WitnessError(f"{self.name} did not answer with a JSON array of heads")
        return [parse_head(v, f"{self.name} head {i + 1}") for i, v in enumerate(value)]


def witness_from_spec(spec: str) -> Witness:
    """A witness from its spec: ``file:///path`` (or a plain path), a database URL
    (``sqlite:///...``, ``postgresql://...``), or ``http(s)://...``."""
    text = spec.strip()
    if not text:
        raise WitnessError(f"empty witness spec: give file:///path, a database URL or"
                           f" an http(s):// URL ({WITNESS_ENV})")
    scheme = text.split(":", 1)[0].lower() if "://" in text else ""
    if scheme == "file":
        path = text[len("file://"):]
        if not path.startswith("/"):
            raise WitnessError(f"witness spec {text!r}: a file witness needs an absolute"
                               " path (file:///path/heads.log)")
        from urllib.parse import unquote

        return FileWitness(unquote(path))
    if scheme in ("http", "https"):
        return HttpWitness(text)
    if not scheme:
        return FileWitness(text)
    from ctxledger.store.backends import backend_for_url

    try:
        backend_for_url(sa.engine.make_url(text))  # a database ctxledger runs on
    except (LedgerError, sa.exc.ArgumentError):
        raise WitnessError(f"witness spec {_strip_credentials(text)!r}: unknown scheme"
                           f" {scheme!r} (file, sqlite, postgresql, http, https)") from None
    return DatabaseWitness(text)


def check_heads(conn: sa.Connection, heads: list[Head], key: ChainKey | None) -> list[str]:
    """Prove the log still extends every witnessed head; the problems found.

    One fold of the log from its start serves every head: each position is a segment
    end. Segments follow the stored seals' keys, as an anchor check does; positions past
    them use the head's own mode (keyed when it has a key id)."""
    if not heads:
        return []
    keyed = [h for h in heads if h.key_id is not None]
    if keyed and key is None:
        return [f"the witness holds heads made with chain key {keyed[-1].key_id}:"
                f" set {CHAIN_KEY_ENV} to verify against them"]
    if key is not None:
        wrong = [h for h in keyed if h.key_id != key.key_id]
        if wrong:
            return [f"{CHAIN_KEY_ENV} (key id {key.key_id}) is not the key the witnessed"
                    f" head at position {wrong[0].position} was made with"
                    f" ({wrong[0].key_id})"]
    problems: list[str] = []
    head = head_position(conn)
    top = max(heads, key=lambda h: h.position)
    if head < top.position:
        problems.append(f"the log ends at position {head}, before the witnessed head at"
                        f" position {top.position}: its tail was cut or an older copy"
                        " of the database was restored")
    by_position: dict[int, list[Head]] = {}
    for h in heads:
        by_position.setdefault(h.position, []).append(h)
    stored = list_seals(conn)
    seal_ends = [(s.position, key if s.key_id is not None else None) for s in stored]
    if any(b[0] <= a[0] for a, b in itertools.pairwise(seal_ends)):
        seal_ends = []  # rewritten seals: fold in the heads' own mode
    ends: dict[int, ChainKey | None] = dict(seal_ends)
    for position, found in by_position.items():
        if position in ends:
            continue
        # A position's events are linked with the key of the first seal at or after it;
        # past the last seal, with the head's own mode.
        covering = [k for end, k in seal_ends if end >= position]
        ends[position] = (covering[0] if covering
                          else key if found[0].key_id is not None else None)
    segments = sorted(ends.items())
    points: dict[int, ChainPoint] = {}
    for (end, _), point in zip(segments, fold_chain(conn, segments), strict=True):
        points[end] = point
    for position in sorted(by_position):
        point = points[position]
        for h in by_position[position]:
            if position > head:
                continue  # reported above, once
            if (point.hash, point.events) != (h.hash, h.events):
                problems.append(f"the log does not extend the witnessed head at position"
                                f" {position}: events up to it were changed, removed or"
                                " inserted, or an older copy of the database was restored")
                return problems
    return problems


def _first_line(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None) or exc
    return str(orig).strip().splitlines()[0] if str(orig).strip() else type(exc).__name__


def _strip_credentials(url: str) -> str:
    if "://" not in url or "@" not in url.split("://", 1)[1].split("/", 1)[0]:
        return url
    scheme, rest = url.split("://", 1)
    return f"{scheme}://***@{rest.split('@', 1)[1]}"
