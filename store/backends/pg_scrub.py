"""PostgreSQL's scrub after an erase: write the tables the erase touched again, so that
the row versions it deleted or overwrote leave the files.

PostgreSQL drops an old row version's bytes only by writing its page again: plain
``VACUUM`` marks the space free and leaves the bytes. Two ways are used:

- **online**, with the ``pg_repack`` extension (a well-kept tool, packaged by the
  PostgreSQL distributions): it copies the live rows into a new file while appends and
  reads go on, replays what changed meanwhile, and swaps the files under a lock held for
  the swap alone. Used when the extension is installed in the database, the role is a
  superuser (its client checks that) and its client program is found, for every table
  past ``SMALL_TABLE_BYTES``.
- **``VACUUM FULL``** otherwise: the same result, but each table's rewrite holds an
  ACCESS EXCLUSIVE lock, so every scope's appends and reads of it wait.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from typing import Any

from ctxledger.store.errors import LedgerError

REPACK_ENV = "CTXLEDGER_PG_REPACK"
"""The ``pg_repack`` client to run; ``off`` scrubs with ``VACUUM FULL`` instead."""

SCRUB_WAIT_SECONDS = 60.0
"""How long an erase waits for transactions older than it to end before it gives up."""

SMALL_TABLE_BYTES = 4 << 20
"""A table this small (with its indexes and TOAST) is rewritten by ``VACUUM FULL`` even
where ``pg_repack`` is installed: a few milliseconds under its lock, against the brief
locks ``pg_repack`` takes three times."""

REPACK_TIMEOUT_SECONDS = 6 * 3600.0
"""Bound on one online scrub: it copies the tables it rewrites, so it grows with them."""


def scrub(driver: Any, quote: Any, tables: Sequence[str]) -> None:
    """Write ``tables`` of the connection's schema again (``driver``: a psycopg connection
    in autocommit), online when ``pg_repack`` can, else with ``VACUUM FULL``."""
    with driver.cursor() as cur:
        _wait_for_older_snapshots(cur, SCRUB_WAIT_SECONDS)
        client = _repack_client(cur)
        large: list[str] = []
        for table in tables:
            if client is not None and _size(cur, quote(table)) > SMALL_TABLE_BYTES:
                large.append(table)
            else:
                cur.execute(f"VACUUM FULL {quote(table)}")
        if large:
            assert client is not None
            cur.execute("SELECT current_schema()")
            schema = str(cur.fetchone()[0])
            qualified = [f"{quote(schema)}.{quote(t)}" for t in large]
            _drop_leftovers(cur, qualified)
            try:
                _repack(driver, client, qualified)
            except LedgerError:
                _drop_leftovers(cur, qualified)
                raise


def _drop_leftovers(cur: Any, tables: list[str]) -> None:
    """Drop what a ``pg_repack`` run that failed half-way left of ``tables``: its copy
    (``repack.table_<oid>``) holds every row the table had then, content included, that
    no later scrub would reach; its log, row type and trigger block the next run."""
    for table in tables:
        cur.execute("SELECT %s::regclass::oid", (table,))
        oid = int(cur.fetchone()[0])
        cur.execute("SELECT to_regclass(%s) IS NOT NULL OR to_regclass(%s) IS NOT NULL"
                    " OR to_regtype(%s) IS NOT NULL OR EXISTS (SELECT FROM pg_trigger"
                    " WHERE tgrelid = %s AND tgname = 'repack_trigger')",
                    (f"repack.table_{oid}", f"repack.log_{oid}", f"repack.pk_{oid}", oid))
        if not cur.fetchone()[0]:
            continue
        # The lock every pg_repack run holds on the table it rewrites: taken, no run is
        # going on (another erase's, say) and what is there was left by one that failed.
        cur.execute(f"SELECT pg_try_advisory_lock({_REPACK_LOCK}, CAST(-2147483648 + %s::bigint"
                    " AS integer))", (oid,))
        if not cur.fetchone()[0]:
            continue  # running: the client below says so, and the erase can be run again
        import psycopg

        try:
            cur.execute(f"DROP TABLE IF EXISTS repack.table_{oid}, repack.log_{oid} CASCADE")
            cur.execute(f"DROP TYPE IF EXISTS repack.pk_{oid} CASCADE")
            cur.execute(f"DROP TRIGGER IF EXISTS repack_trigger ON {table}")
        except psycopg.Error as exc:
            raise LedgerError(
                f"erase: pg_repack's copy of {table} from a run that failed is still in"
                f" schema repack and cannot be dropped here ({type(exc).__name__}: "
                f"{' '.join(str(exc).split())[:200]}); drop repack.table_{oid} and"
                f" repack.log_{oid} as a superuser") from None
        finally:
            cur.execute(f"SELECT pg_advisory_unlock({_REPACK_LOCK}, CAST(-2147483648 +"
                        " %s::bigint AS integer))", (oid,))


_REPACK_LOCK = 16185446
"""pg_repack's advisory lock class (its ``REPACK_LOCK_PREFIX``), keyed by the table."""


def _size(cur: Any, table: str) -> int:
    cur.execute("SELECT pg_total_relation_size(%s::regclass)", (table,))
    return int(cur.fetchone()[0])


def online_scrub_available(driver: Any) -> bool:
    """Whether a scrub on this connection would run online (``pg_repack``); raises
    ``LedgerError`` when ``CTXLEDGER_PG_REPACK`` asks for what cannot run."""
    with driver.cursor() as cur:
        return _repack_client(cur) is not None


