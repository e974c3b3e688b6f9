"""Who may do what: the bearer key of a request, and the scope rules.

- No key, or an unknown, revoked or wrong one: 401 with ``WWW-Authenticate: Bearer``.
- A session whose scope the key lacks is a 404 exactly like an unknown session, so a key
  never learns what another scope holds; an admin key sees every scope.
- A read-only key gets 403 on every write: that says something about the key only.
- The ``system`` stream and the whole log need an admin key.

Keys are read from the database on every request, not cached, so a revocation takes
effect at once in every worker (``keys.verify_token``); an open change feed asks again
while it runs and ends when its key is revoked (``feed_alive``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ctxledger._ledger import Ledger
from ctxledger._service.keys import ApiKey, key_is_live, verify_token
from ctxledger._service.problems import PENDING_KEY, Problem
from ctxledger._service.replica import feed_ledger, primary_ledger_dep
from ctxledger._times import shown
from ctxledger.store.errors import ConcurrencyError
from ctxledger.store.stream_rules import opening_scope
from ctxledger.store.streams import SCOPE_PREFIX, stream_kind

_bearer = HTTPBearer(auto_error=False, description="An API key: ctxl_<key_id>_<secret>")
_CHALLENGE = {"WWW-Authenticate": "Bearer"}


def ledger_of(request: Request) -> Ledger:
    """The process's one ``Ledger`` (opened at startup)."""
    ledger: Ledger = request.app.state.ledger
    return ledger


def _token(credentials: HTTPAuthorizationCredentials | None) -> str:
    """The bearer token the request carries, or 401."""
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise Problem(401, "an API key is required: Authorization: Bearer <token>",
                      headers=_CHALLENGE)
    return credentials.credentials


def _verified(request: Request, token: str) -> ApiKey:
    """The live API key ``token`` names, or 401."""
    key = verify_token(ledger_of(request).engine, token)
    if key is None:
        raise Problem(401, "the API key is unknown or revoked", headers=_CHALLENGE)
    return key


def current_key(request: Request,
                credentials: Annotated[HTTPAuthorizationCredentials | None,
                                       Depends(_bearer)]) -> ApiKey:
    """The request's live API key, or 401."""
    return _verified(request, _token(credentials))


class KeyCheck:
    """A request's bearer token, not checked yet: ``key()`` checks it (a database read)
    in the route's one worker thread, so the check costs no hop of its own.

    FastAPI validates a request's query and body before the route runs; until ``key()``
    has answered, a validation error asks it first (``problems.PENDING_KEY``), so a
    revoked key is still a 401 ahead of a bad body's 422."""

    def __init__(self, request: Request, token: str) -> None:
        self._request = request
        self._token = token
        request.scope[PENDING_KEY] = self.key

    def key(self) -> ApiKey:
        """The request's live API key, or the 401 ``Problem``."""
        self._request.scope.pop(PENDING_KEY, None)  # asked once (and no cycle left)
        return _verified(self._request, self._token)


async def key_check(request: Request,
                    credentials: Annotated[HTTPAuthorizationCredentials | None,
                                           Depends(_bearer)]) -> KeyCheck:
    """The request's bearer token for its route to check, or 401 when it has none (on
    the event loop: this reads no database)."""
    return KeyCheck(request, _token(credentials))


LedgerDep = Annotated[Ledger, Depends(primary_ledger_dep)]
"""The primary's ledger (a read a replica may answer takes ``replica.ReadLedgerDep``)."""
KeyDep = Annotated[ApiKey, Depends(current_key)]
KeyCheckDep = Annotated[KeyCheck, Depends(key_check)]
"""The key checked by the route itself, in its worker thread (the hot routes)."""


def require_admin(key: ApiKey) -> None:
    """403 unless ``key`` is an admin key."""
    if not key.admin:
        raise Problem(403, "this needs an admin key")


def require_writer(key: ApiKey) -> None:
    """403 for a read-only key."""
    if key.read_only:
        raise Problem(403, "this API key is read-only")


def unknown_session(session: str) -> Problem:
    """The 404 of a session that does not exist or is in a scope the key lacks."""
    return Problem(404, f"unknown session {shown(session)}")


