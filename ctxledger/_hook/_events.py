"""What a Claude Code hook event is: its parsed form, its ids, and a tool use's events.

Standard library only (and ``ctxledger``'s stdlib-only modules): the drainer and the
general route import it (a tool use's own route, ``_fast``, does not).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

# The events a hook spools rather than writes, listed where the tool-use route reads them.
from ctxledger._hook._fast import TOOL_EVENTS as TOOL_EVENTS
from ctxledger._ids import derived_event_id
from ctxledger.io._bounded import BoundedInputError, loads_bounded
from ctxledger.store.errors import LedgerError
from ctxledger.store.tool_names import mcp_server

QUIET_EVENTS = ("PreToolUse", "Notification")
"""Events taken and ignored without opening the database (the ``PostToolUse`` after a
``PreToolUse`` records the call)."""
HANDLED = ("SessionStart", "SubagentStart", "UserPromptSubmit", "PreToolUse",
           "PostToolUse", "PostToolUseFailure", "Notification", "Stop", "SubagentStop",
           "PreCompact", "SessionEnd")
"""The hook events ``ctxledger hook`` takes, in the order a session sends them."""
SOURCES = ("startup", "resume", "clear", "compact")
"""``SessionStart``'s ``source``: a new session (startup, and clear with a new id), or
the same session going on (resume, compact)."""
FAIL_PREFIX = "ctxledger hook: "
"""What every line the hook prints on stderr starts with."""

_BUILTIN = re.compile(r"[A-Z][A-Za-z]+")


class HookInputError(LedgerError):
    """The hook's input is not one Claude Code event."""


class HookEvent(NamedTuple):
    """One Claude Code hook event: its name, session, project folder and whole payload."""

    name: str
    session: str
    cwd: str
    payload: Mapping[str, Any]

    def text(self, key: str) -> str | None:
        """The payload's ``key`` when it is a non-blank string."""
        value = self.payload.get(key)
        return value if isinstance(value, str) and value.strip() else None


def parse_event(raw: bytes) -> HookEvent:
    """The event in ``raw`` (a JSON object with ``hook_event_name``, ``session_id`` and
    ``cwd``, nested within the input limit: ``ctxledger.io._bounded``) that the hook
    handles; anything else raises ``HookInputError`` naming what is wrong."""
    try:
        # Numbers unchecked: a tool's response may hold any; the hook reads none of them.
        payload = loads_bounded(raw, "the event", check_numbers=False)
    except BoundedInputError as exc:
        raise HookInputError(str(exc)) from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise HookInputError(f"the event is not JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise HookInputError("the event is not a JSON object")
    fields: dict[str, str] = {}
    for key in ("hook_event_name", "session_id", "cwd"):
        value = payload.get(key)
        if not isinstance(value, str) or not value.strip():
            raise HookInputError(f"the event has no {key}")
        fields[key] = value
    name = fields["hook_event_name"]
    if name not in HANDLED:
        raise HookInputError(f"unhandled hook event {name!r} (handled: {', '.join(HANDLED)})")
    return HookEvent(name, fields["session_id"], fields["cwd"], payload)


def tool_registration(tool_name: str) -> dict[str, Any]:
    """The ``tool.registered`` data of a tool first seen in use: an MCP tool with its
    server, one of Claude Code's own tools (``Read``, ``Bash``: a PascalCase word) as a
    builtin, anything else as ``other``."""
    server = mcp_server(tool_name)
    if server is not None:
        return {"name": tool_name, "tool_type": "mcp_tool", "server_name": server}
    kind = "builtin" if _BUILTIN.fullmatch(tool_name) else "other"
    return {"name": tool_name, "tool_type": kind}


def transcript_size(event: HookEvent) -> str:
    """The size of the event's transcript file now, as text ("" when there is none)."""
    path = event.payload.get("transcript_path")
    if isinstance(path, str) and path:
        try:
            return str(os.stat(path).st_size)
        except OSError:
            return ""
    return ""


def event_key(event: HookEvent, size: str | None = None) -> str:
    """What tells this event from another of its session: its payload's hash, with the
    transcript's size (two identical prompts are two events; a retry is one): ``size``
    when the hook read it earlier (a spooled tool use), else read now."""
    canonical = json.dumps(event.payload, sort_keys=True, ensure_ascii=False,
                           separators=(",", ":"))
    if size is None:
        size = transcript_size(event)
    return hashlib.sha256(f"{canonical}\x1f{size}".encode("utf-8", "surrogatepass")
                          ).hexdigest()


def tool_use(event: HookEvent, size: str | None = None
             ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``tool.used`` event of a PostToolUse (or PostToolUseFailure), with its derived
    id, and the ``tool.registered`` data of its tool; ``size``: the transcript's size
    when the hook saw the event (``event_key``), for an event without ``tool_use_id``."""
    data = event.payload
    tool = data.get("tool_name")
    if not isinstance(tool, str) or not tool:
        raise HookInputError(f"{event.name} has no tool_name")
    call = data.get("tool_use_id")
    use: dict[str, Any] = {"tool_name": tool, "ok": _ok(event)}
    server = mcp_server(tool)
    if server is not None:
        use["server_name"] = server
    if isinstance(call, str) and call:
        use["call_id"] = call
    key = call if isinstance(call, str) and call else event_key(event, size)
    return ({"type": "tool.used", "data": use,
             "id": derived_event_id(event.session, "tool.used", key)},
            tool_registration(tool))


def _ok(event: HookEvent) -> bool:
    """False for a failed tool call: PostToolUseFailure, or a response that says so."""
    if event.name == "PostToolUseFailure":
        return False
    response = event.payload.get("tool_response")
    return not (isinstance(response, Mapping)
                and (response.get("is_error") is True or response.get("success") is False))
