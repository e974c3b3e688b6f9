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

from ctxledger.projections.setting_names import AGENT_MANIFESTS
from ctxledger.store.errors import EventValidationError, LedgerError
from ctxledger.store.log import EventCheck
from ctxledger.store.records import NewEvent

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


SettingCheck = Callable[[str, Any], object]
"""Called with a setting's (key, value); raises ``LedgerError`` or ``ValueError`` (one
line) when the value is invalid, returns otherwise."""


def check_value(key: str, value: Any) -> None:
    """Refuse ``value`` when the validator of ``key`` (if any) refuses it."""
    validator = SETTING_VALIDATORS.get(key)
    if validator is not None:
        validator(value)


def setting_event_check(*checks: SettingCheck) -> EventCheck:
    """The ``EventLog`` hook that runs ``checks`` on every ``setting.changed`` and turns
    a refusal into the store's one-line ``EventValidationError``."""

    def check(stream_id: str, event: NewEvent) -> None:
        if event.type != "setting.changed":
            return
        key = event.data.get("key")
        if not isinstance(key, str):
            return
        value = event.data.get("value")
        for one in checks:
            try:
                one(key, value)
            except (LedgerError, ValueError) as exc:
                message = " ".join(str(exc).split())
                raise EventValidationError(f"setting.changed: {message}") from None

    return check


check_event: EventCheck = setting_event_check(check_value)
"""Reject a ``setting.changed`` whose value its key's validator refuses."""
