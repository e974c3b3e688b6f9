"""The built wheel works on its own: migrations ship inside it and ``Ledger.open`` creates
a database from any directory, with nothing imported from the source checkout. It
installs one import name, ``ctxledger``: the repository's top-level folders live inside
it (``ctxledger.store``, ...), so they never collide with other packages."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

import ctxledger
from ctxledger.migrate import head_revision

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow

# Runs inside the new venv. The dev venv's site-packages is appended (after the new
# venv's own) only so the dependencies resolve; ctxledger must come from the wheel.
PROBE = """
import importlib.util, json, sys
sys.path.append(sys.argv[1])
from pathlib import Path
import ctxledger, ctxledger.store as store, ctxledger.projections as projections
import ctxledger.assembler as assembler
from ctxledger import Ledger
from ctxledger.migrate import head_revision, script_location
db = Path(sys.argv[2]) / "x.db"
with Ledger.open(f"sqlite:///{db}") as ledger:
    result = ledger.append("chat-1", [
        {"type": "session.started", "data": {"scope": "wheel"}},
        {"type": "message.appended", "data": {"role": "user", "content": "hi"}},
    ], expected_version=0)
    with ledger.engine.connect() as conn:
        tables = sorted(r[0] for r in conn.exec_driver_sql(
            "SELECT name FROM sqlite_master WHERE type = 'table'"))
        version = conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()
        messages = conn.exec_driver_sql(
            "SELECT messages_total FROM sessions WHERE stream_id = 'chat-1'").scalar()
    verified = ledger.verify().ok
print(json.dumps({
    "modules": {m.__name__: m.__file__ for m in (ctxledger, store, projections, assembler)},
    "bare": {name: importlib.util.find_spec(name) is not None
             for name in ("store", "projections", "assembler", "migrations")},
    "migrations": str(script_location()), "head": head_revision(),
    "positions": list(result.positions), "tables": tables, "version": version,
    "messages": messages, "verified": verified, "db_exists": db.is_file(),
}))
"""


def run(cmd: list[str], cwd: Path) -> str:
    """Run a command; on failure show its output in the assertion."""
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert done.returncode == 0, f"{cmd[:4]} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_wheel_installs_and_opens_a_database(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    run([sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(REPO)],
        cwd=tmp_path)
    (wheel,) = dist.glob("ctxledger-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    assert "ctxledger/migrations/env.py" in names
    assert any(n.startswith("ctxledger/migrations/versions/0001") for n in names)
    assert {"ctxledger/store/__init__.py", "ctxledger/projections/__init__.py",
            "ctxledger/assembler/profiles/novel/profile.py"} <= names
    top_level = {name.split("/")[0] for name in names}
    assert top_level == {"ctxledger", f"ctxledger-{ctxledger.__version__}.dist-info"}, top_level

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path)
    new_python = venv / "bin" / "python"
    # The dev venv's pip installs into the new venv: no network, no dependencies.
    run([sys.executable, "-m", "pip", "--python", str(new_python), "install", "--no-deps",
         "--no-index", "--quiet", str(wheel)], cwd=tmp_path)

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    dev_site = sysconfig.get_paths()["purelib"]
    out = run([str(new_python), "-I", "-c", PROBE, dev_site, str(elsewhere)], cwd=elsewhere)
    found = json.loads(out.strip().splitlines()[-1])

    installed = venv.resolve()
    for name, location in found["modules"].items():
        path = Path(location).resolve()
        assert path.is_relative_to(installed), f"{name} imported from {path}"
        assert not path.is_relative_to(REPO), f"{name} imported from the checkout"
    assert found["bare"] == dict.fromkeys(("store", "projections", "assembler", "migrations"),
                                          False)
    migrations = Path(found["migrations"]).resolve()
    assert migrations.is_relative_to(installed) and migrations.name == "migrations"
    assert migrations.parent.name == "ctxledger" and (migrations / "env.py").is_file()
    assert found["head"] == found["version"] == head_revision()
    assert found["db_exists"] and found["verified"]
    assert found["positions"] == [1, 2] and found["messages"] == 1
    assert {"events", "alembic_version", "projection_checkpoints", "sessions"} <= set(
        found["tables"])
