"""The event catalog: every event type is a pydantic model, discriminated by ``type``.

Models validate the ``data`` of new events. Reads return plain dicts (upcast to the
current schema) because validating on every read would cost more than the rebuild
budget allows; ``parse_data`` gives the typed model when a caller wants it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from ctxledger.store.character_card import (
    CardFileError,
    card_event_data,
    check_lorebook,
    lorebook_data,
)
from ctxledger.store.chat import ChatRole, ContentPart, ToolCall, check_message
from ctxledger.store.chat_shapes import ChatShapeError, canonical_message
from ctxledger.store.streams import DEFAULT_SCOPE, SCOPE_PREFIX, StreamKind
from ctxledger.store.strict import INT32_MAX


class EventData(BaseModel):
    """Base of every event payload. Unknown fields are rejected so typos surface early."""

    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=False)

    type: ClassVar[str]
    schema_version: ClassVar[int] = 1
    stream_kinds: ClassVar[tuple[StreamKind, ...]] = ("session",)


ID_MAX = 200
"""Ids are stored in 200-character columns; longer ones are rejected up front."""
NonEmpty = Field(min_length=1)
Id = Field(min_length=1, max_length=ID_MAX)


class SessionStarted(EventData):
    """A session opens and names the scope (project, user, book) it belongs to."""

    type: ClassVar[str] = "session.started"
    # "scope:" + name must fit a 200-character stream id.
    scope: str = Field(default=DEFAULT_SCOPE, min_length=1, max_length=ID_MAX - len(SCOPE_PREFIX))
    title: str | None = None
    agent: str | None = Field(default=None, max_length=ID_MAX)


class SessionEnded(EventData):
    """A session closes, optionally with a summary used by the next session's context."""

    type: ClassVar[str] = "session.ended"
    summary: str | None = None


class MessageAppended(EventData):
    """A chat message in the canonical form (``store.chat``); the shapes of OpenAI and
    Anthropic are turned into it first (``store.chat_shapes``). ``message_id`` defaults to
    the event id. v1 had only the roles system, user, assistant and tool, and string
    content: its payloads are v2 payloads as they are (a v1 tool result may lack
    ``tool_call_id``, which v2 requires of new ones)."""

    type: ClassVar[str] = "message.appended"
    schema_version: ClassVar[int] = 2
    message_id: str | None = Field(default=None, min_length=1, max_length=ID_MAX)
    role: ChatRole
    content: str | list[ContentPart] | None = None
    name: str | None = Field(default=None, max_length=ID_MAX)
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = Field(default=None, min_length=1, max_length=ID_MAX)
    is_error: bool | None = None

    @model_validator(mode="before")
    @classmethod
    def _canonical(cls, data: Any) -> Any:
        """OpenAI's and Anthropic's shapes become the canonical form (``store.chat_shapes``),
        so what is stored is canonical whichever the app sent."""
        if not isinstance(data, Mapping):
            return data
        try:
            return canonical_message(data)
        except ChatShapeError as exc:
            raise PydanticCustomError("chat_shape", "{reason}", {"reason": str(exc)}) from None

    @model_validator(mode="after")
    def _fields_fit_role(self, info: ValidationInfo) -> MessageAppended:
        # v1 tool results named no call: such a payload (an import of an older log) is
        # still taken, and is sent as an unpaired result (``assembler.history_window``).
        legacy = (info.context or {}).get("given_version") == 1
        check_message(self.role, self.content, self.tool_calls, self.tool_call_id,
                      self.is_error, call_id_required=not legacy)
        return self


class MessageRetracted(EventData):
    """A message is withdrawn (edit or regeneration); counts go down."""

    type: ClassVar[str] = "message.retracted"
    message_id: str = Id


class HistorySummarized(EventData):
    """The app's LLM summarized the history through ``through_message_id``."""

    type: ClassVar[str] = "history.summarized"
    through_message_id: str = Id
    summary: str


class ToolUsed(EventData):
    """A tool was used in a session. v1 called the fields ``tool`` and ``success``."""

    type: ClassVar[str] = "tool.used"
    schema_version: ClassVar[int] = 2
    tool_name: str = Id
    server_name: str | None = Field(default=None, max_length=ID_MAX)
    ok: bool | None = None
    call_id: str | None = Field(default=None, min_length=1, max_length=ID_MAX)
    """The id of the tool call this use answers (an assistant message's ``tool_calls``):
    a call appended both ways in one session counts once."""


class SettingChanged(EventData):
    """A setting: an override in a session stream, a default in a scope stream."""

    type: ClassVar[str] = "setting.changed"
    stream_kinds: ClassVar[tuple[StreamKind, ...]] = ("session", "scope")
    key: str = Id
    value: JsonValue


