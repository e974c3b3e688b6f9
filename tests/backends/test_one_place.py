"""Only ``store/backends/`` (and the migrations) ask which database they run on.

Everywhere else calls ``backend_for(...)``'s methods; a new branch on the database kind
outside belongs in a backend instead.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIRS = ("ctxledger", "store", "projections", "assembler")
ALLOWED = (ROOT / "store" / "backends",)

DIALECT_CHECKS = re.compile(
    r"dialect\.name|get_backend_name|dialect_name|is_memory_sqlite"
    r"|[\"'](sqlite|postgresql)[\"']")
"""A dialect's or URL's name, or a database's name as a string to compare it with."""


def _sources() -> list[Path]:
    return [path for folder in PACKAGE_DIRS for path in sorted((ROOT / folder).rglob("*.py"))
            if not any(path.is_relative_to(allowed) for allowed in ALLOWED)]


def test_the_scan_sees_the_package() -> None:
    names = {path.relative_to(ROOT).as_posix() for path in _sources()}
    assert {"store/log.py", "store/append.py", "projections/runner.py",
            "ctxledger/_migrate.py"} <= names
    assert not any(name.startswith("store/backends/") for name in names)


def test_no_code_outside_the_backends_asks_which_database_it_runs_on() -> None:
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
             for path in _sources()
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if DIALECT_CHECKS.search(line)]
    assert found == []


def test_the_pattern_catches_the_branches_it_is_for() -> None:
    for line in ('if conn.dialect.name == "postgresql":', "url.get_backend_name()",
                 "upsert_insert(dialect_name, table)", "x = {'sqlite': 1}",
                 "if is_memory_sqlite(url):"):
        assert DIALECT_CHECKS.search(line), line
    assert not DIALECT_CHECKS.search('url = "sqlite:///ledger.db"')
