"""The OpenAI Agents SDK's own session tests, ported to run against ``LedgerSession``.

Source: github.com/openai/openai-agents-python at commit
7f7a44f8dc0650296bd5ab6c745c9bcbaa6ac3b7 (the SDK's tests are not in its package):

- ``tests/memory/test_session.py`` (written for ``SQLiteSession``),
- ``tests/memory/test_session_limit.py``,
- ``tests/extensions/memory/test_sqlalchemy_session.py`` (for ``SQLAlchemySession``).

Every behavioural case a session must pass is here with its name, its steps and its
assertions as the SDK wrote them. What changed is how a session is made:
``SQLiteSession(id, path)`` / ``SQLAlchemySession.from_url(id, ...)`` became
``make_session(id)``, a ``LedgerSession`` on a fresh database of each backend (one ledger
per test, as the SDK's tests share one file or one in-memory engine), ``session.close()``
is gone (a ``LedgerSession`` holds no connection of its own), and ``@pytest.mark.asyncio``
is anyio's marker (pytest-asyncio is not a dependency). The model is the SDK's published
``agents.testing.ScriptedModel``, as in the originals.

Left out, because they test one implementation's internals rather than the session
protocol: the SQLite session's worker threads, file locks, rollback and corrupt-row
handling, cancellation of its mutation helper, and the SQLAlchemy session's table
creation, JSON escaping, engine registry, row timestamps and ``DELETE`` claims (the
concurrent-pop case is kept).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from agents import Agent, RunConfig, Runner, SessionSettings, TResponseInputItem
from agents.testing import ScriptedModel
from conftest import fresh_database
from helpers.templates import Templates
from openai.types.responses import ResponseOutputItem, ResponseOutputMessage, ResponseOutputText

from ctxledger import Ledger
from ctxledger.integrations.openai_agents import LedgerSession

pytestmark = pytest.mark.anyio

SessionFactory = Callable[..., LedgerSession]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def make_session(db_url: str) -> Iterator[SessionFactory]:
    """``make_session(session_id, session_settings=None)``: a ``LedgerSession`` on this
    test's database (each backend)."""
    with Ledger.open(db_url, load_vocabulary=False) as ledger:
        yield lambda session_id, **kwargs: LedgerSession(ledger, session_id, **kwargs)


@pytest.fixture
def make_runner_session(templates: Templates, tmp_path: Path) -> Iterator[SessionFactory]:
    """``make_session`` on SQLite only, for the cases driven through ``Runner``: the
    runner reaches the database only through the session operations the direct cases
    above and below pin on both backends."""
    with fresh_database("sqlite", templates, tmp_path) as url, \
            Ledger.open(url, load_vocabulary=False) as ledger:
        yield lambda session_id, **kwargs: LedgerSession(ledger, session_id, **kwargs)


# -- tests/test_responses.py -------------------------------------------------------------


def get_text_message(content: str) -> ResponseOutputItem:
    return ResponseOutputMessage(
        id="1",
        type="message",
        role="assistant",
        content=[ResponseOutputText(text=content, type="output_text", annotations=[], logprobs=[])],
        status="completed",
    )


# -- tests/memory/test_session.py ---------------------------------------------------------


