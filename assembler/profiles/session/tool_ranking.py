"""Ranking a scope's tools by 7-day usage (Laminark's ``rankToolsByRelevance``).

- Candidates: the registered tools minus excluded types (builtins). MCP tools appear
  through their server's entry, once per server: a registered ``mcp_server`` entry when
  there is one, else an entry made for the server.
- Usage in the window, per tool, comes from the read view. A use is credited to an MCP
  server the same way a registered tool is: the ``server_name`` its event gave, else the
  server in its name (``^mcp__([^_]+(?:_[^_]+)*)__``); when both are given and differ,
  ``server_name`` wins. A server's usage adds up its tools': counts summed, the latest
  last-used kept. A use that gave ``server_name`` is its server's only; one that did not
  is also its name's own (direct) usage. An entry takes its own usage first and, for a
  server entry without window usage of its own, the server's.
- ``max_usage = max(1, every direct and server window count)``;
  ``age_days = max(0, (now - last_used) / 1 day)``;
  ``score = 0.7 * count / max_usage + 0.3 * exp(-0.693 * age_days / 7)``; unused in the
  window scores 0. Scores are rounded (``SCORE_DIGITS``) before they are compared, so the
  order cannot depend on the last bits of ``exp``.
- Order: score descending, then lifetime usage descending, then name, then entry id.
  With no use of any tool in the window there is nothing to rank by: the entries keep
  registration order (the registry's), earliest first, by the position of each entry's
  tool (a made-up server entry: its first tool's), then entry id.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from ctxledger.assembler.ranking import ranked, round_score
from ctxledger.projections.session_view import Tool, ToolUsage


@dataclass(frozen=True, slots=True)
class ToolEntry:
    """One line candidate of the tool section."""

    id: str
    """``tool:<registered name>``, or ``mcp_server:<server>`` for a made-up server entry."""
    name: str
    """The registered name, or the server name of a made-up server entry."""
    tool_type: str
    server: str | None
    description: str | None
    position: int = 0
    """Where it was registered (a made-up server entry: its earliest tool)."""


@dataclass(frozen=True, slots=True)
class FoldedTool:
    """A registered tool that is not a candidate of its own, and why."""

    tool: Tool
    reason: str
    """``excluded_tool_type`` or ``merged_into_server_entry``."""
    entry_id: str | None = None


@dataclass(frozen=True, slots=True)
class Usage:
    """Usage of an entry: in the window and over its lifetime."""

    window_count: int = 0
    window_last_used: datetime | None = None
    lifetime_count: int = 0
    source: str = "none"
    """``direct`` (its own name), ``server`` (its server's tools) or ``none``."""


@dataclass(frozen=True, slots=True)
class RankedEntry:
    """An entry with its score and the numbers behind it; ``rank`` starts at 1."""

    entry: ToolEntry
    rank: int
    score: float
    usage: Usage
    age_days: float | None


@dataclass(frozen=True, slots=True)
class RankingWeights:
    """The numbers of the score formula (policy data)."""

    frequency_weight: float = 0.7
    recency_weight: float = 0.3
    recency_decay: float = 0.693
    recency_half_life_days: float = 7.0


def server_of(tool_name: str, pattern: re.Pattern[str]) -> str | None:
    """The MCP server in ``tool_name`` (``mcp__<server>__<tool>``), if it has one."""
    match = pattern.match(tool_name)
    return match.group(1) if match else None


def build_entries(tools: Sequence[Tool], *, excluded_types: Sequence[str],
                  pattern: re.Pattern[str]) -> tuple[list[ToolEntry], list[FoldedTool]]:
    """The tool section's candidates (registration name order) and the tools folded away."""
    ordered = sorted(tools, key=lambda tool: (tool.name, tool.position))
    entries: list[ToolEntry] = []
    folded: list[FoldedTool] = []
    server_entry: dict[str, str] = {}
    for tool in ordered:  # first pass: registered server entries, one per server
        if tool.tool_type in excluded_types or tool.tool_type != "mcp_server":
            continue
        server = tool.server_name or tool.name
        if server in server_entry:
            folded.append(FoldedTool(tool, "merged_into_server_entry", server_entry[server]))
            continue
        entry = ToolEntry(f"tool:{tool.name}", tool.name, tool.tool_type, server,
                          tool.description, tool.position)
        server_entry[server] = entry.id
        entries.append(entry)
    for tool in ordered:
        if tool.tool_type in excluded_types:
            folded.append(FoldedTool(tool, "excluded_tool_type"))
            continue
        if tool.tool_type == "mcp_server":
            continue
        owner: str | None = None
        if tool.tool_type == "mcp_tool":
            owner = tool.server_name or server_of(tool.name, pattern)
        if owner is None:
            entries.append(ToolEntry(f"tool:{tool.name}", tool.name, tool.tool_type, None,
                                     tool.description, tool.position))
            continue
        if owner not in server_entry:
            made = ToolEntry(f"mcp_server:{owner}", owner, "mcp_server", owner, None,
                             tool.position)
            server_entry[owner] = made.id
            entries.append(made)
        elif server_entry[owner] == f"mcp_server:{owner}":
            # A made-up entry stands where its server's first tool was registered.
            index = next(i for i, entry in enumerate(entries)
                         if entry.id == server_entry[owner])
            if tool.position < entries[index].position:
                entries[index] = replace(entries[index], position=tool.position)
        folded.append(FoldedTool(tool, "merged_into_server_entry", server_entry[owner]))
    return entries, folded


def credited_server(stat: ToolUsage, pattern: re.Pattern[str]) -> str | None:
    """The MCP server a tool's uses are credited to: the ``server_name`` they gave, else
    the one in the tool's name (the rule ``build_entries`` applies to registered tools)."""
    return stat.server_name or server_of(stat.tool_name, pattern)


def direct_usage(usage: Sequence[ToolUsage]) -> dict[str, ToolUsage]:
    """Usage per tool name of the uses that named no server (those that did are their
    server's)."""
    return {stat.tool_name: stat for stat in usage if stat.server_name is None}


def server_usage(usage: Sequence[ToolUsage], pattern: re.Pattern[str]) -> dict[str, Usage]:
    """Usage per MCP server: its tools' counts summed, their latest last-used kept."""
    totals: dict[str, Usage] = {}
    for stat in sorted(usage, key=lambda stat: (stat.tool_name, stat.server_name or "")):
        server = credited_server(stat, pattern)
        if server is None:
            continue
        before = totals.get(server, Usage(source="server"))
        totals[server] = Usage(
            window_count=before.window_count + stat.window_count,
            window_last_used=_latest(before.window_last_used, stat.window_last_used),
            lifetime_count=before.lifetime_count + stat.lifetime_count,
            source="server")
    return totals


@dataclass(frozen=True, slots=True)
class Ranking:
    """The entries in rank order, ``max_usage``, and whether registration order (no usage
    in the window) made an order that score, lifetime usage and name would not."""

    entries: list[RankedEntry]
    max_usage: int
    registry_order: bool


def rank_entries(entries: Sequence[ToolEntry], usage: Sequence[ToolUsage], *, now: datetime,
                 pattern: re.Pattern[str], weights: RankingWeights) -> Ranking:
    """The entries in rank order (see the module docstring), with ``max_usage``."""
    direct = direct_usage(usage)
    servers = server_usage(usage, pattern)
    max_usage = max([1, *(stat.window_count for stat in direct.values()),
                     *(total.window_count for total in servers.values())])
    scored: list[tuple[float, int, str, str, ToolEntry, Usage, float | None]] = []
    for entry in entries:
        used = _entry_usage(entry, direct, servers)
        score, age_days = _score(used, max_usage, now, weights)
        scored.append((score, used.lifetime_count, entry.name, entry.id, entry, used, age_days))
    # Score descending, then lifetime usage descending, then name; the entry id (unique)
    # makes it a total order.
    ordered = ranked(scored, key=lambda row: (-row[0], -row[1], row[2], row[3]))
    registry_order = False
    if not any(stat.window_count > 0 for stat in usage):
        # Nothing used in the window: nothing to rank by, so the registry's order stands.
        by_registration = ranked(scored, key=lambda row: (row[4].position, row[3]))
        registry_order = [row[3] for row in by_registration] != [row[3] for row in ordered]
        ordered = by_registration
    entries_ranked = [RankedEntry(entry, rank, score, used, age_days)
                      for rank, (score, _, _, _, entry, used, age_days)
                      in enumerate(ordered, start=1)]
    return Ranking(entries_ranked, max_usage, registry_order)


def _entry_usage(entry: ToolEntry, direct: dict[str, ToolUsage],
                 servers: dict[str, Usage]) -> Usage:
    own = direct.get(entry.name) if entry.id.startswith("tool:") else None
    if own is not None and own.window_count > 0:
        return Usage(own.window_count, own.window_last_used, own.lifetime_count, "direct")
    if entry.tool_type == "mcp_server" and entry.server is not None \
            and entry.server in servers:
        return servers[entry.server]
    if own is not None:
        return Usage(own.window_count, own.window_last_used, own.lifetime_count, "direct")
    return Usage()


def _score(used: Usage, max_usage: int, now: datetime,
           weights: RankingWeights) -> tuple[float, float | None]:
    if used.window_count <= 0 or used.window_last_used is None:
        return 0.0, None
    age_days = max(0.0, (now - used.window_last_used) / timedelta(days=1))
    recency = math.exp(-weights.recency_decay * age_days / weights.recency_half_life_days)
    frequency = used.window_count / max_usage
    score = weights.frequency_weight * frequency + weights.recency_weight * recency
    return round_score(score), round_score(age_days)


def _latest(first: datetime | None, second: datetime | None) -> datetime | None:
    if first is None:
        return second
    if second is None:
        return first
    return max(first, second)
