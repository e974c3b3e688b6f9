"""Request limits: the body's size, the time a request may take, the client staying, and
how many expensive requests one key may run at once.

The first three are ASGI middleware and answer in problem+json. Every request carries a
``CancelToken`` (``cancel_token``): the time limit trips it when the time is up and
``Disconnect`` when the client goes away, and the long reads (timeline, why, audit) check
it at every step, so their worker thread stops within a step. A write is not cancelled:
an append that times out may still commit. The 503 says so; resending the batch with the
same event ids is safe (an identical retry returns the original positions).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http import HTTPStatus
from typing import Any

import anyio
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ctxledger._cancel import CancelToken
from ctxledger._service.problems import PROBLEM_JSON, Problem

CANCEL_KEY = "ctxledger.cancel"
"""Where a request's ``CancelToken`` is kept in its ASGI scope."""
_log = logging.getLogger("ctxledger.service")


def cancel_token(scope: Scope | dict[str, Any]) -> CancelToken:
    """The request's cancellation token (made by the first to ask)."""
    token = scope.get(CANCEL_KEY)
    if not isinstance(token, CancelToken):
        token = scope[CANCEL_KEY] = CancelToken()
    return token


async def send_problem(send: Send, status: int, detail: str,
                       headers: list[tuple[bytes, bytes]] | None = None) -> None:
    """Send a whole problem+json response."""
    body = json.dumps({"type": "about:blank", "title": HTTPStatus(status).phrase,
                       "status": status, "detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", PROBLEM_JSON.encode()),
                            (b"content-length", str(len(body)).encode()),
                            *(headers or [])]})
    await send({"type": "http.response.body", "body": body})


class BodyLimit:
    """413 for a body over ``max_bytes``: refused by its Content-Length before reading,
    or once that many bytes have arrived (a chunked body). A body under the limit is
    read whole and handed on (it is small by definition).

    Before a 413 the rest of a body that is not much larger is read and dropped (a
    "lingering close", bounded by ``DRAIN_FACTOR`` times the limit and ``DRAIN_SECONDS``):
    closing with unread bytes makes the kernel reset the connection, and a client still
    sending would see the reset instead of the 413. A body larger still is not read."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_large = f"the request body is larger than {self.max_bytes} bytes"
        for name, value in scope["headers"]:
            # Twenty digits or more is too large without asking int() (which refuses
            # over 4,300 digits).
            if name == b"content-length" and value.isdigit() and (
                    len(value) > 19 or int(value) > self.max_bytes):
                if len(value) <= 19 and int(value) <= self.max_bytes * DRAIN_FACTOR:
                    await _drain(receive, self.max_bytes * DRAIN_FACTOR)
                await send_problem(send, 413, too_large, [(b"connection", b"close")])
                return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                if more:
                    await _drain(receive, self.max_bytes * DRAIN_FACTOR - size)
                await send_problem(send, 413, too_large, [(b"connection", b"close")])
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        await self.app(scope, replay_body(b"".join(chunks), receive), send)


DRAIN_FACTOR = 4
"""A refused body up to this many times the limit is read to its end before the 413."""
DRAIN_SECONDS = 2.0
"""The most time spent reading a refused body before the 413."""


async def _drain(receive: Receive, budget: int) -> None:
    """Read and drop the rest of a refused body: at most ``budget`` bytes, for at most
    ``DRAIN_SECONDS``, ending early when the body ends or the client goes away."""
    with anyio.move_on_after(DRAIN_SECONDS):
        while budget > 0:
            message = await receive()
            if message["type"] != "http.request":
                return
            budget -= len(message.get("body", b""))
            if not message.get("more_body", False):
                return


def replay_body(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the application the body already read, then the
    client's own messages (a disconnect)."""
    delivered = False

    async def replayed() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