class CardSet(EventData):
    """Character card fields (V2/V3 ``data``): fields present replace the current ones.

    A whole card file (V1, or V2/V3 with ``spec``) is taken as written and replaces the
    whole card (``store.character_card``); on a scope stream it is the card of the
    scope's sessions that have none of their own."""

    type: ClassVar[str] = "card.set"
    stream_kinds: ClassVar[tuple[StreamKind, ...]] = ("session", "scope")
    name: str | None = None
    description: str | None = None
    personality: str | None = None
    scenario: str | None = None
    first_mes: str | None = None
    mes_example: str | None = None
    system_prompt: str | None = None
    post_history_instructions: str | None = None
    creator_notes: str | None = None
    alternate_greetings: list[str] | None = None
    tags: list[str] | None = None
    creator: str | None = None
    character_version: str | None = None
    extensions: dict[str, JsonValue] | None = None
    character_book: dict[str, JsonValue] | None = None
    """The card's lorebook as written (its types checked: ``character_card.Lorebook``)."""
    # V3 additions
    nickname: str | None = None
    """V3: what ``{{char}}`` stands for, when given (else ``name``)."""
    creator_notes_multilingual: dict[str, str] | None = None
    source: list[str] | None = None
    group_only_greetings: list[str] | None = None
    assets: list[dict[str, JsonValue]] | None = None
    creation_date: int | float | None = None
    modification_date: int | float | None = None
    # What the file carried besides the character (never read into a prompt)
    spec: str | None = None
    spec_version: str | int | float | None = None
    card_extra: dict[str, JsonValue] | None = None
    """A card file's other top-level keys (SillyTavern's ``avatar``, ``chat``, …)."""
    data_extra: dict[str, JsonValue] | None = None
    """Keys of a V2/V3 ``data`` object that no spec names."""
    replace: bool | None = None
    """The fields replace the whole card (a card file), rather than merge into it."""

    @model_validator(mode="before")
    @classmethod
    def _card_file(cls, data: Any) -> Any:
        """A whole card file becomes the fields of a whole card."""
        if not isinstance(data, Mapping):
            return data
        try:
            return card_event_data(data, frozenset(cls.model_fields))
        except CardFileError as exc:
            raise PydanticCustomError("card_file", "{reason}", {"reason": str(exc)}) from None

    @field_validator("character_book")
    @classmethod
    def _book(cls, book: dict[str, JsonValue] | None) -> dict[str, JsonValue] | None:
        return check_lorebook(book)  # type: ignore[no-any-return]


class LorebookSet(EventData):
    """A scope-level lorebook (world info) is created or replaced; every session of the
    scope reads it. ``book`` is a V2 ``character_book`` object or a ``lorebook_v3``
    file, kept as written."""

    type: ClassVar[str] = "lorebook.set"
    stream_kinds: ClassVar[tuple[StreamKind, ...]] = ("scope",)
    book_id: str = Id
    book: dict[str, JsonValue]

    @field_validator("book")
    @classmethod
    def _book(cls, book: dict[str, JsonValue]) -> dict[str, JsonValue]:
        try:
            check_lorebook(lorebook_data(book))
        except CardFileError as exc:
            raise ValueError(str(exc)) from None
        return book


class LorebookRemoved(EventData):
    """A scope-level lorebook is removed."""

    type: ClassVar[str] = "lorebook.removed"
    stream_kinds: ClassVar[tuple[StreamKind, ...]] = ("scope",)
    book_id: str = Id


class ChapterMoved(EventData):
    """The writing session moves to a chapter (and optionally a scene)."""

    type: ClassVar[str] = "chapter.moved"
    chapter: int = Field(ge=1, le=INT32_MAX)  # projections keep it in INTEGER columns
    scene: str | None = None


ItemKind = Literal[
    "exemplar", "anti_exemplar", "scene_plan", "character", "emotional_directive",
    "relationship_state", "summary", "act_summary", "foreshadowing", "world", "plot", "style",
]


class ItemPut(EventData):
    """A context item for the ``novel`` profile is created or replaced."""

    type: ClassVar[str] = "item.put"
    item_id: str = Id
    kind: ItemKind
    content: str
    chapter: int | None = Field(default=None, ge=1, le=INT32_MAX)
    active: bool | None = None
    in_scene: bool | None = None
    pov: bool | None = None
    evolving: bool | None = None
    critical: bool | None = None


class ItemRemoved(EventData):
    """A context item is removed."""

    type: ClassVar[str] = "item.removed"
    item_id: str = Id


