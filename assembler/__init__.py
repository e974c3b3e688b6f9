"""The assembler: builds prompt context from a read view under budgets, deterministically.

Entry points are in ``assembler.api``; the output model is ``assembler.model.Assembly``.
"""

from assembler.api import assemble, counter_for, parse_policy, policy_for, request_for
from assembler.model import Assembly, Decision, Section, SectionItem, TokenTotals
from assembler.policy import Policy, PolicyError
from assembler.tokens import CachedCount, TokenCount, TokenCounter

__all__ = [
    "Assembly", "CachedCount", "Decision", "Policy", "PolicyError", "Section", "SectionItem",
    "TokenCount", "TokenCounter", "TokenTotals", "assemble", "counter_for", "parse_policy",
    "policy_for", "request_for",
]
