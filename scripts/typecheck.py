"""Run ``mypy --strict`` over the package in place: ``python scripts/typecheck.py [MYPY ARGS...]``.

The checkout keeps ``store/``, ``projections/`` and ``assembler/`` beside ``ctxledger/``;
the package finds them at run time through its ``__path__``, which mypy does not follow.
So mypy is handed each of their files with the module name it has once installed
(``store/log.py`` is ``ctxledger.store.log``), beside ``-p ctxledger``: nothing is copied,
and every path mypy prints is the checkout's own file. Settings come from pyproject.toml.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from mypy import util
from mypy.fscache import FileSystemCache
from mypy.main import process_options, run_build
from mypy.modulefinder import BuildSource

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("store", "projections", "assembler")
"""The top-level folders holding modules; ``migrations/`` runs under alembic, not on import."""


def folder_sources(folder: str) -> list[BuildSource]:
    """Every module of a top-level folder, named as it is inside ``ctxledger``."""
    sources = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        module = ".".join(("ctxledger", *parts)).removesuffix(".__init__")
        sources.append(BuildSource(str(path.relative_to(ROOT)), module, None, str(ROOT)))
    return sources


def main() -> int:
    """Check ``ctxledger`` and the folders as one package; print mypy's own report."""
    started = time.time()
    cache = FileSystemCache()
    sources, options = process_options(["-p", "ctxledger", *sys.argv[1:]], fscache=cache)
    for folder in FOLDERS:
        sources.extend(folder_sources(folder))
    _, messages, blockers = run_build(sources, options, cache, started, sys.stdout, sys.stderr)
    errors, _, files = util.count_stats(messages)
    formatter = util.FancyFormatter(sys.stdout, sys.stderr, options.hide_error_codes)
    if errors:
        print(formatter.format_error(errors, files, len(sources), blockers=blockers,
                                     use_color=options.color_output))
        return 2 if blockers else 1
    print(formatter.format_success(len(sources), options.color_output))
    return 0


if __name__ == "__main__":
    sys.exit(main())
