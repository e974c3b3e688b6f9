"""A long answer sent as it is computed: lines made in a worker thread, streamed out.

The lines come from a plain iterator run in a thread of its own, started with the
response (the database connection and the scratch store it uses stay in that one
thread; the thread always ends, so a slot taken for it is always given back). At most
``DEPTH`` lines wait between the thread and the socket: a slow client holds the work back instead
of letting it pile up in memory. The thread checks the request's ``CancelToken`` while it
waits, so a client gone or a time limit passed stops it within a step.

A failure once the status line is out cannot be a status: an NDJSON stream ends with
one ``{"error": <problem>}`` line; a JSON array is left unclosed (not valid JSON, so no
client mistakes it for the whole answer).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import AsyncIterator, Callable, Iterable
from http import HTTPStatus
from typing import Literal

from fastapi.responses import StreamingResponse

from ctxledger import render
from ctxledger._cancel import Cancelled, CancelToken
from ctxledger._open import explain, one_line
from ctxledger._service.problems import status_of
from ctxledger.store.errors import LedgerError

DEPTH = 8
"""Lines computed ahead of the client at most."""
_WAIT = 0.25  # seconds between two looks at the token while the client is slow
_log = logging.getLogger("ctxledger.service")
NDJSON = "application/x-ndjson"
Shape = Literal["ndjson", "array"]


class _End:
    """The worker thread is done."""


def problem_of(exc: BaseException) -> dict[str, object]:
    """The problem+json body of a failure in a stream (a bug: a generic 500)."""
    if isinstance(exc, LedgerError):
        status, detail = status_of(exc), explain(exc) or one_line(str(exc))
    elif (message := explain(exc)) is not None:
        status, detail = 503, message
    else:
        status, detail = 500, "internal error; the server log has the details"
    return {"type": "about:blank", "title": HTTPStatus(status).phrase, "status": status,
            "detail": detail}


class RecordStream:
    """``records()`` (JSON-ready values) computed in a worker thread started at once, sent
    as NDJSON lines or as one JSON array by ``body``. ``done`` runs in that thread when it
    ends, however it ends (so a slot taken for the request is always given back)."""

    def __init__(self, records: Callable[[], Iterable[object]], token: CancelToken, *,
                 shape: Shape, done: Callable[[], None] | None = None) -> None:
        self.shape = shape
        self.token = token
        self._queue: queue.Queue[bytes | BaseException | _End] = queue.Queue(DEPTH)
        self._records = records
        self._done = done
        threading.Thread(target=self._work, name="ctxledger-stream", daemon=True).start()

    def _put(self, item: bytes | BaseException | _End) -> None:
        while True:
            try:
                self._queue.put(item, timeout=_WAIT)
                return
            except queue.Full:
                self.token.check()  # nobody reads: stop once the token says so

    def _work(self) -> None:
        try:
            try:
                for record in self._records():
                    self._put(render.dumps(record).encode())
            except BaseException as exc:  # whatever it is, the stream ends with it
                self._put(exc)
            else:
                self._put(_End())
        except Cancelled:
            pass  # the reader is gone and the token tripped: nobody wants the end
        finally:
            if self._done is not None:
                self._done()

    async def _next(self) -> bytes | BaseException | _End:
        pause = 0.002
        while True:
            try:
                return self._queue.get_nowait()
            except queue.Empty:
                await asyncio.sleep(pause)
                pause = min(pause * 2, 0.05)

    async def body(self) -> AsyncIterator[bytes]:
        """The response body: the records as they come."""
        first, finished = True, False
        try:
            if self.shape == "array":
                yield b"["
            while True:
                item = await self._next()
                if isinstance(item, _End):
                    finished = True
                    if self.shape == "array":
                        yield b"]\n"
                    return
                if isinstance(item, BaseException):
                    finished = True
                    problem = problem_of(item)
                    if problem["status"] == 500:
                        _log.error("a stream failed: %s", type(item).__name__,
                                   exc_info=item)
                    else:
                        _log.info("a stream ended early: %s", problem["detail"])
                    if self.shape == "ndjson":
                        yield render.dumps({"error": problem}).encode() + b"\n"
                    return
                if self.shape == "ndjson":
                    yield item + b"\n"
                else:
                    yield (b"" if first else b",") + item
                first = False
        finally:
            if not finished:  # the response was abandoned: the work stops too
                self.token.cancel("the response was abandoned")

    def response(self) -> StreamingResponse:
        """The streaming response."""
        media = NDJSON if self.shape == "ndjson" else "application/json"
        return StreamingResponse(self.body(), media_type=media,
                                 headers={"Cache-Control": "no-store",
                                          "X-Accel-Buffering": "no"})