class ObservationRecorded(EventData):
    """Something the agent noticed; shown in the next session's context."""

    type: ClassVar[str] = "observation.recorded"
    kind: Literal["change", "decision", "finding", "reference"]
    content: str
    source: str | None = None


class DocumentPut(EventData):
    """A document (plan state, dependency graph or text) shown in compact form."""

    type: ClassVar[str] = "document.put"
    doc_id: str = Id
    kind: Literal["plan_state", "dep_graph", "text"]
    content: str | dict[str, JsonValue]


class ToolRegistered(EventData):
    """A tool becomes available in a scope."""

    type: ClassVar[str] = "tool.registered"
    stream_kinds: ClassVar[tuple[StreamKind, ...]] = ("scope",)
    name: str = Id
    tool_type: Literal[
        "builtin", "mcp_server", "mcp_tool", "slash_command", "skill", "plugin", "other"
    ]
    server_name: str | None = None
    description: str | None = None


class ToolRemoved(EventData):
    """A tool is no longer available in a scope."""

    type: ClassVar[str] = "tool.removed"
    stream_kinds: ClassVar[tuple[StreamKind, ...]] = ("scope",)
    name: str = Id


class Compliance(BaseModel):
    """Licensing terms of a knowledge source (required in ``fan`` mode)."""

    model_config = ConfigDict(extra="allow", frozen=True)
    non_commercial: bool | None = None
    distribution: str | None = None


class SourceRegistered(EventData):
    """A knowledge source with a version and a trust level."""

    type: ClassVar[str] = "source.registered"
    stream_kinds: ClassVar[tuple[StreamKind, ...]] = ("scope",)
    source_id: str = Id
    version: str = Id
    trust: float = Field(ge=0.0, le=1.0)
    neutral: bool | None = None
    compliance: Compliance | None = None


class SnippetAdded(EventData):
    """A retrievable snippet of a source, tagged with the entities it mentions."""

    type: ClassVar[str] = "snippet.added"
    stream_kinds: ClassVar[tuple[StreamKind, ...]] = ("scope",)
    snippet_id: str = Id
    source_id: str = Id
    source_version: str = Id
    text: str
    entities: list[str] = Field(default_factory=list)


class EntityFact(BaseModel):
    """One fact about an entity; non-critical facts are pruned first under budget."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    text: str
    critical: bool = False


class EntityPut(EventData):
    """A world entity with its facts and tags."""

    type: ClassVar[str] = "entity.put"
    stream_kinds: ClassVar[tuple[StreamKind, ...]] = ("scope",)
    entity_id: str = Id
    name: str = NonEmpty
    facts: list[EntityFact] = Field(default_factory=list)
    tags: list[str] = Field(default_factory=list)


class PersonaSet(EventData):
    """The persona agent of a session and what it may know."""

    type: ClassVar[str] = "persona.set"
    agent_id: str = Id
    knowledge_scope: list[str] = Field(default_factory=list)
    beliefs: str | list[str] | None = None


class ContextAssembled(EventData):
    """The app sent a prompt built from this assembly; kept for audit."""

    type: ClassVar[str] = "context.assembled"
    schema_version: ClassVar[int] = 2
    profile: str = Field(min_length=1, max_length=100)  # a String(100) key in usage rollups
    policy_version: str = NonEmpty
    position: int = Field(ge=0)
    now: str = NonEmpty
    digest: str = Field(pattern=r"^[0-9a-f]{64}$")
    tokens: int | None = Field(default=None, ge=0, le=INT32_MAX)
    policy: dict[str, Any] | None = None
    """The policy's canonical JSON data, so an audit re-derives a custom policy too
    (records without it are audited with the policy the settings give)."""
    format_version: int | None = Field(default=None, ge=1, le=INT32_MAX)
    """The ``Assembly.format_version`` the digest was computed under (``record_assembly``
    stores it; left out, the current one). v1 records had no such field: they read as
    format 3."""


class UsageReported(EventData):
    """What the provider billed for one call: its usage report, against the assembly the
    app sent (by ``digest``, with the position of that assembly's ``context.assembled``
    record in ``record_position``) or against the session alone.

    ``input_tokens`` counts every prompt token, cached ones included (``cached_tokens``
    is the part of it read from the provider's cache); ``cost`` is the call's price in
    the app's currency, when it knows it."""

    type: ClassVar[str] = "usage.reported"
    model: str = Field(min_length=1, max_length=ID_MAX)
    input_tokens: int = Field(ge=0, le=INT32_MAX)
    output_tokens: int = Field(ge=0, le=INT32_MAX)
    cached_tokens: int = Field(default=0, ge=0, le=INT32_MAX)
    cost: float | None = Field(default=None, ge=0, le=1e9, allow_inf_nan=False)
    digest: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    record_position: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _cached_within_input(self) -> UsageReported:
        if self.cached_tokens > self.input_tokens:
            raise ValueError(f"cached_tokens ({self.cached_tokens}) exceeds input_tokens "
                             f"({self.input_tokens})")
        return self


class RollupCompleted(EventData):
    """The nightly job rolled up one UTC day, or a stretch of days with no rows.

    ``prune_before`` (a day) tells the tool-usage projection to drop its raw per-use rows
    from before that day, so a rebuild from the log prunes exactly what the job did.
    ``last_day`` (optional, so older events read as one day) ends a stretch
    of empty days that one event covers. ``read_through`` (same) is the log position up
    to which the job read every event: a later event dated in a rolled day is rolled up
    again by the next run.
    """

    type: ClassVar[str] = "rollup.completed"
    stream_kinds: ClassVar[tuple[StreamKind, ...]] = ("system",)
    day: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}$")
    rows: int = Field(ge=0, le=INT32_MAX)
    digest: str
    prune_before: str | None = Field(default=None, pattern=r"^\d{4}-\d{2}-\d{2}$")
    last_day: str | None = Field(default=None, pattern=r"^\d{4}-\d{2}-\d{2}$")
    read_through: int | None = Field(default=None, ge=0)

    @field_validator("day", "prune_before", "last_day")
    @classmethod
    def _real_day(cls, value: str | None) -> str | None:
        if value is not None:
            date.fromisoformat(value)  # raises ValueError for 2026-13-45
        return value

    @model_validator(mode="after")
    def _stretch_is_forward(self) -> RollupCompleted:
        if self.last_day is not None and self.last_day < self.day:
            raise ValueError(f"last_day {self.last_day} is before day {self.day}")
        if self.last_day is not None and self.last_day > self.day and self.rows:
            raise ValueError("a stretch of days (last_day) holds no rows")
        return self


