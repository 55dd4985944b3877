"""Writing JSON: a value that contains itself is a ValueError that says where, never a
RecursionError or a hang; a tree is written as before, shared members included."""

from __future__ import annotations

from typing import Any

import pytest

from singularity.jsoncodec import compact, compact_utf8, cycle_at, pretty

WRITERS = [compact, compact_utf8, pretty]


def _self_in_a_list() -> Any:
    value: dict[str, Any] = {"a": 1, "b": [2, {}]}
    value["b"][1]["back"] = value
    return value


def _list_in_itself() -> Any:
    value: list[Any] = ["x"]
    value.append(("y", value))
    return value


@pytest.mark.parametrize("write", WRITERS)
@pytest.mark.parametrize(
    ("make", "at"),
    [(_self_in_a_list, '$["b"][1]["back"]'), (_list_in_itself, "$[1][1]")],
)
def test_a_value_that_contains_itself_is_a_value_error_naming_the_cycle(
    write: Any, make: Any, at: str
) -> None:
    with pytest.raises(ValueError) as refused:
        write(make())
    assert str(refused.value) == f"cannot write JSON: the value contains itself (a cycle) at {at}"


@pytest.mark.parametrize("write", WRITERS)
def test_a_value_too_deep_to_write_is_a_value_error(write: Any) -> None:
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(ValueError) as refused:
        write(deep)
    assert str(refused.value) == "cannot write JSON: the value nests too deeply"
    assert cycle_at(deep) is None


def test_a_member_shared_by_two_others_is_no_cycle() -> None:
    shared = {"k": [1, 2]}
    value = {"one": shared, "two": [shared, shared], "three": (shared,)}
    assert cycle_at(value) is None
    assert (
        compact(value)
        == '{"one":{"k":[1,2]},"two":[{"k":[1,2]},{"k":[1,2]}],"three":[{"k":[1,2]}]}'
    )
