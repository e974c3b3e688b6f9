"""``LedgerSession``: the OpenAI Agents SDK's ``Runner`` keeps its session in a ledger.

The model is a real ``agents.Model`` subclass that answers from a script (no network);
everything else (the runner, the tool, the session protocol, the item types) is the SDK's.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, Model, ModelResponse, RunConfig, Runner, Usage, function_tool
from agents.memory import Session, SessionSettings, SQLiteSession
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from ctxledger import EventValidationError, Ledger
from ctxledger.integrations.openai_agents import LedgerSession
from ctxledger.store.records import RecordedEvent


def _say(text: str, ident: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id=ident, type="message", role="assistant", status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])])


def _call(name: str, arguments: dict[str, Any], call_id: str) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(type="function_call", name=name, call_id=call_id,
                                    arguments=json.dumps(arguments), id=f"fc_{call_id}",
                                    status="completed")


class ScriptedModel(Model):
    """Answers each call with the next scripted output, and keeps the input it got."""

    def __init__(self, script: list[list[Any]]) -> None:
        self.script = list(script)
        self.inputs: list[Any] = []

    async def get_response(self, system_instructions: Any, input: Any, model_settings: Any,
                           tools: Any, output_schema: Any, handoffs: Any, tracing: Any, *,
                           previous_response_id: Any = None, conversation_id: Any = None,
                           prompt: Any = None) -> ModelResponse:
        self.inputs.append(input)
        return ModelResponse(output=self.script.pop(0), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the tests do not stream")


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"19 C and clear in {city}"


def test_a_run_with_a_tool_call_then_a_second_run_continues_the_session(
        ledger: Ledger) -> None:
    model = ScriptedModel([
        [_call("get_weather", {"city": "Lisbon"}, "call_1")],
        [_say("It is 19 C and clear in Lisbon.", "msg_1")],
        [_say("Yes, a light jacket is enough.", "msg_2")],
    ])
    agent = Agent(name="Atlas", instructions="Be brief.", model=model, tools=[get_weather])
    session = LedgerSession(ledger, "trip-1")
    assert isinstance(session, Session)

    # No tracing: nothing leaves the machine.
    config = RunConfig(tracing_disabled=True)
    first = Runner.run_sync(agent, "Weather in Lisbon?", session=session, run_config=config)
    assert first.final_output == "It is 19 C and clear in Lisbon."
    second = Runner.run_sync(agent, "Is a jacket enough?", session=session, run_config=config)
    assert second.final_output == "Yes, a light jacket is enough."

    # The second run's model saw the first run's items, from the ledger.
    seen = model.inputs[2]
    assert [item.get("type", "message") for item in seen] == [
        "message", "function_call", "function_call_output", "message", "message"]
    assert seen[2]["output"] == "19 C and clear in Lisbon"

    # Stored as canonical chat messages, one per item.
    stored = [e.data for e in ledger.messages("trip-1")]
    assert [m["role"] for m in stored] == ["user", "assistant", "tool", "assistant", "user",
                                           "assistant"]
    assert stored[1]["tool_calls"] == [{"id": "call_1", "type": "function", "function": {
        "name": "get_weather", "arguments": '{"city": "Lisbon"}'}}]
    assert stored[2]["tool_call_id"] == "call_1"
    assert stored[3]["content"] == [{"type": "text", "text": "It is 19 C and clear in Lisbon."}]

    # And read back as the items the runner added, exactly.
    items = asyncio.run(session.get_items())
    assert items[:5] == seen
    assert items[5] == second.new_items[-1].to_input_item()
    assert asyncio.run(session.get_items(limit=2)) == items[-2:]


def test_pop_and_clear_are_retractions_the_log_keeps(ledger: Ledger) -> None:
    session = LedgerSession(ledger, "s")
    items: list[Any] = [{"role": "user", "content": "one"},
                        {"role": "assistant", "content": "two"},
                        {"role": "user", "content": [{"type": "input_text", "text": "three"}]}]
    asyncio.run(session.add_items(items))
    assert asyncio.run(session.pop_item()) == items[2]
    assert asyncio.run(session.get_items()) == items[:2]
    asyncio.run(session.clear_session())
    assert asyncio.run(session.get_items()) == []
    assert asyncio.run(session.pop_item()) is None
    kinds = [e.type for e in ledger.events("s")]
    assert kinds == ["message.appended"] * 3 + ["message.retracted"] * 3
    # Replay up to before the clear still has the two messages.
    before = ledger.events("s")[3].position
    assert [m.item for m in ledger.replay("s", before).messages] == [
        f"message:{e.event_id}" for e in ledger.events("s")[:2]]


def test_an_item_the_form_cannot_hold_writes_nothing(ledger: Ledger) -> None:
    session = LedgerSession(ledger, "s")
    bad: list[Any] = [{"role": "user", "content": "fine"},
                      {"type": "reasoning", "id": "rs_1", "summary": []}]
    with pytest.raises(EventValidationError, match=r"^items\[1\]: a reasoning item is not stored"):
        asyncio.run(session.add_items(bad))
    broken: list[Any] = [{"role": "user", "content": "fine"},
                         {"type": "function_call", "call_id": "c", "name": "f",
                          "arguments": "not json"}]
    with pytest.raises(EventValidationError, match=r"^items\[1\]: .*not JSON"):
        asyncio.run(session.add_items(broken))
    assert ledger.events("s") == []


def test_context_limit_returns_the_fitted_window(ledger: Ledger) -> None:
    full = LedgerSession(ledger, "long")
    asyncio.run(full.add_items([{"role": "user" if n % 2 == 0 else "assistant",
                                 "content": f"message number {n} " + "word " * 40}
                                for n in range(20)]))
    everything = asyncio.run(full.get_items())
    fitted = asyncio.run(LedgerSession(ledger, "long", context_limit=300).get_items())
    assert 0 < len(fitted) < len(everything)
    assert fitted == everything[-len(fitted):]
    window = ledger.history_window("long", 300)
    assert len(window) == len(fitted)
    limited = LedgerSession(ledger, "long", context_limit=300)
    assert asyncio.run(limited.get_items(limit=2)) == fitted[-2:]
    assert asyncio.run(limited.get_items(limit=100)) == fitted


# -- the SDK's session behaviour -------------------------------------------------------
# The cases below follow the session tests of the openai-agents repository
# (tests/memory/test_session.py, tests/memory/test_session_limit.py and
# tests/extensions/memory/test_sqlalchemy_session.py), which its wheel does not ship. Each
# runs against the SDK's own SQLiteSession as well, so what is expected is the SDK's
# behaviour, not ctxledger's reading of it.

SessionFactory = Callable[..., Any]


@pytest.fixture(params=["sdk", "ledger-sqlite",
                        pytest.param("ledger-postgres", marks=pytest.mark.postgres)])
def make_session(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SessionFactory]:
    """``make_session(session_id, session_settings=...)``: the SDK's SQLiteSession, or a
    ``LedgerSession`` on each backend."""
    if request.param == "sdk":
        opened: list[SQLiteSession] = []

        def sdk(session_id: str, **kwargs: Any) -> SQLiteSession:
            opened.append(SQLiteSession(session_id, tmp_path / "sdk.db", **kwargs))
            return opened[-1]

        yield sdk
        for session in opened:
            session.close()
    else:
        url = request.getfixturevalue("sqlite_url" if request.param == "ledger-sqlite"
                                      else "pg_url")
        with Ledger.open(url, load_vocabulary=False) as ledger:
            yield lambda session_id, **kwargs: LedgerSession(ledger, session_id, **kwargs)


def _turns(count: int) -> list[Any]:
    return [{"role": "user" if n % 2 == 0 else "assistant", "content": f"turn {n}"}
            for n in range(count)]


def test_sdk_add_get_pop_clear(make_session: SessionFactory) -> None:
    session = make_session("basic")
    assert asyncio.run(session.get_items()) == []
    items = _turns(3)
    asyncio.run(session.add_items(items))
    assert asyncio.run(session.get_items()) == items
    assert asyncio.run(session.pop_item()) == items[2]
    assert asyncio.run(session.get_items()) == items[:2]
    asyncio.run(session.add_items([{"role": "user", "content": "again"}]))
    assert asyncio.run(session.get_items()) == [*items[:2], {"role": "user",
                                                            "content": "again"}]
    asyncio.run(session.clear_session())
    assert asyncio.run(session.get_items()) == []
    assert asyncio.run(session.pop_item()) is None


def test_sdk_sessions_are_isolated(make_session: SessionFactory) -> None:
    one, two = make_session("one"), make_session("two")
    asyncio.run(one.add_items([{"role": "user", "content": "for one"}]))
    asyncio.run(two.add_items([{"role": "user", "content": "for two"}]))
    assert asyncio.run(one.get_items()) == [{"role": "user", "content": "for one"}]
    asyncio.run(one.clear_session())
    assert asyncio.run(two.get_items()) == [{"role": "user", "content": "for two"}]


def test_sdk_get_items_with_a_limit(make_session: SessionFactory) -> None:
    session = make_session("limits")
    items = _turns(5)
    asyncio.run(session.add_items(items))
    assert asyncio.run(session.get_items(limit=2)) == items[-2:]
    assert asyncio.run(session.get_items(limit=1)) == items[-1:]
    assert asyncio.run(session.get_items(limit=10)) == items
    assert asyncio.run(session.get_items(limit=0)) == []
    assert asyncio.run(session.get_items()) == items


@pytest.mark.parametrize("settings", [SessionSettings(limit=3), {"limit": 3}])
def test_sdk_session_settings_limit_is_the_default(make_session: SessionFactory,
                                                    settings: Any) -> None:
    session = make_session("settings", session_settings=settings)
    assert isinstance(session.session_settings, SessionSettings)
    assert session.session_settings.limit == 3
    items = _turns(5)
    asyncio.run(session.add_items(items))
    assert asyncio.run(session.get_items()) == items[-3:]
    # An explicit limit wins over the settings'.
    assert asyncio.run(session.get_items(limit=1)) == items[-1:]
    assert asyncio.run(session.get_items(limit=5)) == items


def test_sdk_session_settings_without_limit(make_session: SessionFactory) -> None:
    session = make_session("none", session_settings={})
    assert session.session_settings == SessionSettings()
    asyncio.run(session.add_items(_turns(4)))
    assert len(asyncio.run(session.get_items())) == 4


def test_sdk_unknown_session_settings_are_refused(make_session: SessionFactory) -> None:
    with pytest.raises(TypeError, match=r"^Unknown session settings: limits$"):
        make_session("bad", session_settings={"limits": 2})
    with pytest.raises(TypeError, match=r"^session must be a SessionSettings instance or a "
                                        r"dict, got int$"):
        make_session("bad", session_settings=3)


def test_sdk_concurrent_pops_return_each_item_once(make_session: SessionFactory) -> None:
    session = make_session("pops")
    items = [{"role": "user", "content": f"item {n}"} for n in range(6)]
    asyncio.run(session.add_items(items))

    async def pop_all() -> list[Any]:
        return list(await asyncio.gather(*(session.pop_item() for _ in range(4))))

    popped = asyncio.run(pop_all())
    assert all(item is not None for item in popped)
    assert sorted(item["content"] for item in popped) == [f"item {n}" for n in range(2, 6)]
    assert asyncio.run(session.get_items()) == items[:2]


def test_runner_with_settings_given_as_a_dict(ledger: Ledger) -> None:
    session = LedgerSession(ledger, "dict-settings", session_settings={"limit": 2})
    asyncio.run(session.add_items(_turns(4)))
    model = ScriptedModel([[_say("fine", "msg_1")]])
    agent = Agent(name="Atlas", instructions="Be brief.", model=model)
    result = Runner.run_sync(agent, "and now?", session=session,
                             run_config=RunConfig(tracing_disabled=True))
    assert result.final_output == "fine"
    # The runner read the session's two newest items, then added the new input.
    assert [item["content"] for item in model.inputs[0]] == ["turn 2", "turn 3", "and now?"]


# -- concurrent pops on the core: threads, and two ledgers as two processes would be ---

POP_TRIALS = 20


def test_concurrent_pops_on_one_session_each_return_a_different_item(
        ledger: Ledger) -> None:
    for trial in range(POP_TRIALS):
        session = LedgerSession(ledger, f"race-{trial}")
        items = [{"role": "user", "content": f"item {n}"} for n in range(3)]
        session.add(items)

        async def two_pops(session: LedgerSession = session) -> list[Any]:
            return list(await asyncio.gather(session.pop_item(), session.pop_item()))

        popped = asyncio.run(two_pops())
        assert sorted(item["content"] for item in popped) == ["item 1", "item 2"], trial
        assert session.items() == items[:1]


def test_pops_from_two_ledgers_on_one_database(db_url: str) -> None:
    """Two ``Ledger`` objects share nothing in memory, as two processes would not."""
    with Ledger.open(db_url, load_vocabulary=False) as first, \
            Ledger.open(db_url, load_vocabulary=False) as second:
        count = 12
        first.append("shared", [{"type": "message.appended",
                                 "data": {"role": "user", "content": f"m{n}"}}
                                for n in range(count)])
        popped: list[RecordedEvent | None] = []
        errors: list[BaseException] = []
        start = threading.Barrier(4)

        def pop(ledger: Ledger) -> None:
            try:
                start.wait()
                for _ in range(count // 4 + 1):
                    popped.append(ledger.pop_message("shared"))
            except BaseException as exc:  # reported by the test's thread
                errors.append(exc)

        threads = [threading.Thread(target=pop, args=(ledger,))
                   for ledger in (first, second, first, second)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        got = [event.data["content"] for event in popped if event is not None]
        assert sorted(got) == sorted(f"m{n}" for n in range(count))
        assert popped.count(None) == 4
        assert first.messages("shared") == []
        retracted = [e.data["message_id"] for e in first.events("shared")
                     if e.type == "message.retracted"]
        assert len(retracted) == len(set(retracted)) == count


def test_concurrent_clears_retract_each_message_once(ledger: Ledger) -> None:
    session = LedgerSession(ledger, "clears")
    session.add([{"role": "user", "content": f"item {n}"} for n in range(5)])

    async def clears() -> None:
        await asyncio.gather(session.clear_session(), session.clear_session(),
                             session.pop_item())

    asyncio.run(clears())
    assert session.items() == []
    retracted = [e.data["message_id"] for e in ledger.events("clears")
                 if e.type == "message.retracted"]
    assert len(retracted) == len(set(retracted)) == 5


def _pop_in_a_process(url: str, session_id: str, pops: int, barrier: Any, out: Any) -> None:
    """A process's pops: ``pops`` ``pop_item`` calls once every process is ready."""
    with Ledger.open(url, load_vocabulary=False) as ledger:
        session = LedgerSession(ledger, session_id)
        barrier.wait(120)
        for _ in range(pops):
            try:
                item = asyncio.run(session.pop_item())
            except Exception as exc:  # reported by the test
                out.put(f"{type(exc).__name__}: {exc}")
                continue
            out.put(None if item is None else item["content"])


@pytest.mark.slow
def test_pops_from_two_processes_each_return_a_different_item(db_url: str) -> None:
    count, pops = 10, 6
    with Ledger.open(db_url, load_vocabulary=False) as ledger:
        LedgerSession(ledger, "procs").add(
            [{"role": "user", "content": f"item {n}"} for n in range(count)])
    context = multiprocessing.get_context("spawn")
    barrier, out = context.Barrier(2), context.Queue()
    procs = [context.Process(target=_pop_in_a_process,
                             args=(db_url, "procs", pops, barrier, out)) for _ in range(2)]
    for proc in procs:
        proc.start()
    try:
        got = [out.get(timeout=120) for _ in range(2 * pops)]
    finally:
        for proc in procs:
            proc.join(120)
            if proc.is_alive():
                proc.kill()
    assert [proc.exitcode for proc in procs] == [0, 0]
    assert sorted(g for g in got if g is not None) == sorted(f"item {n}" for n in range(count))
    assert got.count(None) == 2 * pops - count
