"""``ctxledger mcp``: the MCP server for coding agents (the ``mcp`` extra).

The SDK is imported by the command only; without the extra it says so in one line.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Annotated

import typer

from ctxledger.cli._errors import fail
from ctxledger.cli._options import db_of

PROJECT_DIR_ENV = "CLAUDE_PROJECT_DIR"
"""Where Claude Code says the project is, in the environment of the servers it starts."""


class Transport(enum.StrEnum):
    """How the server talks to its client."""

    stdio = "stdio"
    streamable_http = "streamable-http"


def mcp(
    ctx: typer.Context,
    transport: Annotated[Transport, typer.Option(
        "--transport", help="stdio (the agent starts the server) or streamable-http.")]
    = Transport.stdio,
    host: Annotated[str, typer.Option(
        "--host", help="The address to listen on (streamable-http).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(
        "--port", min=0, max=65535, help="The TCP port (streamable-http).")] = 8000,
    scope: Annotated[str | None, typer.Option(
        "--scope", metavar="S",
        help="The project's scope. Default: $CTXLEDGER_SCOPE, else derived from the"
             " project's folder ($CLAUDE_PROJECT_DIR, else the working folder).")] = None,
) -> None:
    """Serve the ledger to coding agents over MCP (tools: record_observation,
    search_observations, session_context, why, usage; resources: the project's sessions
    and their state).

    The database defaults to the per-user one of the coding-agent surfaces
    ($CTXLEDGER_DB, else $XDG_DATA_HOME/ctxledger/ledger.db); --db overrides it. Streamable
    HTTP is served at /mcp. Stops when the client closes stdin, or on Ctrl-C."""
    import os

    from ctxledger._config import resolve_db_url
    from ctxledger._open import open_ledger
    from ctxledger._project import project_scope

    try:
        from ctxledger._mcp.server import build_server
    except ImportError as exc:
        raise fail(f"mcp needs the mcp extra (pip install 'ctxledger[mcp]'): {exc}") from None
    if scope is not None and not scope.strip():
        raise typer.BadParameter("must not be empty", param_hint="'--scope'")
    # Claude Code names the project's folder to the servers it starts; the hook's events
    # carry the same folder as their cwd, so both surfaces derive one scope.
    folder = os.environ.get(PROJECT_DIR_ENV, "").strip() or os.getcwd()
    project = scope.strip() if scope is not None else project_scope(folder)
    url = resolve_db_url(db_of(ctx), folder=folder)
    with open_ledger(url) as ledger:
        server = build_server(ledger, project)
        if transport is Transport.stdio:
            server.run("stdio")
        else:
            server.run("streamable-http", host=host, port=port)


COMMANDS: dict[str, Callable[..., None]] = {"mcp": mcp}
"""Commands by name, in ``--help`` order."""
