"""Lengths in the unit the original app counts (``length_unit``), on SQLite and PostgreSQL.

The session injection (Laminark) and the card app (CardShark) are JavaScript: their
500- and 6,000-character budgets and the card's ``ceil(len/4)`` count ``String.length``,
UTF-16 code units, where a character outside the BMP (most emoji) is 2. Their profiles
count the same by default (``session@3``, ``card@5``); ``codepoints`` counts as Python's
``len``. Lengths are checked here against an independent count (the UTF-16 encoding's
size), never against the helper under test.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxledger import Assembly, Ledger
from ctxledger.assembler import assemble, policy_for
from ctxledger.assembler.model import WITHOUT_REGEX_KEYS
from ctxledger.assembler.profiles.card import CardPolicy
from ctxledger.assembler.profiles.session import SessionPolicy, SessionReport
from ctxledger.assembler.text import cut, prefix_within, shorten_to, text_length
from ctxledger.assembler.tokens import TokenCounter
from ctxledger.projections.session_view import Observation, PreviousSession, SessionView

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
TOOLS_HEADING = "## Available Tools"


def utf16(text: str) -> int:
    """JavaScript's ``String.length``: the UTF-16 encoding's size in 2-byte units."""
    return len(text.encode("utf-16-le")) // 2


# -- the helpers ---------------------------------------------------------------------------


def test_an_astral_character_is_two_utf16_units_and_one_code_point() -> None:
    text = "tool 🔧 ok é"
    assert text_length(text, "utf16") == utf16(text) == 12
    assert text_length(text, "codepoints") == len(text) == 11
    assert text_length("\ud800", "utf16") == 1  # a lone surrogate, as a JS string holds it


def test_a_prefix_never_ends_inside_a_pair() -> None:
    assert prefix_within("a😀b", 2, "utf16") == "a"     # 😀 would end at unit 3
    assert prefix_within("a😀b", 3, "utf16") == "a😀"
    assert prefix_within("a😀b", 2, "codepoints") == "a😀"
    assert prefix_within("😀", 1, "utf16") == ""
    assert prefix_within("abc", 0, "utf16") == ""
    assert cut("😀😀😀", 5, unit="utf16") == "😀😀..."
    assert shorten_to("😀😀😀😀", 7, unit="utf16") == "😀😀..."
    assert shorten_to("😀😀😀😀", 7) == "😀😀😀😀"     # 4 code points fit in 7


@given(text=st.text(), limit=st.integers(-2, 60))
def test_a_utf16_prefix_is_the_longest_that_fits(text: str, limit: int) -> None:
    prefix = prefix_within(text, limit, "utf16")
    assert text.startswith(prefix)
    assert utf16(prefix) <= max(0, limit)  # st.text() holds no lone surrogate
    if prefix != text:  # one more code point would be over
        assert text_length(text[:len(prefix) + 1], "utf16") > limit


def test_the_counter_estimates_over_the_units_it_is_given() -> None:
    text = "🐉🐉🐉 fire"  # 8 code points, 11 UTF-16 units
    assert TokenCounter("chars4", unit="utf16").count(text) == math.ceil(11 / 4) == 3
    assert TokenCounter("chars4").count(text) == math.ceil(8 / 4) == 2
    assert TokenCounter("chars4", unit="utf16").truncate("🐉🐉🐉", 1) == "🐉🐉"
    assert TokenCounter("chars4", unit="utf16").key == "chars4:utf16"
    # A tokenizer's count has no unit: the unit does not split its cache.
    assert TokenCounter("cl100k_base", unit="utf16").key == "cl100k_base"


# -- the session injection -----------------------------------------------------------------


EMOJI_TOOLS = [f"🔧🚀 deploy-{i:02d} 🧪📦" for i in range(40)]
"""Skill names with 4 astral characters each: 19 code points, 23 UTF-16 units."""


def session_with_emoji_tools(ledger: Ledger, stream: str = "s",
                             settings: dict[str, Any] | None = None) -> str:
    if not ledger.events("scope:p"):
        ledger.append("scope:p", [
            {"type": "tool.registered", "data": {"name": name, "tool_type": "skill"}}
            for name in EMOJI_TOOLS])
    ledger.append(stream, [{"type": "session.started", "data": {"scope": "p"}},
                           *({"type": "setting.changed", "data": {"key": k, "value": v}}
                             for k, v in sorted((settings or {}).items()))])
    return stream


def tool_section(assembly: Assembly) -> str:
    text = assembly.text
    assert TOOLS_HEADING in text
    return text[text.index(TOOLS_HEADING):]


def test_emoji_tool_names_keep_the_tool_section_within_500_utf16_units(
        ledger: Ledger) -> None:
    stream = session_with_emoji_tools(ledger)
    assembly = ledger.assemble(stream, "session", now=NOW)
    assert assembly.policy_version == "session@3"
    section = tool_section(assembly)
    report = assembly.report
    assert isinstance(report, SessionReport)
    assert utf16(section) <= 500
    assert report.tool_section_chars == utf16(section)
    assert report.chars == utf16(assembly.text)
    shown = sum(name in section for name in EMOJI_TOOLS)
    assert 0 < shown < len(EMOJI_TOOLS)
    lines = [line for line in section.split("\n") if line.startswith("- skill: ")]
    # The next tool's line would not have fitted.
    assert utf16("\n".join([TOOLS_HEADING, *lines, f"- skill: {EMOJI_TOOLS[shown]}"])) > 500


def test_a_codepoints_policy_still_counts_code_points(ledger: Ledger) -> None:
    stream = session_with_emoji_tools(ledger, "py", {"length_unit": "codepoints"})
    assembly = ledger.assemble(stream, "session", now=NOW)
    assert assembly.policy_version.startswith("session@3+")
    section = tool_section(assembly)
    report = assembly.report
    assert isinstance(report, SessionReport)
    # Within 500 as Python counts, over it as the app did: what the default now prevents.
    assert len(section) <= 500 < utf16(section)
    assert report.tool_section_chars == len(section)
    js = tool_section(ledger.assemble(session_with_emoji_tools(ledger, "js"), "session",
                                      now=NOW))
    utf16_shown = sum(name in js for name in EMOJI_TOOLS)
    assert sum(name in section for name in EMOJI_TOOLS) > utf16_shown


def session_view(summary: str, observations: tuple[Observation, ...] = (),
                 settings: dict[str, Any] | None = None) -> SessionView:
    return SessionView(
        stream_id="new", scope="p", position=90, exists=True, settings=settings or {},
        usage_window=(NOW - timedelta(days=7), NOW), observations=observations,
        previous_session=PreviousSession(stream_id="old", summary=summary,
                                         ended_at=NOW - timedelta(hours=2), position=50))


def test_the_6000_cap_counts_utf16_units() -> None:
    view = session_view("🌊" * 4000)  # 8,000 units, 4,000 code points
    assembly = assemble(view, "session", NOW)
    assert utf16(assembly.text) <= 6000 < utf16(assembly.text) + 2
    assert "🌊" * 100 in assembly.text and assembly.text.count("🌊") < 3000
    assert assembly.decision("previous_session:old").action == "truncated"
    report = assembly.report
    assert isinstance(report, SessionReport) and report.chars == utf16(assembly.text)
    # The same view counted in code points fits as it is: nothing is cut.
    points = assemble(session_view("🌊" * 4000, settings={"length_unit": "codepoints"}),
                      "session", NOW)
    assert points.text.count("🌊") == 4000
    assert points.decision("previous_session:old").action == "included"


def test_an_observation_is_cut_at_120_utf16_units() -> None:
    note = Observation(kind="decision", content="🧭" * 100, source=None,
                       recorded_at=NOW - timedelta(hours=3), position=60, stream_id="old")
    assembly = assemble(session_view("Shipped.", (note,)), "session", NOW)
    # 120 units of the note: 60 of its emoji, then the ellipsis.
    assert f"- {'🧭' * 60}... (" in assembly.text
    decision = assembly.decision("observation:60")
    assert (decision.detail["content_chars"], decision.detail["cut"]) == (200, True)
    points = assemble(session_view("Shipped.", (note,), {"length_unit": "codepoints"}),
                      "session", NOW)
    assert f"- {'🧭' * 100} (" in points.text
    assert points.decision("observation:60").detail["cut"] is False


def test_bmp_text_assembles_as_the_previous_revision_did(
        monkeypatch: pytest.MonkeyPatch) -> None:
    view = session_view("Fixed the build; é and 中文 are one unit each. " * 200)
    current = assemble(view, "session", NOW)
    with monkeypatch.context() as patched:
        patched.setattr(SessionPolicy, "REVISION", 2)
        older = assemble(view, "session", NOW)
    assert older.policy_version == "session@2"
    # Only the revision differs: every decision and text is the same.
    assert older.model_dump(exclude={"policy_version", "digest"}) \
        == current.model_dump(exclude={"policy_version", "digest"})


# -- the card's ceil(len/4) ----------------------------------------------------------------


def card_session(ledger: Ledger, stream: str, **settings: Any) -> None:
    ledger.append(stream, [
        {"type": "session.started", "data": {}},
        *({"type": "setting.changed", "data": {"key": key, "value": value}}
          for key, value in sorted({"token_encoding": "chars4", **settings}.items())),
        {"type": "card.set", "data": {"name": "Q", "description": "🐉🐉🐉 fire"}},
        {"type": "message.appended", "data": {"message_id": "m1", "role": "user",
                                              "content": "🐉" * 5}}])


def description_tokens(assembly: Assembly) -> int:
    (section,) = [s for s in assembly.sections if s.name == "card"]
    (item,) = [i for i in section.items if i.id == "description"]
    return item.tokens


def test_a_card_with_astral_characters_estimates_ceil_utf16_len_over_4(
        db_url: str) -> None:
    with Ledger.open(db_url) as ledger:
        card_session(ledger, "js")
        card_session(ledger, "py", length_unit="codepoints")
        js = ledger.assemble("js", "card", now=NOW)
        py = ledger.assemble("py", "card", now=NOW)  # same texts, same token cache
        again = ledger.assemble("js", "card", now=NOW)
    text = "🐉🐉🐉 fire"
    assert js.policy_version.startswith("card@5+") and js.tokens.encoding == "chars4"
    assert description_tokens(js) == math.ceil(utf16(text) / 4) == 3
    assert description_tokens(py) == math.ceil(len(text) / 4) == 2
    assert again.digest == js.digest
    # The message: its content's estimate plus the same per-message overhead either way.
    (js_message,) = [m for m in js.messages if m.item == "message:m1"]
    (py_message,) = [m for m in py.messages if m.item == "message:m1"]
    assert js_message.tokens - py_message.tokens == math.ceil(10 / 4) - math.ceil(5 / 4)
    with Ledger.open(db_url) as reopened:  # counts from the stored cache, per unit
        assert reopened.assemble("js", "card", now=NOW).digest == js.digest
        assert reopened.assemble("py", "card", now=NOW).digest == py.digest


def test_a_length_unit_that_is_not_known_is_one_line_and_writes_nothing(
        ledger: Ledger) -> None:
    from ctxledger import LedgerError
    from ctxledger.assembler.policy import PolicyError

    with pytest.raises(PolicyError) as raised:
        policy_for("session", {"length_unit": "bytes"})
    message = str(raised.value)
    assert message.startswith("invalid session policy: setting 'length_unit': ")
    assert "'utf16' or 'codepoints'" in message and "\n" not in message
    with pytest.raises(LedgerError) as refused:
        card_session(ledger, "bad", length_unit="bytes")
    assert "invalid card policy: setting 'length_unit': " in str(refused.value)
    assert "\n" not in str(refused.value)
    assert ledger.events("bad") == []


# -- audit ---------------------------------------------------------------------------------


def test_records_of_the_previous_revisions_audit_as_superseded(
        ledger: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    card_session(ledger, "chat")
    custom = {"profile": "card", "compression_level": "chat_only",
              "token_encoding": "chars4"}
    with monkeypatch.context() as patched:  # what the previous release made and recorded
        patched.setattr(CardPolicy, "REVISION", 4)
        old = ledger.assemble("chat", "card", now=NOW)
        old_custom = ledger.assemble("chat", "card", now=NOW, policy=custom)
    # The versions the previous release gave these policies: the hash is unchanged.
    assert (old.policy_version, old_custom.policy_version) == (
        "card@4+7cd062282e", "card@4+416e7647eb")
    for assembly, policy in ((old, None), (old_custom, custom)):
        # That release stored no length_unit: its record holds none.
        stored = assembly_policy(ledger, assembly, policy)
        ledger.append("chat", {"type": "context.assembled", "data": {
            "profile": "card", "policy_version": assembly.policy_version,
            "position": assembly.position, "now": assembly.now.isoformat(),
            "digest": assembly.digest, "format_version": assembly.format_version,
            "policy": stored}})
    ledger.record_assembly("chat", ledger.assemble("chat", "card", now=NOW))
    ledger.append("chat", {"type": "context.assembled", "data": {  # a format-3 record
        "profile": "card", "policy_version": "card@2", "position": old.position,
        "now": old.now.isoformat(), "digest": "0" * 64, "format_version": 3}})
    entries = ledger.audit("chat").entries
    assert [e.status for e in entries] == ["superseded", "superseded", "match",
                                           "older_format"]
    assert [e.derived_policy_version for e in entries[:2]] == [
        "card@5+7cd062282e", "card@5+416e7647eb"]
    assert "not a sign of tampering" in entries[0].detail
    assert entries[3].detail.startswith(f"recorded under format 3; current is "
                                        f"{WITHOUT_REGEX_KEYS}: ")


def assembly_policy(ledger: Ledger, assembly: Assembly,
                    custom: dict[str, Any] | None) -> dict[str, Any]:
    """The policy data the previous release stored with ``assembly``: no length_unit."""
    policy = policy_for("card", ledger.view("chat").settings) if custom is None \
        else CardPolicy.model_validate(custom)
    data = policy.model_dump(mode="json")
    del data["length_unit"]
    return data


def test_a_session_record_of_revision_2_is_superseded(
        ledger: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    stream = session_with_emoji_tools(ledger)
    with monkeypatch.context() as patched:
        patched.setattr(SessionPolicy, "REVISION", 2)
        old = ledger.assemble(stream, "session", now=NOW)
    ledger.append(stream, {"type": "context.assembled", "data": {
        "profile": "session", "policy_version": old.policy_version,
        "position": old.position, "now": old.now.isoformat(), "digest": old.digest,
        "format_version": old.format_version}})
    current = ledger.assemble(stream, "session", now=NOW)
    ledger.record_assembly(stream, current)
    entries = ledger.audit(stream).entries
    assert [(e.status, e.recorded_policy_version, e.derived_policy_version)
            for e in entries] == [("superseded", "session@2", "session@3"),
                                  ("match", "session@3", "session@3")]


def test_a_policy_that_leaves_the_unit_at_its_default_keeps_its_hash() -> None:
    # The hashes the previous release gave these policies, at the new revisions.
    assert policy_for("session", {"session_max_chars": 3000}).version \
        == "session@3+32b5a850d8"
    assert policy_for("card", {"token_encoding": "chars4"}).version == "card@5+7cd062282e"
    assert policy_for("session", {"length_unit": "codepoints"}).version.startswith(
        "session@3+")
