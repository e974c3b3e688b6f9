"""The assembler: builds prompt context from a read view under budgets, deterministically.

Entry points are in ``assembler.api``; the output model is ``assembler.model.Assembly``.
Names are imported on first use (PEP 562): importing ``assembler.tokens`` alone must not
load every profile (the brief profile brings numpy and bm25s).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ctxledger.store.lazy import lazy_exports

if TYPE_CHECKING:
    from ctxledger.assembler.api import assemble, counter_for, parse_policy, policy_for, request_for
    from ctxledger.assembler.chat_tokens import MessageOverhead
    from ctxledger.assembler.model import (
        Assembly,
        ContextMessage,
        Decision,
        Section,
        SectionItem,
        TokenTotals,
    )
    from ctxledger.assembler.policy import Policy, PolicyError
    from ctxledger.assembler.tokens import CachedCount, TokenCount, TokenCounter

# Each name's module, relative to this package.
_SOURCES = {
    "assemble": ".api", "counter_for": ".api", "parse_policy": ".api", "policy_for": ".api",
    "request_for": ".api",
    "MessageOverhead": ".chat_tokens",
    "Assembly": ".model", "ContextMessage": ".model", "Decision": ".model",
    "Section": ".model", "SectionItem": ".model", "TokenTotals": ".model",
    "Policy": ".policy", "PolicyError": ".policy",
    "CachedCount": ".tokens", "TokenCount": ".tokens", "TokenCounter": ".tokens",
}

__all__ = [
    "Assembly", "CachedCount", "ContextMessage", "Decision", "MessageOverhead", "Policy",
    "PolicyError", "Section", "SectionItem", "TokenCount", "TokenCounter", "TokenTotals",
    "assemble", "counter_for", "parse_policy", "policy_for", "request_for",
]


__getattr__ = lazy_exports(__name__, _SOURCES, globals())
