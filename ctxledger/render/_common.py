"""Presentation for the CLI: JSON-ready records for scripts, rich tables for people.

Nothing here touches a database; every function turns plain data into output.
Mappings are always walked in sorted key order so output never depends on dict order.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC
from typing import TYPE_CHECKING, Any

from ctxledger.store.character_card import book_entries
from ctxledger.store.clock import format_utc
from ctxledger.store.printable import escape_unprintable
from ctxledger.store.streams import DEFAULT_SCOPE

if TYPE_CHECKING:
    # rich and the database stack load only when a table is drawn: a JSON answer (the
    # default of every read) must not pay for them at start-up.
    from rich.console import Console, ConsoleOptions, RenderableType
    from rich.table import Table
    from rich.text import Text

    from ctxledger.projections.runner import ProjectionStatus
    from ctxledger.store.records import AppendResult, RecordedEvent
    from ctxledger.store.verify import VerifyReport

SUMMARY_WIDTH = 120
"""Longest event summary; the table cuts it further to fit, the JSONL output has it all."""


# -- JSON -----------------------------------------------------------------------------------


def dumps(value: Any, *, indent: int | None = None) -> str:
    """JSON with sorted keys and real UTF-8, one line unless ``indent`` is given."""
    separators = (",", ": ") if indent is not None else (",", ":")
    return json.dumps(value, sort_keys=True, ensure_ascii=False, indent=indent,
                      separators=separators)


def event_record(event: RecordedEvent) -> dict[str, Any]:
    """Every stored field of an event as JSON-ready data."""
    return {
        "position": event.position,
        "stream_id": event.stream_id,
        "stream_version": event.stream_version,
        "event_id": event.event_id,
        "type": event.type,
        "schema_version": event.schema_version,
        "data": event.data,
        "metadata": event.metadata,
        # The fixed-width form the hash chain covers (and ``state`` prints).
        "recorded_at": format_utc(event.recorded_at),
        "prev_hash": event.prev_hash,
        "hash": event.hash,
    }


def append_record(result: AppendResult) -> dict[str, Any]:
    """What ``append`` prints: the positions written (or found again) and the version;
    ``duplicate`` and ``warnings`` (lorebook entries that cannot work as written) when
    there are any."""
    record: dict[str, Any] = {"positions": list(result.positions),
                              "stream_version": result.stream_version}
    if result.duplicate:
        record["duplicate"] = True
    if result.warnings:
        record["warnings"] = list(result.warnings)
    return record


def verify_record(report: VerifyReport) -> dict[str, Any]:
    """A verification report as JSON-ready data."""
    return {"ok": report.ok, "events": report.events, "streams": report.streams,
            "triggers_ok": report.triggers_ok, "seals": report.seals,
            "sealed_position": report.sealed_position,
            **({"anchor": report.anchor} if report.anchor is not None else {}),
            **({"deep": report.deep} if report.deep is not None else {}),
            **({"witness": report.witness, "witnessed_position": report.witnessed_position}
               if report.witness is not None else {}),
            "problems": list(report.problems)}


def status_record(status: ProjectionStatus) -> dict[str, Any]:
    """One projection's version and checkpoint as JSON-ready data."""
    return {"name": status.name, "version": status.version,
            "stored_version": status.stored_version, "position": status.position,
            "head": status.head}


# -- text -----------------------------------------------------------------------------------


def _plain(text: str | None) -> Text | None:
    """Titles carry user data (stream ids), so they are never parsed as markup."""
    from rich.text import Text

    return None if text is None else Text(text)