class TimeLimit:
    """503 when a request takes longer than ``seconds`` (before its response started).

    The request is not awaited past its time: a route in a worker thread cannot be
    cancelled (anyio waits for the thread), so its ``CancelToken`` is tripped (a long
    read stops at its next step) and whatever it sends afterwards is dropped. A response
    already streaming is cut short the same way: its token is tripped at the time limit,
    and the stream ends with an error line."""

    def __init__(self, app: ASGIApp, seconds: float) -> None:
        self.app = app
        self.seconds = seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        token = cancel_token(scope)
        started = False
        abandoned = False

        async def watched(message: Message) -> None:
            nonlocal started
            if abandoned:
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        task = asyncio.ensure_future(self.app(scope, receive, watched))
        done, _ = await asyncio.wait({task}, timeout=self.seconds)
        if task in done:
            task.result()  # re-raises what the application raised
            return
        reason = f"the request took longer than {self.seconds:g} s"
        token.cancel(reason)
        if started:  # part of the response is out: it ends at the next step
            await task
            return
        abandoned = True
        task.cancel()
        task.add_done_callback(_forget)
        await send_problem(
            send, 503,
            f"the request took longer than {self.seconds:g} s; a write may still"
            " complete (resending it with the same event ids is safe)",
            [(b"retry-after", b"1")])


def _forget(task: asyncio.Future[None]) -> None:
    """Retrieve an abandoned request's outcome, so asyncio does not log it as lost."""
    if not task.cancelled():
        task.exception()


class Disconnect:
    """Trips the request's ``CancelToken`` when the client goes away before the response
    is complete (``http.disconnect``), so the work it asked for stops too.

    Placed after ``BodyLimit``, which has read the body whole: the first ``receive`` here
    is the body, and from then on a watcher waits for the disconnect. The application's
    later ``receive`` calls get that disconnect when it comes (a streaming response
    listens for it too)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        token = cancel_token(scope)
        first = await receive()
        gone = asyncio.Event()
        complete = False

        async def watch() -> None:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    if not complete:
                        token.cancel("the client went away")
                        _log.info("%s %s: the client went away; its work stops",
                                  scope.get("method"), scope.get("path"))
                    gone.set()
                    return

        delivered = False

        async def receive_once() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return first
            await gone.wait()
            return {"type": "http.disconnect"}

        async def watched(message: Message) -> None:
            nonlocal complete
            if message["type"] == "http.response.body" and not message.get("more_body"):
                complete = True
            await send(message)

        watcher = asyncio.ensure_future(watch()) if first["type"] == "http.request" \
            else None
        if watcher is None:  # gone before the body
            token.cancel("the client went away")
        try:
            await self.app(scope, receive_once, watched)
        finally:
            if not complete:  # the application failed or was abandoned mid-response
                token.cancel("the response ended early")
            complete = True
            if watcher is not None:
                watcher.cancel()


class Slots:
    """At most ``per_key`` expensive requests (a timeline, ``why``, an audit...) running
    at once for each API key; one more is a 429 with ``Retry-After``. Thread-safe: a
    slot is taken and given back in worker threads."""

    def __init__(self, per_key: int) -> None:
        if per_key < 1:
            raise ValueError("per_key must be at least 1")
        self.per_key = per_key
        self._lock = threading.Lock()
        self._held: dict[str, int] = {}

    def take(self, key: str) -> None:
        """Take one of ``key``'s slots, or raise the 429 ``Problem``."""
        with self._lock:
            held = self._held.get(key, 0)
            if held >= self.per_key:
                raise Problem(429, f"this API key already runs {held} expensive"
                                   f" request(s) (timeline, why, audit); the limit is"
                                   f" {self.per_key} at once", headers={"Retry-After": "2"})
            self._held[key] = held + 1

    def give(self, key: str) -> None:
        """Give back a slot ``take`` gave."""
        with self._lock:
            left = self._held.get(key, 0) - 1
            if left > 0:
                self._held[key] = left
            else:
                self._held.pop(key, None)

    @contextmanager
    def hold(self, key: str) -> Iterator[None]:
        """One of ``key``'s slots for the block."""
        self.take(key)
        try:
            yield
        finally:
            self.give(key)


def cancel_of(request: Request) -> CancelToken:
    """The request's ``CancelToken`` (a route's dependency)."""
    return cancel_token(request.scope)


def slots_of(request: Request) -> Slots:
    """The application's ``Slots`` (a route's dependency)."""
    slots: Slots = request.app.state.slots
    return slots
