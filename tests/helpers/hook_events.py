"""Claude Code hook events as the hook tests send them, and the console script they run."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

SCRIPT = shutil.which("ctxledger", path=str(Path(sys.executable).parent))
"""The ``ctxledger`` console script of this venv (Claude Code runs the hook through it)."""
PROJECT = "/work/projects/webapp"
"""The project folder (``cwd``) the events come from."""
Run = Callable[..., subprocess.CompletedProcess[str]]
"""A fixture that runs ``ctxledger hook`` with one event on stdin."""


def hook_event(name: str, session: str = "cc-1", **fields: Any) -> dict[str, Any]:
    """A hook event ``name`` of ``session`` from ``PROJECT``, with ``fields`` added."""
    return {"session_id": session, "transcript_path": f"/nonexistent/{session}.jsonl",
            "cwd": PROJECT, "hook_event_name": name, **fields}
