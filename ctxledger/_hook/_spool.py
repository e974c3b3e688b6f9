"""The hook's spool: tool uses land in a file first and reach the log through a drainer.

A tool use must not wait for SQLAlchemy and pydantic to import (that alone takes longer
than a hook's budget), so ``ctxledger hook`` appends it as one JSON line to a spool file
in the per-user data folder and starts a drainer in the background. The drainer
(``ctxledger hook --drain``, also run first by every hook event that opens the ledger)
claims the spool by renaming it to a numbered batch, appends each line through
``Ledger.record_in_session`` with the line's derived id at the time the hook saw the tool
use, then deletes the batch. The ids are derived, so a batch drained twice (its drainer
died before deleting it) writes each event once. This module imports only the standard
library (and ``ctxledger``'s stdlib-only modules).

The files of one database (``<key>``: a hash of its URL) in ``user_data_dir()/spool``:

- ``<key>.jsonl``: the spool; a writer holds ``<key>.lock`` shared, a claim exclusive;
- ``<key>.<n>.batch``: a claimed batch, drained in order of ``n``;
- ``<key>.drain``: held exclusive by the drainer at work, so drainers take turns;
- ``<key>.rejected.jsonl``: the lines the log refused, each with its reason.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from ctxledger._project import DB_ENV, private_folder, user_data_dir
from ctxledger.store.clock import system_clock
from ctxledger.store.errors import LedgerError

if TYPE_CHECKING:
    import subprocess

    from ctxledger._ledger import Ledger

SPOOL_VERSION = 1
"""The version of a spool line's shape (``v``)."""

_RELATIVE_SQLITE = re.compile(r"^(sqlite(?:\+\w+)?:///)(?!/)(?!:memory:)(.+)$")
_BATCH = re.compile(r"^(?P<key>[0-9a-f]+)\.(?P<number>[0-9]+)\.batch$")
_TIME = "%Y-%m-%dT%H:%M:%S.%fZ"


class SpoolError(LedgerError):
    """A spooled line is not a tool use this version wrote."""


def absolute_url(url: str) -> str:
    """``url`` with a relative SQLite path made absolute (from the working folder): a
    spool then names one database whichever folder its drainer runs in."""
    match = _RELATIVE_SQLITE.match(url)
    if match is None:
        return url
    return match.group(1) + os.path.abspath(match.group(2))


class Spool(NamedTuple):
    """The spool files of one database."""

    folder: Path
    key: str

    @classmethod
    def of(cls, url: str, environ: Mapping[str, str] | None = None) -> Spool:
        """The spool of the database at ``url`` (made absolute by ``absolute_url``)."""
        digest = hashlib.sha256(absolute_url(url).encode("utf-8", "surrogateescape"))
        return cls(user_data_dir(environ) / "spool", digest.hexdigest()[:24])

    @property
    def path(self) -> Path:
        """The file new lines are appended to."""
        return self.folder / f"{self.key}.jsonl"

    @property
    def lock(self) -> Path:
        """Held shared by writers, exclusive by a claim."""
        return self.folder / f"{self.key}.lock"

    @property
    def drain_lock(self) -> Path:
        """Held exclusive by the drainer at work."""
        return self.folder / f"{self.key}.drain"

    @property
    def rejected(self) -> Path:
        """The lines the log refused, as ``{"error": ..., "line": ...}``."""
        return self.folder / f"{self.key}.rejected.jsonl"

    def batches(self) -> list[Path]:
        """The claimed batches not drained yet, oldest first."""
        found: list[tuple[int, Path]] = []
        try:
            names = os.listdir(self.folder)
        except FileNotFoundError:
            return []
        for name in names:
            match = _BATCH.match(name)
            if match is not None and match.group("key") == self.key:
                found.append((int(match.group("number")), self.folder / name))
        return [path for _, path in sorted(found)]


class SpoolClock:
    """The clock a draining ledger runs on: while a spooled line is appended, the time
    the hook saw that tool use; otherwise ``base`` when set (the hook's time, in the
    worker that runs its event), else the system clock (read at call time, so freezegun
    controls it)."""

    def __init__(self) -> None:
        self.at: datetime | None = None
        self.base: datetime | None = None

    def __call__(self) -> datetime:
        if self.at is not None:
            return self.at
        return self.base if self.base is not None else system_clock()


def tool_use_line(session: str, scope: str, agent: str | None, event: Mapping[str, Any],
                  tool: Mapping[str, Any], at: datetime) -> dict[str, Any]:
    """The spool line of one tool use: the ``record_in_session`` call the drainer makes
    (``event`` with its derived id, the ``tool`` to register) and when it was seen."""
    return {"v": SPOOL_VERSION, "at": at.astimezone(UTC).strftime(_TIME),
            "session": session, "scope": scope, "agent": agent, "event": dict(event),
            "tool": dict(tool)}


def append(spool: Spool, line: Mapping[str, Any]) -> None:
    """Append ``line`` to the spool, durably (fsync), under the shared lock: writers
    append side by side (O_APPEND), a claim waits for the lines being written."""
    # ASCII JSON: a lone surrogate in a tool name is escaped, never invalid UTF-8.
    data = (json.dumps(line, separators=(",", ":"), sort_keys=True) + "\n").encode("ascii")
    private_folder(spool.folder)
    with _locked(spool.lock, fcntl.LOCK_SH):
        _append_durably(spool.path, data)


