"""The session's profile and an assembly in the format a request asked for."""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse, PlainTextResponse, Response

from ctxledger._ledger import Ledger
from ctxledger._service.models import ContextFormat
from ctxledger.assembler import Assembly
from ctxledger.projections.view import ViewRequest

DEFAULT_PROFILE = "card"  # Ledger.assemble's default


def profile_of(ledger: Ledger, session: str, given: str | None) -> str:
    """``given``, else the session's ``profile`` setting, else ``card``."""
    from ctxledger.assembler.setting_check import PROFILE_SETTING

    if given is not None:
        return given
    value = ledger.view(session, ViewRequest(card=False)).settings.get(PROFILE_SETTING)
    return value if isinstance(value, str) else DEFAULT_PROFILE


def context_data(assembly: Assembly, fmt: ContextFormat) -> Any:
    """The assembly as JSON-ready data in ``fmt`` (text: the context text)."""
    if fmt is ContextFormat.text:
        return assembly.text
    if fmt is ContextFormat.openai:
        return {"messages": assembly.to_openai()}
    if fmt is ContextFormat.anthropic:
        return assembly.to_anthropic()
    return assembly.model_dump(mode="json")


def context_response(assembly: Assembly, fmt: ContextFormat) -> Response:
    """The assembly as a response in ``fmt`` (text: ``text/plain``)."""
    if fmt is ContextFormat.text:
        return PlainTextResponse(assembly.text)
    if fmt is ContextFormat.json:
        return Response(assembly.model_dump_json(), media_type="application/json")
    return JSONResponse(context_data(assembly, fmt))
