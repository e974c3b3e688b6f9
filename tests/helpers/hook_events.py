"""Claude Code hook events as the hook tests send them (the fields Claude Code documents
for each event), a transcript that grows turn by turn as Claude Code writes it, and the
console script Claude Code runs."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

SCRIPT = shutil.which("ctxledger", path=str(Path(sys.executable).parent))
"""The ``ctxledger`` console script of this venv (Claude Code runs the hook through it)."""
PROJECT = "/work/projects/webapp"
"""The project folder (``cwd``) the events come from."""
TRANSCRIPT = Path(__file__).resolve().parent.parent / "fixtures" / "claude_code" / "session.jsonl"
"""A three-turn session in Claude Code's transcript format (JSONL), its files under
``PROJECT``."""
TRANSCRIPT_SESSION = "5d0c6a2e-1f4b-4c8e-9a51-3b7f2d9c0e11"
"""The ``sessionId`` of ``TRANSCRIPT``'s lines."""
Run = Callable[..., subprocess.CompletedProcess[str]]
"""A fixture that runs ``ctxledger hook`` with one event on stdin."""

# What each event carries besides the common fields, as Claude Code documents them.
_FIELDS: dict[str, dict[str, Any]] = {
    "SessionStart": {"source": "startup"},
    "UserPromptSubmit": {"prompt": "Hello"},
    "PreToolUse": {"tool_name": "Read", "tool_input": {"file_path": f"{PROJECT}/README.md"},
                   "tool_use_id": "toolu_pre"},
    "PostToolUse": {"tool_name": "Read", "tool_input": {"file_path": f"{PROJECT}/README.md"},
                    "tool_response": {"type": "text"}, "tool_use_id": "toolu_post"},
    "PostToolUseFailure": {"tool_name": "Bash", "tool_input": {"command": "false"},
                           "tool_use_id": "toolu_failed", "error": "exit status 1",
                           "is_interrupt": False},
    "SubagentStart": {"agent_id": "agent-1", "agent_type": "Explore"},
    "Notification": {"message": "Claude needs your permission to use Bash"},
    "Stop": {"stop_hook_active": False},
    "SubagentStop": {"stop_hook_active": False},
    "PreCompact": {"trigger": "manual", "custom_instructions": ""},
    "SessionEnd": {"reason": "prompt_input_exit"},
}


def hook_event(name: str, session: str = "cc-1", *, transcript: str | Path | None = None,
               **fields: Any) -> dict[str, Any]:
    """The hook event ``name`` of ``session`` from ``PROJECT``, as Claude Code sends it:
    ``session_id``, ``transcript_path`` (``transcript``, else a file that does not
    exist), ``cwd``, ``permission_mode``, ``hook_event_name`` and the event's documented
    fields (``fields`` replace or add to them)."""
    path = str(transcript) if transcript is not None else f"/nonexistent/{session}.jsonl"
    return {"session_id": session, "transcript_path": path, "cwd": PROJECT,
            "permission_mode": "default", "hook_event_name": name,
            **_FIELDS.get(name, {}), **fields}


class GrowingTranscript:
    """``TRANSCRIPT`` written to ``path`` turn by turn, as Claude Code appends to it."""

    def __init__(self, path: Path, source: Path = TRANSCRIPT) -> None:
        self.path = path
        self.lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
        self.written = 0
        path.write_text("", encoding="utf-8")

    def turn_starts(self) -> list[int]:
        """The index of each line that is a user's prompt."""
        starts = []
        for index, text in enumerate(self.lines):
            line = json.loads(text)
            if line.get("type") == "user" and not line.get("isMeta") \
                    and not line.get("isSidechain") \
                    and isinstance(line["message"]["content"], str):
                starts.append(index)
        return starts

    def prompt(self, turn: int) -> str:
        """The text of turn ``turn``'s prompt (0-based)."""
        line = json.loads(self.lines[self.turn_starts()[turn]])
        return str(line["message"]["content"])

    def write_through(self, end: int) -> None:
        """Append the lines up to (not including) index ``end``."""
        with self.path.open("a", encoding="utf-8") as file:
            file.writelines(self.lines[self.written:end])
        self.written = max(self.written, end)

    def write_turn(self, turn: int) -> None:
        """Append the lines through the end of turn ``turn`` (0-based)."""
        starts = self.turn_starts()
        self.write_through(starts[turn + 1] if turn + 1 < len(starts) else len(self.lines))