def _append_durably(path: Path, data: bytes) -> None:
    """Append ``data`` (one line) to ``path`` and fsync it."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        # One write() of a small line to a regular file: O_APPEND places it whole.
        written = os.write(fd, data)
        while written < len(data):
            written += os.write(fd, data[written:])
        os.fsync(fd)
    finally:
        os.close(fd)


_DRAINERS: list[subprocess.Popen[bytes]] = []  # subprocess: imported when one starts


def start_drainer(url: str, environ: Mapping[str, str] | None = None, *,
                  worker: bool = False) -> None:
    """Start ``ctxledger hook --drain`` for ``url`` in the background, detached (its own
    session, no standard streams), so the hook exits without waiting for it; with
    ``worker``, ``--worker`` too: it stays on as the database's worker
    (``_worker``). The URL goes in ``$CTXLEDGER_DB``, not on a command line
    others can read."""
    import subprocess  # not at the top: a tool use told to a worker starts no process

    env = dict(os.environ if environ is None else environ)
    env[DB_ENV] = absolute_url(url)
    # Reap the drainers this process started before (a long-lived caller, such as tests).
    _DRAINERS[:] = [child for child in _DRAINERS if child.poll() is None]
    folder = user_data_dir(env) / "spool"
    private_folder(folder)
    # At a low priority where nice(1) is at hand: the drainer's start-up then does not
    # compete with the agent (and the hook that started it) for the CPU.
    # A worker is not: it answers session starts, which wait for it.
    nice = (["/usr/bin/nice", "-n", "10"]
            if not worker and os.access("/usr/bin/nice", os.X_OK) else [])
    _DRAINERS.append(subprocess.Popen(
        [*nice, sys.executable, "-m", "ctxledger.cli", "hook", "--drain",
         *(["--worker"] if worker else [])], env=env,
        cwd=folder,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True, close_fds=True))


def claim(spool: Spool) -> Path | None:
    """Rename the spool to the next numbered batch, under the exclusive lock (so no line
    is half-written); None when there is no spooled line."""
    private_folder(spool.folder)
    with _locked(spool.lock, fcntl.LOCK_EX):
        try:
            if spool.path.stat().st_size == 0:
                return None
        except FileNotFoundError:
            return None
        numbers = [int(path.name.split(".")[1]) for path in spool.batches()]
        target = spool.folder / f"{spool.key}.{max(numbers, default=0) + 1}.batch"
        os.replace(spool.path, target)
        _fsync_folder(spool.folder)
        return target


def drain(spool: Spool, ledger: Callable[[], Ledger], clock: SpoolClock,
          report: Callable[[str], None]) -> int:
    """Append every spooled tool use to the log and return how many lines were taken
    (idempotent repeats included); ``ledger`` opens the ledger (running on ``clock``)
    only when there is a line. Leftover batches (a drainer that died) go first; a line
    the log refuses moves to the rejected file, with one ``report`` line; an error of the
    database itself stops the drain with the batch kept, to be drained again."""
    taken = 0
    private_folder(spool.folder)
    with _locked(spool.drain_lock, fcntl.LOCK_EX):
        while True:
            claim(spool)
            batches = spool.batches()
            if not batches:
                return taken
            opened = ledger()
            for batch in batches:
                taken += _drain_batch(spool, batch, opened, clock, report)
                batch.unlink()


def _drain_batch(spool: Spool, batch: Path, ledger: Ledger, clock: SpoolClock,
                 report: Callable[[str], None]) -> int:
    taken = 0
    for number, raw in enumerate(batch.read_bytes().splitlines(), 1):
        if not raw.strip():
            continue
        try:
            line = _parse_line(raw)
            clock.at = line.at
            try:
                ledger.record_in_session(line.session, line.scope, [line.event],
                                         tools=[line.tool], agent=line.agent)
            finally:
                clock.at = None
        except LedgerError as exc:
            reason = " ".join(str(exc).split())
            _reject(spool, raw, reason)
            report(f"spooled line {number} of {batch.name} rejected ({reason});"
                   f" kept in {spool.rejected}")
        taken += 1
    return taken


class _Line(NamedTuple):
    at: datetime
    session: str
    scope: str
    agent: str | None
    event: dict[str, Any]
    tool: dict[str, Any]


def _parse_line(raw: bytes) -> _Line:
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise SpoolError(f"not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("v") != SPOOL_VERSION:
        raise SpoolError(f"not a version-{SPOOL_VERSION} spool line")
    texts = {key: data.get(key) for key in ("at", "session", "scope")}
    if not all(isinstance(value, str) and value for value in texts.values()):
        raise SpoolError("no at, session or scope")
    agent, event, tool = data.get("agent"), data.get("event"), data.get("tool")
    if not (agent is None or isinstance(agent, str)) or not isinstance(event, dict) \
            or not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
        raise SpoolError("no event or tool")
    try:
        at = datetime.strptime(str(texts["at"]), _TIME).replace(tzinfo=UTC)
    except ValueError as exc:
        raise SpoolError(f"bad time: {exc}") from None
    return _Line(at, str(texts["session"]), str(texts["scope"]), agent, event, tool)


def _reject(spool: Spool, raw: bytes, reason: str) -> None:
    text = raw.decode("utf-8", "backslashreplace")
    data = (json.dumps({"error": reason, "line": text}) + "\n").encode("ascii")
    _append_durably(spool.rejected, data)


@contextmanager
def _locked(path: Path, mode: int) -> Iterator[None]:
    """Hold ``flock(mode)`` on ``path`` (created if missing); closing releases it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, mode)
        yield
    finally:
        os.close(fd)


def _fsync_folder(folder: Path) -> None:
    """Make a rename durable: fsync the folder that holds both names."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
