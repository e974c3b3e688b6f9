"""Claude Code's transcript: read from where the last read stopped, as chat messages, and
the summary a session ends with.

Claude Code appends the session to a JSONL file (the events' ``transcript_path``), one
object per line, each with ``type``, ``uuid``, ``parentUuid``, ``timestamp``,
``sessionId``...: ``user`` lines (``message.content`` a prompt's text, or blocks: ``text``,
and ``tool_result`` answering a call), ``assistant`` lines (blocks: ``text``, ``tool_use``,
``thinking``; a reply split over several lines), and others (``summary``, ``system``,
``file-history-snapshot``...), which hold no message. Lines of a sub-agent
(``isSidechain``) and Claude Code's own notes (``isMeta``) are not the session's
conversation.

A read starts at the byte offset the previous one reached (``TranscriptMark``, kept in
the metadata of the messages it recorded, so it survives processes and a replay needs no
file), takes whole lines only (a partial last line waits for the next read), at most
``$CTXLEDGER_MAX_INPUT_BYTES`` at a time and at most that much in one read (a longer
line is skipped, with one line saying so), and starts again from 0 when the file is
shorter than the mark or its first line changed (rotated, rewritten). Each line's
messages get ids derived from its ``uuid``, so a line read twice is written once.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from ctxledger._ids import derived_event_id
from ctxledger.io._bounded import BoundedInputError, InputLimits, loads_bounded

EXTRA = "extra"
"""The event metadata key that holds an app's own keys (``store.validate``)."""
MARK_KEY = "transcript"
"""The ``extra`` metadata key of a recorded message that came from the transcript."""
PROMPT_KEY = "hook"
"""The ``extra`` metadata key of a prompt recorded from a ``UserPromptSubmit`` event's
payload."""
TOOL_RESULT_CHARS = 2000
"""A tool result is recorded up to this many characters (a file read can be megabytes)."""
TEXT_CHARS = 100_000
"""A prompt or reply is recorded up to this many characters (an event holds 1 MiB)."""
EDIT_TOOLS = ("Edit", "MultiEdit", "Write", "NotebookEdit")
"""Claude Code's tools that change a file: their ``file_path`` (``notebook_path``) is a
file the session touched."""
_HEAD_BYTES = 4096
_SKIP_CHUNK = 1 << 20
_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_FORBIDDEN = re.compile("[\x00\ud800-\udfff]")


@dataclass(frozen=True, slots=True)
class TranscriptMark:
    """Where the last read of a transcript stopped: its ``path``, the byte ``offset`` of
    the first line not read, and a hash of the file's first bytes (``head``), by which a
    rotated file is told from a grown one."""

    path: str
    offset: int
    head: str

    def as_metadata(self) -> dict[str, Any]:
        """The mark as a recorded message's metadata holds it."""
        return {EXTRA: {MARK_KEY: {"path": self.path, "offset": self.offset,
                                   "head": self.head}}}

    @classmethod
    def of(cls, metadata: Mapping[str, Any]) -> TranscriptMark | None:
        """The mark in a recorded message's metadata, if it holds one."""
        extra = metadata.get(EXTRA)
        found = extra.get(MARK_KEY) if isinstance(extra, Mapping) else None
        if not isinstance(found, Mapping):
            return None
        path, offset, head = found.get("path"), found.get("offset"), found.get("head")
        if not (isinstance(path, str) and isinstance(offset, int) and isinstance(head, str)):
            return None
        return cls(path, offset, head)


