"""Each policy's next periodic due time, and which policies are due, without a walk over every policy.

The loop wakes many times a period (after each pass, at each due time, at each trigger) and asked, at each wake,
which policies are due and when the next one is: two walks over every policy (at 5,000 policies, 112 wakes per 10
probe rounds, 2026-12-07 rx2). ``DueTimes`` answers both from heaps: O(k log n) for k policies due, O(1) for the
next due time, plus O(log n) per due time set.

What "due" means is the loop's rule, unchanged (``Controller.due_now``): a policy never evaluated is due at once;
another is due when its due time plus its grace (the period probes may stand for it, none without probes) is at
most ``now + slack``; the policies due come in the order of the policy set. The rule is computed on the same
floats as before (``at + grace <= now + slack``), so the answer is the walk's, bit for bit
(``tests/controller/test_due.py`` compares both after random operations).

How: one min-heap of ``(due time, name)`` per grace value (the policies of one grace are due in the order of their
due times, whichever the ``now``); setting a due time pushes an entry and leaves the old one, recognised as stale
when it comes to the top (its time is no longer the policy's). The heaps are rebuilt when the policy set (and so the
graces) changes, and when stale entries outnumber the live ones.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from typing import TypeVar, overload

T = TypeVar("T")


class DueTimes(MutableMapping[str, float]):
    """Per policy, its next periodic due time (the loop's clock); a mapping, plus ``due`` and ``next``.

    ``track`` tells it the policy set (names in order, and each one's grace): ``due`` answers for those policies
    only; a name set here that is not in it (an evaluation of a removed policy that ended after the reload) is a
    stray (``strays``), which the loop drops."""

    def __init__(self) -> None:
        self._at: dict[str, float] = {}
        #: The policy set's names, by their place in it.
        self._order: dict[str, int] = {}
        #: Per policy with a grace (others: 0), as ``track`` was told.
        self._grace: Mapping[str, float] = {}
        #: One heap of (due time, name) per grace; an entry whose time is no longer its policy's is stale.
        self._heaps: dict[float, list[tuple[float, str]]] = {}
        self._entries = 0
        #: Policies of the set with no due time (never evaluated, or their time removed): due at once.
        self._unset: set[str] = set()
        #: Names with a due time that are not in the set.
        self._strays: set[str] = set()

    # the mapping --------------------------------------------------------------------------------------------
    def __getitem__(self, name: str) -> float:
        return self._at[name]

    def __setitem__(self, name: str, at: float) -> None:
        self._at[name] = at
        if name in self._order:
            self._unset.discard(name)
            heapq.heappush(self._heaps.setdefault(self._grace.get(name, 0.0), []), (at, name))
            self._entries += 1
            if self._entries > 2 * len(self._at) + 64:
                self._rebuild()
        else:
            self._strays.add(name)

    def __delitem__(self, name: str) -> None:
        del self._at[name]  # its heap entries are stale from now on
        self._strays.discard(name)
        if name in self._order:
            self._unset.add(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._at)

    def __len__(self) -> int:
        return len(self._at)

    def __contains__(self, name: object) -> bool:
        return name in self._at

    @overload
    def get(self, name: str, /) -> float | None: ...
    @overload
    def get(self, name: str, default: float, /) -> float: ...
    @overload
    def get(self, name: str, default: T, /) -> float | T: ...

    def get(self, name: str, default: object = None, /) -> object:
        """The dict's own ``get`` (the mapping mixin's goes through ``__getitem__`` and an exception: a round
        asks once per screened policy)."""
        return self._at.get(name, default)

    # the policy set -----------------------------------------------------------------------------------------
    def track(self, names: Sequence[str], grace: Mapping[str, float]) -> None:
        """The policy set is now ``names`` (in order), each with its grace (absent: 0). O(n log n), once per set."""
        self._order = {n: i for i, n in enumerate(names)}
        self._grace = grace
        self._unset = {n for n in names if n not in self._at}
        self._strays = {n for n in self._at if n not in self._order}
        self._rebuild()

    def _rebuild(self) -> None:
        heaps: dict[float, list[tuple[float, str]]] = {}
        grace, order = self._grace, self._order
        for name, at in self._at.items():
            if name in order:
                heaps.setdefault(grace.get(name, 0.0), []).append((at, name))
        for heap in heaps.values():
            heapq.heapify(heap)
        self._heaps = heaps
        self._entries = sum(len(h) for h in heaps.values())

    def strays(self) -> list[str]:
        """Names with a due time that are not in the policy set."""
        return list(self._strays)

    # the questions ------------------------------------------------------------------------------------------
    def _live(self, at: float, name: str) -> bool:
        """Whether a heap entry is its policy's due time (heaps hold only the set's names, each in its grace's
        heap: both change only with ``track``, which rebuilds them)."""
        return self._at.get(name) == at

    def due(self, now: float, slack: float, *, graced: bool) -> list[str]:
        """The policies of the set due at ``now``, in the set's order: none set, or due time (+ grace when
        ``graced``) at most ``now + slack``."""
        limit = now + slack
        found: set[str] = set(self._unset)
        for grace, heap in self._heaps.items():
            g = grace if graced else 0.0
            taken: list[tuple[float, str]] = []
            while heap and heap[0][0] + g <= limit:
                entry = heapq.heappop(heap)
                self._entries -= 1
                if self._live(entry[0], entry[1]) and entry[1] not in found:
                    taken.append(entry)
                    found.add(entry[1])
            for entry in taken:  # a question, not a removal: they stay due until their time is set again
                heapq.heappush(heap, entry)
                self._entries += 1
        order = self._order
        return sorted(found, key=order.__getitem__)

    def next(self, default: float, *, graced: bool) -> float:
        """The earliest due time (+ grace when ``graced``) among those set, strays included (grace 0), or
        ``default`` when none is."""
        best = min((self._at[n] for n in self._strays), default=None)
        for grace, heap in self._heaps.items():
            while heap and not self._live(heap[0][0], heap[0][1]):
                heapq.heappop(heap)
                self._entries -= 1
            if heap:
                at = heap[0][0] + (grace if graced else 0.0)
                best = at if best is None else min(best, at)
        return default if best is None else best
