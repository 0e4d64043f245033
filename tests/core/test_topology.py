"""Placement of TPU slices in physical blocks (the dynamic-slicing codelab's 4x4x4 blocks)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.core.topology import (
    Inventory,
    Occupant,
    Region,
    Shape,
    choose_yield,
    find_place,
    plan_groups,
)

BLOCK = Shape(4, 4, 4)
SUB = Shape(2, 2, 2)


def _sub(block: str, x: int, y: int, z: int) -> Region:
    return Region(block, (x, y, z), SUB)


def _codelab(*occupants: Occupant) -> Inventory:
    return Inventory(block_shape=BLOCK, blocks=("block-a", "block-b"), occupants=occupants)


def _full_block_of_training(block: str, prefix: str) -> list[Occupant]:
    return [
        Occupant(key=f"{prefix}-{x}{y}{z}", regions=(_sub(block, x, y, z),), preemptible=True)
        for x in (0, 2)
        for y in (0, 2)
        for z in (0, 2)
    ]


@pytest.mark.parametrize(
    ("text", "shape", "chips"),
    [
        pytest.param("2x2x2", Shape(2, 2, 2), 8, id="sub-slice"),
        pytest.param("4x4x8", Shape(4, 4, 8), 128, id="super-slice"),
        pytest.param("4x4", Shape(4, 4, 1), 16, id="v5e-2d"),
    ],
)
def test_parse(text: str, shape: Shape, chips: int) -> None:
    assert Shape.parse(text) == shape
    assert shape.chips == chips


@pytest.mark.parametrize("text", ["2x2x", "0x2x2", "a", "2x2x2x2", "-2x2x2"])
def test_parse_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="AxB"):
        Shape.parse(text)


def test_empty_codelab_holds_sixteen_sub_slices_and_no_more() -> None:
    plan = plan_groups(_codelab(), SUB, 17, costs={})
    assert len(plan.placed) == 16
    assert plan.unplaceable == 1
    cells = [c for choice in plan.placed for r in choice.regions for c in ((r.block, x) for x in r.cells())]
    assert len(cells) == len(set(cells)) == 128


def test_a_super_slice_needs_two_whole_free_blocks() -> None:
    one_sub = Occupant("serving-0", (_sub("block-a", 0, 0, 0),))
    assert find_place(_codelab(one_sub), Shape(4, 4, 8)) is None
    assert find_place(_codelab(), Shape(4, 4, 8)) is not None


def test_fragmentation_counts_not_free_chips() -> None:
    """32 chips are free in block-a, but in 2x2x2 holes: a 2x4x4 slice cannot be placed there."""
    holes = [Occupant(f"t-{x}{z}", (_sub("block-a", x, 0, z),), preemptible=True) for x in (0, 2) for z in (0, 2)]
    checker = [Occupant(f"u-{x}{z}", (_sub("block-a", x, 2, z),), preemptible=True) for x in (0, 2) for z in (0, 2)]
    # Make the free cells a checkerboard: every 2x4x4 orientation overlaps an occupant.
    board = [holes[0], holes[3], checker[1], checker[2]]
    inventory = Inventory(BLOCK, ("block-a",), tuple(board))
    assert inventory.total_chips - inventory.used_chips == 32
    assert find_place(inventory, Shape(2, 4, 4)) is None
    assert find_place(inventory, SUB) is not None


def test_cheapest_victim_by_lost_work_not_by_name() -> None:
    training = _full_block_of_training("block-a", "job") + _full_block_of_training("block-b", "job-b")
    costs = {o.key: 100.0 for o in training}
    costs["job-b-222"] = 1.0  # just checkpointed
    choice = choose_yield(_codelab(*training), SUB, costs)
    assert choice is not None
    assert choice.victims == ("job-b-222",)
    assert choice.lost_work == 1.0
    assert choice.chips_stopped == 8


def test_serving_and_protected_slices_never_yield() -> None:
    serving = [
        Occupant(f"s-{i}", (r,))
        for i, r in enumerate(_sub("block-a", x, y, z) for x in (0, 2) for y in (0, 2) for z in (0, 2))
    ]
    protected = [Occupant(o.key, o.regions, preemptible=False) for o in _full_block_of_training("block-b", "prod")]
    assert choose_yield(_codelab(*serving, *protected), SUB, costs={}) is None


def test_super_sliced_training_is_one_unit_that_frees_two_blocks() -> None:
    big = Occupant("big", (Region("block-a", (0, 0, 0), BLOCK), Region("block-b", (0, 0, 0), BLOCK)), True)
    plan = plan_groups(_codelab(big), SUB, 3, costs={"big": 50.0})
    assert plan.victims == ("big",)
    assert plan.lost_work == 50.0
    assert len(plan.placed) == 3
    assert plan.unplaceable == 0


def test_groups_never_share_a_victim_or_chips() -> None:
    training = _full_block_of_training("block-a", "a") + _full_block_of_training("block-b", "b")
    costs = {o.key: float(i) for i, o in enumerate(training)}
    plan = plan_groups(_codelab(*training), SUB, 3, costs)
    assert len(plan.victims) == len(set(plan.victims)) == 3
    assert plan.victims == ("a-000", "a-002", "a-020")  # the three cheapest, one each


def test_unknown_checkpoint_age_is_the_worst_case() -> None:
    training = _full_block_of_training("block-a", "known")[:1] + _full_block_of_training("block-b", "unknown")[:1]
    rest_a = [
        Occupant(f"s-a{i}", (r,))
        for i, r in enumerate(
            _sub("block-a", x, y, z) for x in (0, 2) for y in (0, 2) for z in (0, 2) if (x, y, z) != (0, 0, 0)
        )
    ]
    rest_b = [
        Occupant(f"s-b{i}", (r,))
        for i, r in enumerate(
            _sub("block-b", x, y, z) for x in (0, 2) for y in (0, 2) for z in (0, 2) if (x, y, z) != (0, 0, 0)
        )
    ]
    choice = choose_yield(_codelab(*training, *rest_a, *rest_b), SUB, costs={"known-000": 10_000.0})
    assert choice is not None
    assert choice.victims == ("known-000",)


@settings(max_examples=60, deadline=None)
@given(
    taken=st.sets(
        st.tuples(
            st.sampled_from(["block-a", "block-b"]),
            st.sampled_from([0, 2]),
            st.sampled_from([0, 2]),
            st.sampled_from([0, 2]),
        )
    ),
    want=st.integers(min_value=0, max_value=20),
)
def test_placements_stay_inside_blocks_and_never_overlap(taken: set[tuple[str, int, int, int]], want: int) -> None:
    occupants = [Occupant(f"t-{b}-{x}{y}{z}", (_sub(b, x, y, z),), preemptible=True) for b, x, y, z in sorted(taken)]
    inventory = _codelab(*occupants)
    plan = plan_groups(inventory, SUB, want, costs={o.key: 1.0 for o in occupants})
    assert len(plan.placed) + plan.unplaceable == want
    # Never more groups than the blocks hold, and stops only when needed.
    assert len(plan.placed) == min(want, 16)
    free_now = 16 - len(occupants)
    assert len(plan.victims) == max(0, min(want, 16) - free_now)
    cells = [(r.block, c) for choice in plan.placed for r in choice.regions for c in r.cells()]
    assert len(cells) == len(set(cells))
    assert all(0 <= v < 4 for _, c in cells for v in c)


@pytest.mark.parametrize("shape", [Shape(3, 4, 4), Shape(4, 4, 3), Shape(1, 1, 3)], ids=str)
def test_a_shape_that_does_not_tile_the_block_is_never_placed(shape: Shape) -> None:
    """Aligned sub-slices tile the block; a 3-wide slice would hang outside it (or leave unusable gaps)."""
    assert find_place(_codelab(), shape) is None
    assert plan_groups(_codelab(), shape, 1, costs={}).unplaceable == 1
