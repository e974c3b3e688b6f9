"""Run ``mypy --strict -p ctxledger`` over the package as a wheel lays it out.

The checkout keeps ``store/``, ``projections/``, ``assembler/`` and ``migrations/`` beside
``ctxledger/``; the package finds them at run time through its ``__path__``, which mypy
does not follow. So this script copies the wheel's layout to ``build/typecheck/`` (afresh
each run, so new modules are seen; times kept, so mypy's cache holds), runs mypy there, and
prints each path as the checkout's own file. Copies, not links: a build backend walking the
checkout would take a linked folder for the real one.

    python scripts/typecheck.py [MYPY ARGS...]
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TREE = ROOT / "build" / "typecheck"
FOLDERS = ("store", "projections", "assembler", "migrations")


def copy_tree() -> Path:
    """``build/typecheck/ctxledger``: ``ctxledger/`` with the top-level folders inside."""
    package = TREE / "ctxledger"
    shutil.rmtree(TREE, ignore_errors=True)
    skip = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "ctxledger", package, ignore=skip)
    for folder in FOLDERS:
        shutil.copytree(ROOT / folder, package / folder, ignore=skip)
    return package


def main() -> int:
    """Copy the tree, run mypy on it, and map its paths back to the checkout."""
    copy_tree()
    env = {**os.environ, "MYPYPATH": str(TREE)}
    done = subprocess.run([sys.executable, "-m", "mypy", "-p", "ctxledger", *sys.argv[1:]],
                          cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    prefix = re.escape(str(TREE.relative_to(ROOT)) + os.sep + "ctxledger" + os.sep)
    inner = re.compile(rf"^{prefix}({'|'.join(FOLDERS)}){re.escape(os.sep)}", re.MULTILINE)
    outer = re.compile(rf"^{prefix}", re.MULTILINE)
    for stream, text in ((sys.stdout, done.stdout), (sys.stderr, done.stderr)):
        stream.write(outer.sub("ctxledger" + os.sep, inner.sub(r"\1" + os.sep, text)))
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
