"""The assembler's entry points.

How the facade (``Ledger.assemble``) drives them, in one read transaction::

    settings = load_session_view(conn, session, ViewRequest()).settings   # cheap
    policy   = policy_for(profile, settings)          # or parse_policy(FILE) for replay
    counter  = counter_for(policy, store=<token_counts table adapter>)
    memos    = <the ledger's per-thread SessionMemos> (or None: cold)
    view     = load_session_view(conn, session,
                                 request_for(profile, policy, now, counter, memos))
    result, caches = assemble_with_caches(view, profile, now, policy, counter, memos)
    # then persist counter.new_counts() (token_counts) and every cache write in `caches`

``assemble`` is a pure function of (view, profile, now, policy): no SQL, no clock, no
randomness; the counter only memoizes counts, which are functions of the text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from ctxledger.assembler.caches import CacheWrite
from ctxledger.assembler.decision_engine import Engine
from ctxledger.assembler.digest import seal
from ctxledger.assembler.encodings import EncodingLoader
from ctxledger.assembler.errors import AssemblyError
from ctxledger.assembler.memo import SessionMemos
from ctxledger.assembler.model import FORMAT_7_NOTES, Assembly
from ctxledger.assembler.models import ESTIMATE_METHOD_PREFIX
from ctxledger.assembler.policy import Policy, PolicyError
from ctxledger.assembler.profiles import get_profile
from ctxledger.assembler.setting_check import unknown_setting_warnings
from ctxledger.assembler.tokens import TokenCounter, TokenCountStore, counter_key
from ctxledger.projections.session_view import SessionView, ViewRequest
from ctxledger.store.clock import ensure_utc


def policy_for(profile: str, settings: Mapping[str, Any]) -> Policy:
    """The effective policy of ``profile`` under resolved session ``settings``."""
    return get_profile(profile).policy_type.from_settings(settings)


def parse_policy(data: Mapping[str, Any] | str | bytes) -> Policy:
    """A whole policy from JSON text or data (its ``profile`` field picks the type)."""
    if isinstance(data, str | bytes):
        try:
            data = json.loads(data)
        except RecursionError:  # nesting deeper than the interpreter's stack
            raise PolicyError("policy is not valid JSON: it is nested too deeply") from None
        except ValueError as exc:
            raise PolicyError(f"policy is not valid JSON: {exc}") from None
    if not isinstance(data, Mapping):
        raise PolicyError("a policy must be a JSON object")
    try:
        return Policy.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "policy"
        raise PolicyError(f"invalid policy: {where}: {' '.join(str(first['msg']).split())}"
                          ) from None


def request_for(profile: str, policy: Policy, now: datetime,
                counter: TokenCounter | None = None,
                memos: SessionMemos | None = None) -> ViewRequest:
    """What the read view must hold to assemble ``profile`` under ``policy`` at ``now``.

    ``counter`` (default: a fresh one for the policy) measures a windowed history as the
    assembly will count it; pass the one you will assemble with, to share its memo.
    ``memos`` (those you will assemble with) offer the item sets and whole histories they
    hold, so a view of context items, or of every message, reads only what changed since.
    """
    found = get_profile(profile)
    _check_policy(found.name, found.policy_type, policy)
    request = found.request(policy, _utc(now), counter or counter_for(policy))
    if memos is not None and request.items:
        request = replace(request, items_probe=memos.item_set)
    if memos is not None and request.history != "none":
        request = replace(request, message_pool=memos.for_session,
                          history_probe=(memos.message_set if request.history_budget is None
                                         else None))
    return request


def counter_for(policy: Policy, *, store: TokenCountStore | None = None,
                loader: EncodingLoader | None = None) -> TokenCounter:
    """A token counter for the policy's encoding, backed by ``store`` when given."""
    return TokenCounter(policy.token_encoding, store=store, loader=loader,
                        unit=policy.text_unit)


def assemble(view: SessionView, profile: str, now: datetime, policy: Policy | None = None,
             counter: TokenCounter | None = None) -> Assembly:
    """Assemble ``view`` with ``profile`` at ``now``.

    ``policy`` defaults to ``policy_for(profile, view.settings)``; ``counter`` to a fresh
    counter for the policy's encoding (pass one to share its memo across assemblies).
    """
    return assemble_with_caches(view, profile, now, policy, counter)[0]


def assemble_with_caches(view: SessionView, profile: str, now: datetime,
                         policy: Policy | None = None, counter: TokenCounter | None = None,
                         memos: SessionMemos | None = None
                         ) -> tuple[Assembly, tuple[CacheWrite, ...]]:
    """``assemble``, plus the cache rows the profile computed on the way (to persist).

    ``memos``: in-process memos kept across assemblies (``assembler.memo``); they change
    the time an assembly takes, never its result.
    """
    found = get_profile(profile)
    if not view.exists:
        raise AssemblyError(f"unknown session {view.stream_id!r}")
    if policy is None:
        policy = found.policy_type.from_settings(view.settings)
    _check_policy(found.name, found.policy_type, policy)
    if counter is None:
        counter = counter_for(policy)
    elif counter.key != counter_key(policy.token_encoding, policy.text_unit):
        raise AssemblyError(f"token counter uses {counter.key!r} but the policy says "
                            f"{counter_key(policy.token_encoding, policy.text_unit)!r}")
    engine = Engine(counter, memos)
    result = found.assemble(engine, view, _utc(now), policy)
    if policy.estimated:
        # Left out of the digest: what the counts are, not what was decided.
        result = result.model_copy(update={"tokens": result.tokens.model_copy(update={
            "methods": [f"{ESTIMATE_METHOD_PREFIX}{policy.model}:{method}"
                        for method in result.tokens.methods]})})
    unknown = unknown_setting_warnings(view.settings)
    if unknown:
        # Said by format 7 only: a session without such a key hashes what it did.
        result = seal(result.model_copy(update={
            "warnings": [*result.warnings, *unknown], "format_version": FORMAT_7_NOTES}))
    if memos is not None and view.item_set is not None:
        memos.keep_item_set(view.item_set)
    if memos is not None and view.history is not None and view.history.message_set:
        memos.keep_message_set(view.history.message_set)
    return result, engine.cache_writes


def _check_policy(profile: str, expected: type[Policy], policy: Policy) -> None:
    if not isinstance(policy, expected):
        raise AssemblyError(
            f"profile {profile!r} needs a {expected.__name__}, got {type(policy).__name__}")


def _utc(now: datetime) -> datetime:
    try:
        return ensure_utc(now, "now")
    except (ValueError, OverflowError) as exc:
        raise AssemblyError(f"now: {exc}") from None
