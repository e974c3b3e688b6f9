"""The MCP server: one ``Ledger`` and one project scope behind the SDK's ``MCPServer``.

Every tool and resource is a thin call into the ledger. The server is started in a
project's folder by the agent, so it serves that project's scope: sessions named by a
tool or a resource must belong to it. Failures reach the client as one line: a tool's as
a tool error (``isError``), a resource's as an MCP error; arguments the tool's schema
refuses are described in one line too (``OneLineErrors.call_tool``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Literal, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import (
    ResourceError,
    ResourceNotFoundError,
    ToolError,
    UnexpectedToolError,
)
from pydantic import ValidationError

import ctxledger
from ctxledger._config import DEFAULT_USAGE_DAYS
from ctxledger._ledger import Ledger
from ctxledger._open import explain, one_line
from ctxledger.assembler.setting_check import CODING_AGENT_PROFILE
from ctxledger.projections.session_view import ViewRequest
from ctxledger.store.clock import format_utc
from ctxledger.store.errors import InvalidArgument
from ctxledger.store.streams import SCOPE_PREFIX
from ctxledger.store.validate import describe_validation_error

T = TypeVar("T")

ObservationKind = Literal["change", "decision", "finding", "reference"]

INSTRUCTIONS = (
    "ctxledger keeps this project's sessions, tool use and observations in an event log. "
    "Record what you notice with record_observation; find earlier notes with "
    "search_observations; session_context gives the context a session starts with.")


class OneLineErrors(MCPServer[Any]):
    """``MCPServer`` whose argument-validation failures read as one line (the field and
    the problem) instead of pydantic's multi-line report."""

    async def call_tool(self, name: str, arguments: dict[str, Any],
                        context: Any = None) -> Any:
        """``MCPServer.call_tool``; a ``ToolError`` caused by a ``ValidationError`` is
        raised again with the error in one line."""
        try:
            return await super().call_tool(name, arguments, context)
        except UnexpectedToolError:
            raise
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, ValidationError):
                raise ToolError(f"Error executing tool {name}: invalid arguments: "
                                f"{one_line(describe_validation_error(cause))}") from cause
            raise


def _tool_call(call: Callable[[], T]) -> T:
    """Run a tool's ledger call; an expected failure becomes a one-line ``ToolError``,
    which the SDK sends as ``Error executing tool NAME: MESSAGE`` (anything else is a bug:
    the SDK sends only the first part and logs the traceback on stderr)."""
    try:
        return call()
    except Exception as exc:
        message = explain(exc)
        if message is None:
            raise
        raise ToolError(message) from None


def _resource_call(call: Callable[[], T]) -> T:
    """Run a resource's ledger call; an expected failure becomes a ``ResourceError``."""
    try:
        return call()
    except InvalidArgument as exc:
        raise ResourceNotFoundError(one_line(str(exc))) from None
    except Exception as exc:
        message = explain(exc)
        if message is None:
            raise
        raise ResourceError(message) from None


def project_session(ledger: Ledger, scope: str, session: str) -> None:
    """Raise ``InvalidArgument`` unless ``session`` has started in ``scope``."""
    view = ledger.view(session, ViewRequest(card=False))
    if not view.exists:
        raise InvalidArgument(f"unknown session {session!r}")
    if view.scope != scope:
        raise InvalidArgument(
            f"session {session!r} belongs to scope {view.scope!r}, not this project's "
            f"{scope!r}")


def context_of(ledger: Ledger, scope: str, session: str | None, profile: str | None,
               agent: str | None) -> dict[str, Any]:
    """The context (``Ledger.context``) of ``session``, or of the project (a session
    starting in ``scope`` now); with ``agent``, its text ends with the state scoped by
    that agent's manifest, which ``state`` gives as data too."""
    if session is not None:
        project_session(ledger, scope, session)
    stream = session if session is not None else SCOPE_PREFIX + scope
    starting_in = None if session is not None else scope
    found = ledger.context(stream, profile, agent=agent, starting_in=starting_in,
                           default=CODING_AGENT_PROFILE)
    assembly, text = found.assembly, found.text()
    result: dict[str, Any] = {
        "session": session, "scope": scope, "profile": assembly.profile,
        "text": text, "chars": len(text),
        "tokens": assembly.tokens.total, "position": assembly.position,
        "now": format_utc(assembly.now), "digest": assembly.digest,
        "warnings": list(assembly.warnings)}
    if agent is not None:
        result["agent"] = agent
        result["state"] = found.state
    return result


