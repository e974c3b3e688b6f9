"""Card-profile sessions for tests: one in a scope of its own, with a card, settings and
chat messages, and its assembly with the card report."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ctxledger import Ledger
from ctxledger.assembler.model import Assembly
from ctxledger.assembler.profiles.card import CardReport


def card_session(ledger: Ledger, name: str, card: Mapping[str, Any], *,
                 messages: Sequence[tuple[str, str]] = (),
                 settings: Mapping[str, Any] | None = None,
                 scope_events: Sequence[Mapping[str, Any]] = (), first_id: int = 1) -> str:
    """Session ``name`` in scope ``name`` (after ``scope_events`` there): ``card``, the
    session ``settings``, then ``messages`` (role, text) with ids ``m<first_id>``, ..."""
    if scope_events:
        ledger.append(f"scope:{name}", list(scope_events))
    events: list[Any] = [{"type": "session.started", "data": {"scope": name}},
                         {"type": "card.set", "data": dict(card)}]
    events += [{"type": "setting.changed", "data": {"key": k, "value": v}}
               for k, v in (settings or {}).items()]
    events += [{"type": "message.appended",
                "data": {"message_id": f"m{index}", "role": role, "content": text}}
               for index, (role, text) in enumerate(messages, first_id)]
    ledger.append(name, events)
    return name


def assemble_card(ledger: Ledger, name: str, now: datetime) -> tuple[Assembly, CardReport]:
    """The ``card`` assembly of ``name`` at ``now``, with its report."""
    assembly = ledger.assemble(name, "card", now=now)
    assert isinstance(assembly.report, CardReport)
    return assembly, assembly.report
