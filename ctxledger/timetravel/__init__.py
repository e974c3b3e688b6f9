"""Time travel (SPEC §4): replay a session from a prefix of the log, its timeline, why an
item was decided as it was, audits of recorded assemblies, and forks. ``Ledger`` is the
way in (``Ledger.replay``, ``timeline``, ``why``, ``audit``, ``what_if``, ``fork``)."""
