"""The package installs whole from every route: a wheel built straight from the checkout,
``python -m build`` (an sdist, then a wheel built from it), ``pip install`` of the sdist,
a checkout made without symlinks, and an editable install. Each one imports every module,
and migrations ship inside it so ``Ledger.open`` creates a database from any directory. It
installs one import name, ``ctxledger``: the repository's top-level folders live inside it
(``ctxledger.store``, ...), so they never collide with other packages."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest

import ctxledger
from ctxledger._migrate import head_revision

REPO = Path(__file__).resolve().parent.parent
FOLDERS = ("store", "projections", "assembler", "migrations")
pytestmark = pytest.mark.slow

# Runs inside the new venv, whose path ends with the dev venv's site-packages (see
# ``install``); ctxledger must come from the install.
PROBE = """
import importlib, importlib.util, json, sys
from pathlib import Path
import ctxledger, ctxledger.store as store, ctxledger.projections as projections
import ctxledger.assembler as assembler
from ctxledger import Ledger, LedgerError
from ctxledger._migrate import head_revision, script_location

def modules():
    # The package's own files. In a checkout its path also holds the root, where only the
    # folders are its own. Migration scripts run under alembic, not on import, and the
    # examples are data.
    for entry in map(Path, ctxledger.__path__):
        if (entry / "__init__.py").is_file():
            roots = [(entry, "ctxledger")]
        else:
            roots = [(entry / n, "ctxledger." + n) for n in ("store", "projections", "assembler")]
        for folder, name in roots:
            for path in sorted(folder.rglob("*.py")):
                parts = path.relative_to(folder).with_suffix("").parts
                if not {"migrations", "examples", "__pycache__"} & set(parts):
                    yield ".".join((name, *parts)).removesuffix(".__init__")

imported = sorted(m for m in modules() if importlib.import_module(m))
db = Path(sys.argv[1]) / "x.db"
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
try:
    Ledger.open("sqlite:///" + str(Path(sys.argv[1]) / "missing" / "y.db"), create=False)
    caught = False
except LedgerError:
    caught = True  # the one LedgerError class: nothing was imported twice
print(json.dumps({
    "modules": {m.__name__: m.__file__ for m in (ctxledger, store, projections, assembler)},
    "imported": imported, "caught": caught,
    "bare": {name: importlib.util.find_spec(name) is not None
             for name in ("store", "projections", "assembler", "migrations")},
    "migrations": str(script_location()), "head": head_revision(),
    "positions": list(result.positions), "tables": tables, "version": version,
    "messages": messages, "verified": verified, "db_exists": db.is_file(),
}))
"""


def run(cmd: list[str], cwd: Path, pythonpath: str | None = None) -> str:
    """Run a command; on failure show its output in the assertion."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False, env=env)
    assert done.returncode == 0, f"{cmd[:4]} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def expected_modules() -> list[str]:
    """Every module of the checkout, by the name it has once installed."""
    names = []
    for folder, name in [(REPO / "ctxledger", "ctxledger"),
                         *((REPO / n, f"ctxledger.{n}") for n in FOLDERS if n != "migrations")]:
        for path in folder.rglob("*.py"):
            if "__pycache__" not in path.parts:
                parts = path.relative_to(folder).with_suffix("").parts
                names.append(".".join((name, *parts)).removesuffix(".__init__"))
    return sorted(names)


def install(target: Path, tmp_path: Path, *, editable: bool = False) -> dict[str, Any]:
    """Install ``target`` (a wheel, an sdist or a checkout) into a new venv and probe it
    from an unrelated directory. The dev venv's pip and build backend do the work: no
    network, no dependencies."""
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path)
    new_python = venv / "bin" / "python"
    dev_site = sysconfig.get_paths()["purelib"]
    # The dev venv's site-packages goes after the new venv's own, only so the dependencies
    # resolve: from a .pth, since an editable install's finder (editables) is imported by
    # its own .pth at start-up, which sorts after this one.
    new_site = sysconfig.get_paths(vars={"base": str(venv), "platbase": str(venv)})["purelib"]
    Path(new_site, "0_dependencies.pth").write_text(dev_site + "\n")
    # The backend runs in the new venv's Python, so it borrows hatchling from the dev venv.
    run([sys.executable, "-m", "pip", "--python", str(new_python), "install", "--no-deps",
         "--no-index", "--no-build-isolation", "--quiet",
         *(["--editable"] if editable else []), str(target)], cwd=tmp_path,
        pythonpath=dev_site)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = run([str(new_python), "-I", "-c", PROBE, str(elsewhere)], cwd=elsewhere)
    found: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    assert found["imported"] == expected_modules()
    assert found["caught"]
    assert found["bare"] == dict.fromkeys(FOLDERS, False)
    assert found["head"] == found["version"] == head_revision()
    assert found["db_exists"] and found["verified"]
    assert found["positions"] == [1, 2] and found["messages"] == 1
    assert {"events", "alembic_version", "projection_checkpoints", "sessions"} <= set(
        found["tables"])
    migrations = Path(found["migrations"])
    assert migrations.name == "migrations" and (migrations / "env.py").is_file()
    return found


