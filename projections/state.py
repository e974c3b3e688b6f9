"""The session state as JSON-ready data (``ledger.state()``, ``ctxledger state``).

Built from the read view, so it costs what the view costs. Keys are sorted at every level
and timestamps are ISO-8601 UTC strings, so the output is stable byte for byte.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from ctxledger.projections.compact import compact_dep_graph, compact_plan_state
from ctxledger.projections.session_view import SessionView, ToolUsage, ViewRequest
from ctxledger.projections.tool_window import TOOL_WINDOW
from ctxledger.projections.view_loader import load_session_view
from ctxledger.store.clock import format_utc
from ctxledger.store.errors import LedgerError

TOP_TOOLS_LIMIT = 5


def session_state(conn: sa.Connection, stream_id: str, now: datetime,
                  agent: str | None = None, *,
                  starting_in: str | None = None) -> dict[str, Any]:
    """The state of ``stream_id`` at ``now``: identity, message counts, activity, chapter,
    resolved settings, top tools, documents (in compact form) and the projections'
    position. With ``agent``, scoped through that agent's manifest (``projections.agents``;
    an agent without one gets the full state).

    Raises ``LedgerError`` for a stream with no session events, unless ``starting_in``
    names the scope it would start in (``load_session_view``).
    """
    view = load_session_view(conn, stream_id, ViewRequest(
        now=now, usage_window=TOOL_WINDOW, documents=True), starting_in=starting_in)
    if not view.exists:
        raise LedgerError(f"unknown session {stream_id!r}: the stream has no session events")
    state = state_from_view(view)
    if agent is None:
        return state
    from ctxledger.projections.agents import manifests_from_settings, scope_state

    return scope_state(state, agent, manifests_from_settings(view.settings))


def state_from_view(view: SessionView) -> dict[str, Any]:
    """The JSON-ready state of a loaded view (it must have ``documents`` and usage)."""
    counts = view.counts
    state: dict[str, Any] = {
        "session": view.stream_id,
        "scope": view.scope,
        "title": view.title,
        "agent": view.agent,
        "messages": {"system": counts.system, "developer": counts.developer,
                     "user": counts.user,
                     "assistant": counts.assistant, "tool": counts.tool,
                     "total": counts.total, "retracted": counts.retracted},
        "started_at": _iso(view.started_at),
        "ended_at": _iso(view.ended_at),
        "last_activity": _iso(view.last_activity),
        "chapter": view.chapter,
        "scene": view.scene,
        "settings": dict(view.settings),
        "top_tools": top_tools(view.tool_usage),
        "documents": [{"doc_id": d.doc_id, "kind": d.kind,
                       "content": compact_document(d.kind, d.content)}
                      for d in view.documents],
        "position": view.position,
    }
    sorted_state = sort_keys(state)
    assert isinstance(sorted_state, dict)
    return sorted_state


def compact_document(kind: str, content: Any) -> Any:
    """A document as the state shows it: a plan state (markdown) and a dependency graph
    (an object) in compact form (``projections.compact``), anything else as put."""
    if kind == "plan_state" and isinstance(content, str):
        return compact_plan_state(content)
    if kind == "dep_graph" and isinstance(content, Mapping):
        return compact_dep_graph(content)
    return content


def top_tools(usage: tuple[ToolUsage, ...],
              limit: int = TOP_TOOLS_LIMIT) -> list[dict[str, Any]]:
    """The ``limit`` tools used most in the window (then by name); unused ones are left out."""
    used = sorted((u for u in usage if u.window_count > 0),
                  key=lambda u: (-u.window_count, u.tool_name, u.server_name or ""))
    return [{"name": u.tool_name, "server_name": u.server_name, "uses": u.window_count,
             "last_used": _iso(u.window_last_used), "lifetime_uses": u.lifetime_count}
            for u in used[:limit]]


def sort_keys(value: Any) -> Any:
    """``value`` with every mapping rebuilt in sorted key order (lists keep their order)."""
    if isinstance(value, Mapping):
        return {key: sort_keys(value[key]) for key in sorted(value)}
    if isinstance(value, list | tuple):
        return [sort_keys(item) for item in value]
    return value


def _iso(value: datetime | None) -> str | None:
    return None if value is None else format_utc(value)
