"""ctxledger's own warnings (a database file other users can read) as one line on
stderr, for the command line and the hook; other warnings show as Python shows them.
Standard library only: the hook's fast route uses it."""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

from ctxledger.store.errors import ReadableDatabaseWarning


@contextmanager
def one_line_warnings(write: Callable[[str], None]) -> Iterator[None]:
    """While the block runs, give each ``ReadableDatabaseWarning`` to ``write`` as one
    line (``warning: ...``)."""
    with warnings.catch_warnings():
        shown = warnings.showwarning

        def show(message: Warning | str, category: type[Warning], filename: str,
                 lineno: int, file: TextIO | None = None, line: str | None = None) -> None:
            if issubclass(category, ReadableDatabaseWarning):
                write("warning: " + re.sub(r"\s+", " ", str(message)).strip())
            else:
                shown(message, category, filename, lineno, file, line)
        warnings.showwarning = show
        yield
