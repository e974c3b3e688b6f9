"""What format 7 says, and only where it applies, on SQLite and PostgreSQL: a setting key
nothing reads is named (with the nearest known key) by the append that writes it and by
every assembly of its session; the card app's ``compressionEnabled`` means
``chat_only``; a novel bundle without a scene plan or an exemplar is warned about; a
session's tools keep registration order when none was used in the window. An assembly
none of this touches still says format 5 and hashes what it did; a record made before
says ``older_format`` at audit, never a digest mismatch."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from helpers.service import client, make_key
from helpers.service_fixtures import Served, fresh, served
from typer.testing import CliRunner

from ctxledger import EventValidationError, Ledger
from ctxledger._config import ENV_VAR
from ctxledger.assembler.model import FORMAT_VERSION, WITHOUT_REGEX_KEYS
from ctxledger.cli import app
from ctxledger.cli._errors import DEBUG_ENV_VAR

__all__ = ["served"]  # the fixture, used by name

TYPO = ("setting 'compresion_level' is not read by any profile "
        "(did you mean 'compression_level'?)")
FAR = datetime(2040, 1, 1, tzinfo=UTC)


def ev(type_: str, **data: Any) -> dict[str, Any]:
    return {"type": type_, "data": data}


def setting(key: str, value: Any) -> dict[str, Any]:
    return ev("setting.changed", key=key, value=value)


def fates(assembly: Any) -> list[tuple[str, str, str]]:
    """The decisions without item ids and positions (they differ between sessions)."""
    return sorted((d.section, d.action, d.reason) for d in assembly.decisions)


def card_session(ledger: Ledger, session: str, *settings: dict[str, Any]) -> None:
    ledger.append(session, [
        ev("session.started", scope="p"), *settings,
        ev("card.set", name="Mara", description="A captain.", mes_example="<START>Aye."),
        *(ev("message.appended", role=("user" if n % 2 else "assistant"),
             content=f"line {n}") for n in range(1, 8))])


# -- unknown setting keys ------------------------------------------------------------------


def test_an_unknown_key_is_named_on_append_with_the_nearest_known_key(ledger: Ledger) -> None:
    done = ledger.append("s1", [ev("session.started", scope="p"),
                                setting("compresion_level", "chat_only"),
                                setting("compression_level", "chat_only"),
                                setting("app.theme", "dark"),
                                setting("qqqq", 1)])
    assert done.warnings == (TYPO, "setting 'qqqq' is not read by any profile (a key of "
                                   "the application's own goes under 'app.')")
    assert ledger.append("scope:p", setting("contxt_limit", 9)).warnings == (
        "setting 'contxt_limit' is not read by any profile (did you mean 'context_limit'?)",)
    for fine in (setting("profile", "card"), setting("agent_manifests", {}),
                 setting("policy.novel", {}), setting("compressionEnabled", True),
                 ev("message.appended", role="user", content="hi")):
        assert ledger.append("s1", fine).warnings == ()


@pytest.mark.parametrize("profile", ["card", "session", "novel", "brief"])
def test_every_assembly_of_a_session_with_one_warns_as_format_7(ledger: Ledger,
                                                                profile: str) -> None:
    card_session(ledger, "plain")
    card_session(ledger, "typo", setting("compresion_level", "chat_only"))
    plain = ledger.assemble("plain", profile, now=FAR)
    typo = ledger.assemble("typo", profile, now=FAR)
    assert TYPO not in plain.warnings and TYPO in typo.warnings
    assert typo.warnings[-1] == TYPO
    assert typo.format_version == FORMAT_VERSION == 7
    assert fates(typo) == fates(plain)  # the key changes nothing but the warning
    assert typo.text == plain.text
    assert ledger.assemble("typo", profile, now=FAR).digest == typo.digest
    # A scope default is the session's setting too.
    ledger.append("scope:p", setting("usage_windw_days", 3))
    assert any("usage_windw_days" in line
               for line in ledger.assemble("plain", profile, now=FAR).warnings)


def test_an_untouched_session_is_format_5_and_audits_as_before(ledger: Ledger) -> None:
    card_session(ledger, "s1")
    before = ledger.assemble("s1", "card", now=FAR)
    assert before.format_version == WITHOUT_REGEX_KEYS and before.warnings == []
    ledger.record_assembly("s1", before)
    ledger.append("s1", setting("compresion_level", "chat_only"))
    after = ledger.assemble("s1", "card", now=FAR)
    assert after.format_version == FORMAT_VERSION
    ledger.record_assembly("s1", after)
    # The record made at the earlier position still matches; a format-5 record of the
    # later one (what an earlier release recorded) is another format, not tampering.
    ledger.append("s1", ev("context.assembled", profile="card", position=after.position,
                           policy_version=after.policy_version, now=FAR.isoformat(),
                           digest="0" * 64, format_version=WITHOUT_REGEX_KEYS))
    assert [e.status for e in ledger.audit("s1").entries] == ["match", "match",
                                                              "older_format"]


# -- compressionEnabled --------------------------------------------------------------------


def test_compression_enabled_means_chat_only(ledger: Ledger) -> None:
    card_session(ledger, "legacy", setting("compressionEnabled", True))
    card_session(ledger, "level", setting("compression_level", "chat_only"))
    card_session(ledger, "off", setting("compressionEnabled", False))
    card_session(ledger, "none")
    legacy = ledger.assemble("legacy", "card", now=FAR)
    level = ledger.assemble("level", "card", now=FAR)
    assert legacy.policy_version == level.policy_version != "card@5"
    assert fates(legacy) == fates(level) and legacy.text == level.text
    assert legacy.warnings == [] and legacy.format_version == WITHOUT_REGEX_KEYS
    off = ledger.assemble("off", "card", now=FAR)
    assert off.policy_version == ledger.assemble("none", "card", now=FAR).policy_version
    # A compression level set by name wins over the switch, whatever the order.
    card_session(ledger, "both", setting("compression_level", "chat_dialogue"),
                 setting("compressionEnabled", True))
    both = ledger.assemble("both", "card", now=FAR)
    assert both.report.model_dump()["compression_level"] == "chat_dialogue"
    assert legacy.report.model_dump()["compression_level"] == "chat_only"


def test_a_compression_enabled_that_is_not_a_boolean_is_refused(ledger: Ledger) -> None:
    card_session(ledger, "s1")
    head = ledger.head()
    with pytest.raises(EventValidationError) as caught:
        ledger.append("s1", setting("compressionEnabled", "yes"))
    assert str(caught.value) == ("setting.changed: invalid card policy: setting "
                                 "'compressionEnabled': must be true or false, not 'yes'")
    assert ledger.head() == head


# -- novel: the required items -------------------------------------------------------------

PLAN_MISSING = "no scene plan: a novel bundle requires one"
EXEMPLAR_MISSING = "no style exemplar: a novel bundle requires one"


def test_a_novel_bundle_without_its_required_items_warns(ledger: Ledger) -> None:
    ledger.append("book", [ev("session.started", scope="p"),
                           ev("item.put", item_id="ann", kind="character",
                              content="Ann, a pilot.")])
    bare = ledger.assemble("book", "novel", now=FAR)
    assert [line.split(" (")[0] for line in bare.warnings] == [PLAN_MISSING,
                                                               EXEMPLAR_MISSING]
    assert bare.format_version == FORMAT_VERSION
    ledger.append("book", ev("item.put", item_id="plan", kind="scene_plan",
                             content="Ann lands the plane."))
    planned = ledger.assemble("book", "novel", now=FAR)
    assert [line.split(" (")[0] for line in planned.warnings] == [EXEMPLAR_MISSING]
    ledger.append("book", ev("item.put", item_id="voice", kind="exemplar",
                             content="The sky was a bruise."))
    whole = ledger.assemble("book", "novel", now=FAR)
    assert whole.warnings == [] and whole.format_version == WITHOUT_REGEX_KEYS
    # An anti-exemplar is no exemplar.
    ledger.append("book2", [ev("session.started", scope="p"),
                            ev("item.put", item_id="plan", kind="scene_plan", content="P."),
                            ev("item.put", item_id="bad", kind="anti_exemplar",
                               content="It was a dark and stormy night.")])
    assert [line.split(" (")[0] for line in
            ledger.assemble("book2", "novel", now=FAR).warnings] == [EXEMPLAR_MISSING]


# -- session: registration order without usage ---------------------------------------------


def test_tools_keep_registration_order_until_one_is_used(ledger: Ledger) -> None:
    ledger.append("scope:p", [ev("tool.registered", name=name, tool_type="slash_command")
                              for name in ("/zeta", "/alpha", "/mid")])
    ledger.append("s1", ev("session.started", scope="p"))
    idle = ledger.assemble("s1", "session")
    assert [t.name for t in idle.report.tools] == ["/zeta", "/alpha", "/mid"]  # type: ignore[attr-defined]
    assert idle.text.index("- /zeta") < idle.text.index("- /alpha") < idle.text.index("- /mid")
    assert idle.format_version == FORMAT_VERSION
    ledger.append("s1", ev("tool.used", tool_name="/mid"))
    used = ledger.assemble("s1", "session")
    assert [t.name for t in used.report.tools] == ["/mid", "/alpha", "/zeta"]  # type: ignore[attr-defined]
    assert used.format_version == WITHOUT_REGEX_KEYS
    # Registered in name order: the order format 5 made, so format 5.
    ledger.append("scope:q", [ev("tool.registered", name=name, tool_type="slash_command")
                              for name in ("/alpha", "/mid", "/zeta")])
    ledger.append("s2", ev("session.started", scope="q"))
    assert ledger.assemble("s2", "session").format_version == WITHOUT_REGEX_KEYS


# -- the command line and the HTTP service -------------------------------------------------


def test_cli_append_names_an_unknown_key(db_url: str) -> None:
    runner = CliRunner(env={ENV_VAR: None, DEBUG_ENV_VAR: None, "COLUMNS": "160"})
    lines = "".join(json.dumps(event) + "\n" for event in (
        ev("session.started", scope="p"), setting("compresion_level", "chat_only")))
    done = runner.invoke(app, ["--db", db_url, "append", "s1"], input=lines)
    assert done.exit_code == 0, done.stderr
    assert json.loads(done.stdout)["warnings"] == [TYPO]
    bad = runner.invoke(app, ["--db", db_url, "append", "s1"],
                        input=json.dumps(setting("compressionEnabled", 1)) + "\n")
    assert bad.exit_code == 1 and len(bad.stderr.strip().splitlines()) == 1
    assert "'compressionEnabled': must be true or false" in bad.stderr
    shown = runner.invoke(app, ["--db", db_url, "assemble", "s1", "--profile", "card"])
    assert shown.exit_code == 0, shown.stderr
    assert json.loads(shown.stdout)["warnings"] == [TYPO]
    with Ledger.open(db_url, load_vocabulary=False) as ledger:
        assert len(ledger.events("s1")) == 2  # the refused setting wrote nothing


def test_http_append_and_assemble_name_an_unknown_key(served: Served) -> None:
    scope, session = fresh("scope"), fresh("s")
    with client(served.base, make_key(served.url, [scope])) as http:
        done = http.post(f"/streams/{session}/events", json={"events": [
            ev("session.started", scope=scope), setting("compresion_level", "chat_only")]})
        assert done.status_code == 200, done.text
        assert done.json()["warnings"] == [TYPO]
        bad = http.post(f"/streams/{session}/events", json={"events": [
            setting("compressionEnabled", "on")]})
        assert bad.status_code == 400, bad.text
        assert "'compressionEnabled': must be true or false" in bad.json()["detail"]
        context = http.get(f"/sessions/{session}/assemble", params={"profile": "card"})
        assert context.status_code == 200, context.text
        assert context.json()["warnings"] == [TYPO]
        assert context.json()["format_version"] == FORMAT_VERSION
