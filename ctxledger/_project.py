"""Which project a coding agent works in: its scope and the per-user database.

Coding-agent surfaces (``ctxledger hook``, ``ctxledger mcp``) are started by the agent in
a project's folder, with no flags. The project's scope is therefore derived from that
folder, stably, and the database defaults to one file per user rather than one per
folder, so that every project's history sits in one place.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path

SCOPE_ENV = "CTXLEDGER_SCOPE"
"""Overrides the project scope derived from the working directory."""
DB_ENV = "CTXLEDGER_DB"

_SLUG = re.compile(r"[^a-z0-9]+")


def project_scope(cwd: str | os.PathLike[str], *,
                  environ: Mapping[str, str] | None = None) -> str:
    """The scope of the project at ``cwd``: ``$CTXLEDGER_SCOPE`` when set, otherwise the
    folder's name (as a slug, for people reading ``ctxledger usage``) and a hash of its
    resolved path (so two folders with one name never share a scope, and a symlink or a
    trailing slash never starts a new one)."""
    env = os.environ if environ is None else environ
    override = env.get(SCOPE_ENV, "").strip()
    if override:
        return override
    return folder_scope(os.path.realpath(os.fspath(cwd)))


def folder_scope(resolved: str) -> str:
    """The scope of the project folder ``resolved`` (a path ``os.path.realpath`` gave),
    without ``$CTXLEDGER_SCOPE``: a spooled tool use carries the folder as its hook
    resolved it."""
    digest = hashlib.sha256(resolved.encode("utf-8", "surrogateescape")).hexdigest()[:12]
    slug = _SLUG.sub("-", Path(resolved).name.lower()).strip("-")[:40] or "root"
    return f"{slug}-{digest}"


def user_data_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_DATA_HOME/ctxledger`` (default ``~/.local/share/ctxledger``)."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_DATA_HOME", "").strip()
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".local" / "share"
    return root / "ctxledger"


PROJECT_DB_FILE = "ctxledger.db"
"""A project's own database: this file in the project's folder, when it exists."""
USER_DB_FILE = "ledger.db"
"""The per-user database's file name, in ``user_data_dir()``."""


def default_db_url(folder: str | os.PathLike[str] | None = None, *,
                   environ: Mapping[str, str] | None = None) -> str:
    """The one default database of every surface (command line, hook, MCP server,
    ``Ledger.open``), in this order: ``$CTXLEDGER_DB`` when set; else the project's
    ``ctxledger.db`` in ``folder`` (None: the working folder) when that file exists; else
    ``ledger.db`` in the per-user data folder (``user_data_dir``, made owner-only). So
    the hook, run by a coding agent in a project, and a command run in that project's
    folder find the same database without flags."""
    env = os.environ if environ is None else environ
    explicit = env.get(DB_ENV, "").strip()
    if explicit:
        return explicit
    project = Path(os.getcwd() if folder is None else folder) / PROJECT_DB_FILE
    if project.is_file():
        return f"sqlite:///{project.absolute()}"
    data = user_data_dir(env)
    private_folder(data)
    return f"sqlite:///{data / USER_DB_FILE}"


def private_folder(folder: Path) -> Path:
    """Make ``folder`` and its missing parents owner-only (0700, whatever the umask): the
    per-user data folder holds every recorded prompt. An existing ``folder`` of this
    user's with a wider mode is narrowed; another user's is left alone."""
    missing = [folder, *(p for p in folder.parents if not p.exists())]
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    for each in missing:
        info = each.stat()
        if info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) != 0o700:
            os.chmod(each, 0o700)
    return folder
