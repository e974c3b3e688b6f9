"""The base of every profile's report (``Assembly.report``), and the registry behind it.

A profile defines its own report model (a ``ProfileReport`` subclass whose ``profile``
field defaults to the profile's name) in its own module; defining the class registers it,
so ``Assembly`` can validate a report read back from JSON as the right class without a
central union that every new profile would have to edit.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict


class ProfileReport(BaseModel):
    """Profile-specific figures of one assembly (hashed with the rest of it)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    _registry: ClassVar[dict[str, type[ProfileReport]]] = {}

    profile: str

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        default = cls.model_fields["profile"].default
        if isinstance(default, str):
            ProfileReport._registry.setdefault(default, cls)

    @classmethod
    def report_type(cls, profile: str) -> type[ProfileReport] | None:
        """The report class registered for ``profile`` (None when unknown)."""
        return ProfileReport._registry.get(profile)


def validate_report(value: Any) -> ProfileReport:
    """``value`` (a report or its JSON data) as its profile's registered report class."""
    if isinstance(value, ProfileReport):
        return value
    if not isinstance(value, dict) or not isinstance(value.get("profile"), str):
        raise ValueError("a report must be an object with a string 'profile'")
    found = ProfileReport.report_type(value["profile"])
    if found is None:
        raise ValueError(f"no report type for profile {value['profile']!r}")
    return found.model_validate(value)
