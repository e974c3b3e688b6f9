"""A tool use's whole route, and the ``ctxledger hook`` command line the script reads.

Claude Code starts the hook on every tool call, so a ``PostToolUse`` must cost little
more than starting Python. This module is that route, and imports only what Python has
loaded at start-up plus a few C modules (``_json``, ``fcntl``, ``_socket``, the builtin
SHA-256): no ``json``, ``re``, ``typing``, ``pathlib``, ``hashlib``, ``socket`` or
``subprocess``, each of which costs a share of a Python start-up. It reads the event,
checks it with the C scanner ``json`` itself uses, appends the event's bytes to the spool
(``_spool``: format 2, one line per tool use) with ``fsync`` under the spool's shared
lock, and tells the database's warm worker (``_worker``) to drain, with the request
``_worker`` reads. The drainer derives the ``tool.used`` event from the spooled bytes
and checks them again, as the in-process hook does.

Anything this route is not sure of (not a tool use, an event the checks here do not pass,
a database or data folder named in a way the helpers here do not resolve, no worker)
goes to the general route (``_route.run_hook``, through ``_script``) with the bytes
already read, which does exactly what it did before: the same outcome, the same one-line
error.
"""

from __future__ import annotations

import os
import stat
import sys
import time

TYPE_CHECKING = False  # typing itself is not imported at run time (mypy reads the name)
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import IO, Any

DB_OPTION = "--db"
AGENT_OPTION = "--agent"
AGENT_ENV = "CTXLEDGER_AGENT"
"""The agent whose manifest scopes the injection, when ``--agent`` is not given."""
TOOL_EVENTS = ("PostToolUse", "PostToolUseFailure")
"""The events a hook spools rather than writes: one per tool call."""
SPOOL_FORMAT = 2
"""The version of a format-2 spool line's header (``v``)."""
IDLE_ENV = "CTXLEDGER_HOOK_WORKER_IDLE"
"""Seconds a worker waits for the next event before it exits; ``0`` turns workers off."""
DEFAULT_IDLE = 1800.0
PROTOCOL = 1
"""The worker protocol's version (``_worker``)."""
ACK_TIMEOUT = 2.0
"""Seconds a tool use waits for the worker to take a drain request."""
MAX_SOCKET_PATH = 100
"""AF_UNIX paths are limited to about 104 bytes (macOS) or 108 (Linux)."""
_SPACE = " \t\n\r"  # JSON's whitespace, as ``json.loads`` skips it
_CHUNK = 1024 * 1024

Arguments = tuple["str | None", "str | None", bool, bool, bool]
"""A hook command line: ``(db, agent, drain, worker, stop_worker)``."""


def hook_argv(argv: Sequence[str], environ: Mapping[str, str]) -> Arguments | None:
    """``argv`` (without the program) as a ``ctxledger [--db URL] hook [--agent A]
    [--drain [--worker]] [--stop-worker]`` command line, or None when it is any other
    command or has anything this route does not read (Typer handles those)."""
    db: str | None = None
    agent: str | None = None
    drain = worker = stop_worker = False
    command = False
    args = list(argv)
    index = 0
    while index < len(args):
        token = args[index]
        name, equals, value = token.partition("=")
        if name in (DB_OPTION, AGENT_OPTION) and not equals:
            if index + 1 >= len(args):
                return None
            value = args[index + 1]
            index += 1
        if name == DB_OPTION and token.startswith("--"):
            if not value.strip():
                return None  # Typer says what is wrong with an empty --db
            db = value
        elif name == AGENT_OPTION and command:
            agent = value
        elif token == "hook" and not command:
            command = True
        elif token == "--drain" and command:
            drain = True
        elif token == "--worker" and command:
            worker = True
        elif token == "--stop-worker" and command:
            stop_worker = True
        else:
            return None
        index += 1
    if not command or (worker and not drain) or (stop_worker and (drain or worker)):
        return None  # Typer says what is wrong
    if agent is None:
        agent = environ.get(AGENT_ENV)
    return (db, (agent.strip() or None) if agent is not None else None, drain, worker,
            stop_worker)


