"""Audit: derive every recorded ``context.assembled`` again and compare (SPEC §4).

Each record names the profile, the position its read view reflected, its ``now``, its
policy version and digest, and (since the policy field exists) the policy's data. The
audit replays the session at that position and ``now`` with that policy (or, for old
records without one, the policy the prefix's settings give) and reports one of:

- ``match``: same policy version and same digest;
- ``policy_mismatch``: the policy derived is not the one recorded (the settings' policy
  differs from a custom one the app used, or the stored policy is not its version);
- ``digest_mismatch``: same policy, another digest (the log or the record was altered,
  or the assembler changed without a ``format_version`` bump);
- ``older_format``: recorded under another ``Assembly.format_version`` (records of
  ``context.assembled`` v1, made before format 4, read as format 3). The digest hashes
  another form of the assembly, so it cannot be compared; it says nothing of tampering,
  but it is not a match either;
- ``superseded``: recorded under an earlier revision of the profile (``card@1`` where
  this release makes ``card@2``): that revision's decisions are no longer produced, so
  the record cannot be derived again. It says nothing of tampering, but it is not a
  match either;
- ``copied``: a record copied into a fork; its original is audited in its own session;
- ``error``: it cannot be derived again (e.g. its position is before the session began);
- ``erased``: the record (and the session it audits) was erased (``Ledger.erase``); the
  erasure is proven by ``verify``, so it counts as fine, not as a mismatch.

Beside each record, what the provider billed for it (the newest ``usage.reported`` naming
the record): the predicted input tokens next to the billed ones, and ``over_limit`` when
the billed tokens exceed the policy's ``context_limit``. For a model counted by estimate
(``claude-*``), the report sums the estimate's error against the billed figures per scope
and model over the records audited (``EstimateError``).

A *what-if* replays a timeline under another policy and lists the decisions that change.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

import sqlalchemy as sa

from ctxledger._billing import USAGE_TYPE
from ctxledger._cancel import Cancelled, CancelToken, check
from ctxledger.assembler.api import parse_policy
from ctxledger.assembler.model import Assembly, Decision
from ctxledger.assembler.models import is_estimated
from ctxledger.assembler.policy import Policy
from ctxledger.projections.view_loader import load_session_scope
from ctxledger.store.errors import LedgerError
from ctxledger.store.hash_chain import ERASED_TYPE
from ctxledger.store.read import read_all, read_stream_until
from ctxledger.store.records import RecordedEvent
from ctxledger.store.streams import DEFAULT_SCOPE
from ctxledger.timetravel._replay import (
    ErasedHistory,
    ReplayError,
    TimelineStep,
    fold_assemblies,
    policy_data,
    replay,
)

AuditStatus = Literal["match", "digest_mismatch", "policy_mismatch", "older_format",
                      "superseded", "copied", "error", "erased"]
RECORD_TYPE = "context.assembled"


def recorded_policy(assembly: Assembly, policy: Policy | None) -> dict[str, Any] | None:
    """The policy data to store with ``assembly``'s record: ``policy``'s, when it is the
    policy the assembly was made with (same profile and version); else None."""
    if policy is None or policy.profile != assembly.profile \
            or policy.version != assembly.policy_version:
        return None
    return policy_data(policy)


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """The audit of one ``context.assembled`` record."""

    session: str
    record_position: int
    """Where the record itself is in the log."""
    position: int
    """The position the recorded assembly's read view reflected."""
    profile: str
    now: str
    status: AuditStatus
    recorded_digest: str
    derived_digest: str | None
    recorded_policy_version: str
    derived_policy_version: str | None
    policy_stored: bool
    detail: str = ""
    predicted_tokens: int | None = None
    """The input tokens the assembly predicted (``tokens.total`` as recorded)."""
    billed_input_tokens: int | None = None
    """The input tokens the provider billed for it (``usage.reported``), when reported."""
    billed_model: str | None = None
    context_limit: int | None = None
    """The policy's ``context_limit``, when it has one."""
    over_limit: bool = False
    """The billed input tokens exceed ``context_limit``: the context was larger than the
    model's window as the provider counted it."""

    @property
    def ok(self) -> bool:
        """True unless the record failed to match."""
        return self.status in ("match", "copied", "erased")


@dataclass(frozen=True, slots=True)
class EstimateError:
    """How far a scope's estimated counts (a model without a local tokenizer) were from
    what the provider billed, over the records audited."""

    scope: str
    model: str
    records: int
    predicted: int
    billed: int
    error_pct: float
    """``(predicted - billed) / billed`` over the sums, in percent (2 decimals)."""
    worst_pct: float
    """The record whose error was largest in size, in percent (2 decimals, signed)."""