class CheckpointSaved(EventData):
    """A LangGraph checkpoint of one thread (the stream), as a delta: its skeleton (ids,
    channel versions, versions seen) and only the channel values this step changed. A
    list value that extends the value stored at an earlier version of its channel holds
    only the new tail (``extends``: that version). Values and metadata are JSON when
    they are JSON, else the checkpointer's serializer output (``serde`` type, ``b64``)."""

    type: ClassVar[str] = "checkpoint.saved"
    checkpoint_ns: str = Field(default="", max_length=ID_MAX)
    checkpoint_id: str = Id
    parent_checkpoint_id: str | None = Field(default=None, min_length=1, max_length=ID_MAX)
    checkpoint: dict[str, JsonValue]
    metadata: dict[str, JsonValue]
    values: list[dict[str, JsonValue]] = Field(default_factory=list)


class CheckpointWritten(EventData):
    """A LangGraph task's pending writes against one checkpoint of the thread."""

    type: ClassVar[str] = "checkpoint.written"
    checkpoint_ns: str = Field(default="", max_length=ID_MAX)
    checkpoint_id: str = Id
    task_id: str = Id
    task_path: str = ""
    writes: list[dict[str, JsonValue]] = Field(min_length=1)


class CheckpointsCleared(EventData):
    """LangGraph checkpoints deleted: those of the runs ``run_ids`` (their metadata's
    ``run_id``), or the whole thread's when it is absent. The earlier checkpoints and
    writes no longer count; the events stay in the log, so replay still shows them."""

    type: ClassVar[str] = "checkpoints.cleared"
    run_ids: list[Annotated[str, Field(min_length=1, max_length=ID_MAX)]] | None = None


CATALOG: dict[str, type[EventData]] = {
    model.type: model
    for model in (
        SessionStarted, SessionEnded, MessageAppended, MessageRetracted, HistorySummarized,
        ToolUsed, SettingChanged, CardSet, LorebookSet, LorebookRemoved, ChapterMoved,
        ItemPut, ItemRemoved,
        ObservationRecorded, DocumentPut, ToolRegistered, ToolRemoved, SourceRegistered,
        SnippetAdded, EntityPut, PersonaSet, ContextAssembled, UsageReported, RollupCompleted,
        CheckpointSaved, CheckpointWritten, CheckpointsCleared,
    )
}
"""Every event type by name. The names and fields are the public contract."""


def parse_data(type_name: str, data: dict[str, Any]) -> EventData:
    """Validate current-version ``data`` into its typed model."""
    model = CATALOG[type_name]
    return model.model_validate(data)
