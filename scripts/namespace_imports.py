"""Rewrite imports of the top-level folders into the ``ctxledger`` namespace (issue #12).

    python scripts/namespace_imports.py FILE_OR_DIR...          # rewrite in place
    python scripts/namespace_imports.py --check FILE_OR_DIR...  # exit 1 if any would change

``from store.x import y`` -> ``from ctxledger.store.x import y``; ``import projections.z``
-> ``import ctxledger.projections.z``; the same for ``assembler`` and ``migrations``, and
for dotted module paths in strings (``monkeypatch.setattr("store.append.f", ...)``,
``importlib.import_module("assembler.api")``). Idempotent: names already under
``ctxledger.`` are left alone, so it can run again on files other branches bring.
Directories are walked for ``*.py`` files (``.venv``, ``build`` and ``.git`` skipped).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

PACKAGES = ("store", "projections", "assembler", "migrations")
_NAMES = "|".join(PACKAGES)
# Statement forms, at the start of a line (indented imports included).
_FROM = re.compile(rf"^(\s*from\s+)({_NAMES})(\s+import\b|\.)", re.MULTILINE)
_IMPORT = re.compile(rf"^(\s*import\s+)({_NAMES})(\s|\.|,|$)", re.MULTILINE)
# Dotted module paths inside string literals: "store.append" or 'assembler.profiles.x'.
_STRING = re.compile(rf"""(?<=["'])({_NAMES})(?=\.[A-Za-z_])""")
SKIP = {".venv", "build", "dist", ".git", "__pycache__"}


def rewrite(text: str) -> str:
    """``text`` with every top-level package import moved under ``ctxledger.``."""
    text = _FROM.sub(r"\1ctxledger.\2\3", text)
    text = _IMPORT.sub(r"\1ctxledger.\2\3", text)
    return _STRING.sub(r"ctxledger.\1", text)


def python_files(paths: list[Path]) -> list[Path]:
    """Every ``*.py`` file named or under a named directory."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(p for p in sorted(path.rglob("*.py"))
                         if not SKIP & set(p.relative_to(path).parts))
        elif path.suffix == ".py":
            found.append(path)
    return found


def main(argv: list[str] | None = None) -> int:
    """Rewrite (or with ``--check`` report) the files; prints each file changed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if needed")
    parser.add_argument("paths", nargs="+", type=Path)
    args = parser.parse_args(argv)
    changed = 0
    for path in python_files(args.paths):
        text = path.read_text(encoding="utf-8")
        new = rewrite(text)
        if new != text:
            changed += 1
            print(path)
            if not args.check:
                path.write_text(new, encoding="utf-8")
    print(f"{changed} file(s) {'to rewrite' if args.check else 'rewritten'}", file=sys.stderr)
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    raise SystemExit(main())
