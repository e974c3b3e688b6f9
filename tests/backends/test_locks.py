"""The advisory-lock keys: one registry, each key named once and distinct."""

from __future__ import annotations

import re
from pathlib import Path

from ctxledger.store.backends import locks

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIRS = ("ctxledger", "store", "projections", "assembler", "migrations")


def test_every_key_is_distinct_and_fits_the_lock_functions() -> None:
    keys = list(locks.ALL.values())
    assert len(set(keys)) == len(keys), locks.ALL
    assert all(isinstance(k, int) and 0 < k < 2**31 for k in keys)  # an int4 first key
    named = {name: value for name, value in vars(locks).items()
             if name.isupper() and isinstance(value, int)}
    assert named == locks.ALL  # every key defined is in the registry


def test_no_key_is_written_anywhere_else() -> None:
    # A literal advisory-lock key outside the registry would be a second, unnamed one.
    pattern = re.compile(r"pg_(try_)?advisory_(xact_)?lock(_shared)?\(\s*\d")
    registry = ROOT / "store" / "backends" / "locks.py"
    found = [f"{path.relative_to(ROOT)}: {match.group(0)}"
             for folder in PACKAGE_DIRS for path in sorted((ROOT / folder).rglob("*.py"))
             if path != registry
             for match in pattern.finditer(path.read_text(encoding="utf-8"))]
    found += [f"{path.relative_to(ROOT)}: {value}"
              for folder in PACKAGE_DIRS for path in sorted((ROOT / folder).rglob("*.py"))
              if path != registry for value in locks.ALL.values()
              if str(value) in path.read_text(encoding="utf-8")]
    assert found == []
