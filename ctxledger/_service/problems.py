"""Every error as RFC 9457 ``application/problem+json``: ``{type, title, status, detail}``.

``detail`` is the one line the CLI prints for the same failure (``cli._errors.explain``).
Bad input is a 4xx and writes nothing; anything unexpected is a 500 with a generic detail,
its traceback only in the server log (it is a bug).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from http import HTTPStatus

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from ctxledger._cancel import Cancelled
from ctxledger._open import DatabaseUnavailable, explain, one_line
from ctxledger.store.errors import (
    ConcurrencyError,
    IdempotencyError,
    LedgerError,
)
from ctxledger.store.witness import WitnessError

PROBLEM_JSON = "application/problem+json"
PENDING_KEY = "ctxledger.pending_key"
"""Where a request's ASGI scope keeps its key check while the route has not run it yet
(``auth.KeyCheck``): a validation error runs it first, so a bad key is the answer."""
_log = logging.getLogger("ctxledger.service")


class Problem(Exception):
    """An HTTP failure the routes raise on purpose (401, 403, 404...)."""

    def __init__(self, status: int, detail: str, *,
                 headers: Mapping[str, str] | None = None) -> None:
        self.status = status
        self.detail = detail
        self.headers = dict(headers or {})
        super().__init__(detail)


def problem_response(status: int, detail: str, *,
                     headers: Mapping[str, str] | None = None,
                     extra: Mapping[str, object] | None = None) -> JSONResponse:
    """A problem+json response; ``type`` is ``about:blank`` (the title is the status's)."""
    body: dict[str, object] = {"type": "about:blank", "title": HTTPStatus(status).phrase,
                               "status": status, "detail": detail, **(extra or {})}
    return JSONResponse(body, status_code=status, headers=dict(headers or {}),
                        media_type=PROBLEM_JSON)


def status_of(exc: LedgerError) -> int:
    """The status of a domain error: 409 for a conflict, 503 for an unusable database or
    a read stopped by its time limit,
    502 for a witness that could not be written (the append is committed), 400 for any
    other bad input (event, argument, policy, card file, chat format...)."""
    if isinstance(exc, ConcurrencyError | IdempotencyError):
        return 409
    if isinstance(exc, DatabaseUnavailable | Cancelled):
        return 503  # a cancelled read: its time limit passed (or nobody waits for it)
    if isinstance(exc, WitnessError):
        return 502  # the events are committed; the witness behind the service failed
    # EventValidationError, InvalidArgument, PolicyError, CardFileError, ChatFormatError
    # and every other LedgerError: the input was refused and nothing was written.
    return 400


def _validation_detail(exc: RequestValidationError) -> str:
    """One line naming the first problem, like ``body.events: Field required``."""
    errors = exc.errors()
    if not errors:
        return "the request is not valid"
    first = errors[0]
    where = ".".join(str(part) for part in first.get("loc", ()))
    message = str(first.get("msg", "not valid"))
    if first.get("type") == "json_invalid":
        reason = first.get("ctx", {}).get("error", message)
        return f"the body is not valid JSON: {one_line(str(reason))}"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return one_line(f"{where}: {message}{more}")


def install(app: FastAPI) -> None:
    """Make every error of ``app`` a problem+json response (FastAPI's own 404, 405 and
    validation errors too)."""

    async def on_problem(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, Problem)
        return problem_response(exc.status, exc.detail, headers=exc.headers)

    async def on_ledger_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, LedgerError)
        extra: dict[str, object] = {}
        if isinstance(exc, ConcurrencyError):
            extra = {"stream_id": exc.stream_id, "expected_version": exc.expected,
                     "actual_version": exc.actual}
        if isinstance(exc, WitnessError) and exc.result is not None:
            extra = {"positions": list(exc.result.positions)}
        return problem_response(status_of(exc), explain(exc) or one_line(str(exc)),
                                extra=extra)

    async def on_validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        check: Callable[[], object] | None = request.scope.get(PENDING_KEY)
        if check is not None:
            try:
                await run_in_threadpool(check)
            except Problem as problem:
                return await on_problem(request, problem)
        return problem_response(422, _validation_detail(exc))

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        detail = exc.detail if isinstance(exc.detail, str) else HTTPStatus(
            exc.status_code).phrase
        if exc.status_code == 404 and detail == "Not Found":
            detail = f"no route {request.url.path!r}"
        return problem_response(exc.status_code, one_line(detail),
                                headers=dict(exc.headers or {}))

    async def on_bug(request: Request, exc: Exception) -> JSONResponse:
        message = explain(exc)
        if message is not None:  # a database error or the like: not a bug of ours
            _log.warning("%s %s: %s", request.method, request.url.path, message)
            return problem_response(503, message)
        # Starlette re-raises it after this response: the server logs the traceback.
        _log.error("internal error on %s %s: %s", request.method, request.url.path,
                   type(exc).__name__)
        return problem_response(500, "internal error; the server log has the details")

    app.add_exception_handler(Problem, on_problem)
    app.add_exception_handler(LedgerError, on_ledger_error)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(Exception, on_bug)
