"""What a list of chat messages costs in tokens, counted as the chat APIs count it.

A chat API does not tokenize the messages as one text: each message is wrapped in
special tokens (``<|start|>role<|message|>content<|end|>`` for the cl100k and o200k
families), and the reply is primed with ``<|start|>assistant<|message|>``. So the cost of
a list is the sum of its messages' costs plus the priming, and the cost of one message is

    per_message + tokens(role) + tokens(content)
      + (tokens(name) + per_name, when it has a name)
      + sum over its tool calls of (per_tool_call + tokens(function name)
                                    + tokens(arguments))
      + per_media_part for each image or file part

where ``tokens(content)`` is the sum over its text parts for a list of parts.

The numbers are policy data (``MessageOverhead``), with these defaults:

- ``per_message = 3``, ``per_name = 1`` and ``reply_priming = 3`` are those of OpenAI's
  cookbook "How to count tokens with tiktoken" (``num_tokens_from_messages``) for
  gpt-3.5-turbo-0613 and later, gpt-4 and gpt-4o: the cl100k and o200k families.
- ``per_tool_call = 3`` is an estimate: OpenAI documents no figure for the wrapper of a
  call in an assistant message, so it is counted like a message's.
- ``per_media_part = 85`` is what OpenAI's vision guide charges for an image at ``low``
  detail; a larger image costs more, which a policy can say.

Counts are additive over messages, so a message's cost is a property of the message
alone and can be cached with it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ctxledger.assembler.tokens import TokenCounter
from ctxledger.store.canonical import sha256_hex


class MessageOverhead(BaseModel):
    """The tokens a chat API adds around messages (see the module's docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    per_message: int = Field(default=3, ge=0)
    """Around each message: ``<|start|>``, ``<|message|>``, ``<|end|>``."""
    per_name: int = Field(default=1, ge=0)
    """For a message with a ``name``, besides the name's own tokens."""
    reply_priming: int = Field(default=3, ge=0)
    """Once per list: ``<|start|>assistant<|message|>`` before the reply."""
    per_tool_call: int = Field(default=3, ge=0)
    """Around each tool call, besides its function name and arguments (an estimate)."""
    per_media_part: int = Field(default=85, ge=0)
    """For each image or file part (OpenAI's figure for a low-detail image)."""


DEFAULT_OVERHEAD = MessageOverhead()


def content_tokens(counter: TokenCounter, content: str | Iterable[Mapping[str, Any]] | None,
                   overhead: MessageOverhead) -> int:
    """The tokens of a message's content: a string, or its parts (text counted, media at
    ``per_media_part`` each)."""
    if content is None:
        return 0
    if isinstance(content, str):
        return counter.count(content) if content else 0
    total = 0
    for part in content:
        if part.get("type") == "text":
            total += counter.count(str(part["text"]))
        else:
            total += overhead.per_media_part
    return total


def message_tokens(counter: TokenCounter, *, role: str,
                   content: str | Iterable[Mapping[str, Any]] | None,
                   name: str | None = None,
                   tool_calls: Iterable[Mapping[str, Any]] = (),
                   overhead: MessageOverhead = DEFAULT_OVERHEAD) -> int:
    """The cost of one message as sent (everything but the list's ``reply_priming``)."""
    total = overhead.per_message + counter.count(role) + content_tokens(counter, content,
                                                                        overhead)
    if name:
        total += counter.count(name) + overhead.per_name
    for call in tool_calls:
        function = call["function"]
        total += (overhead.per_tool_call + counter.count(str(function["name"]))
                  + counter.count(str(function["arguments"])))
    return total


def wrapper_tokens(counter: TokenCounter, role: str, overhead: MessageOverhead) -> int:
    """What a message with no name and no tool calls costs besides its content."""
    return overhead.per_message + counter.count(role)


def cost_key(encoding: str, overhead: MessageOverhead) -> str:
    """A name for "messages counted with ``encoding`` and ``overhead``": the key under
    which a memoized total of message costs is kept (at most 50 characters)."""
    o = overhead
    key = f"{encoding}/m{o.per_message}.{o.per_name}.{o.per_tool_call}.{o.per_media_part}"
    return key if len(key) <= 50 else f"{encoding[:24]}/{sha256_hex(key)[:24]}"
