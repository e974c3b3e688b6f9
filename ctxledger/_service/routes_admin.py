"""Health (no key) and the whole log's verification (admin keys)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from ctxledger._service.auth import KeyDep, LedgerDep, require_admin
from ctxledger._service.replica import HealthOut, replica_health

router = APIRouter(tags=["admin"])


@router.get("/healthz", response_model=HealthOut, response_model_exclude_none=True)
def healthz(request: Request) -> HealthOut:
    """The process is up and its ledger open (no key needed, nothing revealed). With a
    read replica (``serve --replica-url``), ``replica`` holds its ``status`` (ok or
    unreachable), ``lag_seconds`` (behind its primary; 0 when it has replayed all it
    received) and ``lag_positions`` (the primary's head minus its own)."""
    return HealthOut(replica=replica_health(request))


@router.get("/verify")
def verify(ledger: LedgerDep, key: KeyDep) -> dict[str, Any]:
    """Check every hash chain, seal and trigger (admin keys only); ``ok`` says whether
    the log is intact (still a 200 when it is not: the report is the answer)."""
    from ctxledger import render

    require_admin(key)
    return render.verify_record(ledger.verify())
