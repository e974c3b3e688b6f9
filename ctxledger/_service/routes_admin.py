"""Health (no key) and the whole log's verification (admin keys)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from ctxledger._service.auth import KeyDep, LedgerDep, require_admin

router = APIRouter(tags=["admin"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    """The process is up and its ledger open (no key needed, nothing revealed)."""
    return {"status": "ok"}


@router.get("/verify")
def verify(ledger: LedgerDep, key: KeyDep) -> dict[str, Any]:
    """Check every hash chain, seal and trigger (admin keys only); ``ok`` says whether
    the log is intact (still a 200 when it is not: the report is the answer)."""
    from ctxledger import render

    require_admin(key)
    return render.verify_record(ledger.verify())
