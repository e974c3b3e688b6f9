"""Who may do what: the bearer key of a request, and the scope rules.

- No key, or an unknown, revoked or wrong one: 401 with ``WWW-Authenticate: Bearer``.
- A session whose scope the key lacks is a 404 exactly like an unknown session, so a key
  never learns what another scope holds; an admin key sees every scope.
- A read-only key gets 403 on every write: that says something about the key only.
- The ``system`` stream and the whole log need an admin key.

Keys are read from the database on every request, not cached, so a revocation takes
effect at once in every worker (``keys.verify_token``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ctxledger._ledger import Ledger
from ctxledger._service.keys import ApiKey, verify_token
from ctxledger._service.problems import Problem
from ctxledger.store.streams import SCOPE_PREFIX, stream_kind

_bearer = HTTPBearer(auto_error=False, description="An API key: ctxl_<key_id>_<secret>")
_CHALLENGE = {"WWW-Authenticate": "Bearer"}
DEFAULT_SCOPE = "default"


def ledger_of(request: Request) -> Ledger:
    """The process's one ``Ledger`` (opened at startup)."""
    ledger: Ledger = request.app.state.ledger
    return ledger


def current_key(request: Request,
                credentials: Annotated[HTTPAuthorizationCredentials | None,
                                       Depends(_bearer)]) -> ApiKey:
    """The request's live API key, or 401."""
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise Problem(401, "an API key is required: Authorization: Bearer <token>",
                      headers=_CHALLENGE)
    key = verify_token(ledger_of(request).engine, credentials.credentials)
    if key is None:
        raise Problem(401, "the API key is unknown or revoked", headers=_CHALLENGE)
    return key


LedgerDep = Annotated[Ledger, Depends(ledger_of)]
KeyDep = Annotated[ApiKey, Depends(current_key)]


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
    return Problem(404, f"unknown session {session!r}")


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


def _started_scope(events: Sequence[Any]) -> str:
    """The scope a batch's ``session.started`` names (``default`` if none does)."""
    for event in events:
        if isinstance(event, Mapping) and event.get("type") == "session.started":
            data = event.get("data")
            scope = data.get("scope") if isinstance(data, Mapping) else None
            return scope if isinstance(scope, str) and scope else DEFAULT_SCOPE
    return DEFAULT_SCOPE


def check_stream(ledger: Ledger, key: ApiKey, stream_id: str, *,
                 batch: Sequence[Any] | None = None) -> None:
    """May ``key`` read (``batch`` None) or append ``batch`` to ``stream_id``?

    ``scope:<S>`` needs S; ``system`` an admin key; a session stream its scope, which for
    a session that does not exist yet is the one the batch's ``session.started`` names
    (so a write may create it, a read finds nothing: 404)."""
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
            scope = _started_scope(batch)
        if not key.allows(scope):
            raise unknown_session(stream_id)


def feed_access(request: Request, key: KeyDep) -> None:
    """The change feed's gate: the key, kept on the request for ``feed_filter``; the whole
    log's feed needs an admin key, like ``GET /events``."""
    request.state.api_key = key
    if request.url.path.rstrip("/") == "/events/stream":
        require_admin(key)


def feed_filter(request: Request) -> Callable[[str], bool] | None:
    """The streams the request's key may follow (None: every one, for an admin key). A
    stream's answer is kept for the request, so only the first look reads the database
    (the one-stream feed asks before it starts, in a worker thread); a session's scope
    never changes once it is started."""
    key: ApiKey = request.state.api_key
    if key.admin:
        return None
    ledger = ledger_of(request)
    known: dict[str, bool] = {}

    def allowed(stream_id: str) -> bool:
        if stream_id not in known:
            try:
                check_stream(ledger, key, stream_id)
                known[stream_id] = True
            except Problem:
                known[stream_id] = False
        return known[stream_id]

    return allowed
