"""The assembler: builds prompt context from a read view under budgets, deterministically.

Entry points are in ``assembler.api``; the output model is ``assembler.model.Assembly``.
Names are imported on first use (PEP 562): importing ``assembler.tokens`` alone must not
load every profile (the brief profile brings numpy and bm25s).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from store.lazy import lazy_exports

if TYPE_CHECKING:
    from assembler.api import assemble, counter_for, parse_policy, policy_for, request_for
    from assembler.model import Assembly, Decision, Section, SectionItem, TokenTotals
    from assembler.policy import Policy, PolicyError
    from assembler.tokens import CachedCount, TokenCount, TokenCounter

_SOURCES = {
    "assemble": "assembler.api", "counter_for": "assembler.api", "parse_policy": "assembler.api",
    "policy_for": "assembler.api", "request_for": "assembler.api", "Assembly": "assembler.model",
    "Decision": "assembler.model", "Section": "assembler.model", "SectionItem": "assembler.model",
    "TokenTotals": "assembler.model", "Policy": "assembler.policy",
    "PolicyError": "assembler.policy", "CachedCount": "assembler.tokens",
    "TokenCount": "assembler.tokens", "TokenCounter": "assembler.tokens",
}

__all__ = [
    "Assembly", "CachedCount", "Decision", "Policy", "PolicyError", "Section", "SectionItem",
    "TokenCount", "TokenCounter", "TokenTotals", "assemble", "counter_for", "parse_policy",
    "policy_for", "request_for",
]


__getattr__ = lazy_exports(__name__, _SOURCES, globals())
