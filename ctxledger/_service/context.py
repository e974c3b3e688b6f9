"""A context (an assembly, with an agent's scoped state) in the format a request asked."""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse, PlainTextResponse, Response

from ctxledger._agent_context import AgentContext
from ctxledger._service.models import ContextFormat


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
    return JSONResponse(context_data(context, fmt))
