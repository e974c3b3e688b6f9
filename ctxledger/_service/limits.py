"""Request limits as ASGI middleware: the body's size and the time a request may take.

Both answer in problem+json. The time limit stops waiting, not the work: a route runs in
a worker thread, which cannot be interrupted, so an append that times out may still
commit. The 503 says so; resending the batch with the same event ids is safe (an
identical retry returns the original positions).
"""

from __future__ import annotations

import asyncio
import json
from http import HTTPStatus

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ctxledger._service.problems import PROBLEM_JSON


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
    read whole and handed on (it is small by definition)."""

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
                await send_problem(send, 413, too_large, [(b"connection", b"close")])
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


class TimeLimit:
    """503 when a request takes longer than ``seconds`` (before its response started).

    The request is not awaited past its time: a route in a worker thread cannot be
    cancelled (anyio waits for the thread), so it is left to finish on its own and
    whatever it sends afterwards is dropped."""

    def __init__(self, app: ASGIApp, seconds: float) -> None:
        self.app = app
        self.seconds = seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
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
        if started:  # part of the response is out: wait for the rest
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
