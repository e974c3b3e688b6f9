"""Text no request may carry: NUL in its path or query string, refused with a 400 problem
before any route runs, as ASGI middleware.

A name with NUL names nothing (``store.strict`` refuses it in every stored value), but
asking for it would still reach the database: SQLite answers "no such row", PostgreSQL
fails the query (it stores no NUL in text), so the same request would be a 404 on one
backend and a 503 on the other. Headers cannot carry NUL (the HTTP parser refuses it)
and bodies are checked by the models they are read into.
"""

from __future__ import annotations

from urllib.parse import parse_qsl

from starlette.types import ASGIApp, Receive, Scope, Send

from ctxledger._service.limits import send_problem
from ctxledger._times import shown

_NUL = "\x00"


def nul_problem(scope: Scope) -> str | None:
    """Why the request of ``scope`` is refused (a NUL in its path or a query parameter),
    or None."""
    if _NUL in scope.get("path", ""):
        return "the path contains NUL (\\u0000), which no name may hold"
    query = scope.get("query_string", b"").decode("latin-1")
    for name, value in parse_qsl(query, keep_blank_values=True):
        if _NUL in name or _NUL in value:
            return f"query parameter {shown(name)} contains NUL (\\u0000)"
    return None


class RefuseNul:
    """400 for a request whose path or query string holds NUL."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            problem = nul_problem(scope)
            if problem is not None:
                await send_problem(send, 400, problem)
                return
        await self.app(scope, receive, send)
