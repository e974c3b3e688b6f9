"""The independent tamper suite agmi (``agent-memory-integrity`` 0.6.3) against
``Ledger.verify``: its nine at-rest edits T1 to T9, on SQLite and PostgreSQL, in each
configuration the README's table names (what the verifier holds outside the store).

A witness must catch all nine. Without one, a whole-store rollback (T9) restores a
consistent older copy that nothing left in the database contradicts; every other edit is
caught, the tail cut (T2) by the projections that still count the cut events."""

from __future__ import annotations

import pytest
from agmi.attacks.at_rest import AT_REST_ATTACKS_WITH_SNAPSHOT
from conftest import PG_URL, pg_schema_url, require_postgres
from helpers.agmi_adapter import MODES, CtxledgerAdapter

ATTACKS = [cls.name for cls in AT_REST_ATTACKS_WITH_SNAPSHOT]

MISSED = {"plain": {"snapshot_rollback"}, "key": {"snapshot_rollback"},
          "anchor": {"snapshot_rollback"}, "witness": set()}
"""What each configuration lets through: the README's table."""


def test_the_suite_has_nine_edits() -> None:
    assert ATTACKS == ["tamper", "truncate", "delete_middle", "reorder", "forge",
                       "cross_replay", "rollback_replay", "metadata_tamper",
                       "snapshot_rollback"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("backend", ["sqlite",
                                     pytest.param("postgres", marks=pytest.mark.postgres)])
def test_agmi_verdicts(backend: str, mode: str) -> None:
    if backend == "postgres":
        require_postgres()
    adapter = CtxledgerAdapter(backend, mode, pg_admin_url=PG_URL, schema_url=pg_schema_url)
    results = [cls().run(adapter) for cls in AT_REST_ATTACKS_WITH_SNAPSHOT]
    # Every edit landed as intended (control C3) and ran to the end: a verdict each.
    unscored = [(r.attack, r.error or r.guard) for r in results if r.status not in
                ("safe", "VULNERABLE")]
    assert unscored == []
    missed = {r.attack for r in results if not r.detected}
    assert missed == MISSED[mode], [(r.attack, r.detail) for r in results]
    caught = [r for r in results if r.detected]
    assert len(caught) == 9 - len(MISSED[mode])
    # Each catch is the ledger's own finding, not a crash of the adapter.
    assert all("(" in r.detail for r in caught)
