"""Files ctxledger creates are its user's alone, whatever the umask: the hook's data
folder (0700) and its database, WAL, shm and journal files (0600), any SQLite database,
the spool, exported files; and an existing database others can read is warned about once.
Through the real ``ctxledger`` console script and the Typer app, on SQLite and PostgreSQL
where a database is involved."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.assertions import one_error_line
from helpers.hook_events import SCRIPT, hook_event
from typer.testing import CliRunner

from ctxledger import Ledger
from ctxledger._config import ENV_VAR
from ctxledger._hook._worker import IDLE_ENV, Place, stop_worker, worker_alive
from ctxledger.cli import app
from ctxledger.cli._errors import DEBUG_ENV_VAR
from ctxledger.store.errors import ReadableDatabaseWarning

UMASKS = [0o022, 0o000]


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def data_home() -> Iterator[Path]:
    """A short data folder (a worker's socket path must stay under about 100 bytes)."""
    folder = Path(tempfile.mkdtemp(prefix="ctxp-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner(env={ENV_VAR: None, DEBUG_ENV_VAR: None})


def _hook(args: list[str], event: dict[str, object], env: dict[str, str],
          umask: int) -> subprocess.CompletedProcess[str]:
    assert SCRIPT is not None
    return subprocess.run(["sh", "-c", f'umask {umask:03o} && exec "$0" "$@"', SCRIPT,
                           *args], input=json.dumps(event), capture_output=True,
                          text=True, env=env, timeout=120, check=False)


def _wait(condition: object, seconds: float = 60.0) -> None:
    assert callable(condition)
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.parametrize("umask", UMASKS, ids=["022", "000"])
def test_the_hooks_default_database_is_private(data_home: Path, umask: int) -> None:
    env = {key: value for key, value in os.environ.items()
           if key not in ("CTXLEDGER_DB", "CTXLEDGER_SCOPE", "CTXLEDGER_AGENT")}
    env.update({"XDG_DATA_HOME": str(data_home), IDLE_ENV: "120"})
    folder = data_home / "ctxledger"
    url = f"sqlite:///{folder / 'ledger.db'}"
    try:
        done = _hook(["hook"], hook_event("SessionStart", "cc-1"), env, umask)
        assert done.returncode == 0 and done.stderr == "", done
        tool = hook_event("PostToolUse", "cc-1", tool_name="Read", tool_use_id="t1",
                          tool_input={}, tool_response={})
        assert _hook(["hook"], tool, env, umask).stderr == ""
        # The worker holds the database open: its WAL and shm files exist now.
        _wait(lambda: worker_alive(url, env) and Place.of(url, env).socket.exists())
        transcript = data_home / "cc-1.jsonl"
        transcript.touch()
        stop = hook_event("Stop", "cc-1", transcript=transcript)
        assert _hook(["hook"], stop, env, umask).stderr == ""
        files = sorted(path.name for path in folder.iterdir() if path.is_file())
        assert {"ledger.db", "ledger.db-wal", "ledger.db-shm"} <= set(files), files
        for name in files:
            assert _mode(folder / name) == 0o600, name
        for sub in (folder, folder / "spool", folder / "worker"):
            assert _mode(sub) == 0o700, sub
        for path in (folder / "spool").iterdir():
            assert _mode(path) == 0o600, path
    finally:
        stop_worker(url, env)
        _wait(lambda: not worker_alive(url, env))


@pytest.mark.parametrize("umask", UMASKS, ids=["022", "000"])
def test_a_sqlite_database_and_its_journals_are_private(tmp_path: Path, umask: int) -> None:
    path = tmp_path / "new.db"
    old = os.umask(umask)
    try:
        with Ledger.open(f"sqlite:///{path}", load_vocabulary=False) as ledger:
            ledger.append("s1", {"type": "session.started", "data": {}})
            names = sorted(p.name for p in tmp_path.iterdir())
            assert {"new.db", "new.db-wal", "new.db-shm"} <= set(names), names
            for name in names:
                assert _mode(tmp_path / name) == 0o600, name
        # A rollback journal (SQLite's other mode) takes the database file's mode too.
        import sqlite3

        from ctxledger.store.backends.sqlite import private_database_file

        other = tmp_path / "journal.db"
        private_database_file(other)
        conn = sqlite3.connect(other, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("CREATE TABLE scratch (x)")
            journal = tmp_path / "journal.db-journal"
            assert journal.exists() and _mode(journal) == 0o600
            conn.execute("ROLLBACK")
        finally:
            conn.close()
    finally:
        os.umask(old)


@pytest.mark.parametrize("umask", UMASKS, ids=["022", "000"])
def test_exported_files_are_private(runner: CliRunner, db_url: str, tmp_path: Path,
                                    umask: int) -> None:
    cli = ["--db", db_url]
    assert runner.invoke(app, [*cli, "card", "import", "examples/cards/wren-halloway.json",
                               "--session", "s1"]).exit_code == 0
    out, card = tmp_path / "log.jsonl", tmp_path / "card.json"
    card.write_text("stale")
    card.chmod(0o644)  # an existing file is narrowed before it is overwritten
    old = os.umask(umask)
    try:
        exported = runner.invoke(app, [*cli, "export", "--output", str(out)])
        carded = runner.invoke(app, [*cli, "card", "export", "--session", "s1", "-o",
                                     str(card)])
    finally:
        os.umask(old)
    assert exported.exit_code == 0 and exported.stdout == "", exported.stderr
    assert carded.exit_code == 0, carded.stderr
    assert _mode(out) == _mode(card) == 0o600
    assert out.read_text() == runner.invoke(app, [*cli, "export"]).stdout
    assert json.loads(card.read_text())["data"]["name"] == "Wren Halloway"
    one_error_line(runner.invoke(app, [*cli, "export", "-o", str(tmp_path / "no" / "x")]),
                   "cannot write")


def test_a_database_others_can_read_is_warned_about_once(runner: CliRunner,
                                                         tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    url = f"sqlite:///{path}"
    with Ledger.open(url, load_vocabulary=False) as ledger:
        ledger.append("s1", {"type": "session.started", "data": {}})
    assert _mode(path) == 0o600
    quiet = runner.invoke(app, ["--db", url, "events"])
    assert quiet.exit_code == 0 and quiet.stderr == ""
    path.chmod(0o644)
    result = runner.invoke(app, ["--db", url, "events"])
    assert result.exit_code == 0
    assert result.stderr == (f"warning: the database file {path} can be read by other users"
                             " (mode 0644); 'chmod 600' it (and its -wal and -shm files)\n")
    # The library warns through ``warnings``, once per file and process.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            with Ledger.open(url, load_vocabulary=False) as ledger:
                ledger.head()
    assert not [w for w in caught if issubclass(w.category, ReadableDatabaseWarning)]
    other = tmp_path / "other.db"
    shutil.copy(path, other)
    other.chmod(0o640)
    with (pytest.warns(ReadableDatabaseWarning, match="can be read by other users"),
          Ledger.open(f"sqlite:///{other}", load_vocabulary=False) as ledger):
        ledger.head()
    # Its mode is the user's choice: warned, never changed.
    assert _mode(path) == 0o644 and _mode(other) == 0o640


@pytest.mark.parametrize("umask", UMASKS, ids=["022", "000"])
def test_the_spool_is_private_on_either_backend(db_url: str, data_home: Path,
                                                umask: int) -> None:
    env = {key: value for key, value in os.environ.items()
           if key not in ("CTXLEDGER_DB", "CTXLEDGER_SCOPE", "CTXLEDGER_AGENT")}
    env.update({"XDG_DATA_HOME": str(data_home), IDLE_ENV: "0"})
    tool = hook_event("PostToolUse", "cc-1", tool_name="Read", tool_use_id="t1",
                      tool_input={}, tool_response={})
    done = _hook(["--db", db_url, "hook"], tool, env, umask)
    assert done.returncode == 0 and done.stderr == "", done
    drained = _hook(["--db", db_url, "hook", "--drain"], {}, env, umask)
    assert drained.returncode == 0 and drained.stderr == "", drained
    folder = data_home / "ctxledger"
    assert _mode(folder) == _mode(folder / "spool") == 0o700
    for path in (folder / "spool").iterdir():
        assert _mode(path) == 0o600, path
    with Ledger.open(db_url, load_vocabulary=False) as ledger:
        assert [e.type for e in ledger.events("cc-1")][-1] == "tool.used"


def test_the_hook_warns_in_one_line(tmp_path: Path, data_home: Path) -> None:
    path = tmp_path / "hook.db"
    url = f"sqlite:///{path}"
    with Ledger.open(url, load_vocabulary=False) as ledger:
        ledger.head()
    path.chmod(0o644)
    env = {key: value for key, value in os.environ.items()
           if key not in ("CTXLEDGER_DB", "CTXLEDGER_SCOPE", "CTXLEDGER_AGENT")}
    env.update({"XDG_DATA_HOME": str(data_home), IDLE_ENV: "0"})
    done = _hook(["--db", url, "hook"], hook_event("SessionStart", "cc-1"), env, 0o022)
    assert done.returncode == 0 and json.loads(done.stdout)["hookSpecificOutput"]
    assert done.stderr == (f"ctxledger hook: warning: the database file {path} can be read"
                           " by other users (mode 0644); 'chmod 600' it (and its -wal and"
                           " -shm files)\n")
