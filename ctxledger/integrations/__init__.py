"""Adapters that put a ``Ledger`` under the agent frameworks apps already use.

- ``ctxledger.integrations.openai_agents``: ``LedgerSession``, a session of the OpenAI
  Agents SDK (extra ``openai-agents``);
- ``ctxledger.integrations.langchain``: ``LedgerChatMessageHistory``, a LangChain chat
  message history (extra ``langchain``);
- ``ctxledger.integrations.langgraph``: ``LedgerSaver``, a LangGraph checkpointer (extra
  ``langgraph``).

Each is a thin layer over the ``Ledger``; ``import ctxledger`` imports none of them, and
importing one without its framework raises ``MissingExtra``, one line naming the extra.
"""

from __future__ import annotations


class MissingExtra(ImportError):
    """An adapter imported without its framework; the message names the extra."""

    def __init__(self, adapter: str, extra: str, missing: str | None) -> None:
        super().__init__(
            f"ctxledger.integrations.{adapter} needs the {extra} extra: "
            f"pip install 'ctxledger[{extra}]' (missing module {missing or '?'})",
            name=missing)
        self.extra = extra


__all__ = ["MissingExtra"]
