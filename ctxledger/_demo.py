"""``ctxledger demo``: load the example sessions into a ledger and show what it holds:
each file's events and sessions' state, the assembly each file exists for, a replay, a
``why`` and an audit, the nightly rollup and a usage report, then ``verify``.
"""

from __future__ import annotations

import json
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from datetime import datetime
from pathlib import Path

from rich.console import Console
from rich.rule import Rule

from ctxledger import render
from ctxledger._ledger import Ledger
from ctxledger._open import open_ledger, safe_url
from ctxledger.assembler.model import Assembly
from ctxledger.assembler.profiles import profile_names
from ctxledger.io._examples import (
    EXAMPLE_ID_NAMESPACE,
    EXAMPLES_DIR,
    ExampleError,
    ExampleEvent,
    ScriptedClock,
    example_files,
    load_examples,
    read_examples,
)
from ctxledger.render._assembly import assembly_view
from ctxledger.render._usage import rollup_summary, usage_view
from ctxledger.store.clock import format_utc
from ctxledger.store.errors import LedgerError
from ctxledger.store.records import RecordedEvent
from ctxledger.store.streams import DEFAULT_SCOPE, stream_kind


def run_demo(console: Console, *, db_url: str | None = None,
             examples_dir: Path = EXAMPLES_DIR) -> None:
    """Load the examples into ``db_url`` (a temporary SQLite file by default) and print
    each file's events and the projection state of each session it holds."""
    files = example_files(examples_dir)
    examples = read_examples(files)
    if not examples:
        raise ExampleError(f"the example files in {examples_dir} hold no events")
    with ExitStack() as stack:
        kept = db_url is not None
        if db_url is None:
            folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ctxledger-")))
            db_url = f"sqlite:///{folder / 'demo.db'}"
        clock = ScriptedClock(examples[0].at)
        ledger = stack.enter_context(open_ledger(db_url, clock=clock))
        by_position = load_examples(ledger, clock, examples)
        # Read back only the examples' span of the log (the --db may hold other events).
        first, last = min(by_position), max(by_position)
        recorded = [e for e in ledger.events(after=first - 1, until=last)
                    if e.position in by_position]

        # Show the files in log order (the order their first events were appended).
        names = list(dict.fromkeys(by_position[e.position].file for e in recorded))
        console.print(Rule("ctxledger demo"))
        console.print(render.info_table([
            ("database", safe_url(db_url) + ("" if kept else "  (temporary; --db URL keeps it)")),
            ("examples", [f"{name} ({_count(examples, name)} events)" for name in names]),
            ("loaded", f"{len(recorded)} events in {len({e.stream_id for e in recorded})}"
                       f" streams, head position {ledger.head()}"),
        ]))
        for name in names:
            _print_example(console, ledger, clock, name,
                           [e for e in recorded if by_position[e.position].file == name])
        _replay_why_audit(console, ledger, by_position)
        _print_usage(console, ledger, clock, examples)
        report = ledger.verify()
        console.print(Rule("verify"))
        console.print(render.verify_view(report, title=None))
        if not report.ok:
            raise ExampleError(f"verify found {len(report.problems)} problem(s)")


DEMO_AGENTS: Mapping[str, str] = {"session.jsonl": "executor"}
"""Example file -> an agent type whose scoped state the demo prints for the file's last
session (the coding-agent sessions, scoped for an executor: ``state SESSION --agent``)."""


DEMO_CHAT_FORMATS: Mapping[str, str] = {"tools.jsonl": "openai"}
"""Example file -> the chat API shape the demo prints its assembly's messages in (the
tool-calling chat, as ``assemble --format openai`` prints it)."""


def _count(examples: Sequence[ExampleEvent], file: str) -> int:
    return sum(1 for e in examples if e.file == file)


def _sessions_last_seen(events: Sequence[RecordedEvent]) -> dict[str, datetime]:
    last_seen: dict[str, datetime] = {}
    for event in events:  # position order, so first appearance orders the sessions
        if stream_kind(event.stream_id) == "session":
            last_seen[event.stream_id] = event.recorded_at
    return last_seen


def example_assembly(ledger: Ledger, file: str,
                     events: Sequence[RecordedEvent]) -> tuple[str, Assembly] | None:
    """The assembly an example file exists for: its last session with the profile the
    file is named after, else the one the session's ``profile`` setting names, at that
    session's last event (None when no profile fits).

    Each example file is named after the profile it exercises, or (``tools.jsonl``, a chat
    for the ``card`` profile) says it as the app would; the app would assemble its last
    session at that moment. The README's and the golden tests' digests come from here.
    """
    last_seen = _sessions_last_seen(events)
    if not last_seen:
        return None
    session, last_at = list(last_seen.items())[-1]
    stem = Path(file).stem
    try:
        profile = ledger.profile_of(session, stem if stem in profile_names() else None,
                                    default=None).name
    except LedgerError:
        return None  # the file names no profile and its session's settings none either
    return session, ledger.assemble(session, profile, now=last_at)


def example_assemblies(ledger: Ledger, by_position: Mapping[int, ExampleEvent]
                       ) -> dict[str, tuple[str, Assembly]]:
    """``example_assembly`` of every loaded example file, by file name."""
    first, last = min(by_position), max(by_position)
    recorded = [e for e in ledger.events(after=first - 1, until=last) if e.position in by_position]
    out: dict[str, tuple[str, Assembly]] = {}
    for name in sorted({example.file for example in by_position.values()}):
        found = example_assembly(
            ledger, name, [e for e in recorded if by_position[e.position].file == name])
        if found is not None:
            out[name] = found
    return out