def _repack_client(cur: Any) -> list[str] | None:
    """The client's command, or None for ``VACUUM FULL``. Found by itself only for a
    superuser (the client refuses others); named in ``CTXLEDGER_PG_REPACK``, it is run
    for any role, with ``--no-superuser-check``: the extension's grants decide (managed
    services give it to their administrator role)."""
    setting = os.environ.get(REPACK_ENV, "").strip()
    if setting.lower() == "off":
        return None
    cur.execute("SELECT (SELECT extversion FROM pg_extension WHERE extname = 'pg_repack'),"
                " (SELECT rolsuper FROM pg_roles WHERE rolname = current_user),"
                " current_setting('server_version_num')::int / 10000")
    version, superuser, major = cur.fetchone()
    if setting:
        if not os.access(setting, os.X_OK):
            raise LedgerError(f"{REPACK_ENV}={setting!r} is not an executable file;"
                              " set it to the pg_repack client, or to off")
        if version is None:
            raise LedgerError(f"{REPACK_ENV} is set but the pg_repack extension is not in"
                              " this database (CREATE EXTENSION pg_repack, as a superuser);"
                              " or set it to off")
        return [setting] if superuser else [setting, "--no-superuser-check"]
    if version is None or not superuser:
        return None
    # Debian and Ubuntu put the client beside the server's programs, not on PATH.
    for found in (shutil.which("pg_repack"), f"/usr/lib/postgresql/{major}/bin/pg_repack"):
        if found is not None and os.access(found, os.X_OK):
            return [found]
    return None


def _repack(driver: Any, client: list[str], tables: list[str]) -> None:
    # The connection's own parameters, each by its libpq environment variable: the
    # client reads ``--dbname`` as a database name, not as a connection string, and the
    # password must not be on a command line another user's ``ps`` can read.
    info = driver.info
    env = {name: value for name, value in os.environ.items() if not name.startswith("PG")}
    env["PGCONNECT_TIMEOUT"] = "30"
    for keyword, value in info.get_parameters().items():
        if keyword in _LIBPQ_ENV and value:
            env[_LIBPQ_ENV[keyword]] = value
    if info.password:
        env["PGPASSWORD"] = info.password
    command = [*client, "--no-order", "--no-kill-backend", "--wait-timeout=60",
               "--no-analyze", "--elevel=WARNING", f"--dbname={info.dbname}",
               *(f"--table={t}" for t in tables)]
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True,
                              check=False, timeout=REPACK_TIMEOUT_SECONDS)
    except (OSError, subprocess.TimeoutExpired) as exc:
        problem = f"{type(exc).__name__}: {exc}"
    else:
        output = (done.stderr + done.stdout).strip()
        # A warning is a table it skipped (one it cannot rewrite): not scrubbed either.
        if done.returncode == 0 and "WARNING" not in output and "ERROR" not in output:
            return
        problem = output or f"exit status {done.returncode}"
    line = " ".join(problem.split())[:300]
    raise LedgerError(f"erase: the content is blanked, but pg_repack could not rewrite the"
                      f" tables ({line}); run the same erase again to scrub")


# The connection keywords a libpq client reads from the environment (``dbname`` goes as
# ``--dbname``; the password apart).
_LIBPQ_ENV = {
    "host": "PGHOST", "hostaddr": "PGHOSTADDR", "port": "PGPORT", "user": "PGUSER",
    "options": "PGOPTIONS", "application_name": "PGAPPNAME", "passfile": "PGPASSFILE",
    "service": "PGSERVICE", "sslmode": "PGSSLMODE", "sslcert": "PGSSLCERT",
    "sslkey": "PGSSLKEY", "sslrootcert": "PGSSLROOTCERT", "sslcrl": "PGSSLCRL",
    "requirepeer": "PGREQUIREPEER", "gssencmode": "PGGSSENCMODE",
    "krbsrvname": "PGKRBSRVNAME", "gsslib": "PGGSSLIB",
    "target_session_attrs": "PGTARGETSESSIONATTRS"}

# Every backend of this database, and every replication slot, that holds the cleanup
# horizon at or before ``%(xid)s`` (the xid counter when the scrub began, past the erase's
# own xid): old row versions stay "recently dead" for VACUUM until they are gone.
_OLDER_SNAPSHOTS = """
SELECT 'pid ' || pid || ' (' || coalesce(state, '?') || ')' FROM pg_stat_activity
 WHERE datname = current_database() AND pid <> pg_backend_pid()
   AND (age(backend_xmin) > age(%(xid)s::text::xid) OR age(backend_xid) > age(%(xid)s::text::xid))
UNION ALL
SELECT 'replication slot ' || slot_name FROM pg_replication_slots
 WHERE (database IS NULL OR database = current_database())
   AND (age(xmin) > age(%(xid)s::text::xid) OR age(catalog_xmin) > age(%(xid)s::text::xid))
"""


def _wait_for_older_snapshots(cur: Any, seconds: float) -> None:
    """Wait until no transaction that began before now is open (raise after ``seconds``)."""
    cur.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint % 4294967296")
    row = cur.fetchone()
    xid = str(row[0])
    deadline = time.monotonic() + seconds
    while True:
        cur.execute(_OLDER_SNAPSHOTS, {"xid": xid})
        holders = sorted(str(r[0]) for r in cur.fetchall())
        if not holders:
            return
        if time.monotonic() > deadline:
            raise LedgerError(
                f"erase: the content is blanked, but {len(holders)} transaction(s) older than"
                f" the erase are still open ({', '.join(holders[:3])}) and keep its old row"
                " versions on disk; end them and run the same erase again to scrub")
        time.sleep(0.1)