@dataclass(slots=True)
class TranscriptRead:
    """What one read found: each line's messages with the offset after that line, where
    the read stopped, and lines for stderr (a line skipped, a line not JSON)."""

    mark: TranscriptMark
    lines: list[tuple[list[dict[str, Any]], int]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def read_transcript(path: str, since: TranscriptMark | None,
                    limits: InputLimits | None = None) -> TranscriptRead:
    """The messages of the lines of ``path`` after ``since`` (its mark when it names
    this file; else from the start): whole lines, read ``limits.max_bytes`` at a time,
    until the end of the file or that many bytes taken. Raises ``OSError`` when the file
    cannot be read."""
    limit = (limits or InputLimits.from_env()).max_bytes
    with open(path, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        first = file.read(_HEAD_BYTES)
        # The first line (or what of it fits): it never changes while the file grows.
        head = hashlib.sha256(first[:first.find(b"\n") + 1 or len(first)]).hexdigest()[:16]
        offset = 0
        if since is not None and since.path == path and since.head == head \
                and since.offset <= size:
            offset = since.offset
        found = TranscriptRead(TranscriptMark(path, offset, head))
        position, taken = offset, 0
        while taken < limit:  # bytes of whole lines taken; a skipped line is not held
            file.seek(position)
            data = file.read(limit)
            end = data.rfind(b"\n")
            if end < 0:
                if len(data) < limit:
                    break  # a partial last line: Claude Code is still writing it
                skipped = _skip_line(file, position + len(data))
                found.notes.append(f"{path}: the line at byte {position} is larger than"
                                   f" the input limit; skipped")
                position = skipped
                continue
            taken += end + 1
            for raw in data[:end + 1].split(b"\n")[:-1]:
                position += len(raw) + 1
                found.lines.append((_line_messages(raw, found.notes, path), position))
        found.mark = TranscriptMark(path, position, head)
        return found


def _skip_line(file: BinaryIO, position: int) -> int:
    """The offset after the next newline at or past ``position`` (end of file: there)."""
    file.seek(position)
    while True:
        chunk = file.read(_SKIP_CHUNK)
        if not chunk:
            return position
        newline = chunk.find(b"\n")
        if newline >= 0:
            return position + newline + 1
        position += len(chunk)


def _line_messages(raw: bytes, notes: list[str], path: str) -> list[dict[str, Any]]:
    """The canonical chat messages (``store.chat``) of one transcript line, each with the
    id its ``uuid`` derives (set as ``message_id``; the caller derives the event id)."""
    if not raw.strip():
        return []
    try:
        line = loads_bounded(raw, path, check_numbers=False)
    except (BoundedInputError, ValueError) as exc:
        if len(notes) < 3:
            notes.append(f"{path}: a line is not JSON ({_one_line(str(exc))}); skipped")
        return []
    if not isinstance(line, dict) or line.get("isSidechain") is True \
            or line.get("isMeta") is True:
        return []
    kind, message = line.get("type"), line.get("message")
    if kind not in ("user", "assistant") or not isinstance(message, dict):
        return []
    uuid = line.get("uuid")
    key = uuid if isinstance(uuid, str) and uuid else hashlib.sha256(raw).hexdigest()
    found = (_user_messages(message.get("content")) if kind == "user"
             else _assistant_messages(message.get("content")))
    for number, each in enumerate(found):
        each["message_id"] = key if number == 0 else f"{key}#{number}"
    return found


def _user_messages(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        text = _clean(content, TEXT_CHARS)
        return [{"role": "user", "content": text}] if text.strip() else []
    if not isinstance(content, list):
        return []
    texts: list[str] = []
    results: list[dict[str, Any]] = []
    for block in content:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif block.get("type") == "tool_result":
            call = block.get("tool_use_id")
            if not isinstance(call, str) or not 0 < len(call) <= 200:
                continue
            result: dict[str, Any] = {"role": "tool", "tool_call_id": _clean(call, 200),
                                      "content": _clean(_block_text(block.get("content")),
                                                        TOOL_RESULT_CHARS)}
            if block.get("is_error") is True:
                result["is_error"] = True
            results.append(result)
    text = _clean("\n".join(texts), TEXT_CHARS)
    return ([{"role": "user", "content": text}] if text.strip() else []) + results


def _assistant_messages(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    if not isinstance(content, list):
        return []
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in content:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif block.get("type") == "tool_use":
            call, name = block.get("id"), block.get("name")
            if not (isinstance(call, str) and 0 < len(call) <= 200 and isinstance(name, str)
                    and _TOOL_NAME.fullmatch(name)):
                continue
            arguments = block.get("input")
            calls.append({"id": _clean(call, 200), "type": "function", "function": {
                "name": name, "arguments": _clean(json.dumps(
                    arguments if isinstance(arguments, dict) else {}, sort_keys=True,
                    ensure_ascii=False), TEXT_CHARS)}})
    text = _clean("\n".join(texts), TEXT_CHARS)
    if not text.strip() and not calls:
        return []
    message: dict[str, Any] = {"role": "assistant", "content": text if text.strip() else None}
    if calls:
        message["tool_calls"] = calls
    return [message]


def _block_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(block["text"] for block in content if isinstance(block, dict)
                         and isinstance(block.get("text"), str))
    return ""


def _clean(text: str, limit: int) -> str:
    """``text`` storable on every backend (no NUL, no lone surrogate) and at most
    ``limit`` characters."""
    text = _FORBIDDEN.sub("\ufffd", text)
    return text if len(text) <= limit else text[:limit - 1] + "\u2026"


def _one_line(text: str) -> str:
    return " ".join(text.split())[:200]


def message_events(session: str, read: TranscriptRead, skip_prompt: Callable[[str], bool],
                   stored: Callable[[list[str]], set[str]]) -> list[dict[str, Any]]:
    """The ``message.appended`` events of ``read`` for ``session``: ids derived from each
    line's ``uuid``; the last carries the read's mark, so the next read starts there. A
    user prompt ``skip_prompt`` takes (one recorded from its hook event already) and the
    messages whose ids ``stored`` says the log holds (a file read again from its start)
    are left out."""
    events: list[dict[str, Any]] = []
    for messages, _ in read.lines:
        for message in messages:
            if message["role"] == "user" and skip_prompt(str(message["content"])):
                continue
            events.append({"type": "message.appended", "data": message,
                           "id": derived_event_id(session, MARK_KEY,
                                                  str(message["message_id"]))})
    known = stored([event["id"] for event in events]) if events else set()
    events = [event for event in events if event["id"] not in known]
    if events:
        events[-1]["metadata"] = read.mark.as_metadata()
    return events


def hook_prompt(metadata: Mapping[str, Any]) -> bool:
    """The recorded message is a prompt taken from its ``UserPromptSubmit`` event."""
    extra = metadata.get(EXTRA)
    return isinstance(extra, Mapping) and PROMPT_KEY in extra


PROMPT_METADATA = {EXTRA: {PROMPT_KEY: "UserPromptSubmit"}}
"""The metadata of a prompt recorded from its ``UserPromptSubmit`` event."""


# -- the summary ------------------------------------------------------------------------


def session_summary(messages: Iterable[Mapping[str, Any]], budget: int,
                    cwd: str | None = None) -> str | None:
    """The summary of a session from its recorded chat messages (``data`` of each
    ``message.appended``, in order): the user's prompts, the files its edits touched
    (relative to ``cwd`` when under it), and its last reply, within ``budget``
    characters. The last reply and the files take at most a third and a sixth of it;
    the prompts take what is left, the newest first kept (and the first, which says
    what the session set out to do). None when the session holds no prompt and no
    reply."""
    prompts: list[str] = []
    files: list[str] = []
    last: str | None = None
    for message in messages:
        role, content = message.get("role"), message.get("content")
        if role == "user" and isinstance(content, str) and content.strip():
            prompts.append(" ".join(content.split()))
        elif role == "assistant":
            if isinstance(content, str) and content.strip():
                last = " ".join(content.split())
            for call in message.get("tool_calls") or ():
                path = _edited_file(call)
                if path is not None:
                    shown = _relative(path, cwd)
                    if shown not in files:
                        files.append(shown)
    if not prompts and last is None:
        return None
    reply = f"Last reply: {_cut(last, max(40, budget // 3) - 12)}" if last else ""
    touched = _file_line(files, max(40, budget // 6)) if files else ""
    room = budget - len(reply) - len(touched) - 2
    asked = _prompt_lines(prompts, room)
    text = "\n".join(part for part in (asked, touched, reply) if part)
    return text[:budget]


def _edited_file(call: Any) -> str | None:
    if not isinstance(call, Mapping):
        return None
    function = call.get("function")
    if not isinstance(function, Mapping) or function.get("name") not in EDIT_TOOLS:
        return None
    try:
        arguments = json.loads(str(function.get("arguments")))
    except ValueError:
        return None
    if not isinstance(arguments, dict):
        return None
    path = arguments.get("file_path", arguments.get("notebook_path"))
    return path if isinstance(path, str) and path.strip() else None


def _relative(path: str, cwd: str | None) -> str:
    if cwd:
        prefix = cwd.rstrip("/") + "/"
        if path.startswith(prefix):
            return path[len(prefix):]
    return path


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:max(1, limit - 1)] + "\u2026"


def _file_line(files: Sequence[str], limit: int) -> str:
    shown: list[str] = []
    for number, name in enumerate(files):
        rest = len(files) - number - 1
        more = f" (+{rest} more)" if rest else ""
        candidate = ", ".join([*shown, name])
        if len("Files changed: " + candidate + more) > limit and shown:
            return f"Files changed: {', '.join(shown)} (+{len(files) - len(shown)} more)"
        shown.append(name)
    return "Files changed: " + ", ".join(shown)


def _prompt_lines(prompts: Sequence[str], room: int) -> str:
    """``Asked:`` and a line per prompt within ``room`` characters: each prompt cut to a
    line's share, the first and the newest kept, a count of those left out between."""
    if not prompts or room < 20:
        return ""
    each = max(40, min(300, room // min(len(prompts), 8)))
    lines = [f"- {_cut(prompt, each)}" for prompt in prompts]
    head = "Asked:"
    kept_first = lines[0]
    newest: list[str] = []
    used = len(head) + 1 + len(kept_first) + 1
    for line in reversed(lines[1:]):
        if used + len(line) + 1 > room - 30:
            break
        newest.insert(0, line)
        used += len(line) + 1
    if used > room:
        return f"{head}\n{_cut(kept_first, room - len(head) - 1)}"
    left_out = len(lines) - 1 - len(newest)
    gap = [f"- ({left_out} more prompt{'s' if left_out != 1 else ''})"] if left_out else []
    return "\n".join([head, kept_first, *gap, *newest])
