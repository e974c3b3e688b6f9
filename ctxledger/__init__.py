"""ctxledger: an event-sourced session store for LLM applications.

``from ctxledger import Ledger`` is all most users need. Names are imported on first use
(PEP 562), so ``ctxledger --version`` starts without loading the database stack.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

# A wheel installs store/, projections/, assembler/ and migrations/ inside this package; a
# checkout keeps them beside it, so there the checkout's root joins the package's search
# path. No symlinks: a checkout made without them imports the same modules.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if not os.path.isdir(os.path.join(__path__[0], "store")) and os.path.isfile(
        os.path.join(_ROOT, "store", "__init__.py")):
    __path__.append(_ROOT)

from ctxledger.store.lazy import lazy_exports  # noqa: E402 (needs the path above)

if TYPE_CHECKING:
    from ctxledger.ledger import Ledger
    from ctxledger.store.anchor import Anchor
    from ctxledger.store.errors import (
        ConcurrencyError,
        DatabaseMissing,
        EventValidationError,
        IdempotencyError,
        IntegrityViolation,
        InvalidArgument,
        LedgerError,
        SchemaMissing,
        StreamRuleError,
    )
    from ctxledger.store.records import AppendResult, RecordedEvent
    from ctxledger.store.seal import Seal, SealSettings

_SOURCES = {
    "Ledger": "ctxledger.ledger", "Anchor": "ctxledger.store.anchor",
    "ConcurrencyError": "ctxledger.store.errors", "DatabaseMissing": "ctxledger.store.errors",
    "EventValidationError": "ctxledger.store.errors", "IdempotencyError": "ctxledger.store.errors",
    "IntegrityViolation": "ctxledger.store.errors", "InvalidArgument": "ctxledger.store.errors",
    "LedgerError": "ctxledger.store.errors", "SchemaMissing": "ctxledger.store.errors",
    "StreamRuleError": "ctxledger.store.errors",
    "AppendResult": "ctxledger.store.records", "RecordedEvent": "ctxledger.store.records",
    "Seal": "ctxledger.store.seal", "SealSettings": "ctxledger.store.seal",
}

__all__ = [
    "Anchor", "AppendResult", "ConcurrencyError", "DatabaseMissing", "EventValidationError",
    "IdempotencyError", "IntegrityViolation", "InvalidArgument", "Ledger", "LedgerError",
    "RecordedEvent", "SchemaMissing", "Seal", "SealSettings", "StreamRuleError",
]
__version__ = "0.1.0"


__getattr__ = lazy_exports(__name__, _SOURCES, globals())
