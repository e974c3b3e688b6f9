"""Agent scoping (SPEC §3 "Agent scoping"): per-agent manifests that filter the
session state down to what an agent type needs.

A manifest is data: ``{fields, optional, exclude}`` naming state keys. The effective
manifests are ``DEFAULT_MANIFESTS`` overlaid by the setting ``agent_manifests`` (an object
``{agent: manifest}``; a manifest replaces that agent's default, ``null`` removes it).
Scoping keeps ``fields`` plus the ``optional`` keys that are not null, and adds ``_agent``
and ``_savings {original_keys, scoped_keys, reduction_pct}`` (one decimal); an unknown
agent gets the full state plus ``_agent`` and a ``_warning``. The coding-agent roles
go by their toolkit's names (``gsd-executor``...); the short names (``executor``...) are
aliases (``AGENT_ALIASES``). ``exclude`` names what an
agent must not see and wins over the other two lists; a manifest whose lists overlap, or
that names a key the state never has, is rejected (one line), and the setting is
checked when it is appended (``projections.setting_values``).

Scoping is a filter on the state, not an assembler profile: it decides nothing about
budgets. A profile that shows state applies the same filter to its state section.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ctxledger.projections.setting_names import AGENT_MANIFESTS
from ctxledger.store.errors import LedgerError

STATE_KEYS: tuple[str, ...] = (
    "agent", "chapter", "documents", "ended_at", "last_activity", "messages", "position",
    "scene", "scope", "session", "settings", "started_at", "title", "top_tools")
"""The keys of the session state (``projections.state.state_from_view``)."""


class ManifestError(LedgerError):
    """An agent manifest (or the ``agent_manifests`` setting) is invalid."""


class AgentManifest(BaseModel):
    """What one agent type is given of the session state."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    fields: tuple[str, ...] = Field(default=())
    """Always kept (null or not)."""
    optional: tuple[str, ...] = Field(default=())
    """Kept when not null."""
    exclude: tuple[str, ...] = Field(default=())
    """Never given to this agent."""

    @model_validator(mode="after")
    def _consistent(self) -> AgentManifest:
        for part in ("fields", "optional", "exclude"):
            keys: tuple[str, ...] = getattr(self, part)
            unknown = [key for key in keys if key not in STATE_KEYS]
            if unknown:
                raise ValueError(f"{part} names unknown state key(s) {', '.join(unknown)} "
                                 f"(known: {', '.join(STATE_KEYS)})")
            if len(set(keys)) != len(keys):
                raise ValueError(f"{part} names a key twice")
        clash = sorted((set(self.fields) | set(self.optional)) & set(self.exclude))
        if clash:
            raise ValueError(f"{', '.join(clash)} both given and excluded")
        both = sorted(set(self.fields) & set(self.optional))
        if both:
            raise ValueError(f"{', '.join(both)} both in fields and optional")
        return self


def _manifest(fields: tuple[str, ...], optional: tuple[str, ...]) -> AgentManifest:
    """A default manifest: everything it neither needs nor may use is excluded."""
    return AgentManifest(fields=fields, optional=optional,
                         exclude=tuple(key for key in STATE_KEYS
                                       if key not in fields and key not in optional))


DEFAULT_MANIFESTS: Mapping[str, AgentManifest] = {
    # A coding-agent team's five roles under that toolkit's own names. Its manifests name
    # keys of its init output; each is kept here as the state key that carries the same
    # information (phase -> chapter, phase dir -> scope, plans and codebase data ->
    # documents, feature flags and routing -> settings, environment -> top_tools, intent
    # -> messages, branch -> scene, commit docs -> position, freshness -> last_activity).
    "gsd-executor": _manifest(("scope", "chapter", "title", "documents", "scene",
                               "position", "settings", "top_tools"), ()),
    "gsd-verifier": _manifest(("scope", "chapter", "title", "documents", "settings"), ()),
    "gsd-planner": _manifest(("scope", "chapter", "title", "documents", "settings",
                              "messages"), ("last_activity", "top_tools")),
    "gsd-phase-researcher": _manifest(("scope", "chapter", "title", "messages"),
                                      ("documents", "top_tools")),
    "gsd-plan-checker": _manifest(("scope", "chapter", "title", "documents"), ()),
    # A writing agent (profile novel's sessions).
    "writer": _manifest(("session", "scope", "chapter", "scene", "settings"),
                        ("title", "agent")),
}

