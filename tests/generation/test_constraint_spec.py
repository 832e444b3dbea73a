"""``check_constraint``: what a request may ask for as ``constraint``, and what it is told when it asks wrong."""

from __future__ import annotations

import pytest

from generation.constraint_spec import CONSTRAINTS, MAX_CATALOGUE_ITEM_CHARS, MAX_CATALOGUE_ITEMS, check_constraint
from generation.sampling import SamplingError, SamplingSpec


def test_catalogue_is_normalized_dropping_duplicates_in_order() -> None:
    value = {"name": "catalogue", "args": {"items": ["Kiwi", "Apple", "Kiwi", "Pear"]}}
    assert check_constraint(value) == {"name": "catalogue", "args": {"items": ["Kiwi", "Apple", "Pear"]}}


def test_the_limits_themselves_are_accepted() -> None:
    items = [f"{i:0{MAX_CATALOGUE_ITEM_CHARS}d}" for i in range(MAX_CATALOGUE_ITEMS)]
    assert check_constraint({"name": "catalogue", "args": {"items": items}})["args"]["items"] == items


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("catalogue", "must be an object"),
        ({"name": "nope", "args": {}}, "one of ['catalogue']"),
        ({"args": {"items": ["a"]}}, "one of ['catalogue']"),
        ({"name": "catalogue", "args": {"items": ["a"]}, "extra": 1}, "only 'name' and 'args'"),
        ({"name": "catalogue", "args": ["a"]}, "args must be an object"),
        ({"name": "catalogue"}, "needs args.items"),
        ({"name": "catalogue", "args": {"items": []}}, "needs args.items"),
        ({"name": "catalogue", "args": {"items": "Apple"}}, "needs args.items"),
        ({"name": "catalogue", "args": {"items": ["a", ""]}}, "args.items[1] must be a non-empty string"),
        ({"name": "catalogue", "args": {"items": ["a", 3]}}, "args.items[1] must be a non-empty string"),
        ({"name": "catalogue", "args": {"items": ["a"], "mode": "x"}}, "takes only 'items'"),
        (
            {"name": "catalogue", "args": {"items": ["x" * (MAX_CATALOGUE_ITEM_CHARS + 1)]}},
            f"at most {MAX_CATALOGUE_ITEM_CHARS} are allowed",
        ),
        (
            {"name": "catalogue", "args": {"items": [str(i) for i in range(MAX_CATALOGUE_ITEMS + 1)]}},
            f"at most {MAX_CATALOGUE_ITEMS} items",
        ),
    ],
)
def test_bad_values_name_the_parameter_and_say_what_to_fix(value: object, says: str) -> None:
    with pytest.raises(SamplingError) as caught:
        check_constraint(value)
    assert caught.value.param == "constraint"
    assert says in caught.value.message


def test_the_checked_value_reaches_vllm_as_extra_args() -> None:
    checked = check_constraint({"name": "catalogue", "args": {"items": ["Paris"]}})
    assert SamplingSpec(constraint=checked).engine_kwargs()["extra_args"] == {"constraint": checked}
    assert set(CONSTRAINTS) == {"catalogue"}
