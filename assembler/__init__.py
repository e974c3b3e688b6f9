"""The assembler: builds prompt context from a read view under budgets, deterministically.

Entry points are in ``assembler.api``; the output model is ``assembler.model.Assembly``.
Names are imported on first use (PEP 562): importing ``assembler.tokens`` alone must not
load every profile (the brief profile brings numpy and bm25s).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from assembler.api import assemble, counter_for, parse_policy, policy_for, request_for
    from assembler.model import Assembly, Decision, Section, SectionItem, TokenTotals
    from assembler.policy import Policy, PolicyError
    from assembler.tokens import CachedCount, TokenCount, TokenCounter

_SOURCES = {
    "assemble": "api", "counter_for": "api", "parse_policy": "api", "policy_for": "api",
    "request_for": "api", "Assembly": "model", "Decision": "model", "Section": "model",
    "SectionItem": "model", "TokenTotals": "model", "Policy": "policy",
    "PolicyError": "policy", "CachedCount": "tokens", "TokenCount": "tokens",
    "TokenCounter": "tokens",
}

__all__ = [
    "Assembly", "CachedCount", "Decision", "Policy", "PolicyError", "Section", "SectionItem",
    "TokenCount", "TokenCounter", "TokenTotals", "assemble", "counter_for", "parse_policy",
    "policy_for", "request_for",
]


def __getattr__(name: str) -> Any:
    module = _SOURCES.get(name)
    if module is None:
        raise AttributeError(f"module 'assembler' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
