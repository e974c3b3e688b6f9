"""The check of setting values that every append runs (``EventLog(check=...)``).

Two layers know what a setting means: ``projections.setting_values`` (agent manifests,
read by ``state``) and ``assembler.setting_check`` (the policy settings every profile
reads, judged by the policy models themselves). The store may know neither, and the
projections may not import the assembler, so the ``Ledger`` wires this one hook, made of
both, into its log; the CLI runs the same hook on its input before it opens a database.

The assembler (its profiles bring numpy and bm25s) is imported by the first
``setting.changed`` checked, never by an append of other events.
"""

from __future__ import annotations

from typing import Any

from ctxledger.projections.setting_values import check_value, setting_event_check
from ctxledger.store.log import EventCheck


def _policy_setting(key: str, value: Any) -> None:
    from ctxledger.assembler.setting_check import check_setting

    check_setting(key, value)


check_event: EventCheck = setting_event_check(check_value, _policy_setting)
"""Reject a ``setting.changed`` that an agent manifest or a profile's policy refuses."""
