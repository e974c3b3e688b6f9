"""Compact serializers for documents shown in the session state (SPEC §3 "Agent scoping").

- ``compact_plan_state(markdown)``: a plan-state document (a STATE.md-style markdown
  page) as ``{phase, progress, status, last_activity, decisions (the last 5), blockers}``.
  Target: 70 to 80% fewer tokens than the markdown. The shapes read (a coding-agent
  team's handoff format):
  ``Phase: 3 of 3 (release)`` -> phase "3"; ``Progress: 80%`` -> "80%"; front-matter
  scalars ``phase: '39'`` -> "39" and ``progress: '1/1 complete'`` -> "1/1 complete";
  ``Plan: 2 of 3`` with a progress bar ``[███░] 71%`` -> "2/3 (71%)"; ``**Status:**``
  bold fields; ``### Decisions`` / ``### Blockers`` bullets (``None yet`` is none).
- ``compact_dep_graph(graph)``: a dependency graph as ``{total_modules, total_edges,
  top_imported (top 5, ties by name), has_cycles}``. Target: 50 to 60% fewer tokens.
  Cycles are found with the stdlib ``graphlib``. Input shapes: see its docstring.

Both are pure functions of their input, deterministic (every sort has a tie-breaker), and
tolerant: what they cannot find comes out as null or empty, never as an error, because a
document is the app's free-form data.

The markdown is read line by line with a few regular expressions rather than through a
markdown library: only ``Key: value`` lines, headings and bullets matter, and a parser
(and its AST) would cost a dependency for no gain here.
"""

from __future__ import annotations

import graphlib
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

DECISIONS_KEPT = 5
TOP_IMPORTED = 5

_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_BULLET = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+(.*\S)\s*$")
_FIELD = re.compile(r"^\s*(?:[-*+]\s+)?\*{0,2}([A-Za-z][A-Za-z ]{0,30}?)\*{0,2}\s*:\s*\*{0,2}"
                    r"\s*(.*?)\s*$")
_NUMBER = re.compile(r"^(\d+(?:\.\d+)*)\b")
_OF = re.compile(r"^(\d+)\s*(?:of|/)\s*(\d+)")
_PERCENT = re.compile(r"(\d{1,3})\s*%")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_PHASE_HEADING = re.compile(r"\bphase\s+(\d+(?:\.\d+)*)", re.IGNORECASE)
_NONE = re.compile(r"^(?:none|n/a|nothing)\b[\s.!]*(?:yet)?[\s.!]*$", re.IGNORECASE)


def compact_plan_state(markdown: str | None) -> dict[str, Any]:
    """The essentials of a plan-state page; metrics tables, velocity history and session
    continuity notes are left out."""
    found: dict[str, str] = {}
    decisions: list[str] = []
    blockers: list[str] = []
    heading_phase: str | None = None
    section = ""
    for line in (markdown or "").splitlines():
        heading = _HEADING.match(line)
        if heading:
            section = heading.group(2).lower()
            phase = _PHASE_HEADING.search(heading.group(2))
            if phase and heading_phase is None:
                heading_phase = phase.group(1)
            continue
        bullet = _BULLET.match(line)
        if bullet and ("decision" in section or "blocker" in section):
            text = bullet.group(1).strip()
            if not _NONE.match(text):
                (decisions if "decision" in section else blockers).append(text)
            continue
        field = _FIELD.match(line)
        if field:
            key = " ".join(field.group(1).lower().split())
            value = _unquoted(field.group(2))
            if key in ("phase", "current phase", "plan", "status", "last activity",
                       "progress") and key not in found and value:
                found[key] = value
    return {
        "phase": _phase(found.get("phase") or found.get("current phase"), heading_phase),
        "progress": _progress(found.get("plan"), found.get("progress")),
        "status": found.get("status"),
        "last_activity": _last_activity(found.get("last activity")),
        "decisions": decisions[-DECISIONS_KEPT:],
        "blockers": blockers,
    }


def _unquoted(value: str) -> str:
    """A YAML-style scalar without its quotes (``phase: '39'`` in a front matter)."""
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1].strip()
    return value


def _phase(value: str | None, from_heading: str | None) -> str | None:
    if value is None:
        return from_heading
    number = _NUMBER.match(value)
    return number.group(1) if number else value.split(" (")[0].strip()


def _progress(plan: str | None, progress: str | None) -> str | None:
    counted = _OF.match(plan) if plan else None
    percent = _PERCENT.search(progress) if progress else None
    if counted:
        text = f"{counted.group(1)}/{counted.group(2)}"
        return f"{text} ({percent.group(1)}%)" if percent else text
    if percent:
        return f"{percent.group(1)}%"
    return progress


def _last_activity(value: str | None) -> str | None:
    if value is None:
        return None
    date = _DATE.search(value)
    return date.group(0) if date else value


