"""The browser view under ``/ui``: server-rendered pages (Jinja2) over the same ``Ledger``
and API keys as the JSON API, with inline SVG charts and one small script. Everything it
loads is served by this package, so it works offline."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from ctxledger._service.ui._forms import FormGuard
from ctxledger._service.ui._pages import HERE, router


def install(app: FastAPI) -> None:
    """Serve the view's pages and static files (its stylesheet and script) on ``app``,
    behind the guard every form post passes (``_forms``)."""
    app.include_router(router)
    app.add_middleware(FormGuard)
    app.mount("/ui/static", StaticFiles(directory=HERE / "static"), name="ui-static")
