"""Agent scoping (a coding-agent team): manifests, ``state(agent=...)``, compact serializers."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from ctxledger import EventValidationError, Ledger
from ctxledger.assembler.tokens import TokenCounter
from ctxledger.projections.agents import (
    DEFAULT_MANIFESTS,
    STATE_KEYS,
    AgentManifest,
    ManifestError,
    manifests_from_settings,
    parse_manifests_setting,
    reduction_pct,
    scope_state,
)
from ctxledger.projections.compact import compact_dep_graph, compact_plan_state
from ctxledger.store.canonical import canonical_json

FIXTURES = Path(__file__).parent / "fixtures"
NOW = datetime(2026, 2, 27, 15, 0, tzinfo=UTC)
PLAN_STATE = (FIXTURES / "plan_state.md").read_text(encoding="utf-8")
DEP_GRAPH = json.loads((FIXTURES / "dep_graph.json").read_text(encoding="utf-8"))
DEP_ADJACENCY = json.loads((FIXTURES / "dep_graph_adjacency.json").read_text(encoding="utf-8"))
DEP_MODULES = json.loads((FIXTURES / "dep_graph_modules.json").read_text(encoding="utf-8"))
"""44 modules, each ``{imports, exports, loc}``: the full graph a code indexer emits."""


def ev(type_: str, **data: Any) -> dict[str, Any]:
    return {"type": type_, "data": data}


def tokens(text: str) -> int:
    return TokenCounter("cl100k_base").count(text)


def reduction(before: Any, after: Any) -> float:
    """Fewer tokens, as a fraction: canonical JSON of the input vs of the output."""
    return 1 - tokens(canonical_json(after)) / tokens(canonical_json(before))


# -- compact serializers ------------------------------------------------------------------


def test_compact_plan_state_keeps_the_essentials() -> None:
    assert compact_plan_state(PLAN_STATE) == {
        "phase": "39",
        "progress": "2/3 (71%)",
        "status": "In progress",
        "last_activity": "2026-02-27",
        "decisions": [
            "[Phase 35]: Task routing picks the model by plan complexity score",
            "[Phase 36]: Worktrees are opt-in, one per wave",
            "[Phase 37]: Intent drift is scored against INTENT.md on every plan",
            "[Phase 38]: Dependency graph is built with acorn, cached per commit",
            "[Phase 39]: Use acorn with module→script fallback for legacy files",
        ],
        "blockers": ["Bundle is at 1009KB against a 1000KB budget; phase 40 must stay lean"],
    }


def test_compact_plan_state_meets_its_token_target() -> None:
    # Target: 70 to 80% fewer tokens. Fewer still is no failure: the floor is the promise.
    saved = reduction(PLAN_STATE, compact_plan_state(PLAN_STATE))
    assert saved >= 0.70, f"plan state compacted by only {saved:.0%}"


def test_the_measured_fixtures_are_realistic_sizes() -> None:
    assert len(PLAN_STATE.splitlines()) >= 80
    compact = compact_dep_graph(DEP_MODULES)
    assert compact["total_modules"] == len(DEP_MODULES["modules"]) >= 40
    assert compact["total_edges"] == sum(len(m["imports"]) for m in DEP_MODULES["modules"].values())


@pytest.mark.parametrize(("page", "expected"), [
    ("Phase: 3 of 3 (release)\nProgress: 80%\n", {"phase": "3", "progress": "80%"}),
    ("---\nphase: '39'\nprogress: '1/1 complete'\nstatus: Phase complete\n---\n# State\n",
     {"phase": "39", "progress": "1/1 complete", "status": "Phase complete"}),
    ('---\nphase: "7"\nprogress: "2/5"\n---\n', {"phase": "7", "progress": "2/5"}),
    ("Phase: 39 of 42 (Parser Hardening)\nPlan: 2 of 3 in current phase\n"
     "Progress: [███████░░░] 71%\n", {"phase": "39", "progress": "2/3 (71%)"}),
])
def test_compact_plan_state_reads_the_seeds_shapes(page: str, expected: dict[str, str]) -> None:
    compact = compact_plan_state(page)
    assert {key: compact[key] for key in expected} == expected


def test_compact_dep_graph_top_imported_ties_go_by_name() -> None:
    adjacency = {"z": ["b", "a", "c"], "y": ["c", "a", "b"], "x": ["e", "d"]}
    assert compact_dep_graph(adjacency)["top_imported"] == [
        "a (2)", "b (2)", "c (2)", "d (1)", "e (1)"]
    given = {"top_imported": [{"file": "q.js", "count": 3}, {"file": "b.js", "count": 4},
                              {"file": "a.js", "count": 3}]}
    assert compact_dep_graph(given)["top_imported"] == ["b.js (4)", "a.js (3)", "q.js (3)"]


def test_compact_plan_state_keeps_the_last_five_decisions() -> None:
    page = "### Decisions\n" + "".join(f"- decision {n}\n" for n in range(1, 9))
    assert compact_plan_state(page)["decisions"] == [f"decision {n}" for n in range(4, 9)]


@pytest.mark.parametrize("page", [None, "", "just some text\nwith no fields"])
def test_compact_plan_state_defaults(page: str | None) -> None:
    assert compact_plan_state(page) == {"phase": None, "progress": None, "status": None,
                                        "last_activity": None, "decisions": [],
                                        "blockers": []}


def test_compact_plan_state_reads_bold_fields_and_none_blockers() -> None:
    page = ("## Phase 7: Launch\n**Status:** Blocked\n**Plan:** 1/4\n"
            "### Blockers\n- None yet\n")
    compact = compact_plan_state(page)
    assert (compact["phase"], compact["status"], compact["progress"]) == ("7", "Blocked", "1/4")
    assert compact["blockers"] == []


def test_compact_dep_graph_of_precomputed_figures() -> None:
    compact = compact_dep_graph(DEP_GRAPH)
    assert set(compact) == {"total_modules", "total_edges", "top_imported", "has_cycles"}
    assert compact["total_modules"] == DEP_GRAPH["total_modules"]
    assert compact["total_edges"] == 143
    assert compact["has_cycles"] is True
    assert len(compact["top_imported"]) == 5
    first = DEP_GRAPH["top_imported"][0]
    assert compact["top_imported"][0] == f"{first['file']} ({first['count']})"


def test_compact_dep_graph_meets_its_token_target() -> None:
    # Target: 50 to 60% fewer tokens (the floor is the promise).
    for graph in (DEP_GRAPH, DEP_ADJACENCY, DEP_MODULES):
        saved = reduction(graph, compact_dep_graph(graph))
        assert saved >= 0.50, f"dependency graph compacted by only {saved:.0%}"


def test_compact_dep_graph_computes_from_adjacency_and_edges() -> None:
    adjacency = {"a": ["b", "c"], "b": ["c"], "c": [], "d": ["c", "b"]}
    assert compact_dep_graph(adjacency) == {
        "total_modules": 4, "total_edges": 5, "top_imported": ["c (3)", "b (2)"],
        "has_cycles": False}
    edges = {"modules": ["a", "b", "z"], "edges": [["a", "b"], {"from": "b", "to": "a"},
                                                   {"source": "a", "target": "b"}]}
    assert compact_dep_graph(edges) == {
        "total_modules": 3, "total_edges": 2, "top_imported": ["a (1)", "b (1)"],
        "has_cycles": True}


def test_compact_dep_graph_caps_top_imported_at_five() -> None:
    adjacency = {f"m{n}": [f"t{k}" for k in range(8)] for n in range(3)}
    assert len(compact_dep_graph(adjacency)["top_imported"]) == 5


@pytest.mark.parametrize("graph", [None, {}, {"unrelated": 3}])
def test_compact_dep_graph_of_nothing_is_empty(graph: Any) -> None:
    assert compact_dep_graph(graph) == {}


def test_cycle_detection_survives_a_deep_chain() -> None:
    chain = {f"m{n}": [f"m{n + 1}"] for n in range(5000)}
    assert compact_dep_graph(chain)["has_cycles"] is False
    chain["m5000"] = ["m0"]
    assert compact_dep_graph(chain)["has_cycles"] is True


# -- manifests ----------------------------------------------------------------------------


def test_default_manifests_name_only_state_keys_and_exclude_the_rest() -> None:
    assert {"gsd-executor", "gsd-verifier", "gsd-planner", "gsd-phase-researcher",
            "gsd-plan-checker", "writer"} <= set(DEFAULT_MANIFESTS)
    for manifest in DEFAULT_MANIFESTS.values():
        named = [*manifest.fields, *manifest.optional, *manifest.exclude]
        assert sorted(named) == sorted(STATE_KEYS)


@pytest.mark.parametrize(("value", "message"), [
    ([], "must be an object"),
    ({"x": {"fields": ["nope"]}}, "x: fields names unknown state key(s) nope"),
    ({"x": {"fields": ["title"], "exclude": ["title"]}}, "title both given and excluded"),
    ({"x": {"fields": ["title"], "optional": ["title"]}}, "both in fields and optional"),
    ({"x": {"field": ["title"]}}, "x.field: Extra inputs are not permitted"),
    ({"x": {"fields": "title"}}, "x.fields"),
    ({"": {}}, "non-empty"),
])
def test_invalid_manifests_are_one_line_errors(value: Any, message: str) -> None:
    with pytest.raises(ManifestError) as caught:
        parse_manifests_setting(value)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_setting_overrides_and_removes_defaults() -> None:
    manifests = manifests_from_settings({"agent_manifests": {
        "executor": None, "writer": {"fields": ["chapter"]}, "critic": {"optional": ["title"]}}})
    assert "executor" not in manifests and "gsd-executor" not in manifests
    assert manifests["writer"] == AgentManifest(fields=("chapter",))
    assert manifests["critic"].optional == ("title",)
    assert manifests["gsd-planner"] == DEFAULT_MANIFESTS["gsd-planner"]


def test_scope_state_keeps_fields_and_non_null_optional() -> None:
    state = {key: None for key in STATE_KEYS} | {"session": "s", "title": "T"}
    manifest = AgentManifest(fields=("session", "scene"), optional=("title", "chapter"))
    scoped = scope_state(state, "a", {"a": manifest})
    assert scoped == {"_agent": "a", "scene": None, "session": "s", "title": "T",
                      "_savings": {"original_keys": 14, "scoped_keys": 3,
                                   "reduction_pct": 78.6}}  # 11/14 = 78.571...%
    assert list(scoped) == sorted(scoped)


def test_an_unknown_agent_gets_the_full_state_with_agent_and_a_warning() -> None:
    state = {key: None for key in STATE_KEYS} | {"session": "s"}
    scoped = scope_state(state, "stranger", {"a": AgentManifest(fields=("session",))})
    assert {key: scoped[key] for key in state} == state
    assert set(scoped) - set(state) == {"_agent", "_warning"}
    assert scoped["_agent"] == "stranger"
    assert "no manifest for agent 'stranger'" in scoped["_warning"]
    assert "_savings" not in scoped


@pytest.mark.parametrize(("original", "kept", "pct"), [
    (14, 7, 50.0), (14, 3, 78.6), (3, 1, 66.7), (3, 2, 33.3), (8, 1, 87.5), (16, 15, 6.3),
    (0, 0, 0.0), (7, 7, 0.0)])
def test_reduction_pct_has_one_decimal_rounded_half_up(original: int, kept: int,
                                                       pct: float) -> None:
    assert reduction_pct(original, kept) == pct


def test_savings_count_the_states_keys_not_agent_or_savings() -> None:
    state = {"session": "s", "title": "T", "scope": "p", "chapter": None}
    scoped = scope_state(state, "a", {"a": AgentManifest(fields=("session",),
                                                         optional=("chapter",))})
    assert scoped["_savings"] == {"original_keys": 4, "scoped_keys": 1,
                                  "reduction_pct": 75.0}


def test_exclude_wins_over_fields_and_optional() -> None:
    # Validated manifests cannot overlap (see the one-line errors above); one built in
    # code without validation still never leaks an excluded key.
    sloppy = AgentManifest.model_construct(fields=("session", "title"), optional=("scope",),
                                           exclude=("title", "scope"))
    scoped = scope_state({"session": "s", "title": "T", "scope": "p"}, "a", {"a": sloppy})
    assert set(scoped) == {"session", "_agent", "_savings"}


# -- through the ledger ---------------------------------------------------------------------


def _session(ledger: Ledger) -> None:
    ledger.append("s", [
        ev("session.started", scope="proj", title="Phase 39", agent="executor"),
        ev("message.appended", role="user", content="go"),
        ev("document.put", doc_id="state", kind="plan_state", content=PLAN_STATE),
        ev("document.put", doc_id="deps", kind="dep_graph", content=DEP_GRAPH),
        ev("document.put", doc_id="notes", kind="text", content="free text"),
        ev("tool.used", tool_name="grep"),
    ])


def test_state_shows_documents_in_compact_form(ledger: Ledger) -> None:
    _session(ledger)
    documents = {d["doc_id"]: d for d in ledger.state("s", now=NOW)["documents"]}
    assert documents["state"]["content"] == compact_plan_state(PLAN_STATE)
    assert documents["deps"]["content"] == compact_dep_graph(DEP_GRAPH)
    assert documents["notes"]["content"] == "free text"


def test_state_scoped_to_an_agent(ledger: Ledger) -> None:
    _session(ledger)
    full = ledger.state("s", now=NOW)
    executor = ledger.state("s", now=NOW, agent="gsd-executor")
    verifier = ledger.state("s", now=NOW, agent="gsd-verifier")
    planner = ledger.state("s", now=NOW, agent="gsd-planner")
    assert executor["_agent"] == "gsd-executor"
    assert set(executor) - {"_agent", "_savings"} == {
        "scope", "chapter", "title", "documents", "scene", "position", "settings",
        "top_tools"}
    # Intent (our messages) is for the planner, never the executor or the verifier.
    assert "messages" not in executor and "messages" not in verifier
    assert "messages" in planner
    assert "ended_at" not in verifier
    assert executor["_savings"] == {"original_keys": len(full), "scoped_keys": 8,
                                    "reduction_pct": 42.9}
    stranger = ledger.state("s", now=NOW, agent="no-such-agent")
    assert {key: stranger[key] for key in full} == full
    assert stranger["_agent"] == "no-such-agent" and "_warning" in stranger
    assert len(canonical_json(verifier)) < len(canonical_json(full))


def test_agent_manifests_setting_applies_from_scope_and_session(ledger: Ledger) -> None:
    _session(ledger)
    ledger.append("scope:proj", ev("setting.changed", key="agent_manifests",
                                   value={"critic": {"fields": ["title"]}}))
    assert set(ledger.state("s", agent="critic")) == {"_agent", "_savings", "title"}
    ledger.append("s", ev("setting.changed", key="agent_manifests",
                          value={"critic": {"fields": ["scope"]}}))
    assert set(ledger.state("s", agent="critic")) == {"_agent", "_savings", "scope"}


def test_an_invalid_manifest_setting_is_rejected_at_append(ledger: Ledger) -> None:
    _session(ledger)
    head = ledger.head()
    with pytest.raises(EventValidationError) as caught:
        ledger.append("s", [ev("message.appended", role="user", content="fine"),
                            ev("setting.changed", key="agent_manifests",
                               value={"critic": {"fields": ["titel"]}})])
    message = str(caught.value)
    assert message.startswith("event 2: setting.changed: setting 'agent_manifests': critic:")
    assert "titel" in message and "\n" not in message
    assert ledger.head() == head  # nothing written, not even the valid first event
    with pytest.raises(EventValidationError):
        ledger.log.append("scope:proj", [ev("setting.changed", key="agent_manifests",
                                            value="executor")])
    assert ledger.head() == head


def test_manifests_know_every_state_key(ledger: Ledger) -> None:
    # STATE_KEYS is what manifests are validated against: it must be the state's keys.
    _session(ledger)
    assert sorted(ledger.state("s", now=NOW)) == sorted(STATE_KEYS)


SEED_MANIFESTS = json.loads((FIXTURES / "seed_manifests.json").read_text(encoding="utf-8"))
"""A coding-agent team's five manifests, verbatim and mapped to our state's keys (see
its 'about')."""


def _derived(seed: dict[str, list[str]], mapping: dict[str, str | None]) -> dict[str, Any]:
    def mapped(keys: list[str]) -> list[str]:
        out: list[str] = []
        for key in keys:
            target = mapping[key]
            if target is not None and target not in out:
                out.append(target)
        return out
    fields = mapped(seed["fields"])
    optional = [key for key in mapped(seed["optional"]) if key not in fields]
    exclude = [key for key in mapped(seed["exclude"])
               if key not in fields and key not in optional]
    return {"fields": fields, "optional": optional, "exclude": exclude}


def test_the_seed_manifest_fixture_follows_its_mapping() -> None:
    assert sorted(SEED_MANIFESTS["seed"]) == ["gsd-executor", "gsd-phase-researcher",
                                              "gsd-plan-checker", "gsd-planner",
                                              "gsd-verifier"]
    for agent, seed in SEED_MANIFESTS["seed"].items():
        assert SEED_MANIFESTS["manifests"][agent] == _derived(seed, SEED_MANIFESTS["mapping"])


def test_the_seeds_five_manifests_load_through_the_setting(ledger: Ledger) -> None:
    _session(ledger)
    ledger.append("scope:proj", ev("setting.changed", key="agent_manifests",
                                   value=SEED_MANIFESTS["manifests"]))
    full = ledger.state("s", now=NOW)
    scoped = {agent: ledger.state("s", now=NOW, agent=agent)
              for agent in SEED_MANIFESTS["manifests"]}
    for agent, manifest in SEED_MANIFESTS["manifests"].items():
        given = set(scoped[agent]) - {"_agent", "_savings"}
        kept_optional = {key for key in manifest["optional"] if full[key] is not None}
        assert given == set(manifest["fields"]) | kept_optional, agent
        assert not given & set(manifest["exclude"]), agent
        assert scoped[agent]["_savings"]["original_keys"] == len(full)
    # That team's checks, in our keys: the executor gets task routing (settings) but not
    # intent drift (messages); the verifier gets the phase dir (scope) and fewer fields.
    assert "settings" in scoped["gsd-executor"] and "messages" not in scoped["gsd-executor"]
    assert "scope" in scoped["gsd-verifier"]
    assert (scoped["gsd-verifier"]["_savings"]["scoped_keys"]
            < scoped["gsd-executor"]["_savings"]["scoped_keys"])


def test_the_seeds_manifests_as_written_are_rejected_at_append(ledger: Ledger) -> None:
    _session(ledger)
    head = ledger.head()
    with pytest.raises(EventValidationError) as caught:
        ledger.append("s", ev("setting.changed", key="agent_manifests",
                              value=SEED_MANIFESTS["seed"]))
    assert "names unknown state key(s)" in str(caught.value)
    assert "\n" not in str(caught.value)
    assert ledger.head() == head


@pytest.mark.parametrize(("short", "role"), [
    ("executor", "gsd-executor"), ("verifier", "gsd-verifier"), ("planner", "gsd-planner"),
    ("researcher", "gsd-phase-researcher"), ("plan-checker", "gsd-plan-checker")])
def test_the_toolkits_names_work_and_short_names_are_aliases(ledger: Ledger, short: str,
                                                             role: str) -> None:
    _session(ledger)
    full = ledger.state("s", now=NOW)
    by_role = ledger.state("s", now=NOW, agent=role)
    by_short = ledger.state("s", now=NOW, agent=short)
    assert "_warning" not in by_role and "_warning" not in by_short
    assert (by_role["_agent"], by_short["_agent"]) == (role, short)
    assert {k: v for k, v in by_short.items() if k != "_agent"} == \
        {k: v for k, v in by_role.items() if k != "_agent"}
    # What each role sees is the toolkit's manifest in our keys (the fixture's mapping).
    manifest = SEED_MANIFESTS["manifests"][role]
    kept_optional = {key for key in manifest["optional"] if full[key] is not None}
    assert set(by_role) - {"_agent", "_savings"} == set(manifest["fields"]) | kept_optional
    assert by_role["_savings"]["scoped_keys"] < len(full)


def test_the_default_manifests_are_the_toolkits_in_our_keys() -> None:
    for role, manifest in SEED_MANIFESTS["manifests"].items():
        default = DEFAULT_MANIFESTS[role]
        assert (list(default.fields), list(default.optional)) == \
            (manifest["fields"], manifest["optional"]), role
        assert set(manifest["exclude"]) <= set(default.exclude), role


def test_a_short_name_follows_its_role_and_can_have_its_own(ledger: Ledger) -> None:
    _session(ledger)
    ledger.append("scope:proj", ev("setting.changed", key="agent_manifests", value={
        "gsd-verifier": {"fields": ["title"]}, "planner": {"fields": ["scope"]},
        "plan-checker": None}))
    assert set(ledger.state("s", agent="verifier")) == {"_agent", "_savings", "title"}
    assert set(ledger.state("s", agent="planner")) == {"_agent", "_savings", "scope"}
    assert "messages" in ledger.state("s", agent="gsd-planner")  # its role is untouched
    for gone in ("plan-checker", "gsd-plan-checker"):
        assert "_warning" in ledger.state("s", agent=gone)
