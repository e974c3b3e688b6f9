"""API keys: create, list, revoke, and verify a bearer token.

A token is ``ctxl_<key_id>_<secret>``, shown once when the key is created. Only the
SHA-256 hex of the secret is stored: the secret is 32 random bytes from ``secrets``, so
it cannot be guessed and a fast hash is right (bcrypt and the like slow down guessing
low-entropy passwords, which a random 256-bit secret is not). Revoking a key sets
``revoked_at`` and forgets the hash.

Keys are rows of ``api_keys``, not events: see that table's docstring
(``store.schema.api_keys``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from ctxledger.store.backends.base import READ_ONLY_OPTION
from ctxledger.store.clock import Clock, format_utc, system_clock
from ctxledger.store.errors import InvalidArgument
from ctxledger.store.schema import api_keys
from ctxledger.store.sql_engine import driver_statement
from ctxledger.store.streams import MAX_STREAM_ID, SCOPE_PREFIX

TOKEN_PREFIX = "ctxl"
_SECRET_BYTES = 32
_KEY_ID_BYTES = 6  # 12 hex characters: a public name, not a secret
# What ``create_key`` makes (12 lowercase hex): anything else is no key, refused before a
# query (PostgreSQL would fail on a NUL, not answer "no row").
_KEY_ID = re.compile(r"[0-9a-f]{1,32}")
# A login value: key id, the second it was issued (at most 19 digits: int() is not
# asked to read more) and the HMAC-SHA256 hex.
_UI_LOGIN = re.compile(r"([0-9a-f]{1,32})\.([0-9]{1,19})\.([0-9a-f]{64})")
# As session.started's scope: "scope:" + the name must fit a stream id.
MAX_SCOPE = MAX_STREAM_ID - len(SCOPE_PREFIX)


@dataclass(frozen=True, slots=True)
class ApiKey:
    """A key as the service sees it: its id, scopes and rights (never its secret)."""

    key_id: str
    scopes: tuple[str, ...]
    read_only: bool
    admin: bool
    created_at: datetime
    revoked_at: datetime | None = None

    def allows(self, scope: str) -> bool:
        """True when this key may see ``scope`` (an admin key sees every scope)."""
        return self.admin or scope in self.scopes

    def record(self) -> dict[str, object]:
        """JSON-ready data for ``keys list`` (no secret, no hash)."""
        return {"key_id": self.key_id, "scopes": list(self.scopes),
                "read_only": self.read_only, "admin": self.admin,
                "created_at": format_utc(self.created_at),
                "revoked_at": None if self.revoked_at is None else format_utc(self.revoked_at)}


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def _checked_scopes(scopes: Sequence[str], admin: bool) -> tuple[str, ...]:
    chosen: list[str] = []
    for scope in scopes:
        if not isinstance(scope, str) or not scope.strip() or len(scope) > MAX_SCOPE:
            raise InvalidArgument(
                f"scope must be a non-empty name of at most {MAX_SCOPE} characters,"
                f" got {scope!r}")
        if scope not in chosen:
            chosen.append(scope)
    if not chosen and not admin:
        raise InvalidArgument("a key needs at least one scope (or admin)")
    return tuple(chosen)


def _key(row: Mapping[Any, Any]) -> ApiKey:
    return ApiKey(key_id=row["key_id"], scopes=tuple(json.loads(row["scopes"])),
                  read_only=bool(row["read_only"]), admin=bool(row["admin"]),
                  created_at=row["created_at"], revoked_at=row["revoked_at"])


def create_key(engine: sa.Engine, scopes: Sequence[str], *, read_only: bool = False,
               admin: bool = False, clock: Clock = system_clock) -> tuple[ApiKey, str]:
    """Store a new key; returns it and its token (the only time the token exists)."""
    chosen = _checked_scopes(scopes, admin)
    key_id = secrets.token_hex(_KEY_ID_BYTES)
    secret = secrets.token_urlsafe(_SECRET_BYTES)
    key = ApiKey(key_id=key_id, scopes=chosen, read_only=read_only, admin=admin,
                 created_at=clock())
    with engine.begin() as conn:
        conn.execute(api_keys.insert().values(
            key_id=key_id, secret_hash=_hash(secret), scopes=json.dumps(list(chosen)),
            read_only=read_only, admin=admin, created_at=key.created_at))
    return key, f"{TOKEN_PREFIX}_{key_id}_{secret}"


@contextmanager
def _reading(engine: sa.Engine) -> Iterator[sa.Connection]:
    """A connection that only reads: on SQLite a deferred BEGIN, so a key check runs
    beside a writer (WAL) instead of waiting for the write lock and holding it."""
    with engine.connect() as conn:
        yield conn.execution_options(**{READ_ONLY_OPTION: True})


def list_keys(engine: sa.Engine) -> list[ApiKey]:
    """Every key, revoked ones too, oldest first."""
    with _reading(engine) as conn:
        rows = conn.execute(sa.select(api_keys).order_by(
            api_keys.c.created_at, api_keys.c.key_id)).mappings().all()
    return [_key(row) for row in rows]


def revoke_key(engine: sa.Engine, key_id: str, *, clock: Clock = system_clock) -> ApiKey:
    """Revoke ``key_id`` now and forget its secret's hash. Revoking it again changes
    nothing; an unknown id raises ``InvalidArgument``."""
    with engine.begin() as conn:
        conn.execute(api_keys.update().where(
            api_keys.c.key_id == key_id, api_keys.c.revoked_at.is_(None)).values(
            revoked_at=clock(), secret_hash=None))
        row = conn.execute(sa.select(api_keys).where(
            api_keys.c.key_id == key_id)).mappings().first()
    if row is None:
        raise InvalidArgument(f"unknown key {key_id!r}")
    return _key(row)


def verify_token(engine: sa.Engine, token: str) -> ApiKey | None:
    """The live key ``token`` names, or None (malformed, unknown, revoked or wrong secret).

    Not cached: one primary-key read per request, so a revocation takes effect on the
    very next request, in every worker process."""
    prefix, _, rest = token.partition("_")
    key_id, _, secret = rest.partition("_")
    if prefix != TOKEN_PREFIX or _KEY_ID.fullmatch(key_id) is None or not secret:
        return None
    row = _live_row(engine, key_id)
    if row is None or not hmac.compare_digest(_hash(secret), row["secret_hash"]):
        return None
    return _key(row)


def key_is_live(engine: sa.Engine, key_id: str) -> bool:
    """True while key ``key_id`` exists and is not revoked (one primary-key read)."""
    return _live_row(engine, key_id) is not None


def _key_row() -> sa.Select[Any]:
    return sa.select(api_keys).where(api_keys.c.key_id == sa.bindparam("key_id"))


def _live_row(engine: sa.Engine, key_id: str) -> Mapping[str, Any] | None:
    """The stored row of key ``key_id`` unless it is unknown or revoked."""
    with _reading(engine) as conn, conn.begin():
        # Compiled once and run on the driver's cursor: every request reads its key,
        # and SQLAlchemy's per-call machinery cost more than the read.
        rows = driver_statement(conn.dialect, ("keys", "row"), _key_row).fetch_dicts(
            conn, {"key_id": key_id})
    row = rows[0] if rows else None
    if row is None or row["revoked_at"] is not None or row["secret_hash"] is None:
        return None
    return row


# -- the browser view's login ------------------------------------------------------------

UI_SESSION_SECONDS = 12 * 3600
"""How long a browser login lasts."""
_UI_CONTEXT = b"ctxledger-ui-login"


def _ui_mac(secret_hash: str, key_id: str, issued: int) -> str:
    # Keyed by the stored hash of the key's secret: only the server (or whoever can read
    # api_keys, who can read everything the read-only view shows anyway) can make one,
    # and revoking the key forgets the hash, which ends every login at once.
    message = _UI_CONTEXT + f"|{key_id}|{issued}".encode()
    return hmac.new(secret_hash.encode("ascii"), message, hashlib.sha256).hexdigest()


def ui_login(engine: sa.Engine, token: str, now: datetime) -> tuple[ApiKey, str] | None:
    """The live key ``token`` names and a login value for the browser's cookie:
    ``<key_id>.<issued>.<mac>``, no secret in it; None when the token is not live."""
    key = verify_token(engine, token)
    if key is None:
        return None
    with _reading(engine) as conn:
        secret_hash = conn.execute(sa.select(api_keys.c.secret_hash).where(
            api_keys.c.key_id == key.key_id)).scalar_one_or_none()
    if secret_hash is None:
        return None
    issued = int(now.timestamp())
    return key, f"{key.key_id}.{issued}.{_ui_mac(secret_hash, key.key_id, issued)}"


def verify_ui_login(engine: sa.Engine, value: str, now: datetime) -> ApiKey | None:
    """The live key of a login cookie made by ``ui_login`` less than
    ``UI_SESSION_SECONDS`` before ``now``; None when malformed (of any size), stale,
    revoked or forged."""
    found = _UI_LOGIN.fullmatch(value)
    if found is None:
        return None
    key_id, issued_text, mac = found.groups()
    issued = int(issued_text)
    if not 0 <= now.timestamp() - issued < UI_SESSION_SECONDS:
        return None
    row = _live_row(engine, key_id)
    if row is None or not hmac.compare_digest(_ui_mac(row["secret_hash"], key_id, issued),
                                              mac):
        return None
    return _key(row)