@dataclass(frozen=True, slots=True)
class AuditReport:
    """Every record audited, in log order."""

    session: str | None
    entries: list[AuditEntry] = field(default_factory=list)
    estimates: list[EstimateError] = field(default_factory=list)
    """Per scope and estimated model (``claude-*``), by scope then model."""

    @property
    def over_limit(self) -> int:
        """Records whose billed input tokens exceed their ``context_limit``."""
        return sum(1 for entry in self.entries if entry.over_limit)

    @property
    def ok(self) -> bool:
        """True when every record matched (an empty audit is fine)."""
        return all(entry.ok for entry in self.entries)

    def counts(self) -> dict[str, int]:
        """How many records have each status, in a fixed order."""
        order: tuple[AuditStatus, ...] = ("match", "digest_mismatch", "policy_mismatch",
                                          "older_format", "superseded", "copied", "error",
                                          "erased")
        return {status: sum(1 for e in self.entries if e.status == status) for status in order}

    def to_json(self) -> dict[str, Any]:
        """JSON-ready data: ok, counts and one object per record."""
        return {"session": self.session, "ok": self.ok, "counts": self.counts(),
                "over_limit": self.over_limit,
                "estimates": [asdict(estimate) for estimate in self.estimates],
                "records": [asdict(entry) for entry in self.entries]}


def _records(conn: sa.Connection, session: str | None
             ) -> tuple[list[RecordedEvent], dict[tuple[str, int], dict[str, Any]]]:
    """The records to audit, and the newest usage report of each (by session and the
    record's position)."""
    found: Iterable[RecordedEvent]
    if session is not None:
        found = read_stream_until(conn, session)
        if not found:
            raise ReplayError(f"unknown session {session!r}")
    else:
        # No index on type: auditing the whole log reads it once, in pages.
        found = read_all(conn)
    records: list[RecordedEvent] = []
    billed: dict[tuple[str, int], dict[str, Any]] = {}
    for event in found:
        if _is_record(event):
            records.append(event)
        elif event.type == USAGE_TYPE and event.data.get("record_position") is not None:
            billed[(event.stream_id, int(event.data["record_position"]))] = event.data
    return records, billed


def _is_record(event: RecordedEvent) -> bool:
    """A ``context.assembled``, or what erasure left of one."""
    return event.type == RECORD_TYPE or (
        event.type == ERASED_TYPE and event.data.get("erased_type") == RECORD_TYPE)


@dataclass(frozen=True, slots=True)
class Derived:
    """What an audit compares of an assembly derived again (the rest is not kept)."""

    digest: str
    policy_version: str
    format_version: int
    context_limit: int | None
    """The derived report's context limit (None: its profile has none), for billing."""


def derived_of(assembly: Assembly) -> Derived:
    """What an audit keeps of ``assembly``."""
    limit = getattr(assembly.report, "context_limit", None)
    return Derived(assembly.digest, assembly.policy_version, assembly.format_version,
                   limit if isinstance(limit, int) else None)


def audit_record(conn: sa.Connection, record: RecordedEvent, *,
                 clock_now: datetime, derived: Derived | None = None) -> AuditEntry:
    """Derive one record again (or take ``derived``, found by a fold) and compare it."""
    data = record.data
    if record.type == ERASED_TYPE:
        return AuditEntry(
            session=record.stream_id, record_position=record.position, position=0,
            profile="", now="", status="erased", recorded_digest="", derived_digest=None,
            recorded_policy_version="", derived_policy_version=None, policy_stored=False,
            detail=f"erased by erasure {data.get('erasure')}: nothing left to derive")
    base: dict[str, Any] = {
        "session": record.stream_id, "record_position": record.position,
        "position": int(data["position"]), "profile": str(data["profile"]),
        "now": str(data["now"]), "recorded_digest": str(data["digest"]),
        "recorded_policy_version": str(data["policy_version"]),
        "policy_stored": data.get("policy") is not None}
    if record.metadata.get("forked_from"):
        return AuditEntry(**base, status="copied", derived_digest=None,
                          derived_policy_version=None,
                          detail=f"copied from {record.metadata['forked_from']}")
    try:
        policy = None if data.get("policy") is None else parse_policy(data["policy"])
        derived = derived or _derive(conn, record, base, policy, clock_now)
    except ErasedHistory as exc:
        return AuditEntry(**base, status="erased", derived_digest=None,
                          derived_policy_version=None, detail=str(exc))
    except (LedgerError, ValueError) as exc:
        return AuditEntry(**base, status="error", derived_digest=None,
                          derived_policy_version=None, detail=str(exc))
    return _compared(base, data, derived)


def _derive(conn: sa.Connection, record: RecordedEvent, base: dict[str, Any],
            policy: Policy | None, clock_now: datetime) -> Derived:
    """One record derived again by a replay of its own."""
    found = replay(conn, record.stream_id, profile=base["profile"],
                         until=base["position"], policy=policy,
                         now=datetime.fromisoformat(base["now"].replace("Z", "+00:00")),
                         clock_now=clock_now)
    return derived_of(found)