def clip(text: str, width: int = SUMMARY_WIDTH) -> str:
    """``text`` on one line, cut to ``width`` characters with an ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _short(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str | int | float) for v in value):
        return ", ".join(str(v) for v in value)
    return dumps(value)


def _message(data: Mapping[str, Any]) -> str:
    """``user: hi [image]``, ``assistant -> get_weather({"city":"Paris"})``,
    ``tool[call_1]: 12C``: the content's text with its media named, then the calls."""
    who = data["role"]
    if data.get("tool_call_id") is not None:
        who += f"[{data['tool_call_id']}]" + (" error" if data.get("is_error") else "")
    who += f" ({data['name']})" if data.get("name") else ""
    ident = f"[{data['message_id']}] " if data.get("message_id") else ""
    text = _content_line(data.get("content"))
    calls = ", ".join(f"{call['function']['name']}({call['function']['arguments']})"
                      for call in data.get("tool_calls") or ())
    line = f"{ident}{who}" + (f": {text}" if text or not calls else "")
    return line + (f" -> {calls}" if calls else "")


def _content_line(content: Any) -> str:
    """Stored content as one line: the string, or the parts with media as ``[image]`` or
    ``[file name]``."""
    if content is None or isinstance(content, str):
        return content or ""
    shown = []
    for part in content:
        if part.get("type") == "text":
            shown.append(str(part["text"]))
        else:
            label = part.get("filename")
            shown.append(f"[{part.get('type')}{f' {label}' if label else ''}]")
    return " ".join(shown)


def _tool_used(data: Mapping[str, Any]) -> str:
    ok = data.get("ok")
    return f"{data['tool_name']}" + ("" if ok is None else " ok" if ok else " FAILED")


def _item_put(data: Mapping[str, Any]) -> str:
    flags = [name for name in ("pov", "in_scene", "active", "evolving", "critical")
             if data.get(name)]
    chapter = [f"ch.{data['chapter']}"] if data.get("chapter") is not None else []
    details = " ".join(chapter + flags)
    return f"{data['kind']} {data['item_id']}" + (f" ({details})" if details else "") + \
        f": {data['content']}"


def _entity_put(data: Mapping[str, Any]) -> str:
    critical = sum(1 for fact in data.get("facts", []) if fact.get("critical"))
    tags = f" [{', '.join(data['tags'])}]" if data.get("tags") else ""
    return (f"{data['entity_id']} \"{data['name']}\": {len(data.get('facts', []))} facts"
            f" ({critical} critical){tags}")


def _card_set(data: Mapping[str, Any]) -> str:
    """``Name: fields set`` for a merge; ``Name: whole card (spec), N lorebook entries``
    for a card file."""
    name = f"{data['name']}: " if data.get("name") else ""
    if data.get("replace") is not True:
        return name + ", ".join(k for k in sorted(data) if k != "name")
    entries = len(book_entries(data.get("character_book")))
    return (f"{name}whole card ({data.get('spec') or 'V1'})"
            + (f", {entries} lorebook entries" if entries else ""))


_SUMMARIES: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "session.started": lambda d: f"scope {d.get('scope', DEFAULT_SCOPE)}"
                                 + (f", agent {d['agent']}" if d.get("agent") else "")
                                 + (f": {d['title']}" if d.get("title") else ""),
    "session.ended": lambda d: f"summary: {d['summary']}" if d.get("summary") else "",
    "message.appended": _message,
    "message.retracted": lambda d: f"retract {d['message_id']}",
    "history.summarized": lambda d: f"through {d['through_message_id']}: {d['summary']}",
    "tool.used": _tool_used,
    "setting.changed": lambda d: f"{d['key']} = {_short(d['value'])}",
    "card.set": _card_set,
    "chapter.moved": lambda d: f"chapter {d['chapter']}"
                               + (f", scene {d['scene']}" if d.get("scene") else ""),
    "item.put": _item_put,
    "item.removed": lambda d: f"remove {d['item_id']}",
    "observation.recorded": lambda d: f"{d['kind']}: {d['content']}",
    "document.put": lambda d: f"{d['doc_id']} ({d['kind']})",
    "tool.registered": lambda d: f"{d['name']} ({d['tool_type']}"
                                 + (f", server {d['server_name']}" if d.get("server_name")
                                    else "") + ")",
    "tool.removed": lambda d: f"remove {d['name']}",
    "lorebook.set": lambda d: f"{d['book_id']}: {len(book_entries(d['book']))} entries",
    "lorebook.removed": lambda d: f"remove {d['book_id']}",
    "source.registered": lambda d: f"{d['source_id']}@{d['version']} trust {d['trust']}"
                                   + (", neutral" if d.get("neutral") else "")
                                   + (", compliance" if d.get("compliance") else ""),
    "snippet.added": lambda d: f"[{d['source_id']}@{d['source_version']}] {d['text']}",
    "entity.put": _entity_put,
    "persona.set": lambda d: f"{d['agent_id']} knows {_short(d.get('knowledge_scope', []))}",
}


