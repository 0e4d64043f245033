"""Slices in the simulator: where each admitted serving group and training Workload sits in the TPU blocks.

Placement is the controller's own pure fit check (``autoscaler.core.topology``): a slice is admitted at the
region ``find_place`` returns, or not at all; Kueue's preemption under topology stops the candidates it
would (lowest priority, then most recently admitted) until ``find_place`` finds a region, and gives back the
ones that turn out not to be needed. There is no second placement model here.

What *is* separate, on purpose, is the audit: every admission is checked by plain cell counting (a whole
slice of the declared shape, aligned, inside its block, a super-slice on whole distinct blocks, no chip held
twice). It shares no code with ``core.topology``, so a placement bug there shows up as a violation here
(``slice_violations`` in the run's results) instead of being trusted.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from autoscaler.core import topology
from autoscaler.core.topology import Inventory, Occupant, Region, Shape


@dataclass(frozen=True, slots=True)
class Holder:
    """One admitted slice: a serving group or a training Workload."""

    key: str
    shape: Shape
    regions: tuple[Region, ...]
    preemptible: bool


@dataclass(frozen=True, slots=True)
class Admission:
    """A record of one placement decision, for tests and the report: the inventory it was made in."""

    t: float
    key: str
    shape: Shape
    regions: tuple[Region, ...]
    before: Inventory


class SlicePlacement:
    """The blocks of one cluster and what holds them now."""

    def __init__(self, block_shape: Shape, blocks: Sequence[str], *, keep_log: bool = False) -> None:
        self.block_shape = block_shape
        self.blocks = tuple(blocks)
        self.holders: dict[str, Holder] = {}
        #: The audit's own view: chip (block, x, y, z) -> holder key.
        self._cells: dict[tuple[str, int, int, int], str] = {}
        self.violations: list[str] = []
        self.admissions = 0
        self.keep_log = keep_log
        self.log: list[Admission] = []

    # ----- what the fit check sees --------------------------------------------------------------------
    def inventory(self, *, without: Iterable[str] = (), extra: Iterable[Occupant] = ()) -> Inventory:
        gone = set(without)
        occupants = tuple(
            Occupant(key=h.key, regions=h.regions, preemptible=h.preemptible)
            for h in self.holders.values() if h.key not in gone
        )
        return Inventory(self.block_shape, self.blocks, (*occupants, *extra))

    def fits(self, shape: Shape, *, without: Iterable[str] = (), extra: Iterable[Occupant] = ()) -> bool:
        return topology.find_place(self.inventory(without=without, extra=extra), shape) is not None

    # ----- admission and release ----------------------------------------------------------------------
    def place(self, key: str, shape: Shape, *, preemptible: bool, now: float) -> tuple[Region, ...] | None:
        """Admit ``key`` at the first free region of ``shape`` (the pure fit check's answer), or None."""
        before = self.inventory()
        regions = topology.find_place(before, shape)
        if regions is None:
            return None
        self._audit(key, shape, regions)
        self.holders[key] = Holder(key, shape, regions, preemptible)
        self.admissions += 1
        if self.keep_log:
            self.log.append(Admission(now, key, shape, regions, before))
        return regions

    def release(self, key: str) -> None:
        holder = self.holders.pop(key, None)
        if holder is None:
            return
        for cell in [c for c, k in self._cells.items() if k == key]:
            del self._cells[cell]

    def kueue_victims(self, shape: Shape, candidates: Sequence[str], *, waiting: Iterable[str] = (),
                      reserved: Iterable[Occupant] = ()) -> list[str] | None:
        """Kueue's preemption for one pending slice under topology: the shortest prefix of ``candidates``
        (already in Kueue's order) after which ``shape`` fits, minus the ones not needed (tried in reverse).

        ``waiting`` are holders already on their way out (their chips are promised), ``reserved`` the places
        promised to slices waiting for them. None when even every candidate would not make room."""
        gone = set(waiting)
        extra = tuple(reserved)
        if self.fits(shape, without=gone, extra=extra):
            return []
        chosen: list[str] = []
        for key in candidates:
            chosen.append(key)
            if self.fits(shape, without=gone | set(chosen), extra=extra):
                break
        else:
            return None
        for key in reversed(list(chosen)):
            rest = [k for k in chosen if k != key]
            if self.fits(shape, without=gone | set(rest), extra=extra):
                chosen = rest
        return chosen

    # ----- the independent audit ----------------------------------------------------------------------
    def _audit(self, key: str, shape: Shape, regions: tuple[Region, ...]) -> None:
        """Check a placement by counting cells (no ``core.topology`` code): record what is wrong."""
        block = self.block_shape.dims
        problems: list[str] = []
        if shape.chips > self.block_shape.chips:
            names = [r.block for r in regions]
            if len(set(names)) != len(names) or len(names) * self.block_shape.chips != shape.chips:
                problems.append(f"super-slice {shape} on blocks {names}: not whole distinct blocks")
            for r in regions:
                if r.origin != (0, 0, 0) or r.shape.dims != block:
                    problems.append(f"super-slice {shape}: region {r} is not a whole block")
        else:
            if len(regions) != 1:
                problems.append(f"slice {shape} placed as {len(regions)} regions")
            for r in regions:
                if sorted(r.shape.dims) != sorted(shape.dims):
                    problems.append(f"slice {shape} placed as {r.shape}")
                for o, e, b in zip(r.origin, r.shape.dims, block, strict=True):
                    if o % e or o + e > b or o < 0:
                        problems.append(f"slice {shape} at {r}: not aligned inside the {self.block_shape} block")
                        break
        for r in regions:
            if r.block not in self.blocks:
                problems.append(f"region {r} is in no block of this cluster")
            ox, oy, oz = r.origin
            for i in range(r.shape.x):
                for j in range(r.shape.y):
                    for k in range(r.shape.z):
                        cell = (r.block, ox + i, oy + j, oz + k)
                        owner = self._cells.get(cell)
                        if owner is not None:
                            problems.append(f"{key} at {r} overlaps {owner} at chip {cell[1:]} of {r.block}")
                            break
                        self._cells[cell] = key
        if sum(r.shape.chips for r in regions) != shape.chips:
            problems.append(f"{key}: {sum(r.shape.chips for r in regions)} chips placed for a {shape} slice")
        self.violations.extend(f"{key}: {p}" for p in problems)
