"""A context (an assembly, with an agent's scoped state) in the format a request asked."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from ctxledger._agent_context import AgentContext
from ctxledger._service.models import ContextFormat
from ctxledger.store.canonical import PLAIN_JSON_ONLY, refuse_non_json


def context_data(context: AgentContext, fmt: ContextFormat) -> Any:
    """The context as JSON-ready data in ``fmt`` (text: the context text)."""
    if fmt is ContextFormat.text:
        return context.text()
    if fmt is ContextFormat.openai:
        return {"messages": context.to_openai()}
    if fmt is ContextFormat.anthropic:
        return context.to_anthropic()
    return context.to_json()


def context_response(context: AgentContext, fmt: ContextFormat) -> Response:
    """The context as a response in ``fmt`` (text: ``text/plain``)."""
    if fmt is ContextFormat.text:
        return PlainTextResponse(context.text())
    if fmt is ContextFormat.json and context.agent is None:
        return Response(context.assembly.model_dump_json(), media_type="application/json")
    return json_response(context_data(context, fmt))


def json_response(data: Any) -> Response:
    """``data`` as an ``application/json`` response, written by orjson (compact UTF-8,
    as ``JSONResponse`` writes it, several times faster on a context's messages); what
    orjson does not take as plain JSON (an integer beyond 64 bits, say) goes to
    ``JSONResponse``, which decides as before."""
    try:
        body = orjson.dumps(data, option=PLAIN_JSON_ONLY, default=refuse_non_json)
    except TypeError:
        return JSONResponse(data)
    return Response(body, media_type="application/json")