def build_server(ledger: Ledger, project: str) -> MCPServer[Any]:
    """The MCP server of the scope ``project`` over ``ledger``: its tools and resources."""
    server = OneLineErrors("ctxledger", version=ctxledger.__version__,
                           instructions=INSTRUCTIONS, log_level="WARNING")
    # bm25s sets its own logger to DEBUG when imported; under the handler the SDK puts on
    # the root logger, every search would print its progress on stderr.
    import bm25s  # noqa: F401

    logging.getLogger("bm25s").setLevel(logging.WARNING)

    @server.tool()
    def record_observation(kind: ObservationKind, text: str,
                           files: list[str] | None = None,
                           session: str | None = None) -> dict[str, Any]:
        """Record something you noticed in this project (a change made, a decision taken,
        a finding, a reference doc), with the files it concerns. It goes to the project's
        active session (or `session`) and shows in the next session's context."""
        event = _tool_call(lambda: ledger.record_observation(
            project, kind, text, files=files or (), session=session))
        return {"event_id": event.event_id, "position": event.position,
                "session": event.stream_id, "scope": project,
                "recorded_at": format_utc(event.recorded_at)}

    @server.tool()
    def search_observations(query: str, limit: int = 10) -> dict[str, Any]:
        """Search this project's observations (BM25 over their text and files), best
        first, each with its event id, log position, session and time."""
        hits = _tool_call(lambda: ledger.search_observations(
            project, query, limit=limit))
        return {"scope": project, "query": query, "results": [hit.to_json() for hit in hits]}

    @server.tool()
    def session_context(session: str | None = None, profile: str | None = None,
                        agent: str | None = None) -> dict[str, Any]:
        """The assembled context of a session of this project, or without `session` of
        the project itself (what a session starting now is given), for a profile
        (default: the session's 'profile' setting, else session). With `agent`, the text
        ends with the session's state scoped by that agent's manifest (with _agent and
        _savings), which `state` gives as data too."""
        return _tool_call(lambda: context_of(ledger, project, session, profile, agent))

    @server.tool()
    def why(session: str, item: str, profile: str | None = None) -> dict[str, Any]:
        """Why an item (a tool, an observation, a section...) was included or left out of
        a session's context, decision by decision over the session's timeline (profile:
        default the session's 'profile' setting, else session)."""
        def explain_item() -> dict[str, Any]:
            project_session(ledger, project, session)
            chosen = ledger.profile_of(session, profile, default=CODING_AGENT_PROFILE)
            return ledger.why(session, item, profile=chosen.name).to_json()
        return _tool_call(explain_item)

    @server.tool()
    def usage(scope: str | None = None, days: int = DEFAULT_USAGE_DAYS) -> dict[str, Any]:
        """Daily messages, tool uses and tokens of this project's scope (or `scope`) over
        the last `days` days, from the nightly rollups and today's raw rows."""
        chosen = project if scope is None else scope
        report = _tool_call(lambda: ledger.usage(chosen, days=days))
        data: dict[str, Any] = report.model_dump(mode="json")
        return data

    @server.resource("ctxledger://sessions", name="sessions", mime_type="application/json")
    def sessions() -> str:
        """This project's sessions, most recently active first."""
        listed = _resource_call(lambda: ledger.sessions(project))
        return ctxledger_json({"scope": project,
                               "sessions": [s.model_dump(mode="json") for s in listed]})

    @server.resource("ctxledger://sessions/{session}/state", name="session_state",
                     mime_type="application/json")
    def session_state(session: str) -> str:
        """A session's state: counts, settings, top tools, documents."""
        def read() -> dict[str, Any]:
            project_session(ledger, project, session)
            return ledger.state(session)
        return ctxledger_json(_resource_call(read))

    @server.resource("ctxledger://context", name="context", mime_type="text/markdown")
    def context() -> str:
        """The context a session of this project starts with now (profile: the scope's
        'profile' setting, else session)."""
        text: str = _resource_call(
            lambda: context_of(ledger, project, None, None, None)["text"])
        return text

    return server


def ctxledger_json(value: Any) -> str:
    """JSON text as the CLI prints it: sorted keys, real UTF-8, one line."""
    from ctxledger.render import dumps

    return dumps(value)