_TYPE_WIDTH = max(map(len, _SUMMARIES))
"""Room for every type this module describes, in a table whose widths are fixed ahead."""


def event_summary(event: RecordedEvent, width: int = SUMMARY_WIDTH) -> str:
    """A one-line human description of an event's data (unprintable characters escaped)."""
    describe = _SUMMARIES.get(event.type)
    data = event.data
    text = describe(data) if describe is not None else \
        ", ".join(f"{key}={_short(data[key])}" for key in sorted(data))
    return clip(escape_unprintable(" ".join(text.split())), width)


STREAM_CAP = 26
"""Widest stream column of an events table (on a wide console); longer ids are cut."""


@dataclass(frozen=True)
class EventsLayout:
    """Widths fixed before the first row, so tables printed a page at a time line up.

    Each is an upper bound, as long as the longest value can be: ``position`` digits of
    the log's head, ``version`` digits of the highest stream version, ``stream``
    characters of a stream id (cut to a cap)."""

    position: int
    version: int
    stream: int


class EventsTable:
    """The events, one line each: position, time, stream and version, type, summary.

    On a wide console the summary is cut to stay on one line; on a narrow one (under
    ``WIDE`` columns) the time and stream are shortened and the summary wraps. With a
    ``layout`` the columns keep its widths, and ``header=False`` leaves the header out:
    the pages of a long listing then read as one table.
    """

    WIDE = 110

    def __init__(self, events: Iterable[RecordedEvent], *, title: str | None = None,
                 layout: EventsLayout | None = None, header: bool = True) -> None:
        self.events = list(events)
        self.title = title
        self.layout = layout
        self.header = header

    def __rich_console__(self, console: Console,
                         options: ConsoleOptions) -> Iterator[RenderableType]:
        from rich import box
        from rich.table import Table
        from rich.text import Text

        wide = options.max_width >= self.WIDE
        time_format, stream_cap = ("%Y-%m-%d %H:%M", STREAM_CAP) if wide else (
            "%m-%d %H:%M", 18)
        rows = [(str(e.position), e.recorded_at.astimezone(UTC).strftime(time_format),
                 escape_unprintable(e.stream_id), str(e.stream_version), e.type,
                 event_summary(e))
                for e in self.events]
        table = Table(title=_plain(self.title), title_justify="left", box=box.SIMPLE_HEAD,
                      pad_edge=False, show_edge=False, expand=True, show_header=self.header)
        headers = ("pos", "recorded (UTC)" if wide else "at (UTC)", "stream", "v", "type")
        # Fixed columns keep their width (stream ids up to a cap, then cut); the summary
        # takes what is left.
        widths = [max([len(h)] + [len(row[i]) for row in rows]) for i, h in enumerate(headers)]
        if self.layout is not None:
            widths[0] = max(widths[0], self.layout.position)
            widths[2] = max(len(headers[2]), self.layout.stream)
            widths[3] = max(widths[3], self.layout.version)
            widths[4] = max(widths[4], _TYPE_WIDTH)
        widths[2] = min(widths[2], stream_cap)
        for header, width in zip(headers, widths, strict=True):
            table.add_column(header, no_wrap=True, overflow="ellipsis", width=width,
                             justify="right" if header in ("pos", "v") else "left",
                             style="cyan" if header == "type" else
                             "dim" if header == "pos" else "")
        table.add_column("data", no_wrap=wide, overflow="ellipsis" if wide else "fold",
                         ratio=1)
        for row in rows:
            table.add_row(*(Text(cell) for cell in row))
        yield table


