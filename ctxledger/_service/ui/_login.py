"""The browser view's login: a form posts an API key; a cookie carries the login.

A browser cannot send ``Authorization: Bearer`` when it follows a link, so the key is
posted once (in the body, never in a URL, so no access log sees it) and answered with a
cookie holding ``<key_id>.<issued>.<mac>`` (``keys.ui_login``): no secret, HttpOnly (no
script reads it), SameSite=Strict (no other site's page sends it) and limited to ``/ui``.
Every page checks it against the key's row, so a revoked key is logged out at once, in
every worker. SameSite does not protect the login form itself: every post passes the
forgery guard first (``_forms``).
"""

from __future__ import annotations

from urllib.parse import parse_qs, quote

from fastapi import Request
from fastapi.responses import RedirectResponse, Response

from ctxledger._service.auth import ledger_of
from ctxledger._service.keys import UI_SESSION_SECONDS, ApiKey, ui_login, verify_ui_login

COOKIE = "ctxledger_ui"
PREFIX = "/ui"
MAX_FORM_BYTES = 4096  # a token and a path: anything longer is not our form


def logged_in(request: Request) -> ApiKey | None:
    """The live key of the request's login cookie, or None."""
    value = request.cookies.get(COOKIE)
    if not value:
        return None
    ledger = ledger_of(request)
    return verify_ui_login(ledger.engine, value, ledger.clock())


def safe_next(value: str | None) -> str:
    """Where to go after logging in: a path of this view, never another site."""
    if value and value.startswith(PREFIX + "/") and not value.startswith("//") \
            and "\\" not in value and "//" not in value:
        return value
    return PREFIX + "/"


def to_login(request: Request) -> RedirectResponse:
    """303 to the login form, coming back to this page after."""
    here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"{PREFIX}/login?next={quote(here, safe='')}", status_code=303)


async def read_form(request: Request) -> dict[str, str]:
    """The fields of a small urlencoded form (first value of each). The standard library
    reads it: the view's only forms are two short fields, no file upload that would need
    a multipart parser."""
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        return {}
    fields = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
    return {name: values[0] for name, values in fields.items() if values}


def log_in(request: Request, token: str, next_path: str) -> Response | None:
    """The redirect that sets the login cookie, or None when ``token`` is not a live key."""
    ledger = ledger_of(request)
    found = ui_login(ledger.engine, token.strip(), ledger.clock())
    if found is None:
        return None
    response = RedirectResponse(safe_next(next_path), status_code=303)
    response.set_cookie(COOKIE, found[1], max_age=UI_SESSION_SECONDS, path=PREFIX,
                        httponly=True, samesite="strict",
                        secure=request.url.scheme == "https")
    return response


def log_out() -> Response:
    """The redirect to the login form that forgets the cookie."""
    response = RedirectResponse(f"{PREFIX}/login", status_code=303)
    response.delete_cookie(COOKIE, path=PREFIX, httponly=True, samesite="strict")
    return response
