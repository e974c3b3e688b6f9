"""``ctxledger hook``: Claude Code's documented hook events, run in this process through
``run_hook`` (the function every route calls), on SQLite and PostgreSQL: what each event
writes, a three-turn session recorded from its transcript, resume, compact and clear, a
transcript read from where the last read stopped, and one process test per route (the
console script's fast route, the Typer command; the worker's is in test_hook_worker.py)."""

from __future__ import annotations

import io
import json
import math
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from freezegun import freeze_time
from helpers.hook_events import (
    PROJECT,
    SCRIPT,
    TRANSCRIPT_SESSION,
    GrowingTranscript,
    Run,
)
from helpers.hook_events import hook_event as _event
from typer.testing import CliRunner

from ctxledger import Ledger
from ctxledger._hook import hook_arguments, run_hook
from ctxledger._hook._events import (
    HANDLED,
    QUIET_EVENTS,
    HookEvent,
    tool_registration,
    tool_use,
)
from ctxledger._hook._fast import spool_line
from ctxledger._hook._handle import CONTINUING, RETURNING
from ctxledger._hook._route import drain_spool
from ctxledger._hook._spool import Spool, append, claim, tool_use_line
from ctxledger._project import project_scope
from ctxledger.assembler.profiles.base import report_of
from ctxledger.assembler.profiles.session.report import SessionReport
from ctxledger.cli import app
from ctxledger.store.tool_names import mcp_server


def _tool(name: str, call: str, session: str = "cc-1", **fields: Any) -> dict[str, Any]:
    return _event("PostToolUse", session, tool_name=name, tool_use_id=call,
                  tool_input={"path": "x"}, tool_response={"ok": True}, **fields)