AGENT_ALIASES: Mapping[str, str] = {
    "executor": "gsd-executor",
    "verifier": "gsd-verifier",
    "planner": "gsd-planner",
    "researcher": "gsd-phase-researcher",
    "plan-checker": "gsd-plan-checker",
}
"""Short names of the coding-agent roles: each is the role's manifest under another
name, unless ``agent_manifests`` gives the short name a manifest of its own."""


def manifest_for(agent: str, manifests: Mapping[str, AgentManifest]) -> AgentManifest | None:
    """``agent``'s manifest: its own, else (a short name) its role's; None without one."""
    found = manifests.get(agent)
    if found is None and agent in AGENT_ALIASES:
        found = manifests.get(AGENT_ALIASES[agent])
    return found


def parse_manifests_setting(value: Any) -> dict[str, AgentManifest | None]:
    """The ``agent_manifests`` setting as ``{agent: manifest or None}``; one-line
    ``ManifestError`` when it is not an object of valid manifests."""
    if not isinstance(value, Mapping):
        raise ManifestError(f"setting {AGENT_MANIFESTS!r} must be an object "
                            "{agent: {fields, optional, exclude}}")
    parsed: dict[str, AgentManifest | None] = {}
    for agent in sorted(value):
        if not isinstance(agent, str) or not agent.strip():
            raise ManifestError(f"setting {AGENT_MANIFESTS!r}: agent names must be non-empty")
        raw = value[agent]
        if raw is None:
            parsed[agent] = None
            continue
        try:
            parsed[agent] = AgentManifest.model_validate(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            message = " ".join(str(first["msg"]).split()).removeprefix("Value error, ")
            place = f"{agent}.{where}" if where else agent
            raise ManifestError(f"setting {AGENT_MANIFESTS!r}: {place}: {message}") from None
    return parsed


def manifests_from_settings(settings: Mapping[str, Any]) -> dict[str, AgentManifest]:
    """The effective manifests: the defaults overlaid by the ``agent_manifests`` setting."""
    manifests = dict(DEFAULT_MANIFESTS)
    if AGENT_MANIFESTS in settings:
        for agent, manifest in parse_manifests_setting(settings[AGENT_MANIFESTS]).items():
            if manifest is None:
                # A short name's null removes its role too: it would still answer.
                manifests.pop(agent, None)
                manifests.pop(AGENT_ALIASES.get(agent, agent), None)
            else:
                manifests[agent] = manifest
    return {agent: manifests[agent] for agent in sorted(manifests)}


WARNING_KEY = "_warning"
"""The field that tells an agent without a manifest it was given the full state."""


def reduction_pct(original: int, kept: int) -> float:
    """How much smaller ``kept`` is than ``original``, in percent with one decimal (half
    up, in exact decimal arithmetic so no float noise decides a rounding)."""
    if not original:
        return 0.0
    exact = Decimal(100 * (original - kept)) / Decimal(original)
    return float(exact.quantize(Decimal("0.1"), rounding=ROUND_HALF_UP))


def scope_state(state: Mapping[str, Any], agent: str,
                manifests: Mapping[str, AgentManifest]) -> dict[str, Any]:
    """``state`` filtered through ``agent``'s manifest, with ``_agent`` and ``_savings``
    (counting the state's own keys, not these two); ``exclude`` wins over ``fields`` and
    ``optional``. An agent without a manifest gets the full state plus ``_agent`` and
    a ``_warning``."""
    manifest = manifest_for(agent, manifests)
    if manifest is None:
        known = ", ".join(manifests) or "none"
        return {key: value for key, value in sorted({
            **state, "_agent": agent,
            WARNING_KEY: f"no manifest for agent {agent!r}: the full state is given "
                         f"(agents with a manifest: {known})"}.items())}
    # Validated manifests never overlap; if one built in code does, exclude wins.
    excluded = set(manifest.exclude)
    scoped = {key: state[key] for key in manifest.fields
              if key in state and key not in excluded}
    scoped.update({key: state[key] for key in manifest.optional
                   if state.get(key) is not None and key not in excluded})
    original, kept = len(state), len(scoped)
    scoped["_agent"] = agent
    scoped["_savings"] = {"original_keys": original, "scoped_keys": kept,
                          "reduction_pct": reduction_pct(original, kept)}
    return {key: scoped[key] for key in sorted(scoped)}
