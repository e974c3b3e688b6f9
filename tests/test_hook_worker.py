"""The hook's warm worker (``ctxledger._hook._worker``), as the console script uses it:
real ``ctxledger hook`` processes, a real worker process on a Unix socket, on SQLite and
PostgreSQL. What it answers must be what the hook would have printed in-process."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from helpers.hook_events import PROJECT, SCRIPT, Run
from helpers.hook_events import hook_event as _event

from ctxledger import Ledger
from ctxledger._hook._handle import RETURNING
from ctxledger._hook._worker import (
    IDLE_ENV,
    PROTOCOL,
    Place,
    ask_event,
    idle_seconds,
    stop_worker,
    worker_alive,
)
from ctxledger._project import project_scope


@pytest.fixture
def data_home() -> Iterator[Path]:
    """A short data folder: a Unix socket's path must stay under about 100 bytes, which
    pytest's own temporary folders can pass."""
    folder = Path(tempfile.mkdtemp(prefix="ctxw-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def env(data_home: Path) -> dict[str, str]:
    found = {key: value for key, value in os.environ.items()
             if key not in ("CTXLEDGER_DB", "CTXLEDGER_SCOPE", "CTXLEDGER_AGENT",
                            "CTXLEDGER_DEBUG")}
    found.update({"XDG_DATA_HOME": str(data_home), IDLE_ENV: "120"})
    return found


@pytest.fixture
def hook(db_url: str, env: dict[str, str]) -> Iterator[Run]:
    """``ctxledger hook`` as Claude Code runs it, with workers on; the worker is stopped
    (and waited for) after the test."""
    assert SCRIPT is not None, "the ctxledger console script is not installed"

    def run(event: dict[str, Any] | str, *args: str,
            extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        if isinstance(event, dict) and str(event.get("transcript_path")).startswith(
                "/nonexistent/"):
            # The helper's placeholder: an empty transcript, as a session's first event
            # finds it.
            path = Path(env["XDG_DATA_HOME"]) / Path(str(event["transcript_path"])).name
            path.touch()
            event = {**event, "transcript_path": str(path)}
        text = event if isinstance(event, str) else json.dumps(event)
        return subprocess.run([SCRIPT, "--db", db_url, "hook", *args], input=text,
                              capture_output=True, text=True,
                              env={**env, **(extra_env or {})}, timeout=120, check=False)
    yield run
    stop_worker(db_url, env)
    _wait(lambda: not worker_alive(db_url, env), "the worker to exit")


def _wait(condition: Callable[[], bool], what: str, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _listening(url: str, env: dict[str, str]) -> bool:
    """The worker answers (a drain request is harmless)."""
    from ctxledger._hook._worker import ask_drain

    return ask_drain(url, env)


def _context(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0 and result.stderr == "", result
    output = json.loads(result.stdout)
    assert output["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    return str(output["hookSpecificOutput"]["additionalContext"])


def _without_sqlalchemy(folder: Path) -> Path:
    """A folder whose ``sqlalchemy`` fails to import, to put first on ``PYTHONPATH``."""
    poisoned = folder / "no-sqlalchemy"
    (poisoned / "sqlalchemy").mkdir(parents=True, exist_ok=True)
    (poisoned / "sqlalchemy" / "__init__.py").write_text(
        "raise ImportError('this hook must not load SQLAlchemy')\n")
    return poisoned


def test_the_first_event_starts_a_worker_and_the_next_ones_use_it(
        hook: Run, db_url: str, env: dict[str, str], data_home: Path) -> None:
    assert not worker_alive(db_url, env)
    _context(hook(_event("SessionStart", "cc-1", source="startup")))
    _wait(lambda: _listening(db_url, env), "the worker to listen")
    place = Place.of(db_url, env)
    assert stat.S_IMODE(place.folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(place.socket.stat().st_mode) == 0o600

    # These hooks (and any drainer they would start) cannot import SQLAlchemy: only the
    # worker can have drained the tool uses, ended the session and answered the start.
    poisoned = {"PYTHONPATH": str(_without_sqlalchemy(data_home))}
    for index, tool in enumerate(("mcp__github__list_prs", "mcp__linear__issue", "Read")):
        done = hook(_event("PostToolUse", "cc-1", tool_name=tool,
                           tool_use_id=f"toolu_{index}", tool_input={}, tool_response={}),
                    extra_env=poisoned)
        assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    for name, fields in (("UserPromptSubmit", {"prompt": "Triage the open PRs."}),
                         ("Stop", {}), ("SessionEnd", {})):
        hook_done = hook(_event(name, "cc-1", **fields), extra_env=poisoned)
        assert (hook_done.returncode, hook_done.stdout, hook_done.stderr) == (0, "", "")
    started = hook(_event("SessionStart", "cc-2", source="startup"), extra_env=poisoned)
    text = _context(started)
    assert "## Previous Session\nAsked:\n- Triage the open PRs." in text
    assert "- MCP: github (1x)" in text
    with Ledger.open(db_url, load_vocabulary=False) as ledger:
        calls = [event.data["call_id"] for event in ledger.events("cc-1")
                 if event.type == "tool.used"]
        assert calls == ["toolu_0", "toolu_1", "toolu_2"]
        start = [event for event in ledger.events("cc-2")]
        assert [event.type for event in start] == ["session.started"]
        # What the worker printed is the session profile's assembly at the hook's time,
        # as the ledger gives it in any process.
        assembled = ledger.assemble("cc-2", "session", now=start[0].recorded_at)
        assert assembled.text == text
        replayed = ledger.replay("cc-2", start[0].position, profile="session",
                                 now=start[0].recorded_at)
        assert replayed.text == text
    assert worker_alive(db_url, env)


def test_the_worker_answers_as_the_hook_would_in_process(
        hook: Run, db_url: str, env: dict[str, str]) -> None:
    _context(hook(_event("SessionStart", "warm")))
    _wait(lambda: _listening(db_url, env), "the worker to listen")
    scope = project_scope(PROJECT, environ={})
    at = datetime(2031, 5, 4, 12, 0, tzinfo=UTC)  # the hook's time, not the worker's
    raw = json.dumps(_event("SessionStart", "cc-at")).encode()
    answer = ask_event(db_url, raw, scope, None, at, env)
    assert answer is not None and answer.lines == [] and answer.error is None
    assert answer.stdout is not None
    with Ledger.open(db_url, load_vocabulary=False) as ledger:
        started = list(ledger.events("cc-at"))
        assert [(event.type, event.recorded_at) for event in started] == [
            ("session.started", at)]
        # A new session in a project with history: greeted as such, not as the first.
        policy = ledger.policy("cc-at", "session").model_copy(
            update={"welcome_message": RETURNING})
        expected = ledger.assemble("cc-at", "session", now=at, policy=policy).text
    assert json.loads(answer.stdout)["hookSpecificOutput"]["additionalContext"] == expected
    # A retried start writes nothing new and says the same.
    again = ask_event(db_url, raw, scope, None, at, env)
    assert again == answer


def test_a_bad_event_gets_the_in_process_line_and_writes_nothing(
        hook: Run, db_url: str, env: dict[str, str]) -> None:
    _context(hook(_event("SessionStart", "warm")))
    _wait(lambda: _listening(db_url, env), "the worker to listen")
    with Ledger.open(db_url, load_vocabulary=False) as ledger:
        before = ledger.head()
    through_worker = hook(_event("UserPromptSubmit", "cc-1", prompt=None))
    in_process = hook(_event("UserPromptSubmit", "cc-1", prompt=None),
                      extra_env={IDLE_ENV: "0"})
    assert through_worker.returncode == 0 and through_worker.stdout == ""
    assert through_worker.stderr == in_process.stderr == (
        "ctxledger hook: UserPromptSubmit has no prompt\n")
    with Ledger.open(db_url, load_vocabulary=False) as ledger:
        assert ledger.head() == before
    assert worker_alive(db_url, env)


def test_a_hook_of_another_build_runs_in_process_and_the_worker_leaves(
        hook: Run, db_url: str, env: dict[str, str]) -> None:
    import socket

    _context(hook(_event("SessionStart", "warm")))
    _wait(lambda: _listening(db_url, env), "the worker to listen")
    place = Place.of(db_url, env)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(30)
        conn.connect(str(place.socket))
        conn.sendall(json.dumps({"v": PROTOCOL, "build": "0.0.0 elsewhere",
                                 "op": "drain"}).encode())
        conn.shutdown(socket.SHUT_WR)
        answer = json.loads(conn.recv(65536))
    assert answer == {"taken": False, "reason": "another build"}
    _wait(lambda: not worker_alive(db_url, env), "the stale worker to exit")
    assert not place.socket.exists()
    # With none listening the hook runs the event itself (and starts a new worker).
    assert "[ctxledger]" in _context(hook(_event("SessionStart", "cc-9")))
    _wait(lambda: _listening(db_url, env), "a new worker to listen")


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # a file is SQLite's
def test_a_replaced_database_file_sends_the_worker_away(
        hook: Run, db_url: str, env: dict[str, str]) -> None:
    _context(hook(_event("SessionStart", "warm")))
    _wait(lambda: _listening(db_url, env), "the worker to listen")
    path = Path(db_url.removeprefix("sqlite:///"))
    copy = path.with_name("copy.db")
    source, target = sqlite3.connect(path), sqlite3.connect(copy)
    with source, target:
        source.backup(target)
    source.close()
    target.close()
    for suffix in ("-wal", "-shm"):
        path.with_name(path.name + suffix).unlink(missing_ok=True)
    copy.chmod(0o600)  # else the hook rightly warns that others can read the copy
    os.replace(copy, path)
    # The worker holds the old file: it must not answer for the new one.
    text = _context(hook(_event("SessionStart", "cc-new")))
    assert text
    _wait(lambda: _listening(db_url, env), "a worker on the new file")
    with Ledger.open(db_url, load_vocabulary=False) as ledger:
        assert [event.type for event in ledger.events("cc-new")] == ["session.started"]


def test_stop_worker_and_idle_exit(db_url: str, env: dict[str, str], hook: Run) -> None:
    stopped = hook("", "--stop-worker")
    assert (stopped.returncode, stopped.stdout) == (0, "no hook worker was running\n")
    _context(hook(_event("SessionStart", "warm")))
    _wait(lambda: _listening(db_url, env), "the worker to listen")
    stopped = hook("", "--stop-worker")
    assert (stopped.returncode, stopped.stdout, stopped.stderr) == (
        0, "stopped the hook's worker\n", "")
    _wait(lambda: not worker_alive(db_url, env), "the worker to exit")

    # A worker idle for its idle time exits by itself and removes its socket.
    short = {IDLE_ENV: "1"}
    _context(hook(_event("SessionStart", "idle"), extra_env=short))
    _wait(lambda: _listening(db_url, {**env, **short}), "the worker to listen")
    _wait(lambda: not worker_alive(db_url, env), "the idle worker to exit", 30)
    assert not Place.of(db_url, env).socket.exists()


def test_workers_off_means_no_background_worker(
        hook: Run, db_url: str, env: dict[str, str]) -> None:
    off = {IDLE_ENV: "0"}
    _context(hook(_event("SessionStart", "cc-1"), extra_env=off))
    time.sleep(1.0)
    assert not worker_alive(db_url, env)
    assert not Place.of(db_url, env).socket.exists()


def test_a_folder_others_can_enter_is_not_used(tmp_path: Path) -> None:
    env = {"XDG_DATA_HOME": str(tmp_path / "d"), IDLE_ENV: "60"}
    place = Place.of("sqlite:////tmp/x.db", env)
    place.folder.mkdir(parents=True, mode=0o755)
    os.chmod(place.folder, 0o755)
    assert not place.usable()
    os.chmod(place.folder, 0o700)
    assert place.usable() == (len(os.fsencode(place.socket)) <= 100)
    assert ask_event("sqlite:////tmp/x.db", b"{}", "s", None, datetime.now(UTC),
                     env) is None


@pytest.mark.parametrize(("raw", "seconds"), [
    ("", 1800.0), ("0", 0.0), ("2.5", 2.5), ("-3", 0.0), ("soon", 1800.0), ("nan", 1800.0)])
def test_idle_setting(raw: str, seconds: float) -> None:
    assert idle_seconds({IDLE_ENV: raw}) == seconds


@pytest.mark.parametrize(("argv", "expected"), [
    (["hook"], (None, None, False, False, False)),
    (["--db", "sqlite:///x.db", "hook", "--drain", "--worker"],
     ("sqlite:///x.db", None, True, True, False)),
    (["hook", "--stop-worker"], (None, None, False, False, True)),
    (["hook", "--worker"], None),  # only with --drain: Typer says so
    (["hook", "--stop-worker", "--drain"], None),
])
def test_the_fast_route_reads_the_worker_options(argv: list[str],
                                                 expected: tuple[Any, ...] | None) -> None:
    from ctxledger._hook import hook_arguments

    found = hook_arguments(argv, environ={})
    if expected is None:
        assert found is None
        return
    assert found is not None and tuple(found) == expected


def test_the_typer_command_refuses_worker_without_drain(db_url: str) -> None:
    from typer.testing import CliRunner

    from ctxledger.cli import app

    result = CliRunner().invoke(app, ["--db", db_url, "hook", "--worker"])
    assert result.exit_code == 2 and "--worker goes with --drain" in result.output


def test_concurrent_hooks_share_one_worker(hook: Run, db_url: str,
                                           env: dict[str, str]) -> None:
    assert SCRIPT is not None
    _context(hook(_event("SessionStart", "warm")))
    _wait(lambda: _listening(db_url, env), "the worker to listen")
    events = [_event("SessionStart", f"cc-{index}") for index in range(4)] + [
        _event("UserPromptSubmit", f"cc-{index}", prompt=f"prompt {index}")
        for index in range(4)] + [
        _event("PostToolUse", "cc-0", tool_name="mcp__github__list_prs",
               tool_use_id=f"toolu_{index}", tool_input={}, tool_response={})
        for index in range(4)]
    processes = [subprocess.Popen([SCRIPT, "--db", db_url, "hook"], env=env,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE) for _ in events]
    outputs = [process.communicate(json.dumps(event).encode(), timeout=120)
               for process, event in zip(processes, events, strict=True)]
    assert [process.returncode for process in processes] == [0] * len(events)
    assert all(err == b"" for _, err in outputs), outputs
    for (out, _), event in zip(outputs, events, strict=True):
        if event["hook_event_name"] == "SessionStart":
            assert json.loads(out)["hookSpecificOutput"]["additionalContext"]
        else:
            assert out == b""
    # The next event drains first: every tool use and prompt is in the log, once.
    _context(hook(_event("SessionStart", "cc-last")))
    with Ledger.open(db_url, load_vocabulary=False) as ledger:
        for index in range(4):
            kinds = [event.type for event in ledger.events(f"cc-{index}")]
            assert kinds.count("session.started") == 1
            assert kinds.count("message.appended") == 1
        calls = sorted(event.data["call_id"] for event in ledger.events("cc-0")
                       if event.type == "tool.used")
        assert calls == [f"toolu_{index}" for index in range(4)]
    assert worker_alive(db_url, env)


def _send_raw(place: Place, data: bytes) -> dict[str, Any] | None:
    """Send ``data`` as one request on the worker's socket; its answer (None when the
    worker closed without one)."""
    import socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(30)
        conn.connect(str(place.socket))
        try:
            conn.sendall(data)
            conn.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # an oversized request: the worker stopped reading it
        chunks = []
        try:
            while chunk := conn.recv(65536):
                chunks.append(chunk)
        except OSError:
            return None
    return json.loads(b"".join(chunks)) if chunks else None


def test_the_worker_survives_bad_requests(hook: Run, db_url: str,
                                          env: dict[str, str]) -> None:
    from ctxledger._hook._worker import build

    _context(hook(_event("SessionStart", "warm")))
    _wait(lambda: _listening(db_url, env), "the worker to listen")
    place = Place.of(db_url, env)
    socket_id = place.socket.stat().st_ino
    nested = '{"v": 1, "build": "x", "op": ' + "[" * 100_000 + "]" * 100_000 + "}"
    event = json.dumps(_event("SessionStart", "cc-bad")).encode()
    deep_event = {"v": PROTOCOL, "build": build(), "op": "event", "scope": "s",
                  "agent": None, "at": "2031-05-04T12:00:00.000000Z",
                  "event": "[" * 50_000 + "]" * 50_000}
    answers = {
        "nested": _send_raw(place, nested.encode()),
        "not JSON": _send_raw(place, b"\xff\xfe not json"),
        "a list": _send_raw(place, b"[1, 2]"),
        "no build": _send_raw(place, b'{"op": "stop"}'),
        "raw event": _send_raw(place, event),
        "deep event": _send_raw(place, json.dumps(deep_event).encode()),
    }
    for what in ("nested", "not JSON", "a list", "no build", "raw event"):
        answer = answers[what]
        assert answer is not None and answer["taken"] is False, (what, answer)
        assert answer["error"].startswith("bad request: "), (what, answer)
        assert "\n" not in answer["error"]
    assert "nested deeper than 100 levels" in answers["nested"]["error"]  # type: ignore[index]
    # An event the worker takes but cannot parse: the hook's own one line, as in-process.
    assert answers["deep event"] == {
        "taken": True, "lines": [],
        "error": "the event: JSON nested deeper than 100 levels (CTXLEDGER_MAX_INPUT_DEPTH)"}
    # Too large for the socket: read no further, keep serving.
    _send_raw(place, b"x" * (64 * 1024 * 1024 + 1))
    # The same worker (the socket it bound) still answers a real hook event.
    assert worker_alive(db_url, env) and place.socket.stat().st_ino == socket_id
    scope = project_scope(PROJECT, environ={})
    answer = ask_event(db_url, json.dumps(_event("SessionStart", "cc-after")).encode(),
                       scope, None, datetime(2031, 5, 4, 12, 0, tzinfo=UTC), env)
    assert answer is not None and answer.error is None and answer.stdout is not None
    assert place.socket.stat().st_ino == socket_id
    with Ledger.open(db_url, load_vocabulary=False) as ledger:
        assert [event.type for event in ledger.events("cc-after")] == ["session.started"]
        assert ledger.events("cc-bad") == []


@pytest.mark.parametrize("workers", ["120", "0"])
def test_a_nested_or_huge_event_on_stdin_fails_open(hook: Run, db_url: str,
                                                    env: dict[str, str],
                                                    workers: str) -> None:
    _context(hook(_event("SessionStart", "warm"), extra_env={IDLE_ENV: workers}))
    if workers != "0":
        _wait(lambda: _listening(db_url, env), "the worker to listen")
    with Ledger.open(db_url, load_vocabulary=False) as ledger:
        before = ledger.head()
    nested = hook("[" * 100_000 + "]" * 100_000, extra_env={IDLE_ENV: workers})
    assert (nested.returncode, nested.stdout) == (0, "")
    assert nested.stderr == ("ctxledger hook: the event: JSON nested deeper than 100 levels"
                             " (CTXLEDGER_MAX_INPUT_DEPTH)\n")
    prompt = _event("UserPromptSubmit", "cc-1", prompt="x" * 4096)
    huge = hook(prompt, extra_env={IDLE_ENV: workers, "CTXLEDGER_MAX_INPUT_BYTES": "2048"})
    assert (huge.returncode, huge.stdout) == (0, "")
    assert huge.stderr == ("ctxledger hook: the event: the input is larger than 2 KiB"
                           " (CTXLEDGER_MAX_INPUT_BYTES)\n")
    # A tool use past either limit: the tool-use route leaves it to the general one,
    # which refuses it with the same line and spools nothing.
    deep: Any = {}
    for _ in range(150):
        deep = {"a": deep}
    tool_uses = {
        "nested": (_event("PostToolUse", "cc-1", tool_input=deep), {}),
        "huge": (_event("PostToolUse", "cc-1", tool_response={"text": "x" * 4096}),
                 {"CTXLEDGER_MAX_INPUT_BYTES": "2048"}),
        "no tool": (_event("PostToolUse", "cc-1", tool_name=""), {})}
    found = {what: hook(event, extra_env={IDLE_ENV: workers, **extra})
             for what, (event, extra) in tool_uses.items()}
    assert {what: (done.returncode, done.stdout, done.stderr)
            for what, done in found.items()} == {
        "nested": (0, "", "ctxledger hook: the event: JSON nested deeper than 100 levels"
                          " (CTXLEDGER_MAX_INPUT_DEPTH)\n"),
        "huge": (0, "", huge.stderr), "no tool": (0, "", "ctxledger hook: PostToolUse has"
                                                         " no tool_name\n")}
    spool = Path(env["XDG_DATA_HOME"]) / "ctxledger" / "spool"
    assert not [path.name for path in spool.glob("*")
                if path.suffix in (".events", ".jsonl", ".batch")]
    with Ledger.open(db_url, load_vocabulary=False) as ledger:
        assert ledger.head() == before


# What a tool use must not import: each costs a share of a Python start-up (json, re and
# typing alone cost as much as the start-up itself), and the whole route must stay within
# twice ``python -c pass`` (the hook leg).
SLOW_IMPORTS = ("json", "re", "typing", "socket", "hashlib", "_hashlib", "dataclasses",
                "collections", "collections.abc", "pathlib", "logging", "subprocess",
                "datetime", "enum", "functools", "contextlib", "warnings", "importlib",
                "ctxledger.cli", "ctxledger._hook._route", "ctxledger._hook._spool",
                "ctxledger._hook._worker", "ctxledger._hook._events", "ctxledger.store")
# Beside the modules of Python's start-up, all a tool use imports.
TOOL_USE_IMPORTS = {"__future__", "ctxledger", "ctxledger._hook", "ctxledger._hook._script",
                    "ctxledger._hook._fast",
                    "_json", "_sha256", "_sha2", "fcntl", "_socket"}
ROOT = Path(__file__).resolve().parent.parent


def _imported(command: list[str], env: dict[str, str], stdin: bytes = b""
              ) -> tuple[set[str], subprocess.CompletedProcess[bytes]]:
    """The modules ``command`` (a Python run with ``-X importtime``) imported."""
    done = subprocess.run(command, input=stdin, capture_output=True, env=env, timeout=120,
                          check=False)
    lines = done.stderr.decode().splitlines()
    return {line.split("|")[-1].strip() for line in lines
            if line.startswith("import time:") and "imported package" not in line}, done


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_tool_use_imports_nothing_slow(hook: Run, db_url: str,
                                         env: dict[str, str]) -> None:
    """The real console script of this venv, as Claude Code runs it with the worker
    listening, under ``-X importtime``. Without site (``-S``; ctxledger from this checkout
    on ``PYTHONPATH``): an editable install's finder, run by site, imports re and typing
    itself and would hide them."""
    assert SCRIPT is not None
    _context(hook(_event("SessionStart", "warm")))
    _wait(lambda: _listening(db_url, env), "the worker to listen")
    python = [sys.executable, "-S", "-X", "importtime"]
    clean = {**env, "PYTHONPATH": str(ROOT)}
    start_up, _ = _imported([*python, "-c", "import os"], clean)  # site imports os
    event = _event("PostToolUse", "cc-imports", tool_name="mcp__github__list_prs",
                   tool_use_id="toolu_imports", tool_input={}, tool_response={"ok": True})
    found, done = _imported([*python, SCRIPT, "--db", db_url, "hook"], clean,
                            json.dumps(event).encode())
    assert done.returncode == 0 and done.stdout == b""
    assert not [line for line in done.stderr.decode().splitlines()
                if not line.startswith("import time:")], done.stderr
    imported = found - start_up
    assert "ctxledger._hook._fast" in imported  # the script ran, through its route
    assert sorted(imported & set(SLOW_IMPORTS)) == []
    assert imported <= TOOL_USE_IMPORTS, sorted(imported - TOOL_USE_IMPORTS)
    # It was spooled and the worker drained it.
    _context(hook(_event("SessionStart", "cc-imports")))
    with Ledger.open(db_url, load_vocabulary=False) as ledger:
        assert [event.data.get("call_id") for event in ledger.events("cc-imports")
                if event.type == "tool.used"] == ["toolu_imports"]