def _run_sync_wrapper(agent: Agent[Any], input_data: Any, **kwargs: Any) -> Any:
    """Wrapper for run_sync that properly sets up an event loop."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        return Runner.run_sync(agent, input_data, **kwargs)
    finally:
        loop.close()


async def run_agent_async(runner_method: str, agent: Agent[Any], input_data: Any,
                          **kwargs: Any) -> Any:
    """Helper function to run agent with different methods."""
    if runner_method == "run":
        return await Runner.run(agent, input_data, **kwargs)
    elif runner_method == "run_sync":
        # For run_sync, we need to run it in a thread with its own event loop
        return await asyncio.to_thread(_run_sync_wrapper, agent, input_data, **kwargs)
    elif runner_method == "run_streamed":
        result = Runner.run_streamed(agent, input_data, **kwargs)
        async for _event in result.stream_events():
            pass
        return result
    else:
        raise ValueError(f"Unknown runner method: {runner_method}")


RUNNER_METHODS = pytest.mark.parametrize("runner_method", ["run", "run_sync", "run_streamed"])


@RUNNER_METHODS
async def test_session_memory_basic_functionality_parametrized(
        runner_method: str, make_runner_session: SessionFactory) -> None:
    session = make_runner_session("test_session_123")

    model = ScriptedModel()
    agent = Agent(name="test", model=model)

    # First turn
    model.enqueue([get_text_message("San Francisco")])
    result1 = await run_agent_async(
        runner_method, agent, "What city is the Golden Gate Bridge in?", session=session)
    assert result1.final_output == "San Francisco"

    # Second turn - should have conversation history
    model.enqueue([get_text_message("California")])
    result2 = await run_agent_async(runner_method, agent, "What state is it in?",
                                    session=session)
    assert result2.final_output == "California"

    # The model should have received the full conversation history
    last_input = model.calls[-1].input
    assert len(last_input) > 1  # Should have more than just the current message


@RUNNER_METHODS
async def test_session_memory_with_explicit_instance_parametrized(
        runner_method: str, make_runner_session: SessionFactory) -> None:
    session = make_runner_session("test_session_456")

    model = ScriptedModel()
    agent = Agent(name="test", model=model)

    model.enqueue([get_text_message("Hello")])
    result1 = await run_agent_async(runner_method, agent, "Hi there", session=session)
    assert result1.final_output == "Hello"

    model.enqueue([get_text_message("I remember you said hi")])
    result2 = await run_agent_async(runner_method, agent, "Do you remember what I said?",
                                    session=session)
    assert result2.final_output == "I remember you said hi"


@RUNNER_METHODS
async def test_session_memory_different_sessions_parametrized(
        runner_method: str, make_runner_session: SessionFactory) -> None:
    model = ScriptedModel()
    agent = Agent(name="test", model=model)

    session_1 = make_runner_session("session_1")
    model.enqueue([get_text_message("I like cats")])
    result1 = await run_agent_async(runner_method, agent, "I like cats", session=session_1)
    assert result1.final_output == "I like cats"

    session_2 = make_runner_session("session_2")
    model.enqueue([get_text_message("I like dogs")])
    result2 = await run_agent_async(runner_method, agent, "I like dogs", session=session_2)
    assert result2.final_output == "I like dogs"

    # Back to Session 1 - should remember cats, not dogs
    model.enqueue([get_text_message("Yes, you mentioned cats")])
    result3 = await run_agent_async(runner_method, agent, "What did I say I like?",
                                    session=session_1)
    assert result3.final_output == "Yes, you mentioned cats"


async def test_sqlite_session_memory_direct(make_session: SessionFactory) -> None:
    session = make_session("direct_test")

    items: list[TResponseInputItem] = [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi there!"},
    ]

    await session.add_items(items)
    retrieved = await session.get_items()

    assert len(retrieved) == 2
    assert retrieved[0].get("role") == "user"
    assert retrieved[0].get("content") == "Hello"
    assert retrieved[1].get("role") == "assistant"
    assert retrieved[1].get("content") == "Hi there!"

    await session.clear_session()
    retrieved_after_clear = await session.get_items()
    assert len(retrieved_after_clear) == 0


async def test_sqlite_session_memory_pop_item(make_session: SessionFactory) -> None:
    session = make_session("pop_test")

    popped = await session.pop_item()
    assert popped is None

    items: list[TResponseInputItem] = [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi there!"},
        {"role": "user", "content": "How are you?"},
    ]

    await session.add_items(items)

    retrieved = await session.get_items()
    assert len(retrieved) == 3

    popped = await session.pop_item()
    assert popped is not None
    assert popped.get("role") == "user"
    assert popped.get("content") == "How are you?"

    retrieved_after_pop = await session.get_items()
    assert len(retrieved_after_pop) == 2
    assert retrieved_after_pop[-1].get("content") == "Hi there!"

    popped2 = await session.pop_item()
    assert popped2 is not None
    assert popped2.get("role") == "assistant"
    assert popped2.get("content") == "Hi there!"

    popped3 = await session.pop_item()
    assert popped3 is not None
    assert popped3.get("role") == "user"
    assert popped3.get("content") == "Hello"

    popped4 = await session.pop_item()
    assert popped4 is None

    final_items = await session.get_items()
    assert len(final_items) == 0


async def test_session_memory_pop_different_sessions(make_session: SessionFactory) -> None:
    session_1 = make_session("session_1")
    session_2 = make_session("session_2")

    items_1: list[TResponseInputItem] = [
        {"role": "user", "content": "Session 1 message"},
    ]
    items_2: list[TResponseInputItem] = [
        {"role": "user", "content": "Session 2 message 1"},
        {"role": "user", "content": "Session 2 message 2"},
    ]

    await session_1.add_items(items_1)
    await session_2.add_items(items_2)

    popped = await session_2.pop_item()
    assert popped is not None
    assert popped.get("content") == "Session 2 message 2"

    session_1_items = await session_1.get_items()
    assert len(session_1_items) == 1
    assert session_1_items[0].get("content") == "Session 1 message"

    session_2_items = await session_2.get_items()
    assert len(session_2_items) == 1
    assert session_2_items[0].get("content") == "Session 2 message 1"


async def test_sqlite_session_get_items_with_limit(make_session: SessionFactory) -> None:
    session = make_session("count_test")

    items: list[TResponseInputItem] = [
        {"role": "user", "content": "Message 1"},
        {"role": "assistant", "content": "Response 1"},
        {"role": "user", "content": "Message 2"},
        {"role": "assistant", "content": "Response 2"},
        {"role": "user", "content": "Message 3"},
        {"role": "assistant", "content": "Response 3"},
    ]

    await session.add_items(items)

    all_items = await session.get_items()
    assert len(all_items) == 6
    assert all_items[0].get("content") == "Message 1"
    assert all_items[-1].get("content") == "Response 3"

    latest_2 = await session.get_items(limit=2)
    assert len(latest_2) == 2
    assert latest_2[0].get("content") == "Message 3"
    assert latest_2[1].get("content") == "Response 3"

    latest_4 = await session.get_items(limit=4)
    assert len(latest_4) == 4
    assert latest_4[0].get("content") == "Message 2"
    assert latest_4[1].get("content") == "Response 2"
    assert latest_4[2].get("content") == "Message 3"
    assert latest_4[3].get("content") == "Response 3"

    latest_10 = await session.get_items(limit=10)
    assert len(latest_10) == 6  # Should return all available items
    assert latest_10[0].get("content") == "Message 1"
    assert latest_10[-1].get("content") == "Response 3"

    latest_0 = await session.get_items(limit=0)
    assert len(latest_0) == 0


@RUNNER_METHODS
async def test_session_memory_appends_list_input_by_default(
        runner_method: str, make_runner_session: SessionFactory) -> None:
    session = make_runner_session("test_validation_parametrized")

    model = ScriptedModel()
    agent = Agent(name="test", model=model)

    initial_history: list[TResponseInputItem] = [
        {"role": "user", "content": "Earlier message"},
        {"role": "assistant", "content": "Saved reply"},
    ]
    await session.add_items(initial_history)

    list_input = [{"role": "user", "content": "Test message"}]

    model.enqueue([get_text_message("This should run")])
    await run_agent_async(runner_method, agent, list_input, session=session)

    assert model.calls[-1].input == initial_history + list_input


@RUNNER_METHODS
async def test_session_callback_prepared_input(runner_method: str,
                                               make_session: SessionFactory) -> None:
    model = ScriptedModel()
    agent = Agent(name="test", model=model)

    session = make_session("session_1")

    initial_history: list[TResponseInputItem] = [
        {"role": "user", "content": "Hello there."},
        {"role": "assistant", "content": "Hi, I'm here to assist you."},
    ]
    await session.add_items(initial_history)

    def filter_assistant_messages(history: list[Any], new_input: list[Any]) -> list[Any]:
        # Only include user messages from history
        return [item for item in history if item["role"] == "user"] + new_input

    new_turn_input = [{"role": "user", "content": "What your name?"}]
    model.enqueue([get_text_message("I'm gpt-4o")])

    await run_agent_async(
        runner_method, agent, new_turn_input, session=session,
        run_config=RunConfig(session_input_callback=filter_assistant_messages))

    expected_model_input = [
        initial_history[0],  # From history
        new_turn_input[0],  # New input
    ]

    assert len(model.calls[-1].input) == 2
    assert model.calls[-1].input == expected_model_input


@RUNNER_METHODS
async def test_session_callback_repeating_history_does_not_grow_session(
        runner_method: str, make_runner_session: SessionFactory) -> None:
    model = ScriptedModel()
    agent = Agent(name="test", model=model)
    session = make_runner_session("session_repeat")

    def repeat_first(history: list[Any], new_input: list[Any]) -> list[Any]:
        if not history:
            return new_input
        return history + [history[0]] + new_input  # noqa: RUF005 (the SDK's own line)

    for turn in range(3):
        model.enqueue([get_text_message(f"assistant {turn}")])
        await run_agent_async(runner_method, agent, f"user {turn}", session=session,
                              run_config=RunConfig(session_input_callback=repeat_first))

    stored = await session.get_items()
    user_messages = [item for item in stored if item.get("role") == "user"]
    assert [item.get("content") for item in user_messages] == [
        "user 0",
        "user 1",
        "user 2",
    ]
    assert len(stored) == 6


async def test_sqlite_session_unicode_content(make_session: SessionFactory) -> None:
    session = make_session("unicode_test")

    items: list[TResponseInputItem] = [
        {"role": "user", "content": "こんにちは"},
        {"role": "assistant", "content": "😊👍"},
        {"role": "user", "content": "Привет"},
    ]
    await session.add_items(items)

    retrieved = await session.get_items()
    assert retrieved[0].get("content") == "こんにちは"
    assert retrieved[1].get("content") == "😊👍"
    assert retrieved[2].get("content") == "Привет"


async def test_sqlite_session_special_characters_and_sql_injection(
        make_session: SessionFactory) -> None:
    session = make_session("special_chars_test")

    items: list[TResponseInputItem] = [
        {"role": "user", "content": "O'Reilly"},
        {"role": "assistant", "content": "DROP TABLE sessions;"},
        {"role": "user", "content": ('"SELECT * FROM users WHERE name = "admin";"')},
        {"role": "assistant", "content": "Robert'); DROP TABLE students;--"},
        {"role": "user", "content": "Normal message"},
    ]
    await session.add_items(items)

    retrieved = await session.get_items()
    assert len(retrieved) == len(items)
    assert retrieved[0].get("content") == "O'Reilly"
    assert retrieved[1].get("content") == "DROP TABLE sessions;"
    assert retrieved[2].get("content") == '"SELECT * FROM users WHERE name = "admin";"'
    assert retrieved[3].get("content") == "Robert'); DROP TABLE students;--"
    assert retrieved[4].get("content") == "Normal message"


async def test_sqlite_session_concurrent_access(make_session: SessionFactory) -> None:
    session = make_session("concurrent_test")

    items: list[TResponseInputItem] = [
        {"role": "user", "content": f"Message {i}"} for i in range(10)
    ]

    # Use ThreadPoolExecutor to simulate concurrent writes
    def add_item(item: TResponseInputItem) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        loop.run_until_complete(session.add_items([item]))
        loop.close()

    with concurrent.futures.ThreadPoolExecutor(max_workers=5) as executor:
        executor.map(add_item, items)

    retrieved = await session.get_items()
    contents = {
        content
        for item in retrieved
        for content in [item.get("content")]
        if isinstance(content, str)
    }
    expected = {f"Message {i}" for i in range(10)}
    assert contents == expected


async def test_session_settings_default(make_session: SessionFactory) -> None:
    session = make_session("default_settings_test")

    assert isinstance(session.session_settings, SessionSettings)
    assert session.session_settings.limit is None


async def test_session_settings_constructor(make_session: SessionFactory) -> None:
    session = make_session("constructor_settings_test",
                           session_settings=SessionSettings(limit=5))

    assert session.session_settings is not None
    assert session.session_settings.limit == 5


async def test_session_settings_constructor_normalizes_dictionary(
        make_session: SessionFactory) -> None:
    session = make_session("dictionary_settings_test", session_settings={"limit": 0})

    assert isinstance(session.session_settings, SessionSettings)
    assert session.session_settings.limit == 0
    assert session.session_settings.resolve({"limit": 4}).limit == 4


async def test_session_settings_rejects_unknown_dictionary_fields(
        make_session: SessionFactory) -> None:
    with pytest.raises(TypeError, match="Unknown session settings: limitt"):
        make_session("invalid_settings_test", session_settings={"limitt": 1})


async def test_get_items_uses_session_settings_limit(make_session: SessionFactory) -> None:
    session = make_session("uses_settings_limit_test", session_settings=SessionSettings(limit=3))

    items: list[TResponseInputItem] = [
        {"role": "user", "content": f"Message {i}"} for i in range(5)
    ]
    await session.add_items(items)

    # get_items() with no limit should use session_settings.limit=3
    retrieved = await session.get_items()
    assert len(retrieved) == 3
    assert retrieved[0].get("content") == "Message 2"
    assert retrieved[1].get("content") == "Message 3"
    assert retrieved[2].get("content") == "Message 4"


async def test_get_items_explicit_limit_overrides_session_settings(
        make_session: SessionFactory) -> None:
    session = make_session("explicit_override_test", session_settings=SessionSettings(limit=5))

    items: list[TResponseInputItem] = [
        {"role": "user", "content": f"Message {i}"} for i in range(10)
    ]
    await session.add_items(items)

    # Explicit limit=2 should override session_settings.limit=5
    retrieved = await session.get_items(limit=2)
    assert len(retrieved) == 2
    assert retrieved[0].get("content") == "Message 8"
    assert retrieved[1].get("content") == "Message 9"


async def test_runner_with_session_settings_override(make_runner_session: SessionFactory) -> None:
    session = make_runner_session("runner_override_test",
                                  session_settings=SessionSettings(limit=100))

    items: list[TResponseInputItem] = [
        {"role": "user", "content": f"Turn {i}"} for i in range(10)
    ]
    await session.add_items(items)

    model = ScriptedModel()
    agent = Agent(name="test", model=model)
    model.enqueue([get_text_message("Got it")])

    await Runner.run(
        agent, "New question", session=session,
        run_config=RunConfig(session_settings=SessionSettings(limit=2)))  # Override to 2

    # Verify the agent received only the last 2 history items + new question
    last_input = model.calls[-1].input
    history_items = [item for item in last_input if item.get("content") != "New question"]
    assert len(history_items) == 2


# -- tests/memory/test_session_limit.py ---------------------------------------------------


@RUNNER_METHODS
async def test_session_limit_parameter(runner_method: str,
                                       make_runner_session: SessionFactory) -> None:
    session = make_runner_session("limit_test")

    model = ScriptedModel()
    agent = Agent(name="test", model=model)

    model.enqueue([get_text_message("Reply 1")])
    await run_agent_async(runner_method, agent, "Message 1", session=session)

    model.enqueue([get_text_message("Reply 2")])
    await run_agent_async(runner_method, agent, "Message 2", session=session)

    model.enqueue([get_text_message("Reply 3")])
    await run_agent_async(runner_method, agent, "Message 3", session=session)

    # Verify we have 6 items in total (3 user + 3 assistant)
    all_items = await session.get_items()
    assert len(all_items) == 6

    # Test session_limit via RunConfig - should only get last 2 history items + new input
    model.enqueue([get_text_message("Reply 4")])
    await run_agent_async(runner_method, agent, "Message 4", session=session,
                          run_config=RunConfig(session_settings=SessionSettings(limit=2)))

    last_input = model.calls[-1].input
    # Should have: 2 history items + 1 new message = 3 total
    assert len(last_input) == 3
    # First item should be "Message 3" (not Message 1 or 2)
    assert last_input[0].get("content") == "Message 3"
    # Assistant message has content as a list
    assert last_input[1].get("content")[0]["text"] == "Reply 3"
    assert last_input[2].get("content") == "Message 4"


@RUNNER_METHODS
async def test_session_limit_drops_unmatched_history_function_call_output(
        runner_method: str, make_runner_session: SessionFactory) -> None:
    """A limit boundary must not pass an output whose matching call was excluded."""
    session = make_runner_session("limit_tool_pair")
    history = cast(
        list[TResponseInputItem],
        [
            {"role": "user", "content": "What is the weather?"},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather",
             "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "It is sunny.", "annotations": []}],
            },
        ],
    )
    await session.add_items(history)

    assert await session.get_items(limit=2) == history[-2:]

    model = ScriptedModel()
    model.enqueue([get_text_message("Tomorrow is sunny too.")])
    agent = Agent(name="test", model=model)

    await run_agent_async(runner_method, agent, "What about tomorrow?", session=session,
                          run_config=RunConfig(session_settings=SessionSettings(limit=2)))

    assert model.calls[-1].input == [
        history[-1],
        {"role": "user", "content": "What about tomorrow?"},
    ]


@RUNNER_METHODS
async def test_session_limit_zero(runner_method: str, make_runner_session: SessionFactory) -> None:
    """Test that session_limit=0 provides no history, only new message."""
    session = make_runner_session("limit_zero_test")

    model = ScriptedModel()
    agent = Agent(name="test", model=model)

    model.enqueue([get_text_message("Reply 1")])
    await run_agent_async(runner_method, agent, "Message 1", session=session)

    model.enqueue([get_text_message("Reply 2")])
    await run_agent_async(runner_method, agent, "Message 2", session=session)

    model.enqueue([get_text_message("Reply 3")])
    await run_agent_async(runner_method, agent, "Message 3", session=session,
                          run_config=RunConfig(session_settings=SessionSettings(limit=0)))

    last_input = model.calls[-1].input
    assert len(last_input) == 1
    assert last_input[0].get("content") == "Message 3"


@RUNNER_METHODS
async def test_session_limit_none_gets_all_history(runner_method: str,
                                                   make_runner_session: SessionFactory) -> None:
    """Test that session_limit=None retrieves entire history (default behavior)."""
    session = make_runner_session("limit_none_test")

    model = ScriptedModel()
    agent = Agent(name="test", model=model)

    for i in range(1, 6):
        model.enqueue([get_text_message(f"Reply {i}")])
        await run_agent_async(runner_method, agent, f"Message {i}", session=session)

    # Verify 10 items in session (5 user + 5 assistant)
    all_items = await session.get_items()
    assert len(all_items) == 10

    model.enqueue([get_text_message("Reply 6")])
    await run_agent_async(runner_method, agent, "Message 6", session=session,
                          run_config=RunConfig(session_settings=SessionSettings(limit=None)))

    last_input = model.calls[-1].input
    assert len(last_input) == 11  # 10 history + 1 new
    assert last_input[0].get("content") == "Message 1"
    assert last_input[-1].get("content") == "Message 6"


@RUNNER_METHODS
async def test_session_limit_larger_than_history(runner_method: str,
                                                 make_runner_session: SessionFactory) -> None:
    """Test that session_limit larger than history size returns all items."""
    session = make_runner_session("limit_large_test")

    model = ScriptedModel()
    agent = Agent(name="test", model=model)

    model.enqueue([get_text_message("Reply 1")])
    await run_agent_async(runner_method, agent, "Message 1", session=session)

    model.enqueue([get_text_message("Reply 2")])
    await run_agent_async(runner_method, agent, "Message 2", session=session,
                          run_config=RunConfig(session_settings=SessionSettings(limit=100)))

    last_input = model.calls[-1].input
    assert len(last_input) == 3  # 2 history + 1 new
    assert last_input[0].get("content") == "Message 1"
    # Assistant message has content as a list
    assert last_input[1].get("content")[0]["text"] == "Reply 1"
    assert last_input[2].get("content") == "Message 2"


# -- tests/extensions/memory/test_sqlalchemy_session.py -----------------------------------


async def test_sqlalchemy_session_direct_ops(make_session: SessionFactory) -> None:
    session = make_session("direct_ops_test")

    items: list[TResponseInputItem] = [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi there!"},
    ]
    await session.add_items(items)

    retrieved = await session.get_items()
    assert len(retrieved) == 2
    assert retrieved[0].get("content") == "Hello"
    assert retrieved[1].get("content") == "Hi there!"

    popped = await session.pop_item()
    assert popped is not None
    assert popped.get("content") == "Hi there!"
    retrieved_after_pop = await session.get_items()
    assert len(retrieved_after_pop) == 1
    assert retrieved_after_pop[0].get("content") == "Hello"

    await session.clear_session()
    retrieved_after_clear = await session.get_items()
    assert len(retrieved_after_clear) == 0


async def test_non_ascii_round_trip(make_session: SessionFactory) -> None:
    # The two storage cases' shared assertion: the item reads back equal.
    session = make_session("default_ascii_storage")
    item: TResponseInputItem = {"role": "user", "content": "café"}

    await session.add_items([item])

    assert await session.get_items() == [item]


async def test_runner_integration(make_runner_session: SessionFactory) -> None:
    agent = Agent(name="test", model=ScriptedModel())
    session = make_runner_session("runner_integration_test")

    assert isinstance(agent.model, ScriptedModel)
    agent.model.enqueue([get_text_message("San Francisco")])
    result1 = await Runner.run(agent, "What city is the Golden Gate Bridge in?",
                               session=session)
    assert result1.final_output == "San Francisco"

    agent.model.enqueue([get_text_message("California")])
    result2 = await Runner.run(agent, "What state is it in?", session=session)
    assert result2.final_output == "California"

    last_input = agent.model.calls[-1].input
    assert len(last_input) > 1
    assert any("Golden Gate Bridge" in str(item.get("content", "")) for item in last_input)


async def test_session_isolation(make_runner_session: SessionFactory) -> None:
    agent = Agent(name="test", model=ScriptedModel())
    session1 = make_runner_session("session_1")
    session2 = make_runner_session("session_2")

    assert isinstance(agent.model, ScriptedModel)
    agent.model.enqueue([get_text_message("I like cats.")])
    await Runner.run(agent, "I like cats.", session=session1)

    agent.model.enqueue([get_text_message("I like dogs.")])
    await Runner.run(agent, "I like dogs.", session=session2)

    agent.model.enqueue([get_text_message("You said you like cats.")])
    result = await Runner.run(agent, "What animal did I say I like?", session=session1)
    assert "cats" in result.final_output.lower()
    assert "dogs" not in result.final_output.lower()


async def test_get_items_with_limit(make_session: SessionFactory) -> None:
    session = make_session("limit_test")

    items: list[TResponseInputItem] = [
        {"role": "user", "content": "1"},
        {"role": "assistant", "content": "2"},
        {"role": "user", "content": "3"},
        {"role": "assistant", "content": "4"},
    ]
    await session.add_items(items)

    latest_2 = await session.get_items(limit=2)
    assert len(latest_2) == 2
    assert latest_2[0].get("content") == "3"
    assert latest_2[1].get("content") == "4"

    all_items = await session.get_items()
    assert len(all_items) == 4

    more_than_all = await session.get_items(limit=10)
    assert len(more_than_all) == 4


async def test_pop_from_empty_session(make_session: SessionFactory) -> None:
    session = make_session("empty_session")
    popped = await session.pop_item()
    assert popped is None


async def test_concurrent_pop_item_returns_each_row_once(make_session: SessionFactory) -> None:
    """Concurrent pops must return each stored item at most once."""
    writer = make_session("concurrent_pop")
    other = make_session("concurrent_pop")
    await writer.add_items([
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "second"},
    ])

    tasks = [asyncio.create_task(session.pop_item()) for session in (writer, other)]
    try:
        popped = await asyncio.wait_for(asyncio.gather(*tasks), timeout=2)
    finally:
        for task in tasks:
            if not task.done():
                task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    contents = {cast(dict[str, Any], item)["content"] for item in popped if item is not None}
    assert contents == {"first", "second"}


async def test_get_items_limit_returns_fewer_when_history_exhausted(
        make_session: SessionFactory) -> None:
    session = make_session("limit_exhausted")

    await session.add_items([{"role": "user", "content": "only valid"}])

    retrieved = await session.get_items(limit=5)
    assert [item.get("content") for item in retrieved] == ["only valid"]


async def test_add_empty_items_list(make_session: SessionFactory) -> None:
    session = make_session("add_empty_test")

    initial_items = await session.get_items()
    assert len(initial_items) == 0

    await session.add_items([])

    items_after_add = await session.get_items()
    assert len(items_after_add) == 0


@pytest.mark.parametrize("use_dictionary", [False, True], ids=["class", "dictionary"])
async def test_session_settings_from_url(use_dictionary: bool,
                                         make_session: SessionFactory) -> None:
    session_settings: SessionSettings | dict[str, int] = (
        {"limit": 5} if use_dictionary else SessionSettings(limit=5))
    session = make_session("from_url_settings_test", session_settings=session_settings)

    assert isinstance(session.session_settings, SessionSettings)
    assert session.session_settings.limit == 5