def compact_dep_graph(graph: Mapping[str, Any] | None) -> dict[str, Any]:
    """The shape of a dependency graph: sizes, the five most imported modules
    (``"module (importers)"``), and whether it has a cycle.

    Accepted forms: an adjacency mapping ``{module: [imported, ...]}``; or an object with
    ``modules``/``nodes`` (a list of names, or a mapping of module -> imports or
    ``{"imports": [...]}``) and/or ``edges`` (``[from, to]`` pairs or ``{from, to}`` /
    ``{source, target}`` objects). Precomputed ``total_modules``, ``total_edges``,
    ``top_imported``, ``has_cycles`` or ``cycles`` are used as given. Anything else (or
    nothing) gives ``{}``.
    """
    if not isinstance(graph, Mapping) or not graph:
        return {}
    adjacency = _adjacency(graph)
    if adjacency is None and not any(key in graph for key in (
            "total_modules", "total_edges", "top_imported", "has_cycles", "cycles")):
        return {}
    adjacency = adjacency or {}
    edges = sorted({(source, target) for source, targets in adjacency.items()
                    for target in targets})
    modules = set(adjacency) | {target for _, target in edges}
    total_modules = graph.get("total_modules")
    total_edges = graph.get("total_edges")
    if "has_cycles" in graph:
        has_cycles = bool(graph["has_cycles"])
    elif "cycles" in graph:
        has_cycles = bool(graph["cycles"])
    else:
        has_cycles = _has_cycle(adjacency)
    given_top = graph.get("top_imported")
    return {
        "total_modules": total_modules if isinstance(total_modules, int) else len(modules),
        "total_edges": total_edges if isinstance(total_edges, int) else len(edges),
        "top_imported": (_given_top(given_top) if isinstance(given_top, list)
                         else _top_imported(edges)),
        "has_cycles": has_cycles,
    }


def _adjacency(graph: Mapping[str, Any]) -> dict[str, list[str]] | None:
    """Module -> the modules it imports, or None when the graph gives neither."""
    structured = any(key in graph for key in ("modules", "nodes", "edges"))
    if not structured:
        if all(isinstance(value, list) and all(isinstance(v, str) for v in value)
               for value in graph.values()):
            return {str(key): list(value) for key, value in graph.items()}
        return None
    adjacency: dict[str, list[str]] = {}
    modules = graph.get("modules", graph.get("nodes"))
    if isinstance(modules, Mapping):
        for name, value in modules.items():
            imports = value.get("imports") if isinstance(value, Mapping) else value
            adjacency[str(name)] = [str(v) for v in imports] if isinstance(imports, list) \
                else []
    elif isinstance(modules, list):
        for entry in modules:
            name = _name_of(entry) if isinstance(entry, Mapping) else entry
            if isinstance(name, str):
                adjacency.setdefault(name, [])
    edges = graph.get("edges")
    if isinstance(edges, list):
        for edge in edges:
            pair = _edge(edge)
            if pair is not None:
                adjacency.setdefault(pair[0], []).append(pair[1])
    return adjacency


def _edge(edge: Any) -> tuple[str, str] | None:
    if isinstance(edge, list | tuple) and len(edge) == 2:
        source, target = edge
    elif isinstance(edge, Mapping):
        source = edge.get("from", edge.get("source"))
        target = edge.get("to", edge.get("target"))
    else:
        return None
    if isinstance(source, str) and isinstance(target, str):
        return source, target
    return None


def _name_of(entry: Mapping[str, Any]) -> Any:
    for key in ("module", "file", "name", "path", "id"):
        if key in entry:
            return entry[key]
    return None


def _given_top(entries: Sequence[Any]) -> list[Any]:
    """A precomputed top list, re-ranked by count (descending) then name when every
    entry gives both, so ties go by name as in ``_top_imported``; else in given order."""
    counted: list[tuple[Any, Any]] = []
    for entry in entries:
        if isinstance(entry, Mapping):
            count = next((entry[key] for key in ("count", "importers", "imported_by",
                                                 "fan_in", "dependents") if key in entry),
                         None)
            counted.append((_name_of(entry), len(count) if isinstance(count, list) else count))
        else:
            counted.append((entry, None))
    if all(isinstance(name, str) and isinstance(count, int) for name, count in counted):
        counted.sort(key=lambda pair: (-pair[1], pair[0]))
    return [f"{name} ({count})" if count is not None else name
            for name, count in counted[:TOP_IMPORTED]]


def _top_imported(edges: Iterable[tuple[str, str]]) -> list[str]:
    importers: dict[str, int] = {}
    for _, target in edges:
        importers[target] = importers.get(target, 0) + 1
    top = sorted(importers.items(), key=lambda pair: (-pair[1], pair[0]))[:TOP_IMPORTED]
    return [f"{name} ({count})" for name, count in top]


def _has_cycle(adjacency: Mapping[str, Sequence[str]]) -> bool:
    """Whether the graph has a cycle: stdlib ``graphlib`` (iterative, so deep chains are
    fine) refuses to order a cyclic graph."""
    try:
        graphlib.TopologicalSorter(
            {node: sorted(targets) for node, targets in sorted(adjacency.items())}).prepare()
    except graphlib.CycleError:
        return True
    return False