@pytest.fixture
def hook(db_url: str, tmp_path: Path) -> Run:
    """Run ``ctxledger hook`` in this process, through ``run_hook`` as both routes do: a
    tool use is spooled (no drainer process), and the next other event drains it."""
    env = {"XDG_DATA_HOME": str(tmp_path / "data"), "CTXLEDGER_HOOK_WORKER_IDLE": "0"}
    transcripts = tmp_path / "transcripts"
    transcripts.mkdir()

    def run(event: dict[str, Any] | str, *args: str, db: str | None = db_url,
            extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        if isinstance(event, dict) and str(event.get("transcript_path")).startswith(
                "/nonexistent/"):
            # The helper's placeholder: an empty transcript, as Claude Code's first event
            # of a session finds it (a test of a missing one names a path of its own).
            path = transcripts / Path(str(event["transcript_path"])).name
            path.touch()
            event = {**event, "transcript_path": str(path)}
        text = event if isinstance(event, str) else json.dumps(event)
        environ = {**env, **(extra_env or {})}
        arguments = hook_arguments([*(("--db", db) if db else ()), "hook", *args], environ)
        assert arguments is not None, args
        out, err = io.StringIO(), io.StringIO()
        run_hook(arguments, io.BytesIO(text.encode("utf-8", "surrogatepass")), out, err,
                 worker=False, environ=environ, drainer=False)
        return subprocess.CompletedProcess(["ctxledger", "hook", *args], 0, out.getvalue(),
                                           err.getvalue())
    return run


def _spool_files(tmp_path: Path) -> list[str]:
    folder = tmp_path / "data" / "ctxledger" / "spool"
    return sorted(path.name for path in folder.glob("*")
                  if path.suffix in (".events", ".jsonl", ".batch")) if folder.is_dir() else []


@pytest.fixture
def read(db_url: str) -> Iterator[Ledger]:
    with Ledger.open(db_url, load_vocabulary=False) as ledger:
        yield ledger


def _quiet(result: subprocess.CompletedProcess[str]) -> None:
    assert (result.returncode, result.stdout, result.stderr) == (0, "", ""), result


def _types(ledger: Ledger, stream: str) -> list[str]:
    return [event.type for event in ledger.events(stream)]


def test_each_event_kind(hook: Run, read: Ledger) -> None:
    scope = project_scope(PROJECT, environ={})
    start = hook(_event("SessionStart", source="startup"))
    assert (start.returncode, start.stderr) == (0, "")
    output = json.loads(start.stdout)
    assert list(output) == ["hookSpecificOutput"]
    assert output["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    assert "First session detected" in output["hookSpecificOutput"]["additionalContext"]
    [started] = read.events("cc-1")
    assert (started.type, started.data) == ("session.started", {"scope": scope})

    _quiet(hook(_tool("mcp__github__create_issue", "toolu_01")))
    _quiet(hook(_tool("Read", "toolu_02")))
    _quiet(hook(_event("PostToolUseFailure", tool_name="Bash", tool_use_id="toolu_03",
                       tool_input={"command": "false"}, error="exit 1")))
    _quiet(hook(_event("UserPromptSubmit", prompt="Fix the login bug, please.")))
    _quiet(hook(_event("Stop")))  # the turn: nothing in the (empty) transcript
    _quiet(hook(_event("SessionEnd", reason="prompt_input_exit")))

    events = read.events("cc-1")
    assert [e.type for e in events] == ["session.started", "tool.used", "tool.used",
                                        "tool.used", "message.appended", "session.ended"]
    assert [e.data for e in events[1:4]] == [
        {"tool_name": "mcp__github__create_issue", "server_name": "github", "ok": True,
         "call_id": "toolu_01"},
        {"tool_name": "Read", "ok": True, "call_id": "toolu_02"},
        {"tool_name": "Bash", "ok": False, "call_id": "toolu_03"}]
    assert events[4].data["role"] == "user"
    assert events[4].data["content"] == "Fix the login bug, please."
    assert events[5].data == {"summary": "Asked:\n- Fix the login bug, please."}
    registered = {e.data["name"]: e.data for e in read.events(f"scope:{scope}")}
    assert registered == {
        "mcp__github__create_issue": {"name": "mcp__github__create_issue",
                                      "tool_type": "mcp_tool", "server_name": "github"},
        "Read": {"name": "Read", "tool_type": "builtin"},
        "Bash": {"name": "Bash", "tool_type": "builtin"}}

    second = json.loads(hook(_event("SessionStart", "cc-2", source="startup")).stdout)
    context = second["hookSpecificOutput"]["additionalContext"]
    assert "## Previous Session\nAsked:\n- Fix the login bug, please." in context
    assert "## Available Tools\n- MCP: github (1x)" in context
    assert "Read" not in context  # builtins are not ranked
    assert read.view("cc-2").scope == scope


def test_retried_events_are_written_once(hook: Run, read: Ledger) -> None:
    events = [_event("SessionStart", source="startup"), _tool("mcp__srv__tool", "toolu_9"),
              _event("UserPromptSubmit", prompt="again"), _event("Stop"),
              _event("SessionEnd")]
    for event in events:
        assert hook(event).returncode == 0
    before = [(e.event_id, e.type) for e in read.events()]
    for event in events:
        assert hook(event).returncode == 0
    assert [(e.event_id, e.type) for e in read.events()] == before
    assert _types(read, "cc-1") == ["session.started", "tool.used", "message.appended",
                                    "session.ended"]
    # The same call reported again by another event (no retry of this one) counts once.
    _quiet(hook(_tool("mcp__srv__tool", "toolu_9", duration_ms=5)))
    _quiet(hook("", "--drain"))
    assert read.state("cc-1")["top_tools"][0]["lifetime_uses"] == 1


def test_fail_open(hook: Run, read: Ledger, tmp_path: Path) -> None:
    assert hook(_event("SessionStart")).returncode == 0
    head = read.head()
    for bad, needle in [
            ("{not json", "not JSON"),
            ("[1, 2]", "not a JSON object"),
            (json.dumps({"hook_event_name": "Stop", "cwd": PROJECT}), "no session_id"),
            (_event("Elicitation", message="hi"), "unhandled hook event 'Elicitation'"),
            (_event("PostToolUse", tool_name=None), "PostToolUse has no tool_name"),
            (_event("UserPromptSubmit", prompt="x" * (1 << 20)), "")]:
        result = hook(bad)
        assert result.returncode == 0 and result.stdout == ""
        assert len(result.stderr.splitlines()) == 1, result.stderr
        assert result.stderr.startswith("ctxledger hook: ") and needle in result.stderr
        assert "Traceback" not in result.stderr
    assert read.head() == head
    assert _spool_files(tmp_path) == []  # nothing spooled either
    # A tool use only spools: an unreachable database shows at the next event that opens
    # it, and the tool use waits in the spool (claimed as a batch), never lost.
    nowhere = "postgresql+psycopg://nobody@127.0.0.1:1/none"
    _quiet(hook(_tool("Read", "toolu_x"), db=nowhere))
    unreachable = hook(_event("UserPromptSubmit", prompt="hi"), db=nowhere)
    assert (unreachable.returncode, unreachable.stdout) == (0, "")
    assert len(unreachable.stderr.splitlines()) == 1
    assert "127.0.0.1" in unreachable.stderr and "Traceback" not in unreachable.stderr
    assert read.head() == head
    folder = tmp_path / "data" / "ctxledger" / "spool"
    assert [b"toolu_x" in (folder / name).read_bytes()
            for name in _spool_files(tmp_path)] == [True]


def test_agent_scopes_the_injection(hook: Run, read: Ledger) -> None:
    _quiet(hook(_tool("mcp__github__list_prs", "toolu_1")))
    result = hook(_event("SessionStart", source="resume"), "--agent", "executor")
    context = json.loads(result.stdout)["hookSpecificOutput"]["additionalContext"]
    text, _, block = context.partition("\n\n[ctxledger - Agent state: executor]\n")
    # The session profile's injection, greeting a resumed session as going on.
    going_on = read.policy("cc-1", "session").model_copy(
        update={"welcome_message": CONTINUING.format(source="resume")})
    assert text == read.assemble("cc-1", "session", policy=going_on).text
    assert "First session" not in text
    state = json.loads(block)
    assert state == read.state("cc-1", agent="executor")
    assert state["_agent"] == "executor" and "_warning" not in state
    assert state == {**read.state("cc-1", agent="gsd-executor"), "_agent": "executor"}
    by_env = hook(_event("SessionStart", source="resume"),
                  extra_env={"CTXLEDGER_AGENT": "executor"})
    assert json.loads(by_env.stdout) == json.loads(result.stdout)
    spawned = hook(_event("SubagentStart", agent_id="a-1", agent_type="planner"))
    output = json.loads(spawned.stdout)["hookSpecificOutput"]
    assert output["hookEventName"] == "SubagentStart"
    header, _, body = output["additionalContext"].partition("\n")
    assert header == "[ctxledger - Agent state: planner]"
    assert json.loads(body) == read.state("cc-1", agent="planner")
    nameless = hook(_event("SubagentStart", agent_id="a-2", agent_type=None))
    assert (nameless.returncode, nameless.stdout) == (0, "")
    assert nameless.stderr.strip().endswith("SubagentStart has no agent_type"
                                            " (and no --agent was given)")


def test_scope_and_database_defaults(hook: Run, tmp_path: Path) -> None:
    result = hook(_event("SessionStart"), db=None, extra_env={"CTXLEDGER_SCOPE": "mine"})
    assert result.returncode == 0, result.stderr
    default = tmp_path / "data" / "ctxledger" / "ledger.db"
    with Ledger.open(f"sqlite:///{default}", load_vocabulary=False) as ledger:
        assert ledger.view("cc-1").scope == "mine"


def test_the_hook_and_the_command_line_find_one_database(
        hook: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No flags: the hook (in the project's folder, its events' cwd) and a command run in
    that folder use the project's ctxledger.db when it exists, else the user's one."""
    project = tmp_path / "webapp"
    project.mkdir()
    event = {**_event("UserPromptSubmit", prompt="where am I?"), "cwd": str(project)}
    _quiet(hook(event, db=None))
    monkeypatch.chdir(project)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.delenv("CTXLEDGER_DB", raising=False)
    runner = CliRunner()
    state = runner.invoke(app, ["state", "cc-1"])
    assert state.exit_code == 0, state.output
    assert json.loads(state.stdout)["messages"]["user"] == 1
    assert (tmp_path / "data" / "ctxledger" / "ledger.db").is_file()
    # A project database of its own comes first, for both.
    assert runner.invoke(app, ["init", "--db", f"sqlite:///{project / 'ctxledger.db'}"]
                         ).exit_code == 0
    _quiet(hook({**event, "session_id": "cc-2"}, db=None))
    listed = runner.invoke(app, ["events", "cc-2"])
    assert listed.exit_code == 0 and "session.started" in listed.stdout
    with Ledger.open(f"sqlite:///{project / 'ctxledger.db'}", load_vocabulary=False) as own:
        assert [e.type for e in own.events("cc-2")] == ["session.started",
                                                        "message.appended"]


def test_mcp_server_names() -> None:
    assert mcp_server("mcp__srv__tool") == "srv"
    assert mcp_server("mcp__my_server__do_it") == "my_server"
    assert mcp_server("mcp__github__create_issue") == "github"
    assert mcp_server("Read") is None and mcp_server("mcp__nope") is None
    assert tool_registration("mcp__srv__tool") == {
        "name": "mcp__srv__tool", "tool_type": "mcp_tool", "server_name": "srv"}
    assert tool_registration("WebFetch")["tool_type"] == "builtin"
    assert tool_registration("my-script")["tool_type"] == "other"


# -- Claude Code's sessions, recorded from their transcripts -----------------------------------

S1 = TRANSCRIPT_SESSION
# The fixture's conversation as it is recorded: the caveat Claude Code notes for itself,
# the thinking-only line, the snapshot, system and summary lines and the sub-agent's line
# are not the session's messages.
RECORDED = [
    ("user", "Fix the login redirect: after signing in, users land on /home instead of the"
             " page they came from."),
    ("assistant", "I'll look at the login view first."),
    ("assistant", "call Read"),
    ("tool", "     1\tdef login(request):\n     2\t    ...\n     3\t    return"
             " redirect('/home')\n"),
    ("assistant", "call Edit"),
    ("tool", f"The file {PROJECT}/app/auth.py has been updated."),
    ("assistant", "Fixed: the login view now redirects to the `next` parameter when it is a"
                  " safe local path, else to /home."),
    ("user", "Add a test for it."),
    ("assistant", "call Write"),
    ("tool", f"File created successfully at: {PROJECT}/tests/test_auth.py"),
    ("assistant", "Added tests/test_auth.py with a test that the login follows `next`."),
    ("user", "Run the tests."),
    ("assistant", "call Bash"),
    ("tool", "...\n3 passed in 0.41s"),
    ("assistant", "All 3 tests pass; the redirect fix is ready for review."),
]
SUMMARY = ("Asked:\n"
           "- Fix the login redirect: after signing in, users land on /home instead of the"
           " page they came from.\n"
           "- Add a test for it.\n"
           "- Run the tests.\n"
           "Files changed: app/auth.py, tests/test_auth.py\n"
           "Last reply: All 3 tests pass; the redirect fix is ready for review.")


def _recorded(ledger: Ledger, session: str = S1) -> list[tuple[str, str]]:
    found = []
    for each in ledger.messages(session):
        data = each.data
        calls = data.get("tool_calls") or []
        text = (" ".join(f"call {call['function']['name']}" for call in calls) if calls
                else str(data["content"]))
        found.append((str(data["role"]), text))
    return found


def _context(result: subprocess.CompletedProcess[str]) -> str:
    assert result.stderr == "", result.stderr
    return str(json.loads(result.stdout)["hookSpecificOutput"]["additionalContext"])


def _ends(ledger: Ledger, session: str = S1) -> list[dict[str, Any]]:
    return [e.data for e in ledger.events(session) if e.type == "session.ended"]


def _turn(hook: Run, transcript: GrowingTranscript, turn: int, **stop: Any) -> None:
    """One turn as Claude Code runs it: the prompt's hook, the turn written to the
    transcript (with a tool use's hook), then Stop."""
    path = transcript.path
    _quiet(hook(_event("UserPromptSubmit", S1, transcript=path,
                       prompt=transcript.prompt(turn))))
    transcript.write_turn(turn)
    _quiet(hook(_event("PostToolUse", S1, transcript=path, tool_use_id=f"toolu_turn{turn}")))
    _quiet(hook(_event("Stop", S1, transcript=path, **stop)))


def test_a_three_turn_session_is_recorded_from_its_transcript(
        hook: Run, read: Ledger, tmp_path: Path) -> None:
    transcript = GrowingTranscript(tmp_path / "session.jsonl")
    first = _context(hook(_event("SessionStart", S1, transcript=transcript.path)))
    assert first.startswith("[ctxledger] First session detected.")
    # Newer Claude Code sends the reply with Stop, older only stop_hook_active: the
    # transcript is read either way.
    _turn(hook, transcript, 0)
    _turn(hook, transcript, 1, last_assistant_message=RECORDED[10][1])
    assert _ends(read) == []  # a Stop is a turn, not the session's end
    _turn(hook, transcript, 2, stop_hook_active=True)
    _quiet(hook(_event("SessionEnd", S1, transcript=transcript.path)))

    assert _recorded(read) == RECORDED  # each prompt once, though its hook recorded it
    assert _ends(read) == [{"summary": SUMMARY}]
    assert [e.type for e in read.events(S1)].count("tool.used") == 3
    second = _context(hook(_event("SessionStart", "cc-2")))
    assert second.startswith(f"[ctxledger - Session Context]\n\n## Previous Session\n"
                             f"{SUMMARY}")
    # The log holds it all: without the file the injection is the same, and a retried end
    # says the file is gone (one line) and writes nothing.
    transcript.path.unlink()
    head = read.head()
    assert _context(hook(_event("SessionStart", "cc-2"))) == second
    again = hook(_event("SessionEnd", S1, transcript=transcript.path))
    assert again.stdout == "" and len(again.stderr.splitlines()) == 1
    assert str(transcript.path) in again.stderr and "No such file" in again.stderr
    assert read.head() == head and _recorded(read) == RECORDED


def test_resume_and_compact_go_on_with_the_session(hook: Run, read: Ledger,
                                                    tmp_path: Path) -> None:
    transcript = GrowingTranscript(tmp_path / "session.jsonl")
    path = transcript.path
    _context(hook(_event("SessionStart", S1, transcript=path)))
    _turn(hook, transcript, 0)
    _quiet(hook(_event("SessionEnd", S1, transcript=path)))
    resumed = _context(hook(_event("SessionStart", S1, transcript=path, source="resume")))
    assert resumed == CONTINUING.format(source="resume")  # not "First session detected"
    _turn(hook, transcript, 1)
    transcript.write_turn(2)
    # Before compacting, the transcript's new lines are recorded; after, the session goes on.
    _quiet(hook(_event("PreCompact", S1, transcript=path, trigger="auto")))
    assert _recorded(read) == RECORDED
    compacted = _context(hook(_event("SessionStart", S1, transcript=path, source="compact")))
    assert compacted == CONTINUING.format(source="compact")
    _quiet(hook(_event("SessionEnd", S1, transcript=path)))
    types = [e.type for e in read.events(S1)]
    assert types.count("session.started") == 1
    assert [end["summary"].splitlines()[1:2] for end in _ends(read)] == [
        [f"- {transcript.prompt(0)}"]] * 2
    assert _ends(read)[-1] == {"summary": SUMMARY}


def test_clear_starts_a_new_session_and_ends_one_left_open(hook: Run, read: Ledger,
                                                          tmp_path: Path) -> None:
    transcript = GrowingTranscript(tmp_path / "session.jsonl")
    _context(hook(_event("SessionStart", S1, transcript=transcript.path)))
    _turn(hook, transcript, 0)
    transcript.write_turn(2)  # two more turns, then Claude Code is killed: no SessionEnd
    assert _ends(read) == []
    # /clear: a new session id. Its start finds the first one open and ends it, with the
    # rest of its transcript read first.
    cleared = _context(hook(_event("SessionStart", "cc-clear", source="clear")))
    assert _recorded(read) == RECORDED
    assert _ends(read) == [{"summary": SUMMARY}]
    assert cleared.startswith(f"[ctxledger - Session Context]\n\n## Previous Session\n"
                              f"{SUMMARY}")
    # An ended session is not ended again; a later start of a session with history is
    # never told it is the first.
    _quiet(hook(_event("SessionEnd", "cc-clear")))
    _context(hook(_event("SessionStart", "cc-3")))
    assert _ends(read) == [{"summary": SUMMARY}]
    assert read.head() > 0


def test_a_new_session_in_a_scope_with_history_is_not_the_first(hook: Run,
                                                                 read: Ledger) -> None:
    _quiet(hook(_tool("Read", "toolu_1")))
    _quiet(hook(_event("SessionEnd")))  # nothing said: no summary
    context = _context(hook(_event("SessionStart", "cc-2")))
    assert context == RETURNING
    # A retried start of a project's very first session is still its first.
    first = _context(hook(_event("SessionStart", "elsewhere",
                                 cwd="/work/projects/other")))
    again = _context(hook(_event("SessionStart", "elsewhere",
                                 cwd="/work/projects/other")))
    assert first == again and first.startswith("[ctxledger] First session detected.")


def test_without_a_transcript_a_stop_records_its_reply(hook: Run, read: Ledger,
                                                       tmp_path: Path) -> None:
    gone = tmp_path / "gone.jsonl"
    # Claude Code writes the file with the session's first message: a start does not
    # miss it; a stop does, with one line.
    start = hook(_event("SessionStart", transcript=gone))
    assert json.loads(start.stdout) and start.stderr == ""
    # An older Claude Code sends no reply: nothing to record, one line.
    older = hook(_event("Stop", transcript=gone))
    assert older.stdout == "" and len(older.stderr.splitlines()) == 1
    assert older.stderr.startswith(f"ctxledger hook: transcript {gone}: No such file")
    newer = hook(_event("Stop", transcript=gone, last_assistant_message="Done: PR 42."))
    assert newer.stdout == "" and len(newer.stderr.splitlines()) == 1
    hook(_event("Stop", transcript=gone, last_assistant_message="Done: PR 42."))  # a retry
    hook(_event("SessionEnd", transcript=gone))
    assert _recorded(read, "cc-1") == [("assistant", "Done: PR 42.")]
    assert _ends(read, "cc-1") == [{"summary": "Last reply: Done: PR 42."}]


def test_a_transcript_is_read_from_where_the_last_read_stopped(
        hook: Run, read: Ledger, tmp_path: Path) -> None:
    transcript = GrowingTranscript(tmp_path / "session.jsonl")
    path = transcript.path
    lines = transcript.lines
    _context(hook(_event("SessionStart", S1, transcript=path)))
    # A partial last line (Claude Code still writing it) waits for the next read.
    transcript.write_through(3)
    with path.open("a", encoding="utf-8") as file:
        file.write(lines[3][:40])
    _quiet(hook(_event("Stop", S1, transcript=path)))
    assert _recorded(read) == RECORDED[:1]
    with path.open("a", encoding="utf-8") as file:
        file.write(lines[3][40:])
    transcript.written = 4
    transcript.write_through(8)
    _quiet(hook(_event("Stop", S1, transcript=path)))
    assert _recorded(read) == RECORDED[:5]
    # A line that is not JSON is skipped with one line, a line past the input limit is
    # stepped over with one line, and the read goes on after both.
    with path.open("a", encoding="utf-8") as file:
        file.write("{torn\n")
        file.write(json.dumps({"type": "system", "content": "x" * 5000}) + "\n")
    transcript.write_through(12)
    with pytest.MonkeyPatch.context() as patch:  # read by the process that reads the file
        patch.setenv("CTXLEDGER_MAX_INPUT_BYTES", "4096")
        small = hook(_event("Stop", S1, transcript=path))
    assert small.stdout == "" and len(small.stderr.splitlines()) == 2
    assert "a line is not JSON" in small.stderr
    assert "is larger than the input limit; skipped" in small.stderr
    assert _recorded(read) == RECORDED[:8]
    _quiet(hook(_event("Stop", S1, transcript=path)))
    assert _recorded(read) == RECORDED[:8]
    # Rotated (another first line) or truncated: read again from the start; the lines
    # read before are not recorded twice.
    path.write_text("".join(lines[2:]), encoding="utf-8")
    _quiet(hook(_event("Stop", S1, transcript=path)))
    assert _recorded(read) == RECORDED
    path.write_text("".join(lines[:3]), encoding="utf-8")
    _quiet(hook(_event("Stop", S1, transcript=path)))
    assert _recorded(read) == RECORDED


def test_every_documented_event_is_taken(hook: Run, read: Ledger) -> None:
    """Each event with the fields Claude Code documents for it: exit 0, no stderr line;
    SessionStart and SubagentStart print; PreToolUse and Notification write nothing."""
    head = read.head()
    for name in ("PreToolUse", "Notification"):
        _quiet(hook(_event(name)))
    assert read.head() == head
    printed = {name: hook(_event(name, agent_type="planner", agent_id="a-1"))
               for name in HANDLED}
    for name, result in printed.items():
        assert result.stderr == "", (name, result.stderr)
        if name in ("SessionStart", "SubagentStart"):
            assert json.loads(result.stdout)["hookSpecificOutput"]["hookEventName"] == name
        else:
            assert result.stdout == "", name
    for source in ("startup", "resume", "clear", "compact"):
        assert _context(hook(_event("SessionStart", source=source)))
    assert _ends(read, "cc-1") == [{"summary": "Asked:\n- Hello"}]


# -- a transcript over nine days, under a frozen clock ----------------------------------------

SERVERS = ("github_enterprise", "linear", "sentry_monitoring", "postgres_db", "playwright",
           "figma_design", "slack", "notion_workspace", "stripe_billing", "vercel", "docker",
           "jira_cloud", "google_drive", "context7", "puppeteer", "aws_docs", "filesystem",
           "memory_bank", "brave_search", "sequential_thinking")


def _uses() -> list[tuple[float, str]]:
    """40 tool uses over nine days: (days after the start, tool name)."""
    uses: list[tuple[float, str]] = []
    for index in range(40):
        day = index * 9 / 40
        server = SERVERS[(index * 7) % len(SERVERS)] if index % 5 else None
        name = (f"mcp__{server}_connector__call_{index % 3}" if server is not None
                else ("Read", "Edit", "Bash", "custom-lint")[index % 4])
        uses.append((day, name))
    return uses


def _expected_ranking(uses: list[tuple[float, str]], now: float) -> list[str]:
    """The SPEC's 7-day formula, computed here from the uses themselves."""
    window: dict[str, list[float]] = {}
    lifetime: dict[str, int] = {}
    for day, name in uses:
        server = mcp_server(name)
        entry = server if server is not None else name
        if tool_registration(name)["tool_type"] == "builtin":
            continue
        lifetime[entry] = lifetime.get(entry, 0) + 1
        if now - day <= 7:
            window.setdefault(entry, []).append(day)
    max_usage = max([1, *(len(days) for days in window.values())])

    def score(entry: str) -> float:
        days = window.get(entry)
        if not days:
            return 0.0
        age = now - max(days)
        return round(0.7 * len(days) / max_usage + 0.3 * math.exp(-0.693 * age / 7), 9)
    return sorted(lifetime, key=lambda entry: (-score(entry), -lifetime[entry], entry))


def test_a_transcript_over_nine_days(db_url: str, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("CTXLEDGER_DB", "CTXLEDGER_SCOPE", "CTXLEDGER_AGENT"):
        monkeypatch.delenv(key, raising=False)
    # Tool uses are spooled (at their frozen time) and drained by background drainers or
    # by the next prompt, stop or session start.
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    runner = CliRunner()
    start = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
    transcript = tmp_path / "cc-1.jsonl"
    transcript.touch()

    def send(event: dict[str, Any], when: datetime) -> str:
        event = {**event, "transcript_path": str(transcript)}
        with freeze_time(when):
            result = runner.invoke(app, ["--db", db_url, "hook"], input=json.dumps(event))
        assert (result.exit_code, result.stderr) == (0, ""), result.output
        return result.stdout

    send(_event("SessionStart", source="startup"), start)
    uses = _uses()
    for index, (day, name) in enumerate(uses):
        when = start + timedelta(days=day)
        if index % 10 == 0:
            send(_event("UserPromptSubmit", prompt=f"step {index}"), when)
        send(_tool(name, f"toolu_{index:03d}"), when)
    end = start + timedelta(days=9)
    send(_event("SessionEnd"), end)
    summary = "Asked:\n- step 0\n- step 10\n- step 20\n- step 30"
    with freeze_time(end), Ledger.open(db_url, load_vocabulary=False) as ledger:
        scope = ledger.view("cc-1").scope
        # Enough long observations that the 6,000-character cap must trim.
        ledger.append("cc-1", [{"type": "observation.recorded",
                                "data": {"kind": ("change", "decision", "finding")[i % 3],
                                         "content": f"observation {i} " + "detail " * 40}}
                               for i in range(60)])
    second = end + timedelta(hours=2)
    output = json.loads(send(_event("SessionStart", "cc-2", source="startup"), second))
    context = output["hookSpecificOutput"]["additionalContext"]

    with Ledger.open(db_url) as ledger:
        assembly = ledger.assemble("cc-2", "session", now=second)
        assert ledger.view("cc-2").scope == scope
    assert assembly.text == context
    assert len(context) <= 6000
    assert context.startswith("[ctxledger - Session Context]\n\n## Previous Session\n"
                              + summary + "\n\n")
    report = report_of(assembly, SessionReport)
    ranked = [row.name for row in report.tools]
    now_days = (second - start) / timedelta(days=1)
    assert ranked == _expected_ranking(uses, now_days)
    # The tool section keeps its 500 characters; what it shows is a prefix of the ranking.
    tools = context.partition("## Available Tools")
    assert tools[1], "the tool section is shown"
    if tools[1]:
        section = tools[1] + tools[2]
        assert len(section) <= 500
        shown = [re.sub(r"^- (MCP: )?| \(\d+x\)$", "", line)
                 for line in section.splitlines()[1:] if line.startswith("- ")]
        assert shown == ranked[:len(shown)] and shown
        more = len(ranked) - len(shown)
        assert more > 0 and section.endswith(f"\n({more} more available)")
    # Uses older than seven days do not count toward the window.
    assert report.max_usage < 40


def test_the_plugin_runs_the_hook_on_every_handled_event() -> None:
    import tomllib

    root = Path(__file__).resolve().parent.parent / "plugin"
    manifest = json.loads((root / ".claude-plugin" / "plugin.json").read_text())
    project = tomllib.loads((root.parent / "pyproject.toml").read_text())["project"]
    assert (manifest["name"], manifest["version"]) == (project["name"], project["version"])
    config = json.loads((root / "hooks" / "hooks.json").read_text())["hooks"]
    # Every event the hook takes but ignores (PreToolUse, Notification) is left out: each
    # would cost a process per tool call for nothing.
    assert sorted(config) == sorted(set(HANDLED) - set(QUIET_EVENTS))
    for groups in config.values():
        commands = [hook for group in groups for hook in group["hooks"]]
        assert [(c["type"], c["command"]) for c in commands] == [("command", "ctxledger hook")]


HEAVY = ("sqlalchemy", "pydantic", "typer", "click", "rich", "tiktoken", "numpy", "alembic",
         "ctxledger._ledger", "ctxledger.store.log", "ctxledger.store.catalog",
         "ctxledger.projections", "ctxledger.assembler", "ctxledger._hook._handle",
         "ctxledger._hook._transcript", "dataclasses", "inspect", "uuid")


def test_a_tool_use_imports_only_the_standard_library(tmp_path: Path) -> None:
    """Import sets, not timings: a tool use spools, in a fresh process that loads none of
    the heavy libraries (nor Typer, nor the store), and exits."""
    probe = """
import io, json, sys
sys.stdin = io.TextIOWrapper(io.BytesIO(sys.argv[2].encode()))
from ctxledger.cli import main
heavy = json.loads(sys.argv[3])
sys.argv = ["ctxledger", "--db", sys.argv[1], "hook"]
main()
print(json.dumps(sorted(m for m in heavy if m in sys.modules)))
"""
    url = f"sqlite:///{tmp_path / 'imports.db'}"
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data")}
    env.pop("CTXLEDGER_DB", None)
    done = subprocess.run([sys.executable, "-c", probe, url,
                           json.dumps(_tool("mcp__srv__tool", "toolu_1")), json.dumps(HEAVY)],
                          capture_output=True, text=True, timeout=120, check=False, env=env)
    assert done.stderr == "" and json.loads(done.stdout.splitlines()[-1]) == []
    # It did spool the tool use (the drainer it started may have claimed it already).
    folder = tmp_path / "data" / "ctxledger" / "spool"
    deadline = time.monotonic() + 60
    while any(folder.glob("*.events")) or any(folder.glob("*.batch")):
        assert time.monotonic() < deadline, "the background drainer did not drain"
        time.sleep(0.1)
    with Ledger.open(url, load_vocabulary=False) as ledger:
        assert _types(ledger, "cc-1") == ["session.started", "tool.used"]


def test_the_typer_route_runs_the_same_hook(db_url: str, tmp_path: Path) -> None:
    """The Typer app's ``hook`` command (what ``--help`` and callers of the app reach), in
    a process of its own: the same ``run_hook``, every event in that process."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("CTXLEDGER_DB", "CTXLEDGER_SCOPE", "CTXLEDGER_AGENT")}
    env["XDG_DATA_HOME"] = str(tmp_path / "data")
    command = [sys.executable, "-c", "from ctxledger.cli import app; app()",
               "--db", db_url, "hook"]
    done = subprocess.run(command, input=json.dumps(_event("SessionStart")),
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert (done.returncode, done.stderr) == (0, ""), done
    context = json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"]
    assert context.startswith("[ctxledger] First session detected.")
    bad = subprocess.run(command, input="{", capture_output=True, text=True, env=env,
                         timeout=120, check=False)
    assert (bad.returncode, bad.stdout) == (0, "")
    assert bad.stderr.startswith("ctxledger hook: the event is not JSON")


# -- the spool ---------------------------------------------------------------------------------

def _line(call: str, at: datetime, session: str = "cc-1") -> bytes:
    event = HookEvent("PostToolUse", session, PROJECT, _tool("mcp__srv__tool", call, session))
    return tool_use_line(event, None, at, {})


def _legacy_line(call: str, at: datetime, session: str = "cc-1") -> dict[str, Any]:
    """A line of the spool as earlier versions wrote it (format 1: the derived event)."""
    event = HookEvent("PostToolUse", session, PROJECT, _tool("mcp__srv__tool", call, session))
    use, tool = tool_use(event)
    return {"v": 1, "at": at.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), "session": session,
            "scope": "proj", "agent": None, "event": use, "tool": tool}


def _append_legacy(spool: Spool, line: dict[str, Any] | bytes) -> None:
    data = line if isinstance(line, bytes) else (
        json.dumps(line, separators=(",", ":"), sort_keys=True) + "\n").encode("ascii")
    spool.folder.mkdir(parents=True, exist_ok=True)
    with spool.legacy_path.open("ab") as file:
        file.write(data)


def _calls(ledger: Ledger, session: str = "cc-1") -> list[str]:
    return [str(e.data["call_id"]) for e in ledger.events(session) if e.type == "tool.used"]


def _drain_in_process(url: str, env: dict[str, str]) -> tuple[int, list[str]]:
    lines: list[str] = []
    return drain_spool(url, environ=env, report=lines.append), lines


def test_a_spooled_tool_use_reaches_the_log_once_at_its_time(
        db_url: str, tmp_path: Path, read: Ledger) -> None:
    env = {"XDG_DATA_HOME": str(tmp_path / "data")}
    spool = Spool.of(db_url, env)
    seen = datetime(2025, 3, 1, 9, 30, 0, 123456, tzinfo=UTC)
    for call in ("toolu_1", "toolu_2"):
        append(spool, _line(call, seen))
    # A drainer dies after the rename: the batch is drained by the next one.
    batch = claim(spool)
    assert batch is not None and spool.batches() == [batch] and not spool.path.exists()
    append(spool, _line("toolu_3", seen))
    kept = batch.read_bytes()
    assert _drain_in_process(db_url, env) == (3, [])
    assert _calls(read) == ["toolu_1", "toolu_2", "toolu_3"]
    assert {e.recorded_at for e in read.events("cc-1")} == {seen}
    # A drainer dies after appending, before deleting its batch: drained again, written once.
    batch.write_bytes(kept)
    assert _drain_in_process(db_url, env) == (2, [])
    assert _calls(read) == ["toolu_1", "toolu_2", "toolu_3"]
    assert spool.batches() == [] and not spool.path.exists()
    assert _drain_in_process(db_url, env) == (0, [])


def test_a_refused_line_is_kept_aside_and_blocks_nothing(
        db_url: str, tmp_path: Path, read: Ledger) -> None:
    env = {"XDG_DATA_HOME": str(tmp_path / "data")}
    spool = Spool.of(db_url, env)
    at = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
    bad_tool = _legacy_line("toolu_2", at)
    bad_tool["event"]["data"]["ok"] = "maybe"  # the catalog refuses it
    # An earlier version's spool (format 1), left on disk by an upgrade, goes first.
    _append_legacy(spool, _legacy_line("toolu_1", at))
    _append_legacy(spool, bad_tool)
    _append_legacy(spool, b"{torn\n")
    append(spool, _line("toolu_3", at))
    # A format-2 line whose event the hook would refuse: refused with the hook's words.
    no_tool = {**_tool("Read", "toolu_4"), "tool_name": ""}
    append(spool, spool_line(json.dumps(no_tool).encode(), "2025-03-01T09:00:00.000000Z",
                             None, None, PROJECT, None))
    taken, reported = _drain_in_process(db_url, env)
    assert taken == 5 and len(reported) == 3
    assert all(line.startswith("spooled line ") and "rejected" in line for line in reported)
    assert _calls(read) == ["toolu_1", "toolu_3"]
    rejected = [json.loads(line) for line in spool.rejected.read_text().splitlines()]
    assert [json.loads(r["line"])["event"]["data"]["call_id"] for r in rejected[:1]] == [
        "toolu_2"]
    assert rejected[1]["line"] == "{torn" and "not JSON" in rejected[1]["error"]
    assert rejected[2]["error"] == "PostToolUse has no tool_name"
    assert spool.batches() == []


def test_an_earlier_versions_batches_drain_in_order_with_the_new_ones(
        db_url: str, tmp_path: Path, read: Ledger) -> None:
    """A batch an earlier version's drainer left (``.batch``, format 1), its spool
    (``.jsonl``) and the new spool (``.events``): numbered on from the old batch, drained
    in that order, each event once."""
    env = {"XDG_DATA_HOME": str(tmp_path / "data")}
    spool = Spool.of(db_url, env)
    at = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
    spool.folder.mkdir(parents=True)
    (spool.folder / f"{spool.key}.3.batch").write_text(
        json.dumps(_legacy_line("toolu_1", at)) + "\n")
    _append_legacy(spool, _legacy_line("toolu_2", at))
    append(spool, _line("toolu_3", at))
    claimed = claim(spool)
    assert claimed is not None and claimed.name == f"{spool.key}.5.events"
    assert [path.name for path in spool.batches()] == [
        f"{spool.key}.3.batch", f"{spool.key}.4.batch", f"{spool.key}.5.events"]
    assert _drain_in_process(db_url, env) == (3, [])
    assert _calls(read) == ["toolu_1", "toolu_2", "toolu_3"]
    assert spool.batches() == [] and not spool.path.exists()
    assert not spool.legacy_path.exists()


def test_two_drainers_at_once_write_each_event_once(hook: Run, db_url: str,
                                                    tmp_path: Path, read: Ledger) -> None:
    env = {"XDG_DATA_HOME": str(tmp_path / "data")}
    spool = Spool.of(db_url, env)
    at = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
    for index in range(30):
        append(spool, _line(f"toolu_{index:02d}", at))
    assert SCRIPT is not None
    drainers = [subprocess.Popen([SCRIPT, "--db", db_url, "hook", "--drain"],
                                 env={**os.environ, **env}, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                for _ in range(2)]
    outputs = [drainer.communicate(timeout=120) for drainer in drainers]
    assert [drainer.returncode for drainer in drainers] == [0, 0]
    assert outputs == [(b"", b"")] * 2
    assert _calls(read) == [f"toolu_{index:02d}" for index in range(30)]
    assert spool.batches() == [] and not spool.path.exists()


def test_concurrent_hooks_lose_no_tool_use(hook: Run, db_url: str, tmp_path: Path,
                                           read: Ledger) -> None:
    assert SCRIPT is not None
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data")}
    env.pop("CTXLEDGER_SCOPE", None)
    processes = [subprocess.Popen([SCRIPT, "--db", db_url, "hook"], env=env,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE)
                 for _ in range(20)]
    for index, process in enumerate(processes):
        assert process.stdin is not None
        process.stdin.write(json.dumps(_tool("Read", f"toolu_{index:02d}")).encode())
        process.stdin.close()
    for process in processes:
        assert process.wait(timeout=120) == 0
        assert process.stdout is not None and process.stderr is not None
        assert (process.stdout.read(), process.stderr.read()) == (b"", b"")
        process.stdout.close()
        process.stderr.close()
    # The next event that opens the ledger drains first: its view holds all twenty.
    _quiet(hook(_event("UserPromptSubmit", prompt="and now?")))
    assert sorted(_calls(read)) == [f"toolu_{index:02d}" for index in range(20)]
    assert _types(read, "cc-1")[-1] == "message.appended"
    assert _spool_files(tmp_path) == []