def assert_installed_inside(found: dict[str, Any], venv: Path) -> None:
    """Every module and the migrations come from ``venv``, none from the checkout."""
    installed = venv.resolve()
    for name, location in [*found["modules"].items(), ("migrations", found["migrations"])]:
        path = Path(location).resolve()
        assert path.is_relative_to(installed), f"{name} imported from {path}"
        assert not path.is_relative_to(REPO), f"{name} imported from the checkout"
    assert Path(found["migrations"]).parent.name == "ctxledger"


def assert_one_package(names: set[str]) -> None:
    """A wheel's files: the whole package, under the one top-level name."""
    assert "ctxledger/migrations/env.py" in names
    assert any(n.startswith("ctxledger/migrations/versions/0001") for n in names)
    assert any(n.startswith("ctxledger/examples/") for n in names)
    assert {"ctxledger/store/__init__.py", "ctxledger/projections/__init__.py",
            "ctxledger/assembler/profiles/novel/profile.py"} <= names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    top_level = {name.split("/")[0] for name in names}
    assert top_level == {"ctxledger", f"ctxledger-{ctxledger.__version__}.dist-info"}, top_level


def test_wheel_from_the_checkout_installs_and_opens_a_database(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist),
         str(REPO)], cwd=tmp_path)
    (wheel,) = dist.glob("ctxledger-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        assert_one_package(set(archive.namelist()))
    assert_installed_inside(install(wheel, tmp_path), tmp_path / "venv")


def test_build_makes_an_sdist_and_from_it_a_complete_wheel(tmp_path: Path) -> None:
    # Plain ``python -m build``: the wheel is built from the unpacked sdist.
    dist = tmp_path / "dist"
    run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(REPO)],
        cwd=tmp_path)
    (sdist,) = dist.glob("ctxledger-*.tar.gz")
    (wheel,) = dist.glob("ctxledger-*.whl")
    with tarfile.open(sdist) as archive:
        members = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {"store/__init__.py", "assembler/decision_engine.py", "migrations/env.py",
            "ctxledger/__init__.py", "pyproject.toml", "scripts/hatch_build.py"} <= members
    with zipfile.ZipFile(wheel) as archive:
        assert_one_package(set(archive.namelist()))
    assert_installed_inside(install(wheel, tmp_path), tmp_path / "venv")


def test_pip_installs_the_sdist(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir", str(dist),
         str(REPO)], cwd=tmp_path)
    (sdist,) = dist.glob("ctxledger-*.tar.gz")
    assert_installed_inside(install(sdist, tmp_path), tmp_path / "venv")


def checkout_without_symlinks(destination: Path) -> Path:
    """The tracked files as ``git -c core.symlinks=false`` checks them out: a tracked link
    would become a text file holding its target. Made from the working tree, so the test
    sees uncommitted changes too."""
    listing = run(["git", "ls-files", "-s", "-z"], cwd=REPO)
    for entry in filter(None, listing.split("\0")):
        meta, name = entry.split("\t", 1)
        source, target = REPO / name, destination / name
        if not source.exists() and not source.is_symlink():
            continue  # deleted in the working tree, not yet committed
        target.parent.mkdir(parents=True, exist_ok=True)
        if meta.startswith("120000"):
            target.write_text(os.readlink(source))
        else:
            shutil.copy2(source, target)
    return destination


def test_no_file_in_the_repository_is_a_symlink() -> None:
    listing = run(["git", "ls-files", "-s"], cwd=REPO)
    assert [line for line in listing.splitlines() if line.startswith("120000")] == []


def test_a_checkout_without_symlinks_installs(tmp_path: Path) -> None:
    checkout = checkout_without_symlinks(tmp_path / "checkout")
    assert_installed_inside(install(checkout, tmp_path), tmp_path / "venv")


def test_an_editable_install_makes_only_ctxledger_importable(tmp_path: Path) -> None:
    checkout = checkout_without_symlinks(tmp_path / "checkout")
    found = install(checkout, tmp_path, editable=True)
    # The modules are the checkout's own files (edits show at once), and the checkout's
    # folders are not importable by their bare names (``bare`` is checked in ``install``).
    for name, location in found["modules"].items():
        assert Path(location).resolve().is_relative_to(checkout.resolve()), name
    assert Path(found["migrations"]).resolve() == (checkout / "migrations").resolve()
