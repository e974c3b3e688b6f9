"""A real PostgreSQL hot standby of the test server, on loopback, for the replica tests.

``Standby.create`` lets the primary accept replication connections from 127.0.0.1
(``allow_replication``: one line in its ``pg_hba.conf`` and a reload, idempotent; in CI
this is what makes a fresh machine's server replicate), copies it with
``pg_basebackup -R`` into a temporary folder and starts it with ``pg_ctl`` on a free
port. PostgreSQL refuses to run as root, so when the tests run as root both run as the
``postgres`` user, which then owns the folder. ``stop`` stops it and removes the folder.
"""

from __future__ import annotations

import atexit
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import sqlalchemy as sa

PG_BIN = Path(os.environ.get("CTXLEDGER_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))
"""Where ``pg_basebackup`` and ``pg_ctl`` are (the server's own release)."""
REPLICATION_LINE = "host replication all 127.0.0.1/32 trust"
"""What the primary's ``pg_hba.conf`` needs for a loopback standby (trust, as the rest)."""
WAIT = 60.0  # seconds: a loaded machine; nothing here is timed
# Settings a hot standby must have at least as high as its primary, or it stops.
_AT_LEAST_PRIMARY = ("max_connections", "max_worker_processes", "max_wal_senders",
                     "max_locks_per_transaction", "max_prepared_transactions")


class StandbyUnavailable(Exception):
    """A standby cannot be made here (no server binaries, a read-only pg_hba.conf...)."""


def _run(command: list[str], what: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise StandbyUnavailable(f"{what} failed: {(done.stderr or done.stdout).strip()}")


def allow_replication(admin: sa.Engine) -> None:
    """Make the primary accept replication connections from 127.0.0.1 (idempotent)."""
    with admin.connect() as conn:
        hba = Path(str(conn.exec_driver_sql("SHOW hba_file").scalar_one()))
        try:
            lines = hba.read_text().splitlines()
            if REPLICATION_LINE in (line.strip() for line in lines):
                return
            with hba.open("a") as out:
                out.write(f"\n{REPLICATION_LINE}\n")
        except OSError as exc:
            raise StandbyUnavailable(f"cannot let replication in through {hba}: {exc}") from exc
        conn.exec_driver_sql("SELECT pg_reload_conf()")


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Standby:
    """A running hot standby of the server ``primary_url`` names."""

    def __init__(self, primary_url: str, folder: Path, port: int, as_user: list[str]) -> None:
        self.primary_url = primary_url
        self.folder = folder
        self.data = folder / "data"
        self.port = port
        self._as_user = as_user

    @classmethod
    def create(cls, primary_url: str) -> Standby:
        """Copy the server at ``primary_url`` and start the copy as its hot standby."""
        for tool in ("pg_basebackup", "pg_ctl"):
            if not (PG_BIN / tool).is_file():
                raise StandbyUnavailable(f"no {tool} in {PG_BIN} (CTXLEDGER_TEST_PG_BIN)")
        url = sa.engine.make_url(primary_url)
        admin = sa.create_engine(url.difference_update_query(["options"]),
                                 isolation_level="AUTOCOMMIT")
        try:
            allow_replication(admin)
            with admin.connect() as conn:
                settings = {name: str(conn.exec_driver_sql(f"SHOW {name}").scalar_one())
                            for name in _AT_LEAST_PRIMARY}
        finally:
            admin.dispose()
        folder = Path(tempfile.mkdtemp(prefix="ctxledger-standby-"))
        as_user: list[str] = []
        if os.geteuid() == 0:  # postgres refuses to run as root
            owner = pwd.getpwnam("postgres")
            os.chown(folder, owner.pw_uid, owner.pw_gid)
            as_user = ["runuser", "-u", "postgres", "--"]
        standby = cls(primary_url, folder, _free_port(), as_user)
        atexit.register(standby.stop)  # also when the session ends without the fixture's end
        try:
            standby._start(url, settings)
        except BaseException:
            standby.stop()
            raise
        return standby

    def _start(self, primary: sa.URL, settings: dict[str, str]) -> None:
        source = ["-h", primary.host or "127.0.0.1", "-p", str(primary.port or 5432),
                  "-U", primary.username or "postgres"]
        for attempt in range(5):  # the reload that lets replication in lands a moment later
            try:
                _run([*self._as_user, str(PG_BIN / "pg_basebackup"), *source,
                      "-D", str(self.data), "-R", "-X", "stream", "-c", "fast"],
                     "pg_basebackup")
                break
            except StandbyUnavailable:
                if attempt == 4:
                    raise
                shutil.rmtree(self.data, ignore_errors=True)
                time.sleep(1)
        # Debian keeps the server's configuration outside its data folder: the copy gets
        # its own, on a port of its own, its socket in its own folder.
        config = {**settings, "port": str(self.port), "listen_addresses": "'127.0.0.1'",
                  "unix_socket_directories": f"'{self.folder}'", "hot_standby": "on",
                  "hot_standby_feedback": "on", "fsync": "off", "logging_collector": "off"}
        self._write("postgresql.conf", "".join(f"{k} = {v}\n" for k, v in config.items()))
        self._write("pg_hba.conf", "local all all trust\nhost all all 127.0.0.1/32 trust\n")
        self._write("pg_ident.conf", "")
        _run([*self._as_user, str(PG_BIN / "pg_ctl"), "-D", str(self.data),
              "-l", str(self.folder / "server.log"), "-w", "-t", str(int(WAIT)), "start"],
             "pg_ctl start")
        engine = sa.create_engine(self.url(self.primary_url))
        try:
            with engine.connect() as conn:
                if not conn.exec_driver_sql("SELECT pg_is_in_recovery()").scalar_one():
                    raise StandbyUnavailable("the copy started, but not as a standby")
        finally:
            engine.dispose()

    def _write(self, name: str, text: str) -> None:
        path = self.data / name
        path.write_text(text)
        if self._as_user:
            owner = pwd.getpwnam("postgres")
            os.chown(path, owner.pw_uid, owner.pw_gid)

    def url(self, primary_url: str) -> str:
        """``primary_url`` (any database or schema of the primary) on the standby."""
        return sa.engine.make_url(primary_url).set(
            host="127.0.0.1", port=self.port).render_as_string(hide_password=False)

    def catch_up(self, primary_url: str, timeout: float = WAIT) -> None:
        """Wait until the standby has replayed everything the primary has written."""
        primary = sa.create_engine(primary_url)
        standby = sa.create_engine(self.url(primary_url))
        try:
            with primary.connect() as conn:
                lsn = str(conn.exec_driver_sql("SELECT pg_current_wal_lsn()").scalar_one())
            deadline = time.monotonic() + timeout
            with standby.connect() as conn:
                while not conn.exec_driver_sql(
                        "SELECT pg_last_wal_replay_lsn() >= %(lsn)s::pg_lsn",
                        {"lsn": lsn}).scalar_one():
                    conn.rollback()
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"the standby did not replay up to {lsn}")
                    time.sleep(0.02)
        finally:
            primary.dispose()
            standby.dispose()

    def set_replay(self, paused: bool) -> None:
        """Pause or resume the standby's replay (WAL still arrives; nothing is applied)."""
        engine = sa.create_engine(self.url(self.primary_url), isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as conn:
                conn.exec_driver_sql("SELECT pg_wal_replay_pause()" if paused
                                     else "SELECT pg_wal_replay_resume()")
        finally:
            engine.dispose()

    def stop(self) -> None:
        """Stop the standby (immediately: it is a throwaway) and remove its folder."""
        try:
            if (self.data / "postmaster.pid").exists():
                _run([*self._as_user, str(PG_BIN / "pg_ctl"), "-D", str(self.data),
                      "-m", "immediate", "-w", "stop"], "pg_ctl stop")
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)