def load_and_assemble_examples(url: str, examples_dir: Path = EXAMPLES_DIR
                               ) -> dict[str, tuple[str, Assembly]]:
    """Load every example into the ledger at ``url`` (their clock driven as in the demo)
    and return ``example_assemblies``: what the golden digests and the schema check use."""
    examples = read_examples(example_files(examples_dir))
    clock = ScriptedClock(examples[0].at)
    with Ledger.open(url, clock=clock) as ledger:
        return example_assemblies(ledger, load_examples(ledger, clock, examples))


def _print_example(console: Console, ledger: Ledger, clock: ScriptedClock, file: str,
                   events: Sequence[RecordedEvent]) -> None:
    """One example file: its events, then each of its sessions' state as of its last event
    (and the last one scoped to an agent, for the files in ``DEMO_AGENTS``)."""
    console.print(Rule(f"examples/{file}"))
    console.print(render.events_table(events, title=f"{len(events)} events"))
    session = ""
    for session, last_at in _sessions_last_seen(events).items():
        # The state's time-based figures (usage windows) are as of the session's last event.
        clock.set(last_at)
        console.print()
        console.print(render.state_table(ledger.state(session), title=f"state {session}"))
    agent = DEMO_AGENTS.get(file)
    if agent is not None and session:
        # Same clock as the last state above: only the manifest differs.
        console.print()
        console.print(Rule(f"state {session} --agent {agent}", style="dim"))
        console.print(render.dumps(ledger.state(session, agent=agent), indent=2), markup=False)
    found = example_assembly(ledger, file, events)
    if found is not None:
        session, assembly = found
        console.print()
        console.print(Rule(f"assemble {session} --profile {assembly.profile}", style="dim"))
        console.print(assembly_view(assembly, show_text=True))
        chat_format = DEMO_CHAT_FORMATS.get(file)
        if chat_format is not None:
            console.print()
            console.print(Rule(f"assemble {session} --format {chat_format}", style="dim"))
            request = (assembly.to_openai() if chat_format == "openai"
                       else assembly.to_anthropic())
            # Not wrapped at the console's width: the JSON stays valid to copy.
            console.print(json.dumps(request, ensure_ascii=False, indent=2), markup=False,
                          highlight=False, soft_wrap=True)


WHY_ITEM = "mes_example"
"""The decision the demo explains (the card example's example dialogue expires)."""
WHY_EXAMPLE = "card.jsonl"
"""The example whose assembly has that decision worth explaining."""


def _replay_why_audit(console: Console, ledger: Ledger,
                      by_position: Mapping[int, ExampleEvent]) -> None:
    """Record each example assembly as the app would, replay it from the log, explain
    one decision across its session's timeline, and audit every record."""
    from ctxledger.render._replay import audit_table, why_view

    found = example_assemblies(ledger, by_position)
    console.print(Rule("replay, why, audit"))
    rows = []
    for session, assembly in found.values():
        # An id per assembly: recording it again (same position and digest) is a no-op.
        ledger.record_assembly(session, assembly, event_id=str(uuid.uuid5(
            EXAMPLE_ID_NAMESPACE,
            f"assembled:{session}:{assembly.position}:{assembly.digest}")))
        again = ledger.replay(session, until=assembly.position, profile=assembly.profile,
                              now=assembly.now)
        rows.append((f"replay {session} --until {assembly.position}",
                     f"{assembly.profile}: digest {again.digest[:16]} "
                     f"{'matches' if again.digest == assembly.digest else 'DIFFERS'}"))
    console.print(render.info_table(rows))
    if WHY_EXAMPLE in found:
        session, assembly = found[WHY_EXAMPLE]
        if any(d.item == WHY_ITEM for d in assembly.decisions):
            console.print(why_view(ledger.why(session, WHY_ITEM, profile=assembly.profile)))
    report = ledger.audit()
    console.print(audit_table(report))
    if not report.ok:
        raise ExampleError("audit found records that do not match")


USAGE_EXAMPLE = "session.jsonl"
"""The coding-agent example, whose days of tool use the demo rolls up and reports."""


def _print_usage(console: Console, ledger: Ledger, clock: ScriptedClock,
                 examples: Sequence[ExampleEvent]) -> None:
    """The nightly rollup run as of the coding-agent example's last event, then its
    scope's daily usage over the example's days (rolled-up days plus the last day's raw
    rows). A second demo run on the same database rolls up nothing more."""
    mine = [e for e in examples if e.file == USAGE_EXAMPLE]
    scopes = [e.event["data"].get("scope", DEFAULT_SCOPE) for e in mine
              if e.event["type"] == "session.started"]
    if not scopes:
        return
    last = mine[-1].at
    days = (last.date() - mine[0].at.date()).days + 1
    clock.set(last)
    report = ledger.rollup(last)
    console.print(Rule(f"rollup --now {format_utc(last)[:19]}Z; usage --scope {scopes[-1]}"
                       f" --days {days}"))
    console.print(rollup_summary(report))
    console.print(usage_view(ledger.usage(scopes[-1], days=days, now=last)))
