"""A cancellation token for long reads: a timeline, ``why``, an audit, a what-if.

A worker thread cannot be interrupted, so long work asks its token at every step and
stops with ``Cancelled`` once someone else (the HTTP layer, on a time limit or when the
client goes away) has tripped it. Tripping is thread-safe and idempotent; the first reason
given is kept.
"""

from __future__ import annotations

import threading

from ctxledger.store.errors import LedgerError


class Cancelled(LedgerError):
    """The work was stopped by its cancellation token (a time limit, a client gone)."""


class CancelToken:
    """Tripped once by ``cancel``; ``check`` raises ``Cancelled`` from then on."""

    __slots__ = ("_event", "_reason", "checks")

    def __init__(self) -> None:
        self._event = threading.Event()
        self._reason = ""
        self.checks = 0
        """How many times ``check`` was asked (how far the work got)."""

    def cancel(self, reason: str) -> None:
        """Stop the work at its next check, saying ``reason``."""
        if not self._event.is_set():
            self._reason = reason
            self._event.set()

    @property
    def cancelled(self) -> bool:
        """True once ``cancel`` was called."""
        return self._event.is_set()

    @property
    def reason(self) -> str:
        """Why it was cancelled ("" if it was not)."""
        return self._reason

    def check(self) -> None:
        """Raise ``Cancelled`` if the token was tripped."""
        self.checks += 1
        if self._event.is_set():
            raise Cancelled(f"stopped: {self._reason}")


def check(token: CancelToken | None) -> None:
    """``token.check()``, for code whose token is optional."""
    if token is not None:
        token.check()
