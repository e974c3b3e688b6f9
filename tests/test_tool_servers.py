"""A tool use is credited to its MCP server whichever way the server is given, and a use
older than its tool's newest counts at its own time, on SQLite and PostgreSQL: through
the session profile's ranking, ``state`` and ``usage``."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from freezegun import freeze_time
from typer.testing import CliRunner

from ctxledger import Ledger
from ctxledger._config import ENV_VAR
from ctxledger.cli import app

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)


def ev(type_: str, **data: Any) -> dict[str, Any]:
    return {"type": type_, "data": data}


def used(tool: str, server: str | None = None) -> dict[str, Any]:
    return ev("tool.used", tool_name=tool, **({"server_name": server} if server else {}))


def _tool_lines(text: str) -> list[str]:
    return text.split("## Available Tools\n", 1)[1].splitlines()


def test_server_name_credits_the_use_to_its_server(ledger: Ledger) -> None:
    with freeze_time(T0):
        ledger.append("scope:team", [
            ev("tool.registered", name="linear", tool_type="mcp_server", server_name="linear"),
            ev("tool.registered", name="github", tool_type="mcp_server", server_name="github"),
            ev("tool.registered", name="triage", tool_type="skill"),
        ])
        ledger.append("s", [ev("session.started", scope="team"),
                            used("create_issue", "linear"), used("create_issue", "linear"),
                            used("list_issues", "linear"),
                            # The same bare name from another server is that server's.
                            used("create_issue", "github"),
                            # Both given and differing: server_name wins, as it does for
                            # a registered tool.
                            used("mcp__github__search", "linear"),
                            used("mcp__github__comment"),
                            used("triage")])
    assembly = ledger.assemble("s", "session", now=T0)
    assert _tool_lines(assembly.text) == [
        "- MCP: linear (4x)", "- MCP: github (2x)", "- skill: triage"]
    linear = assembly.decision("tool:linear")
    assert (linear.detail["window_count"], linear.detail["usage_source"]) == (4, "server")
    top = {(t["name"], t["server_name"]): t["uses"]
           for t in ledger.state("s", now=T0)["top_tools"]}
    assert top == {("create_issue", "linear"): 2, ("create_issue", "github"): 1,
                   ("list_issues", "linear"): 1, ("mcp__github__comment", None): 1,
                   ("mcp__github__search", "linear"): 1}
    servers = {s.name: s.total for s in ledger.usage("team", days=1, now=T0).servers}
    assert servers == {"linear": 4, "github": 2}


def test_an_import_grouped_by_session_counts_old_uses_at_their_time(db_url: str,
                                                                     tmp_path: Path) -> None:
    """``import --trust-timestamps`` of a log grouped by session: the second session's
    uses are 12 days older than the first's, and stay outside the 7-day window."""
    lines = [
        {"stream": "scope:team", "at": "2026-04-01T00:00:00Z", "type": "tool.registered",
         "data": {"name": "lint", "tool_type": "other"}},
        {"stream": "new", "at": "2026-04-20T09:00:00Z", "type": "session.started",
         "data": {"scope": "team"}},
        {"stream": "new", "at": "2026-04-20T09:01:00Z", "type": "tool.used",
         "data": {"tool_name": "lint"}},
        {"stream": "old", "at": "2026-04-08T09:00:00Z", "type": "session.started",
         "data": {"scope": "team"}},
        {"stream": "old", "at": "2026-04-08T09:01:00Z", "type": "tool.used",
         "data": {"tool_name": "lint"}},
        {"stream": "old", "at": "2026-04-16T09:01:00Z", "type": "tool.used",
         "data": {"tool_name": "lint"}},
    ]
    source = tmp_path / "log.jsonl"
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    runner = CliRunner(env={ENV_VAR: None})
    done = runner.invoke(app, ["--db", db_url, "import", str(source), "--trust-timestamps"])
    assert done.exit_code == 0, done.stderr
    state = runner.invoke(app, ["--db", db_url, "state", "new", "--now",
                                "2026-04-20T10:00:00Z"])
    assert state.exit_code == 0, state.stderr
    [lint] = json.loads(state.stdout)["top_tools"]
    # 2026-04-20 and 2026-04-16 are in the window; 2026-04-08 is 12 days before.
    assert (lint["uses"], lint["last_used"], lint["lifetime_uses"]) == (
        2, "2026-04-20T09:01:00.000000Z", 3)
    with Ledger.open(db_url) as ledger:
        at = datetime(2026, 4, 20, 10, tzinfo=UTC)
        for now, inside in ((at, 2), (at - 10 * DAY, 1), (at + 5 * DAY, 1)):
            decision = ledger.assemble("new", "session", now=now).decision("tool:lint")
            assert decision.detail["window_count"] == inside, now
