"""The hook's spool: tool uses land in a file first and reach the log through a drainer.

A tool use must not wait for SQLAlchemy and pydantic to import (that alone takes longer
than a hook's budget), so ``ctxledger hook`` appends it to a spool file in the per-user
data folder (``_fast``: the event's own bytes, with a header) and has it drained: by the
database's worker, else a drainer started in the background. The drainer
(``ctxledger hook --drain``, also run first by every hook event that opens the ledger)
claims the spool by renaming it to a numbered batch, checks each line's event as the
hook does in-process (``_events.parse_event``, ``tool_use``), appends it through
``Ledger.record_in_session`` with its derived id at the time the hook saw the tool use,
then deletes the batch. The ids are derived, so a batch drained twice (its drainer died
before deleting it) writes each event once.

The files of one database (``<key>``: a hash of its URL) in ``user_data_dir()/spool``:

- ``<key>.events``: the spool (format 2: a JSON header, a tab, the event's JSON); a
  writer holds ``<key>.lock`` shared, a claim exclusive;
- ``<key>.jsonl``: the spool of earlier versions (format 1: one derived JSON line per
  tool use), still claimed and drained: a spool on disk survives an upgrade;
- ``<key>.<n>.events`` and ``<key>.<n>.batch``: a claimed batch of either format, drained
  in order of ``n``. The names differ so that a drainer of an earlier version, which
  knows only ``.jsonl`` and ``.batch``, never meets a line it cannot read;
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

from ctxledger._hook._events import TOOL_EVENTS, parse_event, tool_use, transcript_size
from ctxledger._hook._fast import SPOOL_FORMAT, append_durably, append_line, spool_line
from ctxledger._project import DB_ENV, SCOPE_ENV, folder_scope, private_folder, user_data_dir
from ctxledger.store.clock import system_clock
from ctxledger.store.errors import LedgerError

if TYPE_CHECKING:
    import subprocess

    from ctxledger._hook._events import HookEvent
    from ctxledger._ledger import Ledger

SPOOL_VERSION = 1
"""The version of an earlier version's spool line (``v``), still read."""

_RELATIVE_SQLITE = re.compile(r"^(sqlite(?:\+\w+)?:///)(?!/)(?!:memory:)(.+)$")
_BATCH = re.compile(r"^(?P<key>[0-9a-f]+)\.(?P<number>[0-9]+)\.(?:batch|events)$")
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
        """The file new lines are appended to (format 2)."""
        return self.folder / f"{self.key}.events"

    @property
    def legacy_path(self) -> Path:
        """The file earlier versions appended to (format 1)."""
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


def tool_use_line(event: HookEvent, agent: str | None, at: datetime,
                  environ: Mapping[str, str] | None = None) -> bytes:
    """The spool line of the tool use ``event`` (checked by ``tool_use`` already), seen
    at ``at``: the line the tool-use route (``_fast``) writes, with the event written
    again as ASCII JSON (the bytes read may be any encoding ``json`` reads)."""
    env = os.environ if environ is None else environ
    call = event.payload.get("tool_use_id")
    size = None if isinstance(call, str) and call else transcript_size(event)
    body = json.dumps(event.payload, ensure_ascii=True, separators=(",", ":"))
    return spool_line(body.encode("ascii"), at.astimezone(UTC).strftime(_TIME), agent,
                      env.get(SCOPE_ENV, "").strip() or None,
                      os.path.realpath(event.cwd), size)


def append(spool: Spool, line: bytes) -> None:
    """Append ``line`` (one spool line) to the spool, durably (fsync), under the shared
    lock (``_fast.append_line``)."""
    private_folder(spool.folder)
    append_line(os.fspath(spool.folder), spool.key, line)


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
    """Rename the spool (and an earlier version's, when there is one) to the next
    numbered batch, under the exclusive lock (so no line is half-written); the last batch
    made, or None when there is no spooled line."""
    private_folder(spool.folder)
    claimed: Path | None = None
    with _locked(spool.lock, fcntl.LOCK_EX):
        for source, kind in ((spool.legacy_path, "batch"), (spool.path, "events")):
            try:
                if source.stat().st_size == 0:
                    continue
            except FileNotFoundError:
                continue
            numbers = [int(path.name.split(".")[1]) for path in spool.batches()]
            claimed = spool.folder / f"{spool.key}.{max(numbers, default=0) + 1}.{kind}"
            os.replace(source, claimed)
        if claimed is not None:
            _fsync_folder(spool.folder)
    return claimed


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
    head, tab, body = raw.partition(b"\t")  # format 1 escapes every tab
    try:
        data = json.loads(head)
    except ValueError as exc:
        raise SpoolError(f"not JSON: {exc}") from None
    if tab and isinstance(data, dict) and data.get("v") == SPOOL_FORMAT:
        return _parse_format_2(data, body)
    if tab or not isinstance(data, dict) or data.get("v") != SPOOL_VERSION:
        raise SpoolError(f"not a format-{SPOOL_VERSION} or format-{SPOOL_FORMAT} spool line")
    texts = {key: data.get(key) for key in ("at", "session", "scope")}
    if not all(isinstance(value, str) and value for value in texts.values()):
        raise SpoolError("no at, session or scope")
    agent, event, tool = data.get("agent"), data.get("event"), data.get("tool")
    if not (agent is None or isinstance(agent, str)) or not isinstance(event, dict) \
            or not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
        raise SpoolError("no event or tool")
    return _Line(_time(texts["at"]), str(texts["session"]), str(texts["scope"]), agent,
                 event, tool)


def _parse_format_2(header: dict[str, Any], body: bytes) -> _Line:
    """A format-2 line: its event checked as the hook checks one in-process (a bad one
    raises ``HookInputError``, with the hook's own words)."""
    at, agent, scope = header.get("at"), header.get("agent"), header.get("scope")
    folder, size = header.get("folder"), header.get("size")
    if not (isinstance(at, str) and isinstance(folder, str) and folder
            and (agent is None or isinstance(agent, str))
            and (scope is None or (isinstance(scope, str) and scope))
            and (size is None or isinstance(size, str))):
        raise SpoolError("no at, agent, scope, folder or size")
    event = parse_event(body)
    if event.name not in TOOL_EVENTS:
        raise SpoolError(f"not a tool use: {event.name}")
    use, tool = tool_use(event, size)
    return _Line(_time(at), event.session, scope or folder_scope(folder), agent, use, tool)


def _time(text: object) -> datetime:
    try:
        return datetime.strptime(str(text), _TIME).replace(tzinfo=UTC)
    except ValueError as exc:
        raise SpoolError(f"bad time: {exc}") from None


def _reject(spool: Spool, raw: bytes, reason: str) -> None:
    text = raw.decode("utf-8", "backslashreplace")
    data = (json.dumps({"error": reason, "line": text}) + "\n").encode("ascii")
    append_durably(spool.rejected, data)


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