def session_scope(ledger: Ledger, key: ApiKey, session: str) -> str:
    """The scope of an existing session the key may see, else the 404 of an unknown one."""
    scope = ledger.scope_of(session)
    if scope is None or not key.allows(scope):
        raise unknown_session(session)
    return scope


def require_scope(key: ApiKey, scope: str) -> None:
    """404 (``unknown scope``) unless the key may see ``scope``."""
    if not key.allows(scope):
        raise Problem(404, f"unknown scope {scope!r}")


def check_stream(ledger: Ledger, key: ApiKey, stream_id: str, *,
                 batch: Sequence[Any] | None = None) -> bool:
    """May ``key`` read (``batch`` None) or append ``batch`` to ``stream_id``? True when
    the stream is a session that does not exist yet (so the append would create it).

    ``scope:<S>`` needs S; ``system`` an admin key; a session stream its scope, which for
    a session that does not exist yet is the one the store's stream rules say the batch
    would put it in (``stream_rules.opening_scope``), so a write may create it and a read
    finds nothing (404). The store refuses any later move of a session's scope."""
    kind = stream_kind(stream_id)
    if kind == "system":
        require_admin(key)
    elif kind == "scope":
        require_scope(key, stream_id[len(SCOPE_PREFIX):])
    else:
        found = ledger.scope_of(stream_id)
        if found is not None:
            scope = found
        elif batch is None:
            raise unknown_session(stream_id)
        else:
            scope = opening_scope(batch)
        if not key.allows(scope):
            raise unknown_session(stream_id)
        return found is None
    return False


Written = TypeVar("Written")


def checked_write(ledger: Ledger, key: ApiKey, stream_id: str, batch: Sequence[Any],
                  expected_version: int | None,
                  write: Callable[[int | None], Written]) -> Written:
    """``write(expected_version)`` once ``key`` may append ``batch`` to ``stream_id``.

    A stream that did not exist at the check is written as a new one (expected version
    0), so a stream created meanwhile, perhaps in another scope, is checked again rather
    than written into; once it exists, its scope can no longer change."""
    new = check_stream(ledger, key, stream_id, batch=batch)
    if not new or expected_version is not None:
        return write(expected_version)
    try:
        return write(0)
    except ConcurrencyError:
        check_stream(ledger, key, stream_id, batch=batch)
        return write(None)


def feed_access(request: Request, key: KeyDep) -> None:
    """The change feed's gate: the key, kept on the request for ``feed_filter``; the whole
    log's feed needs an admin key, like ``GET /events``."""
    request.state.api_key = key
    if request.url.path.rstrip("/") == "/events/stream":
        require_admin(key)


def feed_filter(request: Request) -> Callable[[str], bool | None] | None:
    """The streams the request's key may follow (None: every one, for an admin key).

    A session stream that does not exist yet answers None (not now), so following it
    waits for its first event; one of a scope the key lacks answers None too, for good, so
    it looks exactly like one that never comes. A ``scope:`` or the ``system`` stream the
    key may not read answers False (a 404: that depends on the key alone). An answer
    that settles is kept for the request (a session's scope never changes once started),
    so only the first look after a stream exists reads the database."""
    key: ApiKey = request.state.api_key
    if key.admin:
        return None
    ledger = feed_ledger(request)  # the scopes as of the events the feed reads
    known: dict[str, bool | None] = {}

    def allowed(stream_id: str) -> bool | None:
        if stream_id in known:
            return known[stream_id]
        if stream_kind(stream_id) == "session":
            scope = ledger.scope_of(stream_id)
            if scope is None:
                return None  # not yet: asked again when an event of it comes
            known[stream_id] = True if key.allows(scope) else None
            return known[stream_id]
        try:
            check_stream(ledger, key, stream_id)
            known[stream_id] = True
        except Problem:
            known[stream_id] = False
        return known[stream_id]

    return allowed


def feed_alive(request: Request) -> Callable[[], bool]:
    """Whether the key that opened the request's feed is still live (asked by the feed
    while it runs: a revoked or deleted key ends it)."""
    key: ApiKey = request.state.api_key
    engine = ledger_of(request).engine
    return lambda: key_is_live(engine, key.key_id)
