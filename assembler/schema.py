"""The JSON Schema of an ``Assembly`` (``ctxledger schema assembly``).

``Assembly.report`` is declared as the base ``ProfileReport`` (each profile's report
registers itself, so no central union has to be edited). The exported schema replaces it
with a union of the registered profiles' report classes discriminated by ``profile``,
built from the profile registry, so a new profile shows up in the schema by itself.
"""

from __future__ import annotations

from typing import Annotated, Any, Union

from pydantic import Field, create_model

from ctxledger.assembler.model import Assembly
from ctxledger.assembler.profiles import get_profile, profile_names

DIALECT = "https://json-schema.org/draft/2020-12/schema"


def assembly_schema() -> dict[str, Any]:
    """The serialization schema of ``Assembly`` with ``report`` as a ``oneOf`` of the
    registered report classes (discriminator ``profile``)."""
    reports = tuple(get_profile(name).report_type for name in profile_names())
    report_type: Any = reports[0] if len(reports) == 1 else Annotated[
        Union[reports], Field(discriminator="profile")]  # noqa: UP007 (a runtime tuple)
    exported = create_model(
        "Assembly", __base__=Assembly, __doc__=Assembly.__doc__,
        report=(report_type, ...))
    schema: dict[str, Any] = exported.model_json_schema(mode="serialization")
    return {"$schema": DIALECT, **schema}
