"""The HTTP service: ``serve``, and its API keys (``keys create|list|revoke``).

FastAPI and uvicorn (the ``serve`` extra) are imported by ``serve`` only; the keys
commands need neither.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

import typer

from ctxledger._open import open_existing, open_ledger
from ctxledger.cli._errors import fail
from ctxledger.cli._options import FormatOption, JsonOrText, db_of


def serve(
    ctx: typer.Context,
    host: Annotated[str, typer.Option("--host", help="The address to listen on.")]
    = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="The TCP port.")]
    = 8000,
    workers: Annotated[int, typer.Option(
        "--workers", min=1, help="Worker processes, each with its own ledger.")] = 1,
    max_body_bytes: Annotated[int | None, typer.Option(
        "--max-body-bytes", min=1,
        help="Larger request bodies get a 413. Default: 1 MiB, the event size limit.")]
    = None,
    request_timeout: Annotated[float | None, typer.Option(
        "--request-timeout", min=0.001, metavar="SECONDS",
        help="Slower requests get a 503; a long read (timeline, why, audit) stops there."
             " Default: 30.")] = None,
    max_expensive: Annotated[int | None, typer.Option(
        "--max-expensive", min=1, envvar="CTXLEDGER_SERVE_MAX_EXPENSIVE",
        help="Expensive requests (timeline, why, audit, replay, their pages) one API key"
             " may run at once; more get a 429 with Retry-After. Default: 2.")] = None,
    page_bytes: Annotated[int | None, typer.Option(
        "--page-bytes", min=1, envvar="CTXLEDGER_SERVE_PAGE_BYTES", metavar="BYTES",
        help="A page of events holds at most this many bytes of them (and at most"
             " 'limit' events). Default: 4 MiB.")] = None,
    replica_url: Annotated[str | None, typer.Option(
        "--replica-url", envvar="CTXLEDGER_SERVE_REPLICA_URL", metavar="URL",
        help="A read replica (a PostgreSQL hot standby of the database), opened"
             " read-only: replay, why, audit, timelines, pages of events and the change"
             " feed go there; writes and assemblies go to the primary. A request"
             " sending Ctxledger-Min-Position: P is answered by the primary while the"
             " replica has not reached P. /healthz reports its lag.")] = None,
    cors_origin: Annotated[list[str] | None, typer.Option(
        "--cors-origin", envvar="CTXLEDGER_SERVE_CORS_ORIGIN", metavar="ORIGIN",
        help="A browser page served from ORIGIN (e.g. http://localhost:5173) may call"
             " the API (CORS; repeatable; the variable takes several, space-separated)."
             " Default: none.")] = None,
) -> None:
    """Serve the ledger over HTTP (JSON; errors as application/problem+json).

    Every route but /healthz needs an API key ('ctxledger keys create'). The database is
    created or migrated before the server starts (and a replica checked: it must hold
    the same schema and projection versions). Stops on Ctrl-C."""
    import os

    from ctxledger._config import resolve_db_url

    try:
        import uvicorn

        from ctxledger._service import app as service
        from ctxledger._service.replica import REPLICA_URL_ENV
    except ImportError as exc:
        raise fail(f"serve needs the serve extra (pip install 'ctxledger[serve]'):"
                   f" {exc}") from None
    url = resolve_db_url(db_of(ctx))
    with open_ledger(url, load_vocabulary=False):
        pass  # migrate once here, not in every worker at the same time
    if replica_url is not None:
        with open_ledger(replica_url, read_only=True, load_vocabulary=False):
            pass  # a replica it cannot answer for is one line now, not in each worker
    body = max_body_bytes or service.DEFAULT_MAX_BODY_BYTES
    timeout = request_timeout or service.DEFAULT_REQUEST_TIMEOUT
    expensive = max_expensive or service.DEFAULT_MAX_EXPENSIVE
    page = page_bytes or service.DEFAULT_PAGE_BYTES
    origins = _origins(cors_origin or [])
    if workers == 1:
        uvicorn.run(service.create_app(url, max_body_bytes=body, request_timeout=timeout,
                                       max_expensive=expensive, page_bytes=page,
                                       replica_url=replica_url,
                                       cors_origins=origins),
                    host=host, port=port, timeout_graceful_shutdown=service.SHUTDOWN_GRACE)
        return
    # Workers are separate processes: they import the factory and read the environment.
    os.environ.update({service.URL_ENV: url, service.MAX_BODY_ENV: str(body),
                       service.TIMEOUT_ENV: str(timeout),
                       service.MAX_EXPENSIVE_ENV: str(expensive),
                       service.PAGE_BYTES_ENV: str(page),
                       service.CORS_ORIGIN_ENV: " ".join(origins)})
    if replica_url is not None:
        os.environ[REPLICA_URL_ENV] = replica_url
    uvicorn.run("ctxledger._service.app:app_from_env", factory=True, host=host, port=port,
                workers=workers, timeout_graceful_shutdown=service.SHUTDOWN_GRACE)


def _origins(given: list[str]) -> list[str]:
    """The ``--cors-origin`` values, each a bare origin (scheme://host[:port]), else exit 1:
    a browser sends exactly that, so a path or a trailing slash would never match."""
    from urllib.parse import urlsplit

    origins: list[str] = []
    for raw in (part for value in given for part in value.split()):
        parts = urlsplit(raw)
        if (parts.scheme not in ("http", "https") or not parts.hostname
                or parts.path or parts.query or parts.fragment or parts.username):
            raise fail(f"--cors-origin {raw!r} is no origin: give scheme://host[:port],"
                       " e.g. http://localhost:5173")
        origins.append(raw)
    return origins


def keys_create(
    ctx: typer.Context,
    scope: Annotated[list[str] | None, typer.Option(
        "--scope", metavar="S", help="A scope the key may use (repeatable).")] = None,
    read_only: Annotated[bool, typer.Option(
        "--read-only", help="The key may read but not write.")] = False,
    admin: Annotated[bool, typer.Option(
        "--admin", help="The key sees every scope, the whole log and verify.")] = False,
    format: FormatOption = JsonOrText.json,
) -> None:
    """Create an API key and print its token: the only time it is shown.

    The token is 'ctxl_<key_id>_<secret>'; only the secret's SHA-256 is stored."""
    from ctxledger import render
    from ctxledger._service.keys import create_key

    with open_ledger(db_of(ctx), load_vocabulary=False) as ledger:
        key, token = create_key(ledger.engine, scope or [], read_only=read_only,
                                admin=admin, clock=ledger.clock)
    if format is JsonOrText.json:
        typer.echo(render.dumps({**key.record(), "token": token}))
    else:
        typer.echo(f"key {key.key_id} created; its token (shown only now):\n{token}")


def keys_list(ctx: typer.Context, format: FormatOption = JsonOrText.json) -> None:
    """List the API keys, revoked ones too (never a secret or its hash); JSON lines."""
    from ctxledger import render
    from ctxledger._service.keys import list_keys

    with open_existing(db_of(ctx), load_vocabulary=False) as ledger:
        found = list_keys(ledger.engine)
    for key in found:
        if format is JsonOrText.json:
            typer.echo(render.dumps(key.record()))
        else:
            record = key.record()
            rights = ("admin " if key.admin else "") + ("read-only" if key.read_only
                                                        else "read-write")
            revoked = f" revoked {record['revoked_at']}" if key.revoked_at else ""
            typer.echo(f"{key.key_id} {rights} scopes={','.join(key.scopes) or '-'}"
                       f" created {record['created_at']}{revoked}")


def keys_revoke(
    ctx: typer.Context,
    key_id: Annotated[str, typer.Argument(metavar="KEY_ID", help="The key's id.")],
    format: FormatOption = JsonOrText.json,
) -> None:
    """Revoke an API key at once and forget its secret's hash (again: no change)."""
    from ctxledger import render
    from ctxledger._service.keys import revoke_key

    with open_existing(db_of(ctx), load_vocabulary=False) as ledger:
        key = revoke_key(ledger.engine, key_id, clock=ledger.clock)
    if format is JsonOrText.json:
        typer.echo(render.dumps(key.record()))
    else:
        typer.echo(f"key {key.key_id} revoked")


COMMANDS: dict[str, Callable[..., None]] = {"serve": serve}
"""Commands by name, in ``--help`` order."""

SUBCOMMANDS: dict[str, tuple[str, dict[str, Callable[..., None]]]] = {
    "keys": ("API keys of the HTTP service: create one, list them, revoke one.",
             {"create": keys_create, "list": keys_list, "revoke": keys_revoke}),
}
"""Command groups by name: their help, and their commands by name in ``--help`` order."""
