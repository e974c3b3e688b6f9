"""Adapters that put a ``Ledger`` under the agent frameworks apps already use.

- ``ctxledger.integrations.openai_agents``: ``LedgerSession``, a session of the OpenAI
  Agents SDK (extra ``openai-agents``);
- ``ctxledger.integrations.langchain``: ``LedgerChatMessageHistory``, a LangChain chat
  message history (extra ``langchain``);
- ``ctxledger.integrations.langgraph``: ``LedgerSaver``, a LangGraph checkpointer (extra
  ``langgraph``).

What a provider billed for a call is read from the SDKs' own objects (OpenAI's
``ChatCompletion``/``Response``, Anthropic's ``Message``, an Agents ``ModelResponse``, a
LangChain ``AIMessage``) by ``ctxledger.integrations.report_usage_of`` (``usage.reported``);
the LangChain history records it by itself for each ``AIMessage`` with ``usage_metadata``,
and ``LedgerSession.report_run_usage`` for each model response of an Agents run.

Each is a thin layer over the ``Ledger``; ``import ctxledger`` imports none of them, and
importing one without its framework raises ``MissingExtra``, one line naming the extra.
"""

from __future__ import annotations

from typing import Any


class MissingExtra(ImportError):
    """An adapter imported without its framework; the message names the extra."""

    def __init__(self, adapter: str, extra: str, missing: str | None) -> None:
        super().__init__(
            f"ctxledger.integrations.{adapter} needs the {extra} extra: "
            f"pip install 'ctxledger[{extra}]' (missing module {missing or '?'})",
            name=missing)
        self.extra = extra


def report_usage_of(*args: Any, **kwargs: Any) -> Any:
    """Record what a provider billed, read from an SDK response (``usage.reported``); see
    ``ctxledger.integrations._usage.report_usage_of``."""
    from ctxledger.integrations._usage import report_usage_of as report

    return report(*args, **kwargs)


__all__ = ["MissingExtra", "report_usage_of"]
