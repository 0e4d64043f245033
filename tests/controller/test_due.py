"""``DueTimes`` answers as the walk over every policy it replaced (``Controller.due_now``/``next_due`` before
2026-12-07 rx3), and the loop asks it without walking the policy set at each wake."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import SimpleNamespace
from typing import Any, cast

from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.controller.due import DueTimes
from autoscaler.controller.loop import DUE_SLACK_S, Controller
from autoscaler.core.engine import compile_policy
from autoscaler.policyfile.loader import load_text
from tests.controller.policies import tgi_policy

NAMES = [f"p{i}" for i in range(12)]


def walk_due(policies: list[str], due: Mapping[str, float], grace: Mapping[str, float], now: float) -> list[str]:
    """The walk as it was: every policy of the set, in its order."""
    return [n for n in policies if (at := due.get(n)) is None or at + grace.get(n, 0.0) <= now + DUE_SLACK_S]


def walk_next(due: Mapping[str, float], grace: Mapping[str, float], now: float) -> float:
    return min((at + grace.get(n, 0.0) for n, at in due.items()), default=now + 1.0)


# Times on a coarse grid, so that ties between due times and with ``now`` (the cases an order can get wrong)
# come up often; graces among a few values, as periods do.
times = st.integers(0, 40).map(lambda k: k * 0.25)
graces = st.sampled_from([0.0, 0.5, 1.0, 15.0])
operation = st.one_of(
    st.tuples(st.just("set"), st.sampled_from(NAMES), times),
    st.tuples(st.just("del"), st.sampled_from(NAMES), st.just(0.0)),
    st.tuples(st.just("track"), st.permutations(NAMES).flatmap(
        lambda names: st.tuples(st.integers(0, len(names)).map(lambda k: names[:k]),
                                st.dictionaries(st.sampled_from(names or ["-"]), graces))), st.just(0.0)),
    st.tuples(st.just("ask"), st.booleans(), times),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(operation, max_size=60))
def test_due_times_answer_as_the_walk_over_every_policy(ops: list[tuple[str, object, object]]) -> None:
    due = DueTimes()
    plain: dict[str, float] = {}
    policies: list[str] = []
    grace: dict[str, float] = {}
    due.track(policies, grace)
    for what, a, b in ops:
        if what == "set":
            assert isinstance(a, str)
            assert isinstance(b, float)
            due[a] = plain[a] = b
        elif what == "del":
            assert isinstance(a, str)
            if a in plain:
                del due[a], plain[a]
        elif what == "track":
            assert isinstance(a, tuple)
            names, g = a
            policies, grace = list(names), {n: v for n, v in g.items() if n in names}
            due.track(policies, grace)
        else:
            assert isinstance(b, float)
            graced = bool(a)
            used = grace if graced else {}
            assert due.due(b, DUE_SLACK_S, graced=graced) == walk_due(policies, plain, used, b)
            # ``next`` asks about the names with a due time, the set's and the strays (which the loop drops).
            assert due.next(b + 1.0, graced=graced) == walk_next(plain, used, b)
        assert dict(due) == plain
        assert [due.get(n) for n in NAMES] == [plain.get(n) for n in NAMES]
        assert sorted(due.strays()) == sorted(n for n in plain if n not in policies)


def test_stale_entries_do_not_pile_up() -> None:
    """Setting a due time leaves the old heap entry behind; the heaps are rebuilt before they hold more than
    about twice the live entries."""
    due = DueTimes()
    names = [f"p{i}" for i in range(100)]
    due.track(names, dict.fromkeys(names[:50], 15.0))
    for k in range(50):
        for n in names:
            due[n] = float(k)
    assert sum(len(h) for h in due._heaps.values()) <= 2 * len(names) + 64
    assert due.due(49.0, DUE_SLACK_S, graced=False) == names


class CountingDict(dict[str, object]):
    """A policy set that counts the walks over it."""

    walks = 0

    def __iter__(self) -> Iterator[str]:
        CountingDict.walks += 1
        return super().__iter__()

    def items(self):  # type: ignore[no-untyped-def]
        CountingDict.walks += 1
        return super().items()

    def keys(self):  # type: ignore[no-untyped-def]
        CountingDict.walks += 1
        return super().keys()


def test_a_wake_of_the_loop_does_not_walk_the_policy_set() -> None:
    """``due_now`` and ``next_due`` at a wake read the heaps, not every policy (two walks of 5,000 at each of
    about eleven wakes per probe round before); the set is walked when it changes (the index)."""
    texts = [tgi_policy(name=f"p{i}", target=f"t{i}", capacity=False, period=15) for i in range(50)]
    policies = CountingDict({lp.policy.metadata.name: compile_policy(lp.policy)
                             for lp in load_text("---\n".join(texts), "many.yaml")})
    anything = cast(Any, None)
    c = Controller(store=cast(Any, SimpleNamespace(policies=policies)), observer=anything, actuator=anything,
                   telemetry=anything, clock=anything, leader=anything)
    assert c.due_now(0.0, probing=True) == list(policies)  # never evaluated: all due at once
    for i, name in enumerate(policies):
        c._due[name] = 10.0 + i
    CountingDict.walks = 0
    for now in (0.0, 5.0, 24.5, 30.0):
        c.due_now(now, probing=True)
        c.next_due(now, probing=True)
    assert CountingDict.walks == 0
    assert c.due_now(25.0, probing=True) == ["p0"]  # due at 10, and its grace (one period) is over
    assert c.next_due(0.0, probing=True) == 25.0
    assert c.due_now(12.0, probing=False) == ["p0", "p1", "p2"]


def test_a_due_time_moved_or_removed_or_regraced_counts_as_it_is_now() -> None:
    """The cases a heap with stale entries can get wrong, named (the random test finds them only by chance)."""
    due = DueTimes()
    due.track(["a", "b"], {"a": 15.0})
    due["a"], due["b"] = 5.0, 5.0
    due["a"], due["b"] = 30.0, 30.0  # moved later: the entries at 5 are stale
    assert due.due(10.0, DUE_SLACK_S, graced=False) == []
    assert due.next(99.0, graced=False) == 30.0
    assert due.next(99.0, graced=True) == 30.0  # b at 30; a at 30 + 15
    del due["b"]  # no time: due at once, and no longer the next
    assert due.due(10.0, DUE_SLACK_S, graced=False) == ["b"]
    assert due.next(99.0, graced=True) == 45.0
    due.track(["b", "a"], {})  # a new set: a's grace gone, the order the set's
    assert due.due(30.0, DUE_SLACK_S, graced=True) == ["b", "a"]
    due["c"] = 1.0  # not in the set: a stray, never due, but the next due time counts it (the loop drops it)
    assert due.strays() == ["c"]
    assert due.due(30.0, DUE_SLACK_S, graced=True) == ["b", "a"]
    assert due.next(99.0, graced=True) == 1.0
