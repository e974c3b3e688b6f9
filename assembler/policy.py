"""Policies: the numbers and tables a profile assembles by, as pydantic models.

Every profile has a ``Policy`` subclass whose field defaults are SPEC's values. The
effective policy of an assembly is built from settings (``Policy.from_settings``):

1. the defaults;
2. the setting ``policy.<profile>`` (a JSON object of policy fields, deep-merged), which
   reaches every knob;
3. the profile's named settings (``SETTINGS``, e.g. ``compression_level`` ->
   ``compression_level``), which win over 2.

A policy can also be given whole (``replay --policy FILE``): ``Policy.model_validate``
on the base class dispatches on ``profile`` to the right subclass.

``version`` names the effective policy: ``<profile>@<REVISION>`` for the defaults, plus
``+<hash>`` of the whole policy when anything differs, so a change of policy always
shows in ``Assembly.policy_version``.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import suppress
from typing import Any, ClassVar, Literal, Self, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ctxledger.assembler.chat_tokens import MessageOverhead
from ctxledger.assembler.encodings import is_known_encoding, known_encodings
from ctxledger.assembler.models import encoding_for_model, is_estimated
from ctxledger.assembler.text import LengthUnit
from ctxledger.store.canonical import canonical_json, sha256_hex
from ctxledger.store.errors import LedgerError

GENERIC_SETTING_PREFIX = "policy."
UNHASHED_AT_DEFAULT: tuple[str, ...] = ("model", "separators", "length_unit")
"""Fields left out of ``Policy.version``'s hash while at their default (added after
versions were recorded)."""


class PolicyError(LedgerError):
    """A policy (or a setting feeding it) is invalid."""


def deep_merge(base: Any, override: Any) -> Any:
    """``override`` laid over ``base``: mappings merge key by key, anything else replaces."""
    if isinstance(base, Mapping) and isinstance(override, Mapping):
        merged = {key: base[key] for key in sorted(base)}
        for key in sorted(override):
            merged[key] = deep_merge(base.get(key), override[key]) if key in base \
                else override[key]
        return merged
    return override


def _describe(error: ValidationError, origin: Mapping[str, str], profile: str) -> str:
    first = error.errors()[0]
    loc = [str(part) for part in first["loc"]]
    field = loc[0] if loc else ""
    where = ".".join(loc) or "policy"
    if field in origin:
        # A named setting is the field; in a ``policy.<profile>`` object, name the field.
        inner = loc if origin[field].startswith(GENERIC_SETTING_PREFIX) else loc[1:]
        where = f"setting {origin[field]!r}" + (f" ({'.'.join(inner)})" if inner else "")
    elif not loc and len(set(origin.values())) == 1:
        # A rule across fields: name the setting when only one fed the policy.
        where = f"setting {next(iter(origin.values()))!r}"
    message = " ".join(str(first["msg"]).split()).removeprefix("Value error, ")
    return f"invalid {profile} policy: {where}: {message}"


class Policy(BaseModel):
    """Base of every profile policy. Subclasses set ``profile`` and their knobs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    REVISION: ClassVar[int] = 1
    """Bump when the profile's code changes meaning under the same policy values."""
    SETTINGS: ClassVar[Mapping[str, str]] = {"token_encoding": "token_encoding",
                                             "model": "model",
                                             "context_role": "context_role"}
    """Setting key -> policy field it overrides."""
    LEGACY_SETTINGS: ClassVar[frozenset[str]] = frozenset()
    """Setting keys an earlier app used that ``from_settings`` reads as that app did."""
    _registry: ClassVar[dict[str, type[Policy]]] = {}

    profile: str
    token_encoding: str = Field(default="cl100k_base", min_length=1)
    """Encoding used to count tokens (setting ``token_encoding``); ``chars4`` = ceil(len/4)."""
    model: str | None = Field(default=None, min_length=1, max_length=200)
    """The model the context is sent to (setting ``model``): it picks ``token_encoding``
    unless that is set too (``assembler.models``); a ``claude-*`` model's counts are
    estimates."""
    message_overhead: MessageOverhead = MessageOverhead()
    """The tokens a chat API adds around each message and before the reply
    (``assembler.chat_tokens``); token totals count the context as messages."""
    context_role: Literal["system", "developer", "user"] = "system"
    """The role of the message the profile builds from its own text (a card's memory, a
    session's, novel's or brief's whole context): setting ``context_role``."""

    @field_validator("token_encoding")
    @classmethod
    def _known_encoding(cls, name: str) -> str:
        if not is_known_encoding(name):
            known = known_encodings()
            raise ValueError(f"unknown token encoding {name!r} (known: {', '.join(known)})")
        return name

    @field_validator("model")
    @classmethod
    def _known_model(cls, model: str | None) -> str | None:
        if model is not None:
            encoding_for_model(model)  # ValueError: unknown model
        return model

    @property
    def text_unit(self) -> LengthUnit:
        """The unit the profile's character budgets and ``chars4`` estimate count in:
        code points, unless its policy has a ``length_unit`` field."""
        return "codepoints"

    @property
    def estimated(self) -> bool:
        """Whether the counts only estimate the model's tokens (no local tokenizer)."""
        return self.model is not None and is_estimated(self.model)

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        default = cls.model_fields["profile"].default
        if isinstance(default, str):
            # The first class for a profile is its policy; subclasses do not take over.
            Policy._registry.setdefault(default, cls)

    @classmethod
    def policy_type(cls, profile: str) -> type[Policy]:
        """The policy class registered for ``profile``."""
        found = Policy._registry.get(profile)
        if found is None:
            known = ", ".join(sorted(Policy._registry))
            raise PolicyError(f"no policy for profile {profile!r} (known: {known})")
        return found

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> Self:
        """Validate ``obj``; on the base class, as the subclass its ``profile`` names."""
        if cls is Policy:
            if not isinstance(obj, Mapping) or not isinstance(obj.get("profile"), str):
                raise PolicyError("a policy must be a JSON object with a string 'profile'")
            target = Policy.policy_type(obj["profile"])
            return cast(Self, target.model_validate(obj, *args, **kwargs))
        return super().model_validate(obj, *args, **kwargs)

    @classmethod
    def model_validate_json(cls, json_data: str | bytes | bytearray, *args: Any,
                            **kwargs: Any) -> Self:
        """Like ``model_validate`` for JSON text."""
        if cls is Policy:
            import json

            try:
                data = json.loads(json_data)
            except RecursionError:  # nesting deeper than the interpreter's stack
                raise PolicyError("policy is not valid JSON: it is nested too deeply"
                                  ) from None
            except ValueError as exc:
                raise PolicyError(f"policy is not valid JSON: {exc}") from exc
            return cls.model_validate(data, *args, **kwargs)
        return super().model_validate_json(json_data, *args, **kwargs)

    @classmethod
    def defaults(cls) -> Self:
        """The policy with SPEC's values."""
        return cls.model_validate({})

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> Self:
        """The effective policy for resolved session ``settings`` (see module docstring)."""
        profile = cls.model_fields["profile"].default
        data: Any = cls.defaults().model_dump(mode="json")
        origin: dict[str, str] = {}
        generic_key = f"{GENERIC_SETTING_PREFIX}{profile}"
        if generic_key in settings:
            generic = settings[generic_key]
            if not isinstance(generic, Mapping):
                raise PolicyError(f"setting {generic_key!r} must be a JSON object")
            data = deep_merge(data, generic)
            origin.update({str(key): generic_key for key in generic})
        for key in sorted(cls.SETTINGS):
            if key in settings:
                field = cls.SETTINGS[key]
                data[field] = cls.overlay_setting(field, data.get(field), settings[key])
                origin[field] = key
        model = data.get("model")
        if isinstance(model, str) and "token_encoding" not in origin:
            # The model picks the encoding; an unknown one is reported by validation.
            with suppress(ValueError):
                data["token_encoding"] = encoding_for_model(model).encoding
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise PolicyError(_describe(exc, origin, str(profile))) from None

    @classmethod
    def overlay_setting(cls, field: str, current: Any, value: Any) -> Any:
        """How a named setting's ``value`` replaces policy ``field`` (default: replace)."""
        return value

    @property
    def version(self) -> str:
        """``<profile>@<REVISION>``, plus ``+<hash>`` when it differs from the defaults."""
        base = f"{self.profile}@{self.REVISION}"
        if self == type(self).defaults():
            return base
        data = self.model_dump(mode="json")
        fields = type(self).model_fields
        for name in UNHASHED_AT_DEFAULT:
            # A field added later hashes only when set: older policies keep their version.
            if name in fields and data.get(name) == fields[name].default:
                data.pop(name, None)
        return f"{base}+{sha256_hex(canonical_json(data))[:10]}"
