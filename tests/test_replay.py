"""Replay (SPEC §4): a scratch store per replay, stream-scoped reads, and equality with the
live assembly at every position, for every registered profile, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa
from conftest import BACKENDS, fresh_database
from helpers.scenario import Recorded, StepClock, load_scenario
from helpers.templates import Templates

from ctxledger import Ledger
from ctxledger.assembler.profiles import profile_names
from ctxledger.projections.base import metadata as projection_metadata
from ctxledger.store.errors import LedgerError
from ctxledger.timetravel._replay import ReplayError, read_prefix

SESSIONS = ("chat-1", "alice-2", "mover")


@pytest.fixture(scope="session")
def recordings() -> Iterator[tuple[ExitStack, dict[str, tuple[Ledger, Recorded]]]]:
    """Where ``recorded`` keeps what it built, for the whole session: xdist's work
    stealing runs this module's tests in pieces, and a module-scoped fixture would be
    built again each time a worker comes back to the module."""
    with ExitStack() as stack:
        yield stack, {}


@pytest.fixture(params=BACKENDS)
def recorded(request: pytest.FixtureRequest, templates: Templates,
             tmp_path_factory: pytest.TempPathFactory,
             recordings: tuple[ExitStack, dict[str, tuple[Ledger, Recorded]]],
             ) -> tuple[Ledger, Recorded]:
    """The scenario, with every profile's live assembly of every session after each event;
    built once per backend and worker (its tests only read it: a replay writes to a
    scratch store)."""
    stack, built = recordings
    if request.param in built:
        return built[request.param]
    clock = StepClock()
    found = Recorded()

    def observe(ledger: Ledger, position: int, now: datetime) -> None:
        for profile in profile_names():
            for session in SESSIONS:
                if not ledger.view(session).exists:
                    continue
                try:
                    assembly = ledger.assemble(session, profile, now=now)
                except LedgerError as exc:
                    found.unservable.setdefault(profile, f"{session}: {exc}")
                    continue
                assert assembly.position == position
                found.digests[(profile, session, position)] = (now, assembly.digest)

    url = stack.enter_context(
        fresh_database(request.param, templates, tmp_path_factory.mktemp("recorded")))
    ledger = stack.enter_context(Ledger.open(url, clock=clock))
    load_scenario(ledger, clock, observe)
    built[request.param] = (ledger, found)
    return ledger, found


@pytest.mark.parametrize("profile", profile_names())
def test_replay_equals_the_live_assembly_at_every_position(
        recorded: tuple[Ledger, Recorded], profile: str) -> None:
    ledger, found = recorded
    mine = {key: value for key, value in found.digests.items() if key[0] == profile}
    if not mine:
        pytest.skip(f"the scenario cannot serve profile {profile!r}: "
                    f"{found.unservable.get(profile)}")
    if profile in ("card", "session"):
        # Guards the loop below: these profiles serve every session all along.
        for session in SESSIONS:
            assert sum(1 for key in mine if key[1] == session) > 5
    for (_, session, position), (now, digest) in sorted(mine.items()):
        replayed = ledger.replay(session, until=position, profile=profile, now=now)
        assert (session, position, replayed.digest) == (session, position, digest)


@pytest.fixture
def scenario(ledger: Ledger) -> tuple[Ledger, StepClock, list[int]]:
    """The scenario in the backend's ledger, its clock, and the position of each event."""
    clock = StepClock()
    ledger.clock = clock
    ledger.log.clock = clock
    return ledger, clock, load_scenario(ledger, clock)


def test_now_defaults_to_the_last_event_of_the_prefix(
        scenario: tuple[Ledger, StepClock, list[int]]) -> None:
    ledger, _, positions = scenario
    cut = positions[30]
    expected = ledger.events(after=cut - 1, limit=1)[0].recorded_at
    assert ledger.replay("chat-1", until=cut).now == expected
    # A time cut is the prefix recorded by then; its last event gives now.
    by_time = ledger.replay("chat-1", until=expected + timedelta(seconds=1))
    assert (by_time.position, by_time.now) == (cut, expected)