# -- reading and checking the event -------------------------------------------------------

def limit(environ: Mapping[str, str], name: str, default: int) -> int | None:
    """``$name`` as ``ctxledger.io._bounded`` reads an input limit: the default when
    unset, None when it is not a positive whole number (the general route says so)."""
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 18 or int(raw) == 0:
        return None
    return int(raw)


def read_event(stream: IO[bytes], environ: Mapping[str, str]) -> bytes | None:
    """The hook's stdin as ``read_bounded`` reads it: at most one byte past
    ``$CTXLEDGER_MAX_INPUT_BYTES`` (the general route refuses that). None, with nothing
    read, when a limit is set to something the general route refuses."""
    most = limit(environ, "CTXLEDGER_MAX_INPUT_BYTES", 64 * 1024 * 1024)
    if most is None or limit(environ, "CTXLEDGER_MAX_INPUT_DEPTH", 100) is None:
        return None
    data = bytearray()
    while True:
        chunk = stream.read(min(_CHUNK, most + 1 - len(data)))
        if not chunk:
            return bytes(data)
        data += chunk
        if len(data) > most:
            return bytes(data)


class _Decoder:
    """What ``_json.make_scanner`` reads from ``json.JSONDecoder()``: its defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = {"-Infinity": float("-inf"), "Infinity": float("inf"),
                      "NaN": float("nan")}.__getitem__
    array_hook = None  # newer Pythons read it too; without it every event would go the long way


def tool_payload(data: bytes, environ: Mapping[str, str]) -> dict[str, Any] | None:
    """The event in ``data`` when it is a tool use the general route would take as it
    is: UTF-8 JSON (decoded as ``json.loads`` decodes bytes), within the input limits,
    an object with the fields ``parse_event`` and ``tool_use`` require, and a tool
    event. None for anything else, which the general route then judges."""
    most = limit(environ, "CTXLEDGER_MAX_INPUT_BYTES", 64 * 1024 * 1024)
    depth = limit(environ, "CTXLEDGER_MAX_INPUT_DEPTH", 100)
    # json.loads reads bytes as UTF-16 or UTF-32 by their zero bytes and BOMs: only an
    # object's opening brace first (after JSON's whitespace) and no zero byte in the
    # first four is surely UTF-8 to it.
    if most is None or depth is None or len(data) > most or b"\x00" in data[:4] \
            or data.lstrip(_SPACE.encode())[:1] != b"{":
        return None
    from _json import make_scanner

    decoder: Any = _Decoder()
    try:
        text = data.decode("utf-8", "surrogatepass")
        start = len(text) - len(text.lstrip(_SPACE))
        payload, end = make_scanner(decoder)(text, start)
    except Exception:  # not JSON, too deep for the C stack, a number Python refuses
        return None
    if text[end:].strip(_SPACE) or not isinstance(payload, dict) \
            or deeper_than(payload, depth, data):
        return None
    for key in ("hook_event_name", "session_id", "cwd", "tool_name"):
        value = payload.get(key)
        if not isinstance(value, str) or not value.strip():
            return None
    if payload["hook_event_name"] not in TOOL_EVENTS or not payload["tool_name"]:
        return None
    return payload


def deeper_than(value: object, most: int, data: bytes) -> bool:
    """``value`` nests past ``most`` levels (as ``loads_bounded`` counts them); decided
    without a walk when the text has too few brackets to get there."""
    if data.count(b"[") + data.count(b"{") <= most or not isinstance(value, dict | list):
        return False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if level > most:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, level + 1) for child in children
                     if isinstance(child, dict | list))
    return False


# -- where things are ---------------------------------------------------------------------

def _plain(path: str) -> bool:
    """``path`` is absolute and already in the form ``pathlib`` gives it."""
    return path.startswith("/") and os.path.normpath(path) == path


def data_dir(environ: Mapping[str, str]) -> str | None:
    """``_project.user_data_dir`` when it is plain to compute here, else None."""
    base = environ.get("XDG_DATA_HOME", "").strip()
    if not (base and os.path.isabs(base)):
        # pathlib's home: $HOME of this process, whatever ``environ`` says.
        base = os.path.join(os.environ.get("HOME", ""), ".local", "share")
    return os.path.join(base, "ctxledger") if _plain(base) else None


def private(folder: str) -> bool:
    """``folder`` is a folder of this user's with mode 0700 (``_project.private_folder``
    would leave it as it is)."""
    try:
        info = os.stat(folder)
    except (OSError, ValueError):
        return False
    return (stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid()
            and stat.S_IMODE(info.st_mode) == 0o700)


def database_url(db: str | None, cwd: str, environ: Mapping[str, str], data: str
                 ) -> str | None:
    """``_route.database_url(db, cwd)`` when it is plain to find here (no folder to
    make; a URL with a host or an absolute file path), else None."""
    if db:
        url = db
    elif environ.get("CTXLEDGER_DB", "").strip():
        url = environ["CTXLEDGER_DB"].strip()
    else:
        if not _plain(cwd):
            return None
        project = os.path.join(cwd, "ctxledger.db")
        try:
            found = stat.S_ISREG(os.stat(project).st_mode)
        except FileNotFoundError:
            found = False
        except (OSError, ValueError):
            return None  # pathlib's is_file would raise, or says False for its own reasons
        if not found and not private(data):
            return None  # the general route makes the data folder
        url = "sqlite:///" + (project if found else os.path.join(data, "ledger.db"))
    _, scheme_end, rest = url.partition("://")
    # Taken only with a host, or an absolute path (four slashes): a relative file path,
    # a local socket or anything else odd goes to the general route, which resolves it.
    if not scheme_end or not rest or (rest.startswith("/") and not rest.startswith("//")) \
            or "\n" in url:
        return None
    return url


def spool_key(url: str) -> str:
    """``_spool.Spool.of(url).key``: the URL's SHA-256, from the builtin module (not
    ``hashlib``, which loads OpenSSL)."""
    name = "_sha2" if sys.version_info >= (3, 12) else "_sha256"
    digest = __import__(name).sha256(url.encode("utf-8", "surrogateescape"))
    return str(digest.hexdigest())[:24]


def idle_seconds(environ: Mapping[str, str]) -> float:
    """``$CTXLEDGER_HOOK_WORKER_IDLE`` as seconds (the default when unset or not a
    number; never negative)."""
    raw = environ.get(IDLE_ENV, "").strip()
    try:
        value = float(raw) if raw else DEFAULT_IDLE
    except ValueError:
        return DEFAULT_IDLE
    return max(0.0, value) if value == value else DEFAULT_IDLE  # NaN: the default


def build() -> str:
    """What a worker and a hook must share to talk: this version of ctxledger, as
    installed now (an upgrade rewrites ``_worker.py``), on this Python."""
    from ctxledger import __version__

    try:
        stamp = os.stat(os.path.join(os.path.dirname(__file__), "_worker.py")).st_mtime_ns
    except OSError:
        stamp = 0
    return f"{__version__} {stamp} {sys.executable}"


def socket_path(folder: str, key: str) -> str | None:
    """The worker socket of ``key`` in ``folder`` when it is usable: its path fits
    AF_UNIX and the folder is the user's own (mode 0700), so nobody else can have put a
    socket there."""
    path = os.path.join(folder, f"{key}.sock")
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        return None
    try:
        info = os.lstat(folder)
    except OSError:
        return None
    if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() \
            and stat.S_IMODE(info.st_mode) == 0o700:
        return path
    return None


# -- the spool line and the worker's request ----------------------------------------------

def utc_text(nanoseconds: int) -> str:
    """``nanoseconds`` since the epoch as the spool writes a time
    (``%Y-%m-%dT%H:%M:%S.%fZ``, UTC)."""
    seconds, rest = divmod(nanoseconds, 1_000_000_000)
    t = time.gmtime(seconds)
    return (f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}T{t.tm_hour:02d}:"
            f"{t.tm_min:02d}:{t.tm_sec:02d}.{rest // 1000:06d}Z")


def spool_line(event: bytes, at: str, agent: str | None, scope: str | None, folder: str,
               size: str | None) -> bytes:
    """A format-2 spool line: an ASCII JSON header (``v``, when the hook saw the tool use,
    the agent, the ``$CTXLEDGER_SCOPE`` override or null, the project folder resolved,
    the transcript's size when the event has no ``tool_use_id``), a tab, then the event's
    JSON as it came. ``event`` must be JSON a strict decoder took: a line break in it can
    then only be whitespace between tokens, and is written as a space."""
    from _json import encode_basestring_ascii as text

    def value(item: str | None) -> str:
        return "null" if item is None else text(item)
    header = (f'{{"v":{SPOOL_FORMAT},"at":{text(at)},"agent":{value(agent)},'
              f'"scope":{value(scope)},"folder":{text(folder)},"size":{value(size)}}}')
    body = event.strip(_SPACE.encode()).replace(b"\n", b" ").replace(b"\r", b" ")
    return header.encode("ascii") + b"\t" + body + b"\n"


def append_line(folder: str, key: str, line: bytes) -> None:
    """Append ``line`` to the spool ``<key>.events`` in ``folder``, durably (fsync),
    holding ``<key>.lock`` shared: writers append side by side (O_APPEND), a claim waits
    for the lines being written."""
    import fcntl

    lock = os.open(os.path.join(folder, f"{key}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_SH)
        append_durably(os.path.join(folder, f"{key}.events"), line)
    finally:
        os.close(lock)  # closing releases the lock


def append_durably(path: str | os.PathLike[str], data: bytes) -> None:
    """Append ``data`` (one line) to the owner-only file ``path`` and fsync it."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        # One write() of a line to a regular file: O_APPEND places it whole.
        written = os.write(fd, data)
        while written < len(data):
            written += os.write(fd, data[written:])
        os.fsync(fd)
    finally:
        os.close(fd)


def drain_request() -> bytes:
    """The worker's drain request (``_worker``'s protocol 1), as ``json.dumps`` writes it."""
    from _json import encode_basestring_ascii as text

    return f'{{"v":{PROTOCOL},"build":{text(build())},"op":"drain"}}'.encode("ascii")


def ask_drain(folder: str, key: str, environ: Mapping[str, str]) -> bool:
    """Tell the worker of the spool ``key`` (its socket in ``folder``) to drain; False
    when workers are off or none listens. The request is only delivered (the worker
    took the connection): the tool use is on disk already, and a worker that is busy, or
    of another build (which leaves), only delays it to the next drain."""
    path = socket_path(folder, key) if idle_seconds(environ) > 0 else None
    if path is None:
        return False
    import _socket

    conn = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        conn.settimeout(ACK_TIMEOUT)
        conn.connect(path)
        conn.sendall(drain_request())
        conn.shutdown(_socket.SHUT_WR)
    except OSError:
        return False  # no worker, a stale socket, a worker that went away or is stuck
    finally:
        conn.close()
    return True


def prepare(data: bytes, db: str | None, agent: str | None, environ: Mapping[str, str]
            ) -> tuple[str, str, str, bytes] | None:
    """The tool use in ``data`` as a spool line, with where it goes: ``(data folder,
    database URL, spool key, line)``; None when this route is not sure of it."""
    payload = tool_payload(data, environ)
    if payload is None:
        return None
    folder = data_dir(environ)
    if folder is None:
        return None
    url = database_url(db, payload["cwd"], environ, folder)
    if url is None or not private(os.path.join(folder, "spool")):
        return None
    call = payload.get("tool_use_id")
    size = None
    if not (isinstance(call, str) and call):
        # The event's key then hashes the transcript's size as the hook saw it.
        path = payload.get("transcript_path")
        size = ""
        if isinstance(path, str) and path:
            try:
                size = str(os.stat(path).st_size)
            except OSError:
                size = ""
    override = environ.get("CTXLEDGER_SCOPE", "").strip() or None
    line = spool_line(data, utc_text(time.time_ns()), agent, override,
                      os.path.realpath(payload["cwd"]), size)
    return folder, url, spool_key(url), line
