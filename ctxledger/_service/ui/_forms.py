"""The browser view's guard against cross-site request forgery, as ASGI middleware.

Every request under ``/ui`` that may change something (any method but GET, HEAD and
OPTIONS: today the login and logout forms) passes two checks, each enough on its own to
stop a page of another origin, before its route runs:

- **Origin.** The ``Origin`` header (``Referer`` when a browser sent none) must be this
  server's own origin, the request's scheme and ``Host``. Neither header, ``null``, or
  another origin is refused. The view's pages send ``Referrer-Policy: same-origin``, so a
  browser posting one of them names the page's origin (``no-referrer`` would make it
  send ``Origin: null``).
- **The form's token** (double submit). A ``/ui`` response to a browser that has no form
  cookie sets one: 32 random bytes, HttpOnly, SameSite=Strict, path ``/ui``. Each form
  carries HMAC-SHA256 of the form's action path keyed by that value, so a page of another
  origin, which can neither read the cookie nor choose it for this origin's forms, cannot
  make the field, and a login form's token is no logout form's token. No server secret
  is needed, so any worker process checks any form.

SameSite=Strict on the login cookie does not protect the login form (it needs no
cookie) nor, from a sibling origin on the same site, the logout form: hence both checks.
A refusal is a 403 problem and the route never runs: no cookie is set or cleared.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from contextvars import ContextVar
from urllib.parse import parse_qs, urlsplit

from starlette.datastructures import Headers
from starlette.requests import cookie_parser
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ctxledger._service.limits import replay_body, send_problem
from ctxledger._service.ui._login import MAX_FORM_BYTES, PREFIX

STATIC = PREFIX + "/static/"
COOKIE = "ctxledger_ui_form"
FIELD = "form_token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_NONCE_BYTES = 32
_NONCE = re.compile(r"[A-Za-z0-9_-]{43}")  # token_urlsafe(32); anything else is no cookie
_CONTEXT = b"ctxledger-ui-form|"
_DEFAULT_PORTS = {"http": ":80", "https": ":443"}
_nonce: ContextVar[str | None] = ContextVar("ctxledger_ui_form_nonce", default=None)

FOREIGN = ("the form was not posted from a page of this server (its Origin or Referer"
           " is missing or another site's)")
NO_TOKEN = ("the form's token is missing or does not match its cookie: reload the page"
            " and submit it again")


def form_token(action: str) -> str:
    """The token of the form posting to ``action`` (a path), for the page being rendered
    now: the templates call it. Empty outside a request (the form is then refused)."""
    nonce = _nonce.get()
    return "" if nonce is None else _token(nonce, action)


def _token(nonce: str, action: str) -> str:
    return hmac.new(nonce.encode("ascii"), _CONTEXT + action.encode("utf-8"),
                    hashlib.sha256).hexdigest()


def _origin(scheme: str, netloc: str) -> str:
    """``scheme://netloc`` in lower case, without the scheme's default port."""
    origin = f"{scheme}://{netloc}".lower()
    return origin.removesuffix(_DEFAULT_PORTS.get(scheme.lower(), "\0"))


def same_origin(headers: Headers, scheme: str) -> bool:
    """Whether the request's ``Origin`` (else ``Referer``) is its own server's origin."""
    host = headers.get("host")
    if not host:
        return False
    expected = _origin(scheme, host)
    origin = headers.get("origin")
    if origin is not None:
        parts = origin.split("://", 1)
        return len(parts) == 2 and _origin(parts[0], parts[1]) == expected
    referer = headers.get("referer")
    if referer is None:
        return False
    try:
        parts_ = urlsplit(referer)
    except ValueError:  # e.g. an unclosed IPv6 bracket
        return False
    return bool(parts_.scheme and parts_.netloc) and \
        _origin(parts_.scheme, parts_.netloc) == expected


def _form_field(body: bytes, name: str) -> str | None:
    """The first value of field ``name`` of an urlencoded form (None: absent, or no
    small urlencoded form at all)."""
    if len(body) > MAX_FORM_BYTES:
        return None
    values = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True).get(name)
    return values[0] if values else None


def _cookie_header(nonce: str, secure: bool) -> tuple[bytes, bytes]:
    """The ``Set-Cookie`` header that gives the browser its form cookie."""
    response = Response()
    response.set_cookie(COOKIE, nonce, path=PREFIX, httponly=True, samesite="strict",
                        secure=secure)
    return next((name, value) for name, value in response.raw_headers
                if name == b"set-cookie")


async def _read_body(receive: Receive) -> bytes | None:
    """The whole request body (None: the client went away). The service's body limit
    has already bounded its size."""
    chunks: list[bytes] = []
    more = True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    return b"".join(chunks)


class FormGuard:
    """Refuse a state-changing ``/ui`` request from another origin or without its form's
    token (403); give every browser its form cookie; let the templates make tokens."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope.get("path", "")
        if scope["type"] != "http" or not (path == PREFIX or path.startswith(PREFIX + "/")) \
                or path.startswith(STATIC):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        cookie = cookie_parser(headers.get("cookie", "")).get(COOKIE)
        nonce = cookie if cookie is not None and _NONCE.fullmatch(cookie) else None
        secure = scope.get("scheme") == "https"
        if scope["method"] not in SAFE_METHODS:
            if not same_origin(headers, scope.get("scheme", "http")):
                await send_problem(send, 403, FOREIGN)
                return
            body = await _read_body(receive)
            if body is None:
                return
            field = _form_field(body, FIELD)
            if nonce is None or field is None or not hmac.compare_digest(
                    field.encode("utf-8", "replace"), _token(nonce, path).encode("ascii")):
                await send_problem(send, 403, NO_TOKEN)
                return
            receive = replay_body(body, receive)
        fresh = None if nonce is not None else secrets.token_urlsafe(_NONCE_BYTES)

        async def send_with_cookie(message: Message) -> None:
            if fresh is not None and message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []),
                                                   _cookie_header(fresh, secure)]}
            await send(message)

        reset = _nonce.set(nonce or fresh)
        try:
            await self.app(scope, receive, send_with_cookie)
        finally:
            _nonce.reset(reset)
