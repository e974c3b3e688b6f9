"""What a provider billed, read from the SDKs' own response and usage objects.

Each SDK reports a call's tokens its own way; ``usage_of`` reads them all into one
``BilledUsage`` where ``input_tokens`` counts every prompt token, cached ones included:

- OpenAI chat completions (``CompletionUsage``): ``prompt_tokens``, ``completion_tokens``,
  ``prompt_tokens_details.cached_tokens``;
- OpenAI responses (``ResponseUsage``) and the Agents SDK (``agents.usage.Usage``):
  ``input_tokens``, ``output_tokens``, ``input_tokens_details.cached_tokens``;
- Anthropic (``anthropic.types.Usage``): its ``input_tokens`` leave out the cache, so
  the input is ``input_tokens + cache_read_input_tokens + cache_creation_input_tokens``
  and the cached part ``cache_read_input_tokens``;
- LangChain (``UsageMetadata`` of an ``AIMessage``): ``input_tokens``, ``output_tokens``,
  ``input_token_details.cache_read``.

A whole response is read through its ``usage`` (``ChatCompletion``, ``Response``,
Anthropic's ``Message``; the model from its ``model``), an Agents ``ModelResponse``
through its ``usage``, and a LangChain ``AIMessage`` through its ``usage_metadata`` (the
model from ``response_metadata``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ctxledger.store.errors import InvalidArgument

if TYPE_CHECKING:
    from ctxledger._ledger import Ledger
    from ctxledger.store.records import AppendResult


USAGE_EVENT = "usage.reported"


@dataclass(frozen=True, slots=True)
class BilledUsage:
    """One call's billed tokens, and the model when the object named it."""

    input_tokens: int
    output_tokens: int
    cached_tokens: int
    model: str | None = None


def _get(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else 0


def usage_of(obj: Any) -> BilledUsage:
    """The billed usage an SDK object reports (see the module's docstring);
    ``InvalidArgument`` (one line) for an object that reports none."""
    model = _get(obj, "model")
    model = model if isinstance(model, str) and model else None
    metadata = _get(obj, "usage_metadata")  # a LangChain AIMessage
    if metadata is not None:
        response = _get(obj, "response_metadata") or {}
        named = response.get("model_name") or response.get("model")
        return _counts(metadata, named if isinstance(named, str) and named else model)
    usage = _get(obj, "usage")
    if usage is not None and not isinstance(usage, int):
        return _counts(usage, model)
    return _counts(obj, model)


def _counts(usage: Any, model: str | None) -> BilledUsage:
    if _get(usage, "prompt_tokens") is not None:  # OpenAI chat completions
        details = _get(usage, "prompt_tokens_details")
        return BilledUsage(_int(_get(usage, "prompt_tokens")),
                           _int(_get(usage, "completion_tokens")),
                           _int(_get(details, "cached_tokens")) if details else 0, model)
    if _get(usage, "input_tokens") is None or _get(usage, "output_tokens") is None:
        raise InvalidArgument(f"{type(usage).__name__} reports no token usage")
    read = _get(usage, "cache_read_input_tokens")
    written = _get(usage, "cache_creation_input_tokens")
    if read is not None or written is not None:  # Anthropic: input leaves the cache out
        return BilledUsage(_int(_get(usage, "input_tokens")) + _int(read) + _int(written),
                           _int(_get(usage, "output_tokens")), _int(read), model)
    details = _get(usage, "input_tokens_details")  # OpenAI responses, Agents SDK
    cached = _int(_get(details, "cached_tokens")) if details is not None else 0
    langchain = _get(usage, "input_token_details")
    if langchain is not None:
        cached = _int(_get(langchain, "cache_read"))
    return BilledUsage(_int(_get(usage, "input_tokens")), _int(_get(usage, "output_tokens")),
                       cached, model)


def usage_event_of(reply: Any) -> dict[str, Any] | None:
    """The ``usage.reported`` event of a LangChain reply (an ``AIMessage``) whose
    ``usage_metadata`` and ``response_metadata`` say what was billed and by which model;
    None for a message that says neither."""
    if not _get(reply, "usage_metadata"):
        return None
    billed = usage_of(reply)
    if billed.model is None:
        return None
    return {"type": USAGE_EVENT, "data": {
        "model": billed.model, "input_tokens": billed.input_tokens,
        "output_tokens": billed.output_tokens, "cached_tokens": billed.cached_tokens}}


def report_usage_of(ledger: Ledger, session: str, response: Any, *, model: str | None = None,
                    assembly: Any = None, cost: float | None = None,
                    event_id: str | None = None) -> AppendResult:
    """``Ledger.report_usage`` with the tokens an SDK response (or usage object) reports;
    ``model`` is needed when the object names none (an Agents ``ModelResponse``)."""
    billed = usage_of(response)
    chosen = model or billed.model
    if chosen is None:
        raise InvalidArgument(f"{type(response).__name__} names no model: pass model=")
    return ledger.report_usage(session, model=chosen, input_tokens=billed.input_tokens,
                               output_tokens=billed.output_tokens,
                               cached_tokens=billed.cached_tokens, cost=cost,
                               assembly=assembly, event_id=event_id)