def _table_contents(ledger: Ledger) -> dict[str, list[tuple[object, ...]]]:
    with ledger.engine.connect() as conn:
        return {name: sorted(map(tuple, conn.execute(sa.select(table))), key=repr)
                for name, table in sorted(projection_metadata.tables.items())}


def test_replay_never_touches_live_tables(
        scenario: tuple[Ledger, StepClock, list[int]]) -> None:
    ledger, _, positions = scenario
    before = _table_contents(ledger)
    for profile in ("card", "session"):
        ledger.replay("chat-1", until=positions[20], profile=profile)
        ledger.timeline("chat-1", profile=profile)
    assert _table_contents(ledger) == before


def test_replay_reads_only_the_streams_the_profile_needs(
        scenario: tuple[Ledger, StepClock, list[int]]) -> None:
    ledger, _, _ = scenario
    head = ledger.head()
    with ledger.engine.connect() as conn:
        card = read_prefix(conn, "chat-1", head, "card")
        session = read_prefix(conn, "chat-1", head, "session")
        before_alice_2 = read_prefix(conn, "chat-1", 20, "session")
    assert card.streams == ("chat-1", "scope:alice")
    assert {e.stream_id for e in card.events} == {"chat-1", "scope:alice"}
    # The scope's members, including one that moved to another scope since.
    assert set(session.streams) == {"chat-1", "scope:alice", "alice-1", "alice-2", "mover"}
    assert "bob-1" not in {e.stream_id for e in session.events}
    assert "alice-2" not in before_alice_2.streams
    for prefix in (card, session):
        positions = [e.position for e in prefix.events]
        assert positions == sorted(positions) and len(set(positions)) == len(positions)


# The events that change each profile's inputs, restated from SPEC for the scenario.
_STEPS_ON = {
    "card": {"chat-1": {"message.appended", "message.retracted", "history.summarized",
                        "card.set", "setting.changed"},
             "scope:alice": {"setting.changed"}},
    "session": {"chat-1": {"session.started", "tool.used", "message.appended",
                           "observation.recorded", "setting.changed"},
                "scope:alice": {"setting.changed", "tool.registered", "tool.removed"},
                "peer": {"tool.used", "message.appended", "observation.recorded",
                         "session.ended"}},
    "novel": {"chat-1": {"item.put", "item.removed", "chapter.moved", "setting.changed"},
              "scope:alice": {"setting.changed"}},
}


def test_timeline_steps_on_each_event_that_changes_the_profiles_inputs(
        scenario: tuple[Ledger, StepClock, list[int]]) -> None:
    """Steps: the session's events of the profile's input types, its scope's, and (for
    ``session``) its peers' in the scope, from its start; each equals a replay there."""
    ledger, _, _ = scenario
    start = ledger.events("chat-1")[0].position
    peers = {"alice-1", "alice-2", "mover"}
    messages = [e for e in ledger.events("chat-1") if e.type == "message.appended"]
    for profile, wanted in _STEPS_ON.items():
        with ledger.engine.connect() as conn:
            prefix = read_prefix(conn, "chat-1", ledger.head(), profile)
        expected = [e for e in prefix.events if e.position >= start and e.type in wanted.get(
            "peer" if e.stream_id in peers else e.stream_id, set())]
        steps = ledger.timeline("chat-1", profile=profile)
        assert [(s.position, s.event_type) for s in steps] == [
            (e.position, e.type) for e in expected], profile
        assert [s.step for s in steps] == list(range(1, len(steps) + 1))
        for step in steps:
            again = ledger.replay("chat-1", until=step.position, profile=profile)
            assert again.digest == step.assembly.digest
            assert step.message == sum(1 for e in messages if e.position <= step.position)
            assert step.is_message == (step.event_type == "message.appended"
                                       and step.stream_id == "chat-1")
    # A tool use in another session of the scope is a step of the session profile.
    session_steps = ledger.timeline("chat-1", profile="session")
    assert ("alice-2", "tool.used") in {(s.stream_id, s.event_type) for s in session_steps}


