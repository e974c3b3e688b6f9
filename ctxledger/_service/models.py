"""The JSON shapes the routes send and take (they document the OpenAPI schema too)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ctxledger._times import MAX_POSITION
from ctxledger.assembler import Assembly
from ctxledger.store.records import AppendResult


class Body(BaseModel):
    """A request body: unknown fields are refused, not silently ignored."""

    model_config = ConfigDict(extra="forbid")


class AppendOut(BaseModel):
    """An append's outcome: the positions written (or found again by an identical retry,
    then ``duplicate``) and the stream's version after it."""

    positions: list[int]
    stream_version: int
    duplicate: bool = False
    warnings: list[str] = Field(default_factory=list)
    """Each lorebook entry a card.set or lorebook.set imported that cannot work as
    written (a regex key RE2 refuses, an invalid one): written anyway, named here."""

    @classmethod
    def of(cls, result: AppendResult) -> AppendOut:
        """The model of a ``Ledger`` append result."""
        return cls(positions=list(result.positions), stream_version=result.stream_version,
                   duplicate=result.duplicate, warnings=list(result.warnings))


class EventRecord(BaseModel):
    """Every stored field of an event (as ``ctxledger events`` prints it)."""

    position: int
    stream_id: str
    stream_version: int
    event_id: str
    type: str
    schema_version: int
    data: dict[str, Any]
    metadata: dict[str, Any]
    recorded_at: str
    prev_hash: str
    hash: str


class EventPage(BaseModel):
    """A page of events in position order; ``next`` is the ``after`` of the next page
    (null on the last one)."""

    events: list[EventRecord]
    next: int | None


class ContextFormat(StrEnum):
    """How an assembly is returned: the whole ``Assembly``, its text, or the chat request
    shape of OpenAI (``{"messages": [...]}``) or Anthropic (``{"system", "messages"}``)."""

    json = "json"
    text = "text"
    openai = "openai"
    anthropic = "anthropic"


class AppendBody(Body):
    """Events to append to one stream, atomically."""

    events: list[dict[str, Any]] = Field(min_length=1)
    expected_version: int | None = Field(default=None, ge=0, le=MAX_POSITION)


class AssembleBody(Body):
    """``POST /sessions/{session}/assemble``: a policy replacing the settings' one."""

    policy: dict[str, Any] | None = None


class TurnBody(Body):
    """One turn: chat messages to append (OpenAI, Anthropic or canonical shape), then the
    context assembled after them."""

    messages: list[dict[str, Any]] = Field(min_length=1)
    system: str | list[dict[str, Any]] | None = None
    expected_version: int | None = Field(default=None, ge=0, le=MAX_POSITION)
    profile: str | None = None
    format: ContextFormat = ContextFormat.json
    record: bool = True
    """Record the assembly (``context.assembled``) so audit can derive it again."""


class ChatRequestOut(BaseModel):
    """An assembly as a chat API's request: OpenAI's ``{"messages"}``, or Anthropic's
    ``{"system", "messages"}`` (``system`` left out when there is none)."""

    model_config = ConfigDict(extra="forbid")

    messages: list[dict[str, Any]]
    system: list[dict[str, Any]] | None = None


class AgentOut(BaseModel):
    """An agent's part of a context: its name, the session state its manifest scopes
    (with ``_agent`` and ``_savings``), and the whole context text."""

    model_config = ConfigDict(extra="forbid")

    name: str
    state: dict[str, Any]
    text: str


class AgentAssemblyOut(Assembly):
    """The Assembly (json format) of a request naming an ``agent``: plus ``agent``."""

    agent: AgentOut


class TurnOut(BaseModel):
    """A turn's append result and the context after it, in the turn's ``format``."""

    append: AppendOut
    format: ContextFormat
    context: Any
    recorded: AppendOut | None = None
    """Where the assembly was recorded (null when the turn asked for no record)."""


class ForkBody(Body):
    """Copy the session up to position ``at`` into the new session ``new_session``."""

    new_session: str
    at: int = Field(ge=0, le=MAX_POSITION)
    count: bool = False


class UsageBody(Body):
    """What the provider billed for one call (``usage.reported``): against the recorded
    assembly the call sent (``digest`` or ``position``), or the session alone."""

    model: str = Field(min_length=1, max_length=200)
    input_tokens: int = Field(ge=0, le=2**31 - 1)
    """Every prompt token billed, cached ones included."""
    output_tokens: int = Field(ge=0, le=2**31 - 1)
    cached_tokens: int = Field(default=0, ge=0, le=2**31 - 1)
    cost: float | None = Field(default=None, ge=0, le=1e9, allow_inf_nan=False)
    digest: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    """The digest of the recorded assembly the call sent."""
    position: int | None = Field(default=None, ge=0, le=MAX_POSITION)
    """Or that assembly's position."""
    id: str | None = Field(default=None, min_length=1, max_length=36)
    """An event id: reporting the same call again is a no-op."""


class ForkOut(AppendOut):
    """The fork's append result and the session it was copied from."""

    forked_from: str


class CardOut(BaseModel):
    """A card set from a file: its name, spec and lorebook entries, the stream and the
    position written (what ``ctxledger card import`` prints), and each lorebook entry
    that cannot work as written."""

    name: str | None
    spec: str
    lorebook_entries: int
    stream: str
    position: int
    warnings: list[str] = Field(default_factory=list)


class LorebookOut(BaseModel):
    """A scope lorebook set (``entries``: how many it holds) or removed (0): the stream
    and the position written, and each entry that cannot work as written."""

    book_id: str
    entries: int
    stream: str
    position: int
    warnings: list[str] = Field(default_factory=list)


class ProblemOut(BaseModel):
    """An error (RFC 9457, sent as ``application/problem+json``). A version conflict
    adds ``stream_id``, ``expected_version`` and ``actual_version``."""

    model_config = ConfigDict(extra="allow")

    type: str = "about:blank"
    title: str
    status: int
    detail: str
