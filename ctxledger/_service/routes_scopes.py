"""Scopes: daily usage figures."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from ctxledger._config import DEFAULT_USAGE_DAYS, MAX_USAGE_DAYS
from ctxledger._service.auth import KeyDep, LedgerDep, require_scope

router = APIRouter(tags=["scopes"])


@router.get("/scopes/{scope}/usage")
def usage(scope: str, ledger: LedgerDep, key: KeyDep,
          days: Annotated[int, Query(ge=1, le=MAX_USAGE_DAYS, description="Days up to today.")]
          = DEFAULT_USAGE_DAYS) -> dict[str, Any]:
    """Daily message, tool and token figures of the scope."""
    require_scope(key, scope)
    report = ledger.usage(scope, days=days)
    data: dict[str, Any] = report.model_dump(mode="json")
    return data
