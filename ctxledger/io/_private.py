"""Files ctxledger writes that hold conversations (``export --output``, ``card export
--output``): created owner-only (0600, whatever the umask), an existing file narrowed to
0600 before it is overwritten."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TextIO


def open_private(path: Path) -> TextIO:
    """``path`` opened for writing UTF-8 text, truncated, with mode 0600."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        return os.fdopen(fd, "w", encoding="utf-8")
    except BaseException:
        os.close(fd)
        raise
