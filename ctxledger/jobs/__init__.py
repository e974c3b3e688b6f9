"""The usage jobs (SPEC §5): the nightly rollup, its scheduler, and the reports read from
the rollups (``Ledger.rollup``, ``Ledger.usage``; brief statistics)."""
