"""Where a TPU slice still fits: physical blocks, the slices carved out of them, and who must yield.

On TPU7x with dynamic slicing (the codelab in ``shared/seeds/003_…``) capacity is not a quota number (its
ClusterQueue declares ``google.com/tpu: "999999"``): it is a set of physical 4x4x4 *blocks* (64 chips, 16 VMs
of 4 chips), carved on admission into sub-slices (``2x2x2``: 8 chips on 2 VMs; ``2x4x4``: 32 chips) or joined
into super-slices (``4x4x8``: two whole blocks). Whether one more serving group can start is a placement
question, answered here from a snapshot (pure: no I/O, no clock):

1. ``find_place(inventory, shape)`` — a free region for one more slice of ``shape``, or ``None``.
2. ``choose_yield(inventory, shape, costs)`` — when nothing is free: the running training slices that would
   have to stop so that one region becomes free, at the least lost work; ``None`` when even stopping every
   preemptible slice cannot make room (serving or non-preemptible slices are in the way everywhere).
3. ``plan_groups(inventory, shape, count, costs)`` — repeat 1 and 2 for ``count`` groups, each placed in the
   inventory left by the previous ones, so two groups never claim the same chips or the same victim twice.

Placement model (documented in docs/simulate.md; ``estimate`` where no published rule exists):

- A sub-slice is a cuboid whose sides divide the block's, in any orientation, at an origin aligned to its own
  sides (``estimate``: GKE's slice controller does not publish its placement rule; aligned cuboids are how
  ICI-torus sub-slicing is described, and they never leave a region that an aligned slice could use).
- A slice larger than a block (a super-slice) takes whole free blocks: ``ceil(chips / block_chips)`` of them.
  Which blocks may be joined is the cluster's wiring; here any free blocks may (``estimate``).
- Stopping a training slice frees its whole region; a training Workload that holds several regions (a
  super-slice spanning two blocks) frees all of them and is counted once.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: Ranks a set of victims (occupant keys, sorted): the lowest rank is stopped. The arbitration passes the
#: hand-off's own order (``arbitration.victim_rank``) so there is one victim rule with or without topology.
Rank = Callable[[tuple[str, ...]], Any]


@dataclass(frozen=True, slots=True, order=True)
class Shape:
    """A slice topology such as ``2x2x2`` (chips along each torus axis)."""

    x: int
    y: int
    z: int

    @classmethod
    def parse(cls, text: str) -> Shape:
        """``"2x2x2"`` → ``Shape(2, 2, 2)``; a 2-D topology (``"4x4"``, TPU v5e) gets ``z = 1``."""
        parts = text.strip().lower().split("x")
        if len(parts) not in (2, 3) or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise ValueError(f"slice topology {text!r} is not of the form AxB or AxBxC with positive integers")
        dims = [int(p) for p in parts] + ([1] if len(parts) == 2 else [])
        return cls(dims[0], dims[1], dims[2])

    @property
    def chips(self) -> int:
        return self.x * self.y * self.z

    @property
    def dims(self) -> tuple[int, int, int]:
        return (self.x, self.y, self.z)

    def orientations(self) -> list[Shape]:
        """Every distinct axis permutation (a 2x4x4 slice may lie as 4x2x4 or 4x4x2)."""
        return sorted({Shape(*p) for p in itertools.permutations(self.dims)})

    def __str__(self) -> str:
        return f"{self.x}x{self.y}x{self.z}"


@dataclass(frozen=True, slots=True)
class Region:
    """A cuboid inside one block: origin (chip coordinates) and extent."""

    block: str
    origin: tuple[int, int, int]
    shape: Shape

    def cells(self) -> frozenset[tuple[int, int, int]]:
        ox, oy, oz = self.origin
        return frozenset(
            (ox + i, oy + j, oz + k)
            for i in range(self.shape.x)
            for j in range(self.shape.y)
            for k in range(self.shape.z)
        )

    def __str__(self) -> str:
        return f"{self.block}@{self.origin[0]},{self.origin[1]},{self.origin[2]}:{self.shape}"


@dataclass(frozen=True, slots=True)
class Occupant:
    """A slice that holds chips now: a serving group or a training Workload, possibly over several regions."""

    #: A stable identity (the Workload's UID or ``namespace/name``; for serving, the group's Workload).
    key: str
    regions: tuple[Region, ...]
    #: Only preemptible training may be asked to yield; serving groups and protected jobs never are.
    preemptible: bool = False

    @property
    def chips(self) -> int:
        return sum(r.shape.chips for r in self.regions)


@dataclass(frozen=True, slots=True)
class Inventory:
    """The physical blocks of one accelerator pool and what occupies them.

    ``levels``: when the cluster fixes where each slice shape may go (a Kueue Topology whose levels are the
    GKE TPU partitions ``…-partition-2x4x4-id``, …), the partition shapes in their one orientation: a sub-slice
    is then placed only as one of them (Kueue admits a slice into one domain of the level its shape names).
    Empty: any aligned orientation (``estimate``)."""

    block_shape: Shape
    blocks: tuple[str, ...]
    occupants: tuple[Occupant, ...] = ()
    levels: tuple[Shape, ...] = ()

    @property
    def total_chips(self) -> int:
        return self.block_shape.chips * len(self.blocks)

    @property
    def used_chips(self) -> int:
        return sum(o.chips for o in self.occupants)

    def with_occupant(self, occupant: Occupant) -> Inventory:
        return Inventory(self.block_shape, self.blocks, (*self.occupants, occupant), self.levels)

    def with_occupants(self, occupants: Iterable[Occupant]) -> Inventory:
        return Inventory(self.block_shape, self.blocks, tuple(occupants), self.levels)

    def without(self, keys: Iterable[str]) -> Inventory:
        gone = set(keys)
        return self.with_occupants(o for o in self.occupants if o.key not in gone)

    def preemptible(self, keys: Iterable[str]) -> Inventory:
        """The same occupants, only ``keys`` marked as preemptible (the arbitration's eligible victims)."""
        ok = set(keys)
        return self.with_occupants(Occupant(o.key, o.regions, o.key in ok) for o in self.occupants)


@dataclass(frozen=True, slots=True)
class YieldChoice:
    """Where one more slice goes, and which training slices must stop first (empty when it fits now)."""

    regions: tuple[Region, ...]
    victims: tuple[str, ...] = ()
    #: The lost work of stopping ``victims`` (the caller's unit, e.g. chip-seconds since the last checkpoint).
    lost_work: float = 0.0
    chips_stopped: int = 0


@dataclass(frozen=True, slots=True)
class GroupsPlan:
    """Placement of several new groups: those that can be placed, and the victims they need, in order."""

    placed: tuple[YieldChoice, ...] = ()
    #: Groups asked for that cannot be placed even with every preemptible slice stopped.
    unplaceable: int = 0
    victims: tuple[str, ...] = field(default=())

    @property
    def lost_work(self) -> float:
        return sum(c.lost_work for c in self.placed)


def _fits_in_block(shape: Shape, block: Shape) -> bool:
    return all(b % s == 0 for s, b in zip(shape.dims, block.dims, strict=True))


def _candidate_regions(inventory: Inventory, shape: Shape) -> list[tuple[Region, ...]]:
    """Every aligned place for ``shape`` in deterministic order: block, then orientation, then origin."""
    block = inventory.block_shape
    if shape.chips > block.chips:
        needed = math.ceil(shape.chips / block.chips)
        if needed > len(inventory.blocks):
            return []
        whole = Region(block="", origin=(0, 0, 0), shape=block)
        return [
            tuple(Region(name, whole.origin, block) for name in combo)
            for combo in itertools.combinations(inventory.blocks, needed)
        ]
    places: list[tuple[Region, ...]] = []
    for name in inventory.blocks:
        for orient in shape.orientations():
            if not _fits_in_block(orient, block) or (inventory.levels and orient not in inventory.levels):
                continue
            for ox in range(0, block.x, orient.x):
                for oy in range(0, block.y, orient.y):
                    for oz in range(0, block.z, orient.z):
                        places.append((Region(name, (ox, oy, oz), orient),))
    return places


def _occupied_cells(inventory: Inventory) -> dict[tuple[str, tuple[int, int, int]], str]:
    cells: dict[tuple[str, tuple[int, int, int]], str] = {}
    for occupant in inventory.occupants:
        for region in occupant.regions:
            for cell in region.cells():
                cells[(region.block, cell)] = occupant.key
    return cells


def _blockers(place: Sequence[Region], cells: Mapping[tuple[str, tuple[int, int, int]], str]) -> set[str]:
    found: set[str] = set()
    for region in place:
        for cell in region.cells():
            owner = cells.get((region.block, cell))
            if owner is not None:
                found.add(owner)
    return found


def find_place(inventory: Inventory, shape: Shape) -> tuple[Region, ...] | None:
    """A free region for one more slice of ``shape`` (first in deterministic order), or ``None``."""
    cells = _occupied_cells(inventory)
    for place in _candidate_regions(inventory, shape):
        if not _blockers(place, cells):
            return place
    return None


def choose_yield(
    inventory: Inventory, shape: Shape, costs: Mapping[str, float], *, rank: Rank | None = None
) -> YieldChoice | None:
    """The cheapest way to make room for one slice of ``shape``.

    ``costs`` maps an occupant's key to the work lost if it stops now (a missing key counts as the
    occupant's chips × 1e9: unknown checkpoint age is the worst case, never free). Among places that can be
    cleared, the least lost work wins, then the fewest chips stopped, then the first place in order; with
    ``rank``, the victim set of the lowest rank wins instead (then the first place in order).
    """
    cells = _occupied_cells(inventory)
    by_key = {o.key: o for o in inventory.occupants}
    best: YieldChoice | None = None
    best_rank: Any = None
    for place in _candidate_regions(inventory, shape):
        blockers = _blockers(place, cells)
        if not blockers:
            return YieldChoice(regions=place)
        if any(not by_key[k].preemptible for k in blockers):
            continue
        lost = sum(costs.get(k, by_key[k].chips * 1e9) for k in blockers)
        chips = sum(by_key[k].chips for k in blockers)
        key = (lost, chips) if rank is None else rank(tuple(sorted(blockers)))
        if best_rank is None or key < best_rank:
            best_rank = key
            best = YieldChoice(regions=place, victims=tuple(sorted(blockers)), lost_work=lost, chips_stopped=chips)
    return best


def plan_groups(
    inventory: Inventory, shape: Shape, count: int, costs: Mapping[str, float], *, owner_prefix: str = "new",
    rank: Rank | None = None,
) -> GroupsPlan:
    """Place ``count`` more slices one after another, each in what the previous ones left."""
    placed: list[YieldChoice] = []
    victims: list[str] = []
    current = inventory
    for index in range(count):
        choice = choose_yield(current, shape, costs, rank=rank)
        if choice is None:
            return GroupsPlan(placed=tuple(placed), unplaceable=count - index, victims=tuple(victims))
        placed.append(choice)
        victims.extend(choice.victims)
        current = current.without(choice.victims).with_occupant(
            Occupant(key=f"{owner_prefix}-{index}", regions=choice.regions, preemptible=False)
        )
    return GroupsPlan(placed=tuple(placed), unplaceable=0, victims=tuple(victims))


def free_places(inventory: Inventory, shape: Shape, limit: int) -> list[tuple[Region, ...]]:
    """Up to ``limit`` places for slices of ``shape`` that fit now, none overlapping, in deterministic order."""
    found: list[tuple[Region, ...]] = []
    current = inventory
    while len(found) < limit:
        place = find_place(current, shape)
        if place is None:
            break
        found.append(place)
        current = current.with_occupant(Occupant(key=f"free-{len(found)}", regions=place))
    return found
