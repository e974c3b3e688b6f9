"""``ctxledger mcp``: a real server process driven by the MCP SDK's own client, over stdio
(SQLite and PostgreSQL) and over streamable HTTP on loopback."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, MCPError, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from ctxledger import Ledger

CTXLEDGER = str(Path(sys.executable).with_name("ctxledger"))
SCOPE = "proj-mcp"
TOOLS = ["record_observation", "search_observations", "session_context", "why", "usage"]

Body = Callable[[ClientSession], Awaitable[Any]]


def _seed(url: str) -> dict[str, int]:
    """A project with an ended session (tools, uses, an observation, a summary) and a
    session of another project."""
    with Ledger.open(url) as ledger:
        ledger.append(f"scope:{SCOPE}", [
            {"type": "tool.registered", "data": {"name": "mcp__github__create_pr",
                                                 "tool_type": "mcp_tool",
                                                 "server_name": "github"}},
            {"type": "tool.registered", "data": {"name": "deploy", "tool_type": "skill"}}])
        done = ledger.append("s1", [
            {"type": "session.started", "data": {"scope": SCOPE, "title": "first"}},
            {"type": "tool.used", "data": {"tool_name": "mcp__github__create_pr"}},
            {"type": "tool.used", "data": {"tool_name": "deploy"}},
            {"type": "observation.recorded", "data": {
                "kind": "decision", "content": "Writers take a PostgreSQL advisory lock"}},
            {"type": "session.ended", "data": {"summary": "Set up the writer locks."}}])
        ledger.append("elsewhere", {"type": "session.started", "data": {"scope": "other"}})
        return {"observation": done.positions[3]}


def _run(argv: list[str], cwd: Path, body: Body, **env: str) -> Any:
    """Start ``ctxledger ARGV`` as the SDK's stdio client does (with ``env`` added to the
    environment) and run ``body`` on its initialized session."""
    params = StdioServerParameters(command=CTXLEDGER, args=argv, cwd=cwd,
                                   env={**os.environ, "CTXLEDGER_SCOPE": "",
                                        "CLAUDE_PROJECT_DIR": "", **env})

    async def main() -> Any:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            return await body(session)
    return anyio.run(main)


def _text(result: Any) -> str:
    assert len(result.content) == 1
    text: str = result.content[0].text
    return text


@pytest.fixture
def project(db_url: str, tmp_path: Path) -> tuple[str, Path, dict[str, int]]:
    folder = tmp_path / "work"
    folder.mkdir()
    return db_url, folder, _seed(db_url)


def test_tools_and_resources_over_stdio(project: tuple[str, Path, dict[str, int]]) -> None:
    url, folder, seeded = project

    async def body(session: ClientSession) -> dict[str, Any]:
        out: dict[str, Any] = {}
        listed = await session.list_tools()
        out["tools"] = {tool.name: tool.input_schema for tool in listed.tools}
        recorded = await session.call_tool("record_observation", {
            "kind": "finding", "text": "The token cache lives in redis",
            "files": ["src/cache.py", "docs/cache.md"]})
        out["recorded"] = recorded
        out["search"] = await session.call_tool("search_observations",
                                                {"query": "redis token cache", "limit": 5})
        out["project"] = await session.call_tool("session_context", {})
        out["scoped"] = await session.call_tool("session_context",
                                                {"session": "s1", "agent": "executor"})
        out["why"] = await session.call_tool("why", {
            "session": "s1", "item": f"observation:{seeded['observation']}"})
        out["usage"] = await session.call_tool("usage", {})
        out["resources"] = [str(r.uri) for r in (await session.list_resources()).resources]
        out["templates"] = [t.uri_template for t in
                            (await session.list_resource_templates()).resource_templates]
        out["sessions"] = await session.read_resource("ctxledger://sessions")
        out["state"] = await session.read_resource("ctxledger://sessions/s1/state")
        out["context"] = await session.read_resource("ctxledger://context")
        return out

    out = _run(["mcp", "--db", url, "--scope", SCOPE], folder, body)
    assert sorted(out["tools"]) == sorted(TOOLS)
    assert out["tools"]["record_observation"]["required"] == ["kind", "text"]
    assert out["tools"]["record_observation"]["properties"]["kind"]["enum"] == [
        "change", "decision", "finding", "reference"]

    with Ledger.open(url) as ledger:
        recorded = out["recorded"]
        assert not recorded.is_error
        written = recorded.structured_content
        event = ledger.events(after=written["position"] - 1, limit=1)[0]
        assert event.event_id == written["event_id"] and event.type == "observation.recorded"
        assert event.data == {"kind": "finding", "content": "The token cache lives in redis",
                              "source": "src/cache.py, docs/cache.md"}
        assert event.metadata == {"extra": {"files": ["src/cache.py", "docs/cache.md"]}}
        # s1 has ended, so the observation started a session of its own in the project.
        assert written["session"] == event.stream_id != "s1"
        assert ledger.view(event.stream_id).scope == SCOPE == written["scope"]

        hits = out["search"].structured_content["results"]
        assert [hit["event_id"] for hit in hits] == [event.event_id]
        assert hits[0]["files"] == ["src/cache.py", "docs/cache.md"]
        assert hits[0]["session"] == event.stream_id
        assert hits[0]["position"] == event.position and hits[0]["score"] > 0
        assert [h.to_json() for h in ledger.search_observations(SCOPE, "redis token cache")
                ] == hits

        project_context = out["project"].structured_content
        assert project_context["session"] is None and project_context["scope"] == SCOPE
        text = project_context["text"]
        assert "## Previous Session\nSet up the writer locks." in text
        assert "- The token cache lives in redis" in text
        assert "- Writers take a PostgreSQL advisory lock" in text
        assert "github" in text and "deploy" in text
        assert out["context"].contents[0].text == text

        scoped = out["scoped"].structured_content
        assert scoped["session"] == "s1" and scoped["profile"] == "session"
        state = scoped["state"]
        expected = ledger.state("s1", agent="executor")
        assert state["_agent"] == "executor"
        assert state["_savings"] == expected["_savings"]
        assert set(state) == set(expected) and "messages" not in state

        assert out["why"].structured_content == ledger.why(
            "s1", f"observation:{seeded['observation']}", profile="session").to_json()
        usage = out["usage"].structured_content
        assert usage["scope"] == SCOPE
        assert sum(day["tool_uses"] for day in usage["days"]) == 2
        assert usage["days"] == ledger.usage(SCOPE).model_dump(mode="json")["days"]

        assert out["resources"] == ["ctxledger://sessions", "ctxledger://context"]
        assert out["templates"] == ["ctxledger://sessions/{session}/state"]
        listed = json.loads(out["sessions"].contents[0].text)
        assert listed["scope"] == SCOPE
        assert [s["session"] for s in listed["sessions"]] == [event.stream_id, "s1"]
        assert listed["sessions"][1]["summary"] == "Set up the writer locks."
        assert json.loads(out["state"].contents[0].text) == ledger.state("s1")


BAD_CALLS: list[tuple[str, dict[str, Any], str]] = [
    ("record_observation", {"kind": "idea", "text": "x"},
     "Error executing tool record_observation: invalid arguments: kind: Input should be"
     " 'change', 'decision', 'finding' or 'reference'"),
    ("record_observation", {"kind": "finding", "text": "   "},
     "Error executing tool record_observation: text must not be empty"),
    ("record_observation", {"kind": "finding", "text": "x", "files": ["a.py", " "]},
     "Error executing tool record_observation: files[1] must be a non-empty path"),
    ("record_observation", {"kind": "finding", "text": "x", "session": "elsewhere"},
     "Error executing tool record_observation: session 'elsewhere' belongs to scope"
     " 'other', not 'proj-mcp'"),
    ("record_observation", {"text": "x"},
     "Error executing tool record_observation: invalid arguments: kind: Field required"),
    ("search_observations", {"query": "  "},
     "Error executing tool search_observations: query must not be empty"),
    ("search_observations", {"query": "lock", "limit": 0},
     "Error executing tool search_observations: limit must be between 1 and 100, got 0"),
    ("search_observations", {"query": "lock", "limit": "many"},
     "Error executing tool search_observations: invalid arguments: limit: Input should be"
     " a valid integer, unable to parse string as an integer"),
    ("session_context", {"session": "nope"},
     "Error executing tool session_context: unknown session 'nope'"),
    ("session_context", {"session": "elsewhere"},
     "Error executing tool session_context: session 'elsewhere' belongs to scope 'other',"
     " not this project's 'proj-mcp'"),
    ("session_context", {"profile": "poem"},
     "Error executing tool session_context: unknown profile 'poem'"),
    ("why", {"session": "s1", "item": "observation:999999"},
     "Error executing tool why: 'observation:999999' is not a candidate in any assembly of"
     " session 's1' (session)"),
    ("why", {"session": "s1"},
     "Error executing tool why: invalid arguments: item: Field required"),
    ("usage", {"days": 0},
     "Error executing tool usage: days must be between 1 and 366 (got 0)"),
    ("forget_everything", {}, "Unknown tool: forget_everything"),
]


def test_bad_arguments_give_one_line_tool_errors_and_write_nothing(
        project: tuple[str, Path, dict[str, int]]) -> None:
    url, folder, _ = project
    with Ledger.open(url) as ledger:
        head = ledger.head()

    async def body(session: ClientSession) -> tuple[list[Any], list[str]]:
        results = [await session.call_tool(name, args) for name, args, _ in BAD_CALLS]
        errors: list[str] = []
        for uri in ("ctxledger://sessions/nope/state",
                    "ctxledger://sessions/elsewhere/state"):
            with pytest.raises(MCPError) as caught:
                await session.read_resource(uri)
            errors.append(caught.value.error.message)
        return results, errors

    results, errors = _run(["mcp", "--db", url, "--scope", SCOPE], folder, body)
    for (name, args, expected), result in zip(BAD_CALLS, results, strict=True):
        assert result.is_error, (name, args)
        text = _text(result)
        assert "\n" not in text and "Traceback" not in text, text
        assert text.startswith(expected), (text, expected)
    assert errors == ["unknown session 'nope'",
                      "session 'elsewhere' belongs to scope 'other', not this project's"
                      " 'proj-mcp'"]
    with Ledger.open(url) as ledger:
        assert ledger.head() == head


def test_the_scope_comes_from_the_project_folder(sqlite_url: str, tmp_path: Path) -> None:
    from ctxledger._project import project_scope

    folder = tmp_path / "My App"
    (folder / "src").mkdir(parents=True)

    async def body(session: ClientSession) -> Any:
        return await session.call_tool("record_observation",
                                       {"kind": "change", "text": "Renamed the CLI"})

    result = _run(["mcp", "--db", sqlite_url], folder, body)
    assert result.structured_content["scope"] == project_scope(folder, environ={})
    assert result.structured_content["scope"].startswith("my-app-")
    # Started by Claude Code in a subfolder: the project folder it names decides.
    again = _run(["mcp", "--db", sqlite_url], folder / "src", body,
                 CLAUDE_PROJECT_DIR=str(folder))
    assert again.structured_content["scope"] == result.structured_content["scope"]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture
def http_server(sqlite_url: str, tmp_path: Path) -> Iterator[str]:
    _seed(sqlite_url)
    port = _free_port()
    process = subprocess.Popen(
        [CTXLEDGER, "mcp", "--transport", "streamable-http", "--host", "127.0.0.1",
         "--port", str(port), "--scope", SCOPE, "--db", sqlite_url],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(
                        process.stderr.read() if process.stderr else "") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_streamable_http_on_loopback(http_server: str) -> None:
    async def main() -> tuple[list[str], Any, Any]:
        async with streamable_http_client(http_server) as (read, write, *_), \
                ClientSession(read, write) as session:
            await session.initialize()
            tools = [tool.name for tool in (await session.list_tools()).tools]
            await session.call_tool("record_observation", {
                "kind": "reference", "text": "The API guide is docs/api.md"})
            found = await session.call_tool("search_observations", {"query": "API guide"})
            bad = await session.call_tool("search_observations", {"query": ""})
            return tools, found, bad

    tools, found, bad = anyio.run(main)
    assert sorted(tools) == sorted(TOOLS)
    assert [hit["text"] for hit in found.structured_content["results"]] == [
        "The API guide is docs/api.md"]
    assert bad.is_error
    assert _text(bad) == "Error executing tool search_observations: query must not be empty"


def test_without_the_extra_it_says_which_in_one_line(sqlite_url: str) -> None:
    probe = ("import sys; sys.modules['mcp'] = None; from ctxledger.cli import main;"
             f" sys.argv = ['ctxledger', 'mcp', '--db', {sqlite_url!r}]; main()")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: mcp needs the mcp extra (pip install 'ctxledger[mcp]')")


def test_importing_ctxledger_and_its_cli_loads_no_sdk() -> None:
    probe = ("import sys, ctxledger, ctxledger.cli._app;"
             " print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith('mcp.')))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True, timeout=60)
    assert done.stdout.strip() == "[]"
