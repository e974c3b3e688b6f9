"""ctxledger: an event-sourced session store for LLM applications.

``from ctxledger import Ledger`` is all most users need; the types its methods take and
return (``Assembly``, ``WhyReport``, ``UsageReport``, ``VerifyReport``...) are here too, to
annotate with. Names are imported on first use (PEP 562), so ``ctxledger --version``
starts without loading the database stack.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing is not imported at run time: the hook's tool use loads this

# A wheel installs store/, projections/, assembler/ and migrations/ inside this package; a
# checkout keeps them beside it, so there the checkout's root joins the package's search
# path (an editable install maps only the top-level name ctxledger, so it cannot). No
# symlinks: a checkout made without them imports the same modules.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if not os.path.isdir(os.path.join(__path__[0], "store")) and os.path.isfile(
        os.path.join(_ROOT, "store", "__init__.py")):
    __path__.append(_ROOT)

if TYPE_CHECKING:
    from typing import Any

    from ctxledger._agent_context import AgentContext
    from ctxledger._cancel import Cancelled, CancelToken
    from ctxledger._erase import ErasureReport
    from ctxledger._ledger import Ledger
    from ctxledger._message_list import MessageList
    from ctxledger._observations import ObservationHit
    from ctxledger.assembler.chat_tokens import MessageOverhead
    from ctxledger.assembler.errors import ChatFormatError
    from ctxledger.assembler.lorebook import LorebookWarning
    from ctxledger.assembler.model import Assembly, ContextMessage, Decision, Section
    from ctxledger.assembler.policy import Policy, PolicyError
    from ctxledger.assembler.setting_check import ProfileChoice
    from ctxledger.jobs._rollup import RolledDay, RollupPolicy, RollupReport
    from ctxledger.jobs._usage import DayUsage, Series, UsageReport
    from ctxledger.projections.runner import ProjectionStatus
    from ctxledger.projections.session_stats import SessionSummary
    from ctxledger.projections.session_view import SessionView, ViewRequest
    from ctxledger.store.anchor import Anchor
    from ctxledger.store.character_card import CardFileError
    from ctxledger.store.errors import (
        ConcurrencyError,
        DatabaseMissing,
        EventValidationError,
        IdempotencyError,
        IntegrityViolation,
        InvalidArgument,
        LedgerError,
        ReadOnlyLedger,
        ReplicaNotReady,
        SchemaMissing,
        StreamRuleError,
    )
    from ctxledger.store.records import AppendResult, RecordedEvent
    from ctxledger.store.seal import Seal, SealSettings
    from ctxledger.store.verify import VerifyReport
    from ctxledger.store.witness import (
        DatabaseWitness,
        FileWitness,
        Head,
        HttpWitness,
        Witness,
        WitnessError,
        WitnessSettings,
    )
    from ctxledger.timetravel._audit import (
        AuditEntry,
        AuditReport,
        DecisionChange,
        WhatIfReport,
    )
    from ctxledger.timetravel._fork import ForkError
    from ctxledger.timetravel._markers import ChartStep, Marker, TimelineChart
    from ctxledger.timetravel._replay import ErasedHistory, ReplayError, TimelineStep
    from ctxledger.timetravel._why import WhyError, WhyReport, WhyRun, WhyStep

# Every name a user meets: what ``Ledger`` takes and returns, and what it raises.
_SOURCES = {
    **dict.fromkeys(["Ledger"], "ctxledger._ledger"),
    **dict.fromkeys(["AgentContext"], "ctxledger._agent_context"),
    **dict.fromkeys(["ProfileChoice"], "ctxledger.assembler.setting_check"),
    **dict.fromkeys(["ObservationHit"], "ctxledger._observations"),
    **dict.fromkeys(["MessageList"], "ctxledger._message_list"),
    **dict.fromkeys(["Assembly", "ContextMessage", "Decision", "Section"],
                    "ctxledger.assembler.model"),
    **dict.fromkeys(["MessageOverhead"], "ctxledger.assembler.chat_tokens"),
    **dict.fromkeys(["ChatFormatError"], "ctxledger.assembler.errors"),
    **dict.fromkeys(["LorebookWarning"], "ctxledger.assembler.lorebook"),
    **dict.fromkeys(["Policy", "PolicyError"], "ctxledger.assembler.policy"),
    **dict.fromkeys(["RollupPolicy", "RollupReport", "RolledDay"], "ctxledger.jobs._rollup"),
    **dict.fromkeys(["UsageReport", "DayUsage", "Series"], "ctxledger.jobs._usage"),
    **dict.fromkeys(["ProjectionStatus"], "ctxledger.projections.runner"),
    **dict.fromkeys(["SessionSummary"], "ctxledger.projections.session_stats"),
    **dict.fromkeys(["SessionView", "ViewRequest"], "ctxledger.projections.session_view"),
    **dict.fromkeys(["Anchor"], "ctxledger.store.anchor"),
    **dict.fromkeys(["CardFileError"], "ctxledger.store.character_card"),
    **dict.fromkeys(["ConcurrencyError", "DatabaseMissing", "EventValidationError",
                     "IdempotencyError", "IntegrityViolation", "InvalidArgument",
                     "LedgerError", "ReadOnlyLedger", "ReplicaNotReady", "SchemaMissing",
                     "StreamRuleError"],
                    "ctxledger.store.errors"),
    **dict.fromkeys(["AppendResult", "RecordedEvent"], "ctxledger.store.records"),
    **dict.fromkeys(["Seal", "SealSettings"], "ctxledger.store.seal"),
    **dict.fromkeys(["VerifyReport"], "ctxledger.store.verify"),
    **dict.fromkeys(["DatabaseWitness", "FileWitness", "Head", "HttpWitness", "Witness",
                     "WitnessError", "WitnessSettings"], "ctxledger.store.witness"),
    **dict.fromkeys(["AuditEntry", "AuditReport", "DecisionChange", "WhatIfReport"],
                    "ctxledger.timetravel._audit"),
    **dict.fromkeys(["ForkError"], "ctxledger.timetravel._fork"),
    **dict.fromkeys(["ChartStep", "Marker", "TimelineChart"], "ctxledger.timetravel._markers"),
    **dict.fromkeys(["ReplayError", "TimelineStep"], "ctxledger.timetravel._replay"),
    **dict.fromkeys(["ErasedHistory"], "ctxledger.timetravel._replay"),
    **dict.fromkeys(["ErasureReport"], "ctxledger._erase"),
    **dict.fromkeys(["CancelToken", "Cancelled"], "ctxledger._cancel"),
    **dict.fromkeys(["WhyError", "WhyReport", "WhyRun", "WhyStep"], "ctxledger.timetravel._why"),
}

__all__ = [
    "AgentContext",
    "Anchor",
    "AppendResult",
    "Assembly",
    "AuditEntry",
    "AuditReport",
    "CancelToken",
    "Cancelled",
    "CardFileError",
    "ChartStep",
    "ChatFormatError",
    "ConcurrencyError",
    "ContextMessage",
    "DatabaseMissing",
    "DatabaseWitness",
    "DayUsage",
    "Decision",
    "DecisionChange",
    "ErasedHistory",
    "ErasureReport",
    "EventValidationError",
    "FileWitness",
    "ForkError",
    "Head",
    "HttpWitness",
    "IdempotencyError",
    "IntegrityViolation",
    "InvalidArgument",
    "Ledger",
    "LedgerError",
    "LorebookWarning",
    "Marker",
    "MessageList",
    "MessageOverhead",
    "ObservationHit",
    "Policy",
    "PolicyError",
    "ProfileChoice",
    "ProjectionStatus",
    "ReadOnlyLedger",
    "RecordedEvent",
    "ReplayError",
    "ReplicaNotReady",
    "RolledDay",
    "RollupPolicy",
    "RollupReport",
    "SchemaMissing",
    "Seal",
    "SealSettings",
    "Section",
    "Series",
    "SessionSummary",
    "SessionView",
    "StreamRuleError",
    "TimelineChart",
    "TimelineStep",
    "UsageReport",
    "VerifyReport",
    "ViewRequest",
    "WhatIfReport",
    "WhyError",
    "WhyReport",
    "WhyRun",
    "WhyStep",
    "Witness",
    "WitnessError",
    "WitnessSettings",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """Each name of ``__all__``, imported from its module on first use, then kept here
    (as ``ctxledger.store.lazy.lazy_exports`` does, without importing ``typing``)."""
    source = _SOURCES.get(name)
    if source is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(source), name)
    globals()[name] = value
    return value
