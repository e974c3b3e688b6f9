"""The profile API and the facade's contract around it.

- A new profile is its own module plus one registration: the engine, the facade, the
  JSON round trip and the text rendering serve it unchanged.
- Threads assembling different sessions run in parallel and agree with serial runs.
- Naive or out-of-range times are ``LedgerError``s; a swallowed cache error is logged.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any, ClassVar, Literal

import pytest
import sqlalchemy as sa
from rich.console import Console

from ctxledger import Ledger
from ctxledger.assembler.candidates import Frame, SectionLayout, joined
from ctxledger.assembler.decision_engine import Engine
from ctxledger.assembler.encodings import default_loader
from ctxledger.assembler.inputs import Inputs
from ctxledger.assembler.model import Assembly
from ctxledger.assembler.policy import Policy
from ctxledger.assembler.profiles import _PROFILES, Profile
from ctxledger.assembler.report import ProfileReport
from ctxledger.assembler.tokens import TokenCounter
from ctxledger.projections.session_view import SessionView, ViewRequest
from ctxledger.render._assembly import assembly_view
from ctxledger.store.errors import LedgerError

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
ROOT = Path(__file__).resolve().parent.parent


class EchoPolicy(Policy):
    """A toy policy: how many messages to echo."""

    profile: Literal["echo"] = "echo"
    last: int = 2


class EchoReport(ProfileReport):
    """A toy report."""

    profile: Literal["echo"] = "echo"
    echoed: int


class EchoProfile(Profile):
    """The last N messages, newest last, under a header."""

    name: ClassVar[str] = "echo"
    policy_type: ClassVar[type[Policy]] = EchoPolicy
    report_type: ClassVar[type[ProfileReport]] = EchoReport
    inputs: ClassVar[Inputs] = Inputs(session=frozenset({"message.appended"}))

    def request(self, policy: Policy, now: datetime, counter: TokenCounter) -> ViewRequest:
        return ViewRequest(history="full", now=now)

    def assemble(self, engine: Engine, view: SessionView, now: datetime,
                 policy: Policy) -> Assembly:
        assert isinstance(policy, EchoPolicy) and view.history is not None
        messages = list(view.history.messages)
        cut = max(0, len(messages) - policy.last)
        kept = []
        for index, message in enumerate(messages):
            candidate = engine.candidate(f"message:{message.message_id}", "echo",
                                         message.content, priority=index)
            if index < cut:
                engine.exclude(candidate, "dropped", "older_than_last_n", last=policy.last)
            else:
                kept.append(engine.include(candidate, "within_last_n"))
        pieces = joined([[Frame("# Echo", "echo")], *([c] for c in kept)], "\n", "echo")
        return engine.finish(profile=self.name, policy_version=policy.version,
                             session=view.stream_id, position=view.position, now=now,
                             pieces=pieces, sections=[SectionLayout("echo")],
                             report=EchoReport(echoed=len(kept)))


@pytest.fixture
def echo_registered() -> Iterator[None]:
    _PROFILES["echo"] = EchoProfile()  # the one registration line, done by the test
    try:
        yield
    finally:
        del _PROFILES["echo"]


def chat(ledger: Ledger, session: str, n: int) -> None:
    ledger.append(session, [
        {"type": "session.started", "data": {"scope": "p"}},
        *({"type": "message.appended", "data": {"role": "user", "content": f"{session} {i}"}}
          for i in range(n))])


def test_a_new_profile_plugs_in_with_one_registration(ledger: Ledger,
                                                      echo_registered: None) -> None:
    chat(ledger, "s1", 5)
    assembly = ledger.assemble("s1", "echo", now=NOW)
    assert assembly.text == "# Echo\ns1 3\ns1 4"
    assert isinstance(assembly.report, EchoReport) and assembly.report.echoed == 2
    assert [d.action for d in assembly.decisions] == ["dropped"] * 3 + ["included"] * 2
    assert assembly.decisions[4].priority == 4
    # Its report survives the JSON round trip as its own class, digest unchanged.
    again = Assembly.model_validate_json(assembly.model_dump_json())
    assert isinstance(again.report, EchoReport) and again == assembly
    # A policy for it comes from settings and from a whole policy document.
    ledger.append("s1", {"type": "setting.changed", "data": {"key": "policy.echo",
                                                             "value": {"last": 4}}})
    assert ledger.assemble("s1", "echo", now=NOW).report.echoed == 4  # type: ignore[attr-defined]
    assert ledger.assemble("s1", "echo", now=NOW,
                           policy={"profile": "echo", "last": 1}).text == "# Echo\ns1 4"
    # Its timeline steps on what it declares: each message, and the setting.
    steps = ledger.timeline("s1", profile="echo")
    assert [s.event_type for s in steps] == ["message.appended"] * 5 + ["setting.changed"]
    # The CLI's text view falls back to the profile's default rendering.
    console = Console(record=True, width=100)
    console.print(assembly_view(assembly))
    shown = console.export_text()
    assert "s1 4" in shown and f"digest {assembly.digest[:16]}" in shown


def test_threads_assemble_in_parallel_and_agree_with_serial_runs(db_url: str) -> None:
    sessions = [f"s{i}" for i in range(4)]
    with Ledger.open(db_url) as ledger:
        for index, session in enumerate(sessions):
            chat(ledger, session, 40 + index)
            ledger.append(session, {"type": "setting.changed",
                                    "data": {"key": "context_limit", "value": 120}})
        serial = {(s, p): ledger.assemble(s, p, now=NOW).digest
                  for s in sessions for p in ("card", "session")}
    with Ledger.open(db_url) as ledger:  # empty in-memory memos: threads count too
        results: dict[tuple[str, str], str] = {}
        errors: list[BaseException] = []
        barrier = threading.Barrier(len(sessions))

        def work(session: str) -> None:
            try:
                barrier.wait(timeout=10)
                for _ in range(3):
                    for profile in ("card", "session"):
                        results[(session, profile)] = ledger.assemble(
                            session, profile, now=NOW).digest
            except BaseException as exc:  # surfaced below, in the test's own thread
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(s,)) for s in sessions]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    assert not errors
    assert results == serial


@pytest.mark.parametrize("bad", [
    datetime(2026, 5, 1, 12, 0),  # naive
    datetime(1, 1, 1, 0, 0, tzinfo=timezone(timedelta(hours=5))),  # before year 1 in UTC
])
def test_bad_times_are_ledger_errors(ledger: Ledger, bad: datetime) -> None:
    chat(ledger, "s1", 1)
    with pytest.raises(LedgerError):
        ledger.assemble("s1", "card", now=bad)
    with pytest.raises(LedgerError):
        ledger.state("s1", now=bad)
    with pytest.raises(LedgerError):
        ledger.events("s1", until=bad)


def test_a_cache_write_that_fails_is_logged_not_raised(sqlite_url: str,
                                                       caplog: pytest.LogCaptureFixture
                                                       ) -> None:
    with Ledger.open(sqlite_url) as ledger:
        chat(ledger, "s1", 3)
    blocker = sa.create_engine(sqlite_url)
    with Ledger.open(sqlite_url) as ledger, blocker.connect() as conn:

        @sa.event.listens_for(ledger.engine, "connect")
        def _short_wait(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.execute("PRAGMA busy_timeout=50")  # after the ledger's own setting

        ledger.engine.dispose()
        conn.exec_driver_sql("BEGIN IMMEDIATE")  # another writer holds the lock
        with caplog.at_level(logging.WARNING, logger="ctxledger.ledger"):
            assembly = ledger.assemble("s1", "card", now=NOW)
        conn.exec_driver_sql("ROLLBACK")
    blocker.dispose()
    assert "s1 2" in assembly.text
    assert any("token caches not saved" in record.getMessage() for record in caplog.records)


def test_the_vocabulary_is_loaded_when_the_ledger_opens(sqlite_url: str) -> None:
    loader = default_loader()
    with Ledger.open(sqlite_url):
        assert "cl100k_base" in loader.loaded()
