"""``scripts/namespace_imports.py`` (for the move into the ``ctxledger`` namespace) rewrites
the imports of the top-level folders, and a second run changes nothing."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "namespace_imports.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("namespace_imports", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SOURCE = '''from store.errors import LedgerError
import projections.state
from assembler import Assembly
from ctxledger.store import x
import storage
from stores import y
    from migrations import env
monkeypatch.setattr("store.append.f", 1)
text = "store is not a module path"
'''

EXPECTED = '''from ctxledger.store.errors import LedgerError
import ctxledger.projections.state
from ctxledger.assembler import Assembly
from ctxledger.store import x
import storage
from stores import y
    from ctxledger.migrations import env
monkeypatch.setattr("ctxledger.store.append.f", 1)
text = "store is not a module path"
'''


def test_rewrite_is_exact_and_idempotent() -> None:
    rewrite = _script().rewrite
    assert rewrite(SOURCE) == EXPECTED
    assert rewrite(EXPECTED) == EXPECTED


def test_check_mode_reports_and_changes_nothing(tmp_path: Path) -> None:
    script = _script()
    (tmp_path / "pkg").mkdir()
    target = tmp_path / "pkg" / "m.py"
    target.write_text(SOURCE, encoding="utf-8")
    assert script.main(["--check", str(tmp_path)]) == 1
    assert target.read_text(encoding="utf-8") == SOURCE
    assert script.main([str(tmp_path)]) == 0
    assert target.read_text(encoding="utf-8") == EXPECTED
    assert script.main(["--check", str(tmp_path)]) == 0


def test_the_repository_imports_only_through_the_namespace() -> None:
    # A bare ``import store`` would load a second copy of the module in a checkout.
    script = _script()
    root = SCRIPT.parent.parent
    own = {SCRIPT, Path(__file__).resolve()}
    # rglob does not descend into the ctxledger/{store,...} symlinks: each file once.
    files = [p for p in script.python_files([root / d for d in (
        "store", "projections", "assembler", "migrations", "ctxledger", "tests", "benchmarks",
        "scripts", "examples")]) if p.resolve() not in own]
    stale = [str(p.relative_to(root)) for p in files
             if script.rewrite(p.read_text(encoding="utf-8")) != p.read_text(encoding="utf-8")]
    assert len(files) > 100 and stale == []
