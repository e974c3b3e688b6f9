"""Canonical JSON through orjson is byte for byte the reference ``json.dumps`` form, so no
hash, seal or digest changes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ctxledger.store.canonical import canonical_json


def reference(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)


scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text())
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=30,
)


@settings(max_examples=3000, deadline=None)
@given(values)
def test_canonical_json_equals_the_reference_form(value: Any) -> None:
    assert canonical_json(value) == reference(value)


any_text = st.text(alphabet=st.characters(exclude_categories=()))  # lone surrogates too
flat_plain = st.dictionaries(
    st.text() | any_text,
    st.text() | any_text | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x7F)),
    max_size=8)


@settings(max_examples=3000, deadline=None)
@given(flat_plain)
@example({"a": "\ud800"})
@example({"\udfff": 1, "b": "x\x00y\u2028"})
@example({"n": 2**64, "t": True, "s": "null e-7 .00001"})
def test_a_flat_object_of_plain_scalars_equals_the_reference_form(value: Any) -> None:
    """The path that skips the output scan (no float, no null): any text, control
    characters, astral and lone-surrogate code points, integers past 64 bits."""
    assert canonical_json(value) == reference(value)


@settings(max_examples=3000, deadline=None)
@given(st.text() | any_text | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70))
@example("\ud800")
@example("null e-7 .00001")
@example(2**64)
def test_a_plain_scalar_alone_equals_the_reference_form(value: Any) -> None:
    """A setting's value is often one string, integer or boolean: the same unscanned path
    as a flat object's values."""
    assert canonical_json(value) == reference(value)


@settings(max_examples=3000, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_every_float_is_written_as_the_reference_writes_it(value: float) -> None:
    assert canonical_json({"v": value, "w": [value]}) == reference({"v": value, "w": [value]})


@pytest.mark.parametrize("value", [float("nan"), float("inf"), {"a": float("-inf")}])
def test_nan_and_infinity_are_refused_as_before(value: Any) -> None:
    with pytest.raises(ValueError):
        canonical_json(value)


@pytest.mark.parametrize("value", [{1: "int key"}, {"big": 2**64 + 1}, ("a", 1),
                                   {"s": "lone \ud800"}, {"t": (1, 2)}])
def test_values_orjson_refuses_take_the_reference_path(value: Any) -> None:
    assert canonical_json(value) == reference(value)


def test_types_the_reference_refuses_are_still_refused() -> None:
    from datetime import UTC, datetime

    class Sub(dict[str, Any]):
        pass

    with pytest.raises(TypeError):
        canonical_json({"when": datetime(2026, 1, 1, tzinfo=UTC)})
    with pytest.raises(TypeError):
        canonical_json(object())
    assert canonical_json(Sub(b=1, a=2)) == reference(Sub(b=1, a=2))


@settings(max_examples=2000, deadline=None)
@given(values)
def test_stored_json_reads_back_as_the_json_module_reads_it(value: Any) -> None:
    """The rebuild's orjson decoder (``store.read._decode``) gives the json module's value,
    integers past 64 bits included."""
    from ctxledger.store.read import _decode

    text = reference(value)
    decoded, expected = _decode(text), json.loads(text)
    assert decoded == expected and repr(decoded) == repr(expected)
