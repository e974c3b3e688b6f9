"""The hook's worker: a warm process that answers one database's hook events.

A hook process pays for Python, SQLAlchemy, pydantic and the assembler before it reads a
row: most of a second, where a session start takes about 10 ms in a process that has
them loaded. So the background drainer a hook starts (``ctxledger hook --drain``) stays
on after its drain as the database's worker: it listens on a Unix socket in the per-user
data folder and runs each event it is sent through the code the hook runs in-process
(``_handle.LedgerRunner``), at the time the hook saw it, until it has been idle for
``$CTXLEDGER_HOOK_WORKER_IDLE`` seconds (default 1800; ``0``: no worker). A hook asks
the worker first and does the work itself when there is none, or the worker is of
another build, does not answer in time, or goes away; derived event ids make a repeat
harmless. A tool use still lands in the spool first; the worker is only told to drain.

The client half imports only the standard library (a tool use must stay fast); the
server half opens the ledger. The files of one database (``<key>``, as the spool's) in
``user_data_dir()/worker`` (a folder only its owner may enter):

- ``<key>.sock``: the worker's socket (mode 0600);
- ``<key>.lock``: held exclusive by the live worker, so a database has one.

One request per connection: a JSON object, then end of stream; one JSON object back.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from ctxledger._hook import _fast
from ctxledger._hook._spool import Spool
from ctxledger._project import private_folder, user_data_dir
from ctxledger.io._bounded import BoundedInputError, loads_bounded
from ctxledger.store.errors import LedgerError

IDLE_ENV = _fast.IDLE_ENV
"""Seconds a worker waits for the next event before it exits; ``0`` turns workers off."""
DEFAULT_IDLE = _fast.DEFAULT_IDLE
PROTOCOL = _fast.PROTOCOL
ANSWER_TIMEOUT = 4.0
"""Seconds a hook waits for the worker's answer before doing the work itself (the
plugin gives a hook 10 s in all; in-process takes about 1 s)."""
ACK_TIMEOUT = _fast.ACK_TIMEOUT
"""Seconds a tool use waits for the worker to take a drain request."""
_MAX_REQUEST = 64 * 1024 * 1024  # a hook event with a large tool response, and room over
_MAX_SOCKET_PATH = _fast.MAX_SOCKET_PATH
_TIME = "%Y-%m-%dT%H:%M:%S.%fZ"
_TICK = 30.0  # seconds between a waiting worker's checks that it is still wanted


class WorkerError(LedgerError):
    """The worker ran the event and it failed: the hook's one line, as the worker gave
    it."""


class Answer(NamedTuple):
    """A worker's answer to an event: what the hook prints, the lines for stderr, and
    the failure's line when the event failed."""

    stdout: str | None
    lines: list[str]
    error: str | None = None


def idle_seconds(environ: Mapping[str, str] | None = None) -> float:
    """``$CTXLEDGER_HOOK_WORKER_IDLE`` as seconds (the default when unset or not a
    number; never negative)."""
    return _fast.idle_seconds(os.environ if environ is None else environ)


def build() -> str:
    """What a worker and a hook must share to talk: this version of ctxledger, as
    installed now (an upgrade rewrites this file), on this Python (``_fast.build``)."""
    return _fast.build()


class Place(NamedTuple):
    """Where the worker of one database listens."""

    folder: Path
    key: str

    @classmethod
    def of(cls, url: str, environ: Mapping[str, str] | None = None) -> Place:
        """The worker files of the database at ``url`` (keyed as its spool)."""
        return cls(user_data_dir(environ) / "worker", Spool.of(url, environ).key)

    @property
    def socket(self) -> Path:
        """The worker's socket."""
        return self.folder / f"{self.key}.sock"

    @property
    def lock(self) -> Path:
        """Held exclusive by the live worker."""
        return self.folder / f"{self.key}.lock"

    def usable(self) -> bool:
        """The socket's path fits AF_UNIX and its folder is the user's own (mode 0700):
        nobody else can have put a socket there."""
        return _fast.socket_path(os.fspath(self.folder), self.key) is not None


# -- the hook's side (standard library only) -------------------------------------------


def ask_event(url: str, raw: bytes, scope: str, agent: str | None, at: datetime,
              environ: Mapping[str, str] | None = None) -> Answer | None:
    """Have the worker of ``url`` run the hook event ``raw`` (project ``scope``, ``agent``)
    as seen at ``at``; None when no worker took it (the hook then runs it itself)."""
    found = _exchange(Place.of(url, environ), {
        "op": "event", "event": raw.decode("utf-8", "surrogateescape"), "scope": scope,
        "agent": agent, "at": at.astimezone(UTC).strftime(_TIME)},
        ANSWER_TIMEOUT, environ)
    if found is None:
        return None
    lines = [str(line) for line in found.get("lines", [])]
    stdout, error = found.get("stdout"), found.get("error")
    return Answer(stdout if isinstance(stdout, str) else None, lines,
                  None if error is None else str(error))


