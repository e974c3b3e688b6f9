"""The CLI starts without loading the database stack: ``--version`` and ``--help`` import
none of the heavy libraries, and a read that needs no assembler does not load it.

Import sets, not timings (a test suite does not time things; ``benchmarks/legs_startup.py``
measures the wall time)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ctxledger import _migrate as migrate

HEAVY = ("sqlalchemy", "rich", "pydantic", "tiktoken", "alembic", "numpy", "bm25s",
         "psycopg", "ctxledger.assembler.api", "ctxledger._ledger",
         "sqlalchemy.dialects.postgresql", "ctxledger.store.catalog",
         "ctxledger.store.validate", "ctxledger.projections.agents")

PROBE = """
import json, sys
from ctxledger.cli import main
heavy = json.loads(sys.argv[2])
sys.argv = ["ctxledger", *json.loads(sys.argv[1])]
try:
    main()
except SystemExit:
    pass
print(json.dumps(sorted(m for m in heavy if m in sys.modules)), file=sys.stderr)
"""


def _loaded(args: list[str], heavy: tuple[str, ...], cwd: Path) -> list[str]:
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(args), json.dumps(heavy)],
                          capture_output=True, text=True, cwd=cwd, timeout=120, check=False)
    found: list[str] = json.loads(done.stderr.strip().splitlines()[-1])
    return found


@pytest.mark.parametrize("args", [["--version"], ["--help"]])
def test_version_and_help_load_nothing_heavy(args: list[str], tmp_path: Path) -> None:
    assert _loaded(args, HEAVY, tmp_path) == []


def test_command_help_loads_no_database_stack(tmp_path: Path) -> None:
    # Typer itself imports pydantic to adapt a command's parameters; nothing else.
    assert _loaded(["state", "--help"], HEAVY, tmp_path) in ([], ["pydantic"])


def test_state_loads_no_assembler_and_no_alembic(tmp_path: Path) -> None:
    from ctxledger import Ledger

    url = f"sqlite:///{tmp_path / 'x.db'}"
    with Ledger.open(url) as ledger:
        ledger.append("s1", {"type": "session.started", "data": {}})
    loaded = _loaded(["state", "s1", "--db", url], HEAVY, tmp_path)
    assert "sqlalchemy" in loaded  # the probe does see what a read loads
    # JSON output draws no table (no rich); a SQLite database needs no PostgreSQL dialect.
    assert not {"alembic", "numpy", "bm25s", "tiktoken", "ctxledger.assembler.api", "rich",
                "psycopg", "sqlalchemy.dialects.postgresql"} & set(loaded)
    # Nor the models only writes need (the catalog's pydantic models, the validation
    # and the agent manifests): a read builds no pydantic model of its own.
    assert not {"ctxledger.store.catalog", "ctxledger.store.validate",
                "ctxledger.projections.agents"} & set(loaded)


def test_state_of_an_agent_and_a_first_write_load_what_they_need(tmp_path: Path) -> None:
    from ctxledger import Ledger

    url = f"sqlite:///{tmp_path / 'x.db'}"
    with Ledger.open(url) as ledger:
        ledger.append("s1", {"type": "session.started", "data": {}})
    assert "ctxledger.projections.agents" in _loaded(
        ["state", "s1", "--agent", "executor", "--db", url], HEAVY, tmp_path)
    event = json.dumps({"type": "message.appended", "data": {"role": "user", "content": "hi"}})
    (tmp_path / "one.jsonl").write_text(event + "\n", encoding="utf-8")
    loaded = _loaded(["append", "s1", "-f", str(tmp_path / "one.jsonl"), "--db", url], HEAVY,
                     tmp_path)
    assert {"ctxledger.store.catalog", "ctxledger.store.validate"} <= set(loaded)


def test_the_head_read_without_alembic_is_alembics_head() -> None:
    assert migrate.linear_head() == migrate.head_revision()