def _compared(base: dict[str, Any], data: dict[str, Any], derived: Derived) -> AuditEntry:
    """The entry of a record whose assembly was derived again."""
    status: AuditStatus = "match"
    detail = ""
    recorded_format = data.get("format_version") or derived.format_version
    if recorded_format != derived.format_version:
        status = "older_format"
        detail = (f"recorded under format {recorded_format}; current is "
                  f"{derived.format_version}: the digest hashes another form of the "
                  "assembly, so it cannot be compared; not a sign of tampering")
    elif _superseded(base["recorded_policy_version"], derived.policy_version):
        status = "superseded"
        detail = (f"recorded under {base['recorded_policy_version']}, a revision this "
                  f"release no longer makes (it derives {derived.policy_version}); not "
                  "derivable again, not a sign of tampering")
    elif derived.policy_version != base["recorded_policy_version"]:
        status = "policy_mismatch"
        detail = (f"recorded policy {base['recorded_policy_version']}, derived "
                  f"{derived.policy_version}")
    elif derived.digest != base["recorded_digest"]:
        status = "digest_mismatch"
        detail = f"recorded {base['recorded_digest'][:16]}, derived {derived.digest[:16]}"
    return AuditEntry(**base, status=status, derived_digest=derived.digest,
                      derived_policy_version=derived.policy_version, detail=detail,
                      context_limit=derived.context_limit)


_VERSION = re.compile(r"(?P<profile>[^@+]+)@(?P<revision>\d+)(?P<rest>\+[0-9a-f]+)?")


def _superseded(recorded: str, derived: str) -> bool:
    """Whether ``recorded`` names the same profile and policy values as ``derived`` at an
    earlier revision of the profile (``card@1+ab`` against ``card@2+ab``)."""
    old, new = _VERSION.fullmatch(recorded), _VERSION.fullmatch(derived)
    return (old is not None and new is not None and old["profile"] == new["profile"]
            and old["rest"] == new["rest"]
            and int(old["revision"]) < int(new["revision"]))


def audit_log(conn: sa.Connection, session: str | None, *, clock_now: datetime,
              cancel: CancelToken | None = None) -> AuditReport:
    """Audit every ``context.assembled`` of ``session`` (or of the whole log); ``cancel``
    is checked before each record."""
    records, billed = _records(conn, session)
    folded = _fold_records(conn, records, clock_now, cancel)
    entries: list[AuditEntry] = []
    for record in records:
        check(cancel)
        entry = audit_record(conn, record, clock_now=clock_now,
                             derived=folded.get(record.position))
        entries.append(_with_billing(entry, record, billed.get(
            (record.stream_id, record.position))))
    return AuditReport(session, entries, _estimate_errors(conn, entries))


def _with_billing(entry: AuditEntry, record: RecordedEvent,
                  usage: dict[str, Any] | None) -> AuditEntry:
    """``entry`` with the predicted and billed tokens and the context limit beside it."""
    if record.type != RECORD_TYPE:
        return entry
    predicted = record.data.get("tokens")
    policy = record.data.get("policy") or {}
    # The recorded policy's limit, else the one the audit's replay derived.
    limit = policy.get("context_limit", entry.context_limit)
    billed = None if usage is None else int(usage["input_tokens"])
    return replace(entry, predicted_tokens=predicted, billed_input_tokens=billed,
                   billed_model=None if usage is None else str(usage["model"]),
                   context_limit=limit,
                   over_limit=billed is not None and limit is not None and billed > limit)


def _estimate_errors(conn: sa.Connection, entries: Sequence[AuditEntry]
                     ) -> list[EstimateError]:
    groups: dict[tuple[str, str], list[AuditEntry]] = {}
    scopes: dict[str, str] = {}
    for entry in entries:
        model = entry.billed_model
        if model is None or not is_estimated(model) or entry.predicted_tokens is None \
                or not entry.billed_input_tokens:
            continue
        if entry.session not in scopes:
            scopes[entry.session] = load_session_scope(conn, entry.session) or DEFAULT_SCOPE
        groups.setdefault((scopes[entry.session], model), []).append(entry)
    out: list[EstimateError] = []
    for (scope, model), group in sorted(groups.items()):
        predicted = sum(e.predicted_tokens or 0 for e in group)
        billed = sum(e.billed_input_tokens or 0 for e in group)
        worst = max((((e.predicted_tokens or 0) - (e.billed_input_tokens or 0))
                     / (e.billed_input_tokens or 1) for e in group), key=abs)
        out.append(EstimateError(scope, model, len(group), predicted, billed,
                                 round(100 * (predicted - billed) / billed, 2),
                                 round(100 * worst, 2)))
    return out


