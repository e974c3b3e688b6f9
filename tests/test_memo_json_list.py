"""``CanonicalMemo.json_list`` joins runs of the last list again only where they are the
very same objects, and always gives the list's canonical JSON."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxledger.assembler.memo import CanonicalMemo
from ctxledger.assembler.model import SectionItem
from ctxledger.store.canonical import canonical_json

POOL = [SectionItem(id=f"item:{n}", tokens=n, chars=2 * n) for n in range(12)]
# Equal content, other objects: a list of these is the same JSON, whatever is reused.
TWINS = [SectionItem(id=f"item:{n}", tokens=n, chars=2 * n) for n in range(12)]
# The same id and a value whose JSON differs while Python calls them equal (True == 1).
LOOKALIKE = SectionItem.model_construct(id="item:1", tokens=True, chars=2)

lists = st.lists(st.lists(st.sampled_from([*POOL, *TWINS, LOOKALIKE]), max_size=30),
                 min_size=1, max_size=8)


def _expected(models: list[SectionItem]) -> str:
    return canonical_json([model.model_dump(mode="json") for model in models])


@settings(max_examples=200, deadline=None)
@given(sequence=lists)
def test_every_list_is_its_own_canonical_json(sequence: list[list[SectionItem]]) -> None:
    memo = CanonicalMemo()
    for models in sequence:
        assert memo.json_list("items", models) == _expected(models)


def test_a_list_that_grew_in_the_middle_reuses_the_runs_around_the_change() -> None:
    memo = CanonicalMemo()
    first = [POOL[0], *POOL[1:10], POOL[11]]
    memo.json_list("items", first)
    made: list[SectionItem] = []
    serialize = memo.json_of

    def counting(model: SectionItem) -> str:
        made.append(model)
        return str(serialize(model))

    memo.json_of = counting
    changed = [TWINS[0], *POOL[1:10], POOL[10], POOL[11]]  # a new head, one more inside
    assert memo.json_list("items", changed) == _expected(changed)
    # Only what is not the same object in the same place as before was serialized: the
    # new head, the new item, and the last one (out of step with the old list by then).
    assert made == [TWINS[0], POOL[10], POOL[11]]