def events_table(events: Iterable[RecordedEvent], *, title: str | None = None,
                 layout: EventsLayout | None = None, header: bool = True) -> EventsTable:
    """The events as a table that fits the console (see ``EventsTable``)."""
    return EventsTable(events, title=title, layout=layout, header=header)


def flatten(value: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """Nested mappings as ``(dotted.key, leaf)`` pairs in sorted key order."""
    pairs: list[tuple[str, Any]] = []
    for key in sorted(value):
        item = value[key]
        name = f"{prefix}{key}"
        if isinstance(item, Mapping) and item:
            pairs.extend(flatten(item, f"{name}."))
        else:
            pairs.append((name, item))
    return pairs


def _records_table(records: Sequence[Mapping[str, Any]]) -> Table:
    """A list of objects (top tools, documents...) as a nested table, one row each."""
    from rich import box
    from rich.table import Table

    columns = sorted({key for record in records for key in record})
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for column in columns:
        table.add_column(column, overflow="fold")
    for record in records:
        table.add_row(*(_cell(record.get(column)) for column in columns))
    return table


def _cell(value: Any) -> Text:
    from rich.text import Text

    # Text, not str: user content like "[m01]" must not be read as rich markup.
    if value is None or value == [] or value == {}:
        return Text("–")
    return Text(clip(value if isinstance(value, str) else _short(value), 100))


def _value(value: Any) -> RenderableType:
    if isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
        return _records_table(value)
    return _cell(value)


def state_table(state: Mapping[str, Any], *, title: str | None = None) -> Table:
    """A session's state as a key/value table: nested keys dotted, lists of objects nested."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=_plain(title), title_justify="left", show_header=False)
    table.add_column("key", style="bold", no_wrap=True)
    table.add_column("value", overflow="fold")
    for key, value in flatten(state):
        table.add_row(Text(key), _value(value))
    return table


def verify_view(report: VerifyReport, *, title: str | None = "verify") -> RenderableType:
    """The verification result as a summary table, then every problem."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table(show_header=False, title=title, title_justify="left")
    table.add_column("check", style="bold")
    table.add_column("result")
    table.add_row("events checked", str(report.events))
    table.add_row("streams", str(report.streams))
    table.add_row("hash chains", "ok" if _chain_problem_count(report) == 0 else "BROKEN")
    table.add_row("immutability triggers", "ok" if report.triggers_ok else "MISSING")
    table.add_row("seals", f"{report.seals} (up to position {report.sealed_position})"
                  if report.seals else "none yet: run `ctxledger seal`")
    if report.anchor is not None:
        table.add_row("anchor", report.anchor)
    if report.deep is not None:
        table.add_row("projections = rebuild", report.deep)
    if report.witness is not None:
        table.add_row("witness", f"{report.witness} (up to position"
                                 f" {report.witnessed_position})"
                      if report.witnessed_position else report.witness)
    table.add_row("result", Text("ok", style="green") if report.ok
                  else Text(f"{len(report.problems)} problem(s)", style="bold red"))
    if report.ok:
        return table
    problems = Text("\n".join(f"- {p}" for p in report.problems), style="red")
    return Group(table, problems)


def _chain_problem_count(report: VerifyReport) -> int:
    # verify reports missing triggers as exactly one problem; the rest are chain breaks.
    return len(report.problems) - (0 if report.triggers_ok else 1)


def status_table(statuses: Sequence[ProjectionStatus], *, title: str | None = None) -> Table:
    """Every projection's version and checkpoint against the head."""
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    table.add_column("projection")
    table.add_column("version", justify="right")
    table.add_column("checkpoint", justify="right")
    table.add_column("head", justify="right")
    for status in statuses:
        table.add_row(status.name, str(status.version), str(status.position), str(status.head))
    return table


def info_table(rows: Sequence[tuple[str, Any]], *, title: str | None = None) -> Table:
    """A small two-column table of labelled values."""
    from rich.table import Table

    table = Table(title=title, title_justify="left", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    for label, value in rows:
        table.add_row(label, _cell(value))
    return table