def _fold_records(conn: sa.Connection, records: Sequence[RecordedEvent],
                  clock_now: datetime, cancel: CancelToken | None) -> dict[int, Derived]:
    """The records derived again by one fold per session and profile (a timeline's fold,
    assembled at each record's position and ``now``), by record position. A record the
    fold cannot stand for (copied, erased, a bad policy or position, history an erasure
    took) is left out: ``audit_record`` replays it alone and names what is wrong."""
    groups: dict[tuple[str, str], list[tuple[int, datetime, Policy | None, int]]] = {}
    for record in records:
        data = record.data
        if record.type != RECORD_TYPE or record.metadata.get("forked_from"):
            continue
        try:
            policy = None if data.get("policy") is None else parse_policy(data["policy"])
            now = datetime.fromisoformat(str(data["now"]).replace("Z", "+00:00"))
            position = int(data["position"])
        except (LedgerError, ValueError, KeyError, TypeError):
            continue
        if now.tzinfo is None or position < 1:
            continue
        groups.setdefault((record.stream_id, str(data["profile"])), []).append(
            (position, now, policy, record.position))
    derived: dict[int, Derived] = {}
    for (session, profile), wanted in groups.items():
        wanted.sort(key=lambda item: (item[0], item[3]))
        try:
            for at, assembly in fold_assemblies(conn, session, profile, wanted, clock_now,
                                                cancel):
                derived[at] = derived_of(assembly)
        except Cancelled:
            raise
        except (LedgerError, ValueError):
            continue  # the rest are replayed alone, and say why
    return derived


# -- what-if -------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class DecisionChange:
    """One decision that differs between two timelines at the same step."""

    item: str
    message: int
    """The session's messages so far at the step."""
    position: int
    old_action: str
    old_reason: str
    new_action: str
    new_reason: str
    step: int = 0

    @property
    def action_changed(self) -> bool:
        """True when the item's action changes (kept, dropped...); False when only the
        reason for the same action does."""
        return self.old_action != self.new_action


@dataclass(frozen=True, slots=True)
class WhatIfReport:
    """The decisions of ``session`` that change under another policy, turn by turn."""

    session: str
    profile: str
    old_policy: str
    new_policy: str
    messages: int
    changes: list[DecisionChange]
    steps: int = 0
    """The timeline's steps (``messages``: the session's messages in it)."""

    @property
    def action_changes(self) -> list[DecisionChange]:
        """The changes whose action differs (an item kept now dropped, or the reverse)."""
        return [c for c in self.changes if c.action_changed]

    @property
    def reason_changes(self) -> list[DecisionChange]:
        """The changes that keep the action and only give another reason."""
        return [c for c in self.changes if not c.action_changed]

    def to_json(self) -> dict[str, Any]:
        """JSON-ready data."""
        return {"session": self.session, "profile": self.profile,
                "old_policy": self.old_policy, "new_policy": self.new_policy,
                "messages": self.messages, "steps": self.steps,
                "changes": [asdict(c) for c in self.changes]}


ABSENT = ("absent", "not_a_candidate")


def _by_item(decisions: Sequence[Decision]) -> dict[str, tuple[str, str]]:
    return {d.item: (d.action, d.reason) for d in decisions}


def _decided(assembly: Assembly, item: str) -> tuple[str, str]:
    """How ``assembly`` decided an item with no decision of its own: through the range
    decision that covers it (``Assembly.decision``), else absent."""
    try:
        cover = assembly.decision(item)
    except KeyError:
        return ABSENT
    return cover.action, f"{cover.reason} via {cover.item}"


def compare_timelines(session: str, profile: str,
                      pairs: Iterable[tuple[TimelineStep, TimelineStep]]) -> WhatIfReport:
    """Every (item, message) whose action or reason differs between the two steps of each
    pair (``iter_timeline_pairs``: the same step under the old and the new policy). Reads
    ``pairs`` once, keeping only the changes and the last pair."""
    changes: list[DecisionChange] = []
    last: tuple[TimelineStep, TimelineStep] | None = None
    steps = 0
    for before, after in pairs:
        steps += 1
        last = (before, after)
        was = _by_item(before.assembly.decisions)
        now = _by_item(after.assembly.decisions)
        # Items in the old order, then those only the new timeline has, in its order.
        items = list(dict.fromkeys([*was, *now]))
        for item in items:
            a = was.get(item) or _decided(before.assembly, item)
            b = now.get(item) or _decided(after.assembly, item)
            if a != b:
                changes.append(DecisionChange(item, before.message, before.position,
                                              a[0], a[1], b[0], b[1], before.step))
    if last is None:
        return WhatIfReport(session, profile, "", "", 0, changes, 0)
    return WhatIfReport(session, profile, last[0].assembly.policy_version,
                        last[1].assembly.policy_version, last[0].message, changes, steps)
