"""Every PostgreSQL advisory-lock key ctxledger takes, named and defined once.

A lock is the pair (key, ``hashtext(current_schema())``): ledgers in different schemas of
one database never wait for each other. SQLite takes none of them: a write transaction
(``BEGIN IMMEDIATE``) already holds the whole database.

The keys must stay distinct (``tests/backends/test_locks.py``) and must not change: a
process of an older version waits on the number it knows.
"""

from __future__ import annotations

MIGRATIONS = 7422853
"""Schema upgrades: concurrent openers of one schema wait instead of racing on DDL."""

ROLLUP = 7422854
"""The nightly rollup: a second job on the database queues, then finds the day done."""

POSITIONS = 7422861
"""Taking positions (``G`` in ``pg_writes``): held for the one statement that assigns the
transaction id and inserts a batch, so ids and positions are handed out in one order."""

SEAL = 7422862
"""Sealers, automatic and explicit: one seal at a time, each extending the last."""

APPENDING = 7422863
"""Taken shared by every transaction that may append, from before it has a transaction id
until it ends: a reader's settled position waits only for these transactions."""

ALL = {"MIGRATIONS": MIGRATIONS, "ROLLUP": ROLLUP, "POSITIONS": POSITIONS, "SEAL": SEAL,
       "APPENDING": APPENDING}
"""Each key by name."""
