"""Fuzz the running HTTP service with schemathesis, from its own OpenAPI document.

    python scripts/api_fuzz.py [--backend sqlite|postgres ...] [--examples N]

For each backend named (``--backend sqlite --backend postgres`` fuzzes both, at the same
time), starts ``ctxledger serve`` on a free loopback port over a fresh database (a temporary
SQLite file, or a throwaway schema of ``$CTXLEDGER_TEST_PG_URL``), creates an admin key
and a session with messages (so routes with a session reach their logic instead of a
404), then runs ``schemathesis run`` against ``/openapi.json`` with the checks that the
service answers user input without a server error and as its schema says (status code,
content type, body). It runs twice: with the admin key on the seeded session, then with
a scoped key (the seeded scope only, not admin) on the ids schemathesis makes up, so the
scope checks (404 for what the key may not see, 403 for admin routes) are fuzzed too.
The two runs go side by side, and so do the backends: a run spends most of its time
waiting for the server's answer, so on two cores four runs take little longer than one.
Schemathesis makes each case once (``--generation-unique-inputs``): no operation is
sent a case it was already sent. Exit status: 0 when every case of every run passed,
else the first failing run's. The live change feed's routes do not end a response by
themselves, so they are left out here; their own tests cover them.
"""

from __future__ import annotations

import argparse
import concurrent.futures
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
STARTUP = 300
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


def wait_until_up(base: str, server: subprocess.Popen[bytes]) -> None:
    """Return once ``base`` answers its health check; raise if the server exits or has
    not answered within ``STARTUP`` seconds (a busy machine starts it slowly)."""
    deadline = time.monotonic() + STARTUP
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"ctxledger serve exited with status {server.returncode}")
        try:
            with urllib.request.urlopen(f"{base}/healthz", timeout=5):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"ctxledger serve did not answer {base}/healthz in {STARTUP} s")


def fuzz(base: str, token: str, examples: int, config: Path, output: Path) -> int:
    """One ``schemathesis run`` with ``token`` (``config``: its path parameters pinned, or
    empty for the ids it generates), its report written to ``output``; its exit status."""
    with output.open("w") as report:
        return subprocess.run(
            [str(BIN / "schemathesis"), "--config-file", str(config), "run",
             f"{base}/openapi.json", "--header", f"Authorization: Bearer {token}",
             "--checks", CHECKS, "--max-examples", str(examples),
             "--phases", "examples,fuzzing", "--generation-unique-inputs",
             # How fast hypothesis makes cases is no property of the service; on a busy
             # machine (the runs share it) the timing check fails operations at random.
             "--suppress-health-check", "too_slow",
             "--exclude-path-regex", "/stream$", "--generation-deterministic",
             "--request-timeout", "60", "--no-color"],
            stdout=report, stderr=subprocess.STDOUT, check=False).returncode


def fuzz_backend(backend: str, examples: int, folder: Path) -> tuple[int, str]:
    """Serve a fresh ``backend`` database and run both fuzz runs against it at once;
    their exit status (the first failing one's) and their reports."""
    folder.mkdir()
    with database(backend, folder) as url:
        token, scoped = seed(url)
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        log = (folder / "serve.log").open("w")
        server = subprocess.Popen([str(BIN / "ctxledger"), "--db", url, "serve",
                                   "--port", str(port)], stdout=log, stderr=log)
        try:
            wait_until_up(base, server)
            (folder / "schemathesis.toml").write_text(CONFIG)
            # The empty config file: nothing pinned, so the ids are schemathesis's own.
            (folder / "random.toml").write_text("")
            runs = [("admin key, seeded session", token, folder / "schemathesis.toml"),
                    ("scoped key, generated ids", scoped, folder / "random.toml")]
            with concurrent.futures.ThreadPoolExecutor(len(runs)) as pool:
                statuses = list(pool.map(
                    lambda run: fuzz(base, run[1], examples, run[2],
                                     folder / f"{run[2].stem}.out"), runs))
        finally:
            server.terminate()
            server.wait(30)
            log.close()
    reports = "".join(f"\n===== {backend}: {name} =====\n"
                      f"{(folder / f'{config.stem}.out').read_text()}"
                      for (name, _, config) in runs)
    status = next((code for code in statuses if code != 0), 0)
    if status != 0:
        reports += f"\n===== {backend}: server log =====\n"
        reports += (folder / "serve.log").read_text()[-4000:]
    return status, reports


def main(argv: list[str] | None = None) -> int:
    """Serve a fresh database per backend and fuzz them all at once; the first failing
    run's exit status, or 0."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("sqlite", "postgres"), action="append",
                        help="a backend to fuzz (repeat for both; default sqlite)")
    parser.add_argument("--examples", type=int, default=25,
                        help="cases generated per operation (default 25)")
    args = parser.parse_args(argv)
    backends = list(dict.fromkeys(args.backend or ["sqlite"]))
    folder = Path(tempfile.mkdtemp(prefix="ctxledger-fuzz-"))
    try:
        with concurrent.futures.ThreadPoolExecutor(len(backends)) as pool:
            results = list(pool.map(
                lambda backend: fuzz_backend(backend, args.examples, folder / backend),
                backends))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    for _, reports in results:
        print(reports)
    return next((status for status, _ in results if status != 0), 0)


if __name__ == "__main__":
    sys.exit(main())