def ask_drain(url: str, environ: Mapping[str, str] | None = None) -> bool:
    """Tell the worker of ``url`` to drain the spool; False when no worker listens (the
    hook then starts a drainer). The hook does not wait for the worker to answer: the
    tool use is on disk already, and a busy worker (or one of another build, which
    leaves) only delays it to the next drain, at the latest the next other event's."""
    return _exchange(Place.of(url, environ), {"op": "drain"}, ACK_TIMEOUT,
                     environ, wait=False) is not None


def stop_worker(url: str, environ: Mapping[str, str] | None = None) -> bool:
    """Ask the worker of ``url`` to exit (``ctxledger hook --stop-worker``); False when
    none was listening."""
    return _exchange(Place.of(url, environ), {"op": "stop"}, ANSWER_TIMEOUT,
                     environ, even_off=True) is not None


def _exchange(place: Place, request: dict[str, Any], timeout: float,
              environ: Mapping[str, str] | None, *, even_off: bool = False,
              wait: bool = True) -> dict[str, Any] | None:
    """Send ``request`` and read the answer; None when there is no worker, it is of
    another build, or it does not answer within ``timeout`` seconds. With workers off
    nothing is sent, unless ``even_off`` (a stop reaches a worker started before).
    Without ``wait`` the request is only delivered (a listening worker took the
    connection): ``{"taken": true}`` then, without waiting for the worker's turn."""
    if (idle_seconds(environ) <= 0 and not even_off) or not place.usable():
        return None
    request = {"v": PROTOCOL, "build": build(), **request}
    data = json.dumps(request, ensure_ascii=True, separators=(",", ":")).encode("ascii")
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout)
            conn.connect(os.fspath(place.socket))
            conn.sendall(data)
            conn.shutdown(socket.SHUT_WR)
            if not wait:
                return {"taken": True}
            answer = json.loads(_read_all(conn))
    except (OSError, ValueError):
        return None  # no worker, a stale socket, a worker that went away or is stuck
    if not isinstance(answer, dict) or answer.get("taken") is not True:
        return None
    return answer


def _read_all(conn: socket.socket) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = conn.recv(65536)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > _MAX_REQUEST:
            raise ValueError(f"larger than {_MAX_REQUEST} bytes")
        chunks.append(chunk)


# -- the worker's side -----------------------------------------------------------------


