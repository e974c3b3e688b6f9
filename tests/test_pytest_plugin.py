"""The ``pytest11`` plugin: its fixtures as a user's test suite sees them (``pytester``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ctxledger.store.catalog import CATALOG
from ctxledger.store.errors import EventValidationError
from ctxledger.testing import EventBuilders, assert_decisions

pytest_plugins = ("pytester",)

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "pytest" / "test_time_travel.py"


def test_the_readme_example_passes_in_a_user_suite(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_time_travel=EXAMPLE.read_text(encoding="utf-8"))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)


def test_fixtures_do_not_shadow_the_users_and_each_test_gets_a_new_ledger(
        pytester: pytest.Pytester) -> None:
    pytester.makeconftest("""
        import pytest

        @pytest.fixture
        def ledger():
            return "the user's own ledger fixture"
    """)
    pytester.makepyfile("""
        import pytest
        from freezegun import freeze_time

        @pytest.mark.parametrize("run", [1, 2])
        def test_new_stream_each_time(run, ledger, ctxledger_ledger, ctxledger_events):
            assert ledger == "the user's own ledger fixture"
            # expected_version=0: the stream must be new, so the database is too.
            ctxledger_ledger.append("s", ctxledger_events.session_started(),
                                    expected_version=0)
            assert ctxledger_ledger.head() == 1

        def test_clock_read_at_each_append(ctxledger_ledger, ctxledger_events):
            # The fixture was set up before this freeze; appends still follow it.
            with freeze_time("2025-01-01T00:00:00Z") as clock:
                ctxledger_ledger.append("s", ctxledger_events.session_started())
                clock.move_to("2024-12-31T00:00:00Z")
                ctxledger_ledger.append("s", ctxledger_events.message("hi"))
            first, second = ctxledger_ledger.events("s")
            assert (first.recorded_at.year, second.recorded_at.year) == (2025, 2024)
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)


def test_the_plugin_module_is_import_light() -> None:
    code = ("import sys, ctxledger.pytest_plugin as p; "
            "heavy = [m for m in ('sqlalchemy', 'pydantic', 'tiktoken', 'ctxledger._ledger')"
            " if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


def test_there_is_a_builder_for_every_event_type() -> None:
    builders = EventBuilders()
    assert builders.types() == sorted(CATALOG)
    for type_name in CATALOG:
        assert callable(getattr(builders, type_name.replace(".", "_")))
    assert builders.tool_used(tool_name="Bash") == {"type": "tool.used",
                                                    "data": {"tool_name": "Bash"}}
    with pytest.raises(EventValidationError):
        builders.message_appended(role="narrator", content="x")
    with pytest.raises(AttributeError, match="no event builder"):
        builders.tool_misused  # noqa: B018


def test_assert_decisions_lists_every_difference(pytester: pytest.Pytester) -> None:
    from ctxledger.testing import memory_ledger

    builders = EventBuilders()
    with memory_ledger() as ledger:
        ledger.append("c", [builders.session_started(), builders.card_set(name="M")])
        assembly = ledger.assemble("c", "card")
    assert_decisions(assembly, {"description": ("dropped", "empty_field")})
    with pytest.raises(AssertionError) as raised:
        assert_decisions(assembly, {"description": "included", "nothing": "included"})
    assert "description: expected included, got dropped (empty_field)" in str(raised.value)
    assert "nothing: no decision" in str(raised.value)


def test_the_docs_show_the_example_as_it_is() -> None:
    page = (EXAMPLE.parent.parent.parent / "docs" / "pytest-plugin.md").read_text(encoding="utf-8")
    assert "```python\n" + EXAMPLE.read_text(encoding="utf-8") + "```" in page
