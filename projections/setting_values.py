"""Validation of setting values at append time (``setting.changed``).

Most settings are checked where they are used (a policy reports a bad value when it is
built), but some are data that must never be stored invalid, e.g. ``agent_manifests``:
a bad manifest would make every later ``state --agent`` fail. Those are checked here.

Why a hook the store calls rather than a check in ``Ledger.append``: every way into the
log (``Ledger.append``, ``ledger.log.append`` in scripts, replays and forks copying
events, the CLI) goes through ``EventLog.prepare``, so the check cannot be bypassed, and
it runs with the other validation before the transaction, so a rejected event writes
nothing and is named like any other bad event. The store stays ignorant of what settings
mean: it only calls the ``check`` it was given (``store.log.EventCheck``); the meaning
lives here, one layer up, and the ``Ledger`` wires it in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ctxledger.store.errors import EventValidationError, LedgerError
from ctxledger.store.records import NewEvent

AGENT_MANIFESTS = "agent_manifests"
"""The setting that replaces or adds agent manifests (``projections.agents``)."""

SettingValidator = Callable[[Any], object]
"""Raises ``LedgerError`` or ``ValueError`` (one line) when a value is invalid."""


def _agent_manifests(value: Any) -> object:
    # Imported when such a setting is appended: the manifests are pydantic models, which
    # a process that never writes one (``ctxledger state``) should not build.
    from ctxledger.projections.agents import parse_manifests_setting

    return parse_manifests_setting(value)


SETTING_VALIDATORS: Mapping[str, SettingValidator] = {
    AGENT_MANIFESTS: _agent_manifests,
}


def check_event(stream_id: str, event: NewEvent) -> None:
    """Reject a ``setting.changed`` whose value its key's validator refuses."""
    if event.type != "setting.changed":
        return
    key = event.data.get("key")
    validator = SETTING_VALIDATORS.get(key) if isinstance(key, str) else None
    if validator is None:
        return
    try:
        validator(event.data.get("value"))
    except (LedgerError, ValueError) as exc:
        message = " ".join(str(exc).split())
        raise EventValidationError(f"setting.changed: {message}") from None