@contextmanager
def _only_worker(place: Place) -> Iterator[bool]:
    """Hold ``place.lock`` exclusive while the block runs; False (and nothing held) when
    another worker has it."""
    private_folder(place.folder)
    fd = os.open(place.lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def _file_identity(path: Path | None) -> tuple[int, int] | None:
    if path is None:
        return None
    try:
        info = path.stat()
    except OSError:
        return (-1, -1)
    return (info.st_dev, info.st_ino)


class Runner(Protocol):
    """What a worker does with the ledger open (``_handle.LedgerRunner`` implements it)."""

    def act(self, raw: bytes, scope: str, agent: str | None, at: datetime,
            report: Callable[[str], None]) -> str | None:
        """Run the hook event ``raw`` as the hook would in-process, at ``at``."""

    def failure(self, exc: Exception) -> str:
        """The one line a hook prints for ``exc``."""

    def drain(self) -> None:
        """Append the spooled tool uses."""

    def database_file(self) -> Path | None:
        """The ledger's database file (None for a server's database)."""

    def close(self) -> None:
        """Release the ledger."""


def worker_alive(url: str, environ: Mapping[str, str] | None = None) -> bool:
    """A worker of ``url`` is running or starting (its lock is held)."""
    place = Place.of(url, environ)
    if not place.usable():
        return False
    try:
        fd = os.open(place.lock, os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing releases a lock taken here
    return False


def worker_wanted(url: str, environ: Mapping[str, str] | None = None) -> bool:
    """Workers are on and none of ``url`` runs or is starting: a hook should start one."""
    return idle_seconds(environ) > 0 and not worker_alive(url, environ)


def serve(url: str, start: Callable[[], Runner],
          environ: Mapping[str, str] | None = None) -> None:
    """Be the worker of ``url`` until idle (``idle_seconds``), stopped, or stale; return
    at once when workers are off or another worker holds the place. ``start()`` opens
    the ledger (only once the place is this worker's)."""
    idle = idle_seconds(environ)
    place = Place.of(url, environ)
    if idle <= 0 or len(os.fsencode(place.socket)) > _MAX_SOCKET_PATH:
        return
    own_build = build()  # the code this process runs, whatever is installed later
    with _only_worker(place) as mine:
        if not mine:
            return
        runner = start()
        database = runner.database_file()
        identity = _file_identity(database)
        place.socket.unlink(missing_ok=True)  # a dead worker's; the lock says none lives
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(os.fspath(place.socket))
            os.chmod(place.socket, 0o600)
            listener.listen(64)
            listener.settimeout(min(idle, _TICK))
            _drain_quietly(runner)  # what was spooled while this worker started
            last = time.monotonic()
            while True:
                try:
                    conn, _ = listener.accept()
                except TimeoutError:
                    # Idle long enough, or the place or database gone (a removed data
                    # folder, a replaced file): leave.
                    if time.monotonic() - last >= idle or not _still_here(
                            place, database, identity):
                        return
                    continue
                with conn:
                    # A database file replaced or removed (erased, restored from a copy)
                    # must not be written through the old handle: leave, and the next
                    # hook runs in-process.
                    if not _still_here(place, database, identity):
                        return
                    try:
                        keep = _answer(conn, runner, own_build)
                    except Exception:  # one request must not end the worker
                        keep = True
                    if not keep:
                        return
                last = time.monotonic()
        finally:
            listener.close()
            place.socket.unlink(missing_ok=True)
            runner.close()


def _still_here(place: Place, database: Path | None,
                identity: tuple[int, int] | None) -> bool:
    """This worker's socket is still in place and its database file is the one it
    opened."""
    return place.socket.exists() and _file_identity(database) == identity


def _answer(conn: socket.socket, runner: Runner, own_build: str) -> bool:
    """Answer one request on ``conn``; False when the worker must exit (stop, or a hook
    of another build: that hook runs in-process, and a later one starts a new worker)."""
    conn.settimeout(ANSWER_TIMEOUT)
    try:
        request = _request(conn)
    except OSError:
        return True  # a client that went away midway
    except (BoundedInputError, ValueError) as exc:
        # Not a hook's request (too large, too deep, not JSON): say so, keep serving.
        _send(conn, {"taken": False, "error": f"bad request: {_one_line(exc)}"})
        return True
    if not isinstance(request, dict) or not isinstance(request.get("build"), str):
        _send(conn, {"taken": False, "error": "bad request: not a hook's request object"})
        return True
    if request.get("v") != PROTOCOL or request.get("build") != own_build:
        _send(conn, {"taken": False, "reason": "another build"})
        return False
    op = request.get("op")
    if op == "stop":
        _send(conn, {"taken": True})
        return False
    if op == "drain":
        _send(conn, {"taken": True})
        # The hook waits for the end of the answer: end it now, not after the drain.
        with suppress(OSError):
            conn.shutdown(socket.SHUT_RDWR)
        _drain_quietly(runner)
        return True
    if op != "event":
        _send(conn, {"taken": False, "reason": f"unknown op {op!r}"})
        return True
    lines: list[str] = []
    try:
        at = datetime.strptime(str(request["at"]), _TIME).replace(tzinfo=UTC)
        agent = request.get("agent")
        stdout = runner.act(str(request["event"]).encode("utf-8", "surrogateescape"),
                            str(request["scope"]), agent if isinstance(agent, str) else None,
                            at, lines.append)
    except Exception as exc:  # the hook's own fail-open line, sent back to it
        _send(conn, {"taken": True, "lines": lines, "error": runner.failure(exc)})
        return True
    _send(conn, {"taken": True, "stdout": stdout, "lines": lines})
    return True


def _request(conn: socket.socket) -> Any:
    """The request on ``conn``, within ``_MAX_REQUEST`` bytes and the input nesting
    limit (``ctxledger.io._bounded``)."""
    data = _read_all(conn)
    return loads_bounded(data, "request", check_numbers=False)


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())[:300] or type(exc).__name__


def _drain_quietly(runner: Runner) -> None:
    """Drain; a failure (the database down) leaves the lines spooled, and the next
    event's own drain reports it to its hook."""
    with suppress(Exception):
        runner.drain()


def _send(conn: socket.socket, answer: Mapping[str, Any]) -> None:
    with suppress(OSError):  # the hook gave up waiting; it runs the event itself
        conn.sendall(json.dumps(answer, ensure_ascii=True,
                                separators=(",", ":")).encode("ascii"))
