"""Fuzz the running HTTP service with schemathesis, from its own OpenAPI document.

    python scripts/api_fuzz.py [--backend sqlite|postgres] [--examples N]

Starts ``ctxledger serve`` on a free loopback port over a fresh database (a temporary
SQLite file, or a throwaway schema of ``$CTXLEDGER_TEST_PG_URL``), creates an admin key
and a session with messages (so routes with a session reach their logic instead of a
404), then runs ``schemathesis run`` against ``/openapi.json`` with the checks that the
service answers user input without a server error and as its schema says (status code,
content type, body). It runs twice: with the admin key on the seeded session, then with
a scoped key (the seeded scope only, not admin) on the ids schemathesis makes up, so the
scope checks (404 for what the key may not see, 403 for admin routes) are fuzzed too.
Exit status: 0 when every case of both runs passed, else the first failing run's. The
live change feed's routes do not end a response by themselves, so they are left out
here; their own tests cover them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

BIN = Path(sys.executable).parent
PG_URL = os.environ.get("CTXLEDGER_TEST_PG_URL",
                        "postgresql+psycopg://postgres@127.0.0.1:5432/test")
CHECKS = ("not_a_server_error,status_code_conformance,content_type_conformance,"
          "response_schema_conformance")
SESSION, SCOPE = "fuzz-1", "fuzz"
CONFIG = f"""
[parameters]
"path.session" = "{SESSION}"
"path.stream_id" = "{SESSION}"
"path.scope" = "{SCOPE}"
"""


@contextmanager
def database(backend: str, folder: Path) -> Iterator[str]:
    """A fresh database URL of ``backend``, dropped afterwards."""
    if backend == "sqlite":
        yield f"sqlite:///{folder / 'fuzz.db'}"
        return
    import sqlalchemy as sa

    schema = f"fuzz_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(PG_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    try:
        yield sa.engine.make_url(PG_URL).update_query_dict(
            {"options": f"-csearch_path={schema}"}).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
        admin.dispose()


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def ctxledger(url: str, *args: str) -> str:
    """Run the CLI on ``url``; its standard output."""
    return subprocess.run([str(BIN / "ctxledger"), "--db", url, *args], check=True,
                          capture_output=True, text=True).stdout


def seed(url: str) -> tuple[str, str]:
    """An admin key's token and a scoped key's (``SCOPE`` only); the session the fuzzing
    names, with a few messages."""
    token = str(json.loads(ctxledger(url, "keys", "create", "--admin"))["token"])
    scoped = str(json.loads(ctxledger(url, "keys", "create", "--scope", SCOPE))["token"])
    events = [{"type": "session.started", "data": {"scope": SCOPE}},
              {"type": "message.appended", "data": {"role": "user", "content": "hello"}},
              {"type": "message.appended", "data": {"role": "assistant", "content": "hi"}}]
    lines = "\n".join(json.dumps(event) for event in events)
    subprocess.run([str(BIN / "ctxledger"), "--db", url, "append", SESSION], input=lines,
                   check=True, capture_output=True, text=True)
    return token, scoped


def fuzz(base: str, token: str, examples: int, config: Path | None) -> int:
    """One ``schemathesis run`` with ``token`` (``config``: its path parameters pinned,
    else the ids it generates); its exit status."""
    pinned = ["--config-file", str(config)] if config is not None else []
    return subprocess.run(
        [str(BIN / "schemathesis"), *pinned, "run", f"{base}/openapi.json",
         "--header", f"Authorization: Bearer {token}", "--checks", CHECKS,
         "--max-examples", str(examples), "--phases", "examples,fuzzing",
         "--exclude-path-regex", "/stream$", "--generation-deterministic",
         "--request-timeout", "60", "--no-color"], check=False).returncode


def main(argv: list[str] | None = None) -> int:
    """Serve a fresh database and fuzz it; schemathesis's exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--examples", type=int, default=25,
                        help="cases generated per operation (default 25)")
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="ctxledger-fuzz-"))
    try:
        with database(args.backend, folder) as url:
            token, scoped = seed(url)
            port = free_port()
            base = f"http://127.0.0.1:{port}"
            log = (folder / "serve.log").open("w")
            server = subprocess.Popen([str(BIN / "ctxledger"), "--db", url, "serve",
                                       "--port", str(port)], stdout=log, stderr=log)
            try:
                for _ in range(300):
                    try:
                        with urllib.request.urlopen(f"{base}/healthz", timeout=1):
                            break
                    except OSError:
                        time.sleep(0.1)
                (folder / "schemathesis.toml").write_text(CONFIG)
                status = fuzz(base, token, args.examples, folder / "schemathesis.toml")
                # The empty config file: nothing pinned, so the ids are schemathesis's own.
                (folder / "random.toml").write_text("")
                scoped_status = fuzz(base, scoped, args.examples, folder / "random.toml")
                status = status or scoped_status
            finally:
                server.terminate()
                server.wait(30)
                log.close()
            if status != 0:
                print((folder / "serve.log").read_text()[-4000:], file=sys.stderr)
            return status
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