@pytest.mark.parametrize("profile", profile_names())
def test_nothing_changes_between_two_steps_of_a_timeline(
        recorded: tuple[Ledger, Recorded], profile: str) -> None:
    """Every position between two steps assembles (at the earlier step's ``now``) the same
    decisions and text as that step: the timeline misses no event that changes them."""
    ledger, found = recorded
    checked = 0
    for session in SESSIONS:
        positions = sorted(p for (name, s, p) in found.digests if (name, s) == (profile,
                                                                              session))
        if not positions:
            continue
        steps = ledger.timeline(session, profile=profile)
        for position in positions:
            earlier = [s for s in steps if s.position <= position]
            if not earlier:
                continue
            step = earlier[-1]
            again = ledger.replay(session, until=position, profile=profile,
                                  now=step.assembly.now)
            assert (position, again.text, again.decisions) == (
                position, step.assembly.text, step.assembly.decisions), (session, step.step)
            checked += 1
    if checked == 0:
        pytest.skip(f"the scenario cannot serve profile {profile!r}: "
                    f"{found.unservable.get(profile)}")


def test_bad_replays_are_one_line_domain_errors(
        scenario: tuple[Ledger, StepClock, list[int]]) -> None:
    ledger, clock, _ = scenario
    head = ledger.head()
    cases = [
        (lambda: ledger.replay("nobody"), "unknown session 'nobody'"),
        (lambda: ledger.replay("chat-1", until=head + 1), "beyond the head"),
        (lambda: ledger.replay("chat-1", until=-1), "not a log position"),
        (lambda: ledger.replay("chat-1", until=clock() + timedelta(days=1)), "in the future"),
        (lambda: ledger.replay("chat-1", until=datetime(2025, 3, 2)), "timezone-aware"),
        (lambda: ledger.replay("chat-1", until=3), "unknown session 'chat-1' at position 3"),
    ]
    for call, needle in cases:
        with pytest.raises(LedgerError) as raised:
            call()
        assert needle in str(raised.value)
        assert "\n" not in str(raised.value)
    assert issubclass(ReplayError, LedgerError)
    assert ledger.head() == head


def test_which_profiles_read_the_scopes_other_sessions() -> None:
    from ctxledger.timetravel._replay import scope_wide

    assert scope_wide("session") and not scope_wide("card")


def test_each_profile_declares_its_inputs_and_peers_only_when_it_reads_them() -> None:
    """A timeline steps on peers' events only for a profile whose replay reads them."""
    from ctxledger.assembler.profiles import get_profile
    from ctxledger.store.catalog import CATALOG
    from ctxledger.timetravel._replay import scope_wide

    for name in profile_names():
        inputs = get_profile(name).inputs
        assert bool(inputs.peers) == scope_wide(name), name
        # Each type can be in the streams it is declared for.
        for types, kind in ((inputs.session, "session"), (inputs.scope, "scope"),
                            (inputs.peers, "session")):
            assert all(kind in CATALOG[t].stream_kinds for t in types), (name, types)


def test_every_example_assembly_replays_to_its_digest(db_url: str) -> None:
    """The example sessions (one per profile, snippets and all) replay exactly."""
    from ctxledger._demo import example_assemblies
    from ctxledger.io._examples import (
        EXAMPLES_DIR,
        ScriptedClock,
        example_files,
        load_examples,
        read_examples,
    )

    examples = read_examples(example_files(EXAMPLES_DIR))
    clock = ScriptedClock(examples[0].at)
    with Ledger.open(db_url, clock=clock) as ledger:
        found = example_assemblies(ledger, load_examples(ledger, clock, examples))
        assert {assembly.profile for _, assembly in found.values()} == set(profile_names())
        for session, assembly in found.values():
            again = ledger.replay(session, until=assembly.position, profile=assembly.profile,
                                  now=assembly.now)
            assert (assembly.profile, again.digest) == (assembly.profile, assembly.digest)
