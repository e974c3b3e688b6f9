"""One question, one context: the CLI, the HTTP service and the MCP server give the same
context (profile, digest, text with the agent's state block, scoped state) for the same
session, profile, agent and ``now`` as ``Ledger.context`` does, on both backends.

Each surface is one function ``(served, session, case) -> Seen`` in ``SURFACES``; a
surface that gives less (the Claude Code hook gives only the text) leaves the rest None,
and a new surface is one more entry there.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import anyio
import pytest
from helpers.service import client, make_key
from helpers.service_fixtures import Served, fresh, served
from mcp import Client
from typer.testing import CliRunner

from ctxledger import Ledger, LedgerError
from ctxledger._config import ENV_VAR
from ctxledger._mcp.server import build_server
from ctxledger.cli import app
from ctxledger.cli._errors import DEBUG_ENV_VAR
from ctxledger.store.clock import format_utc

__all__ = ["served"]  # the fixture, used by name

SCOPE = "surfaces"
NOW = datetime(2031, 1, 1, 9, 30, tzinfo=UTC)


@dataclass(frozen=True)
class Case:
    """What is asked: a profile (None: the session's setting) and an agent."""

    profile: str | None
    agent: str | None


@dataclass(frozen=True)
class Seen:
    """What a surface gave; None where it gives no such thing."""

    text: str
    profile: str | None = None
    digest: str | None = None
    state: dict[str, Any] | None = None


CASES = [Case(None, None), Case(None, "executor"), Case("session", "planner"),
         Case("session", None), Case("card", "stranger")]


def _session(url: str) -> str:
    """A coding session whose ``profile`` setting is card (the MCP server's own default
    is session, so it must read the setting to agree)."""
    session = fresh("ctx")
    with Ledger.open(url) as ledger:
        ledger.append(session, [
            {"type": "session.started", "data": {"scope": SCOPE, "title": "Surfaces"}},
            {"type": "setting.changed", "data": {"key": "profile", "value": "card"}},
            {"type": "message.appended", "data": {"role": "user", "content": "hello"}},
            {"type": "tool.used", "data": {"tool_name": "Bash"}},
            {"type": "document.put", "data": {"doc_id": "plan", "kind": "plan_state",
                                              "content": "Phase: 3 of 5\nStatus: Going"}}])
    return session


def _from_json(data: dict[str, Any]) -> Seen:
    agent = data.get("agent")
    if agent is None:
        return Seen(data["text"], data["profile"], data["digest"])
    return Seen(agent["text"], data["profile"], data["digest"], agent["state"])


def cli(served: Served, session: str, case: Case) -> Seen:
    runner = CliRunner(env={ENV_VAR: None, DEBUG_ENV_VAR: None})
    args = ["--db", served.url, "assemble", session, "--now", format_utc(NOW)]
    args += ["--profile", case.profile] if case.profile else []
    args += ["--agent", case.agent] if case.agent else []
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.stderr
    return _from_json(json.loads(result.stdout))


def http(served: Served, session: str, case: Case) -> Seen:
    params = {"now": format_utc(NOW), "profile": case.profile, "agent": case.agent}
    asked = {key: value for key, value in params.items() if value is not None}
    with client(served.base, make_key(served.url, [SCOPE])) as http:
        found = http.get(f"/sessions/{session}/assemble", params=asked)
        text = http.get(f"/sessions/{session}/assemble", params={**asked, "format": "text"})
    assert found.status_code == 200, found.text
    seen = _from_json(found.json())
    assert text.text == seen.text  # the text format is the same context
    return seen


def mcp(served: Served, session: str, case: Case) -> Seen:
    arguments = {"session": session, "profile": case.profile, "agent": case.agent}

    async def ask() -> Any:
        with Ledger.open(served.url, clock=lambda: NOW) as ledger:
            async with Client(build_server(ledger, SCOPE)) as session_client:
                return await session_client.call_tool(
                    "session_context",
                    {key: value for key, value in arguments.items() if value is not None})

    result = anyio.run(ask)
    assert not result.is_error, result.content
    data = json.loads(result.content[0].text)
    return Seen(data["text"], data["profile"], data["digest"], data.get("state"))


SURFACES: dict[str, Callable[[Served, str, Case], Seen]] = {
    "cli": cli, "http": http, "mcp": mcp}


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.profile}-{c.agent}")
def test_every_surface_gives_the_core_context(served: Served, case: Case) -> None:
    session = _session(served.url)
    with Ledger.open(served.url) as ledger:
        core = ledger.context(session, case.profile, agent=case.agent, now=NOW)
    expected = Seen(core.text(), core.assembly.profile, core.assembly.digest, core.state)
    assert expected.profile == (case.profile or "card")  # the setting, not a default
    if case.agent is not None:
        assert expected.state is not None and expected.state["_agent"] == case.agent
        assert expected.text.startswith(core.assembly.text + "\n\n[ctxledger - Agent state: ")
    for name, surface in SURFACES.items():
        seen = surface(served, session, case)
        assert seen.text == expected.text, name
        for field in ("profile", "digest", "state"):
            given = getattr(seen, field)
            assert given is None or given == getattr(expected, field), (name, field)


def test_an_unknown_profile_setting_is_the_same_one_line_error_everywhere(
        served: Served) -> None:
    session = fresh("bad")
    with Ledger.open(served.url) as ledger:
        ledger.log.check = None  # as a release that did not check settings stored it
        ledger.append(session, [
            {"type": "session.started", "data": {"scope": SCOPE}},
            {"type": "setting.changed", "data": {"key": "profile", "value": "poem"}}])
        with pytest.raises(LedgerError, match="the session's 'profile' setting is 'poem'") \
                as raised:
            ledger.context(session)
    message = str(raised.value)
    runner = CliRunner(env={ENV_VAR: None, DEBUG_ENV_VAR: None})
    result = runner.invoke(app, ["--db", served.url, "assemble", session])
    assert result.exit_code == 1 and result.stderr.splitlines() == [f"error: {message}"]
    with client(served.base, make_key(served.url, [SCOPE])) as http:
        found = http.get(f"/sessions/{session}/assemble")
    assert found.status_code == 400 and found.json()["detail"] == message
