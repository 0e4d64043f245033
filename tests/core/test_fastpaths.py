"""The shortcuts taken for replay speed give exactly what the plain definitions give."""

from __future__ import annotations

import ast
import dataclasses
import gc
import math
import weakref
from pathlib import Path

import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

import autoscaler
from autoscaler.core import behavior, expressions, sizing, specbase
from autoscaler.core.fast import REGROW, collector_paused, freeze_survivors, settle_long_lived
from autoscaler.core.model import (
    Observation,
    PolicyState,
    ReplicaStatus,
    SignalState,
    SignalValue,
    TargetKind,
    TargetRef,
)
from autoscaler.core.policies import slo
from autoscaler.core.policies.hpa import milli

history_st = st.lists(
    st.tuples(st.floats(-1e4, 1e4, allow_nan=False) | st.just(math.nan), st.integers(0, 50)), max_size=30
).map(tuple)


@given(value=st.floats(0, 1e9, allow_nan=False) | st.integers(0, 10**6).map(lambda n: n / 1000))
def test_milli_matches_its_definition(value: float) -> None:
    assert milli(value) == math.ceil(round(value * 1000.0, 6))


@pytest.mark.parametrize("offset", [0.0, 1e-10, -1e-10, 3e-7, 4e-7, 4.5e-7, 5e-7, 5.5e-7, 1e-6, 1.1e-6])
def test_milli_near_whole_millis(offset: float) -> None:
    for n in range(0, 5000, 7):
        value = n / 1000 + offset / 1000
        assert milli(value) == math.ceil(round(value * 1000.0, 6))


@given(history=history_st, cutoff=st.floats(-1e4, 1e4, allow_nan=False))
def test_history_pruning_matches_the_filter_in_any_order(history: tuple[tuple[float, int], ...], cutoff: float) -> None:
    assert behavior.since(history, cutoff) == tuple(e for e in history if e[0] >= cutoff)
    assert behavior.newer_than(history, cutoff) == tuple(e for e in history if e[0] > cutoff)


def test_with_scale_history_is_replace() -> None:
    state = PolicyState(((1.0, 2),), ((2.0, 1),), (), (("a", 3),), 4.0, 2.0, 1.0, object())
    changed = state.with_scale_history(((5.0, 1),), ((6.0, 2),), 6.0)
    expected = dataclasses.replace(
        state, scale_up_events=((5.0, 1),), scale_down_events=((6.0, 2),), last_scale_time=6.0
    )
    assert changed == expected
    assert changed.algorithm is state.algorithm


def test_quick_init_keeps_dataclass_behaviour() -> None:
    value = SignalValue("q", SignalState.OK, 1.0)
    assert (value.reason, value.age_s, value.source) == ("", None, "")
    with pytest.raises(dataclasses.FrozenInstanceError):
        value.name = "other"  # type: ignore[misc]
    target = TargetRef(TargetKind.DEPLOYMENT, "llm")
    first, second = Observation(target, ReplicaStatus(1, 1)), Observation(target, ReplicaStatus(1, 1))
    assert first == second
    assert first.signals is not second.signals  # default_factory: one dict each
    assert SignalValue(name="q", state=SignalState.OK, value=1.0) == value


def test_the_speed_tricks_live_in_one_module() -> None:
    """``core.fast`` is their one home: no other module switches the collector off, freezes it or writes an
    ``__init__``."""
    root = Path(autoscaler.__file__).parent
    offenders = [
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if path.name != "fast.py" and any(trick in path.read_text() for trick in ("gc.disable(", "gc.freeze(", "exec("))
    ]
    assert offenders == []


def test_core_memoizes_only_through_fast() -> None:
    """A cache in ``core`` is a speed trick too: ``fast.memoized`` is the one way in (the review of stop 12 found
    two module-level ``functools.lru_cache`` in ``sizing`` and ``slo``)."""
    root = Path(autoscaler.__file__).parent / "core"
    offenders = [
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if path.name != "fast.py"
        and any(trick in path.read_text() for trick in ("lru_cache", "functools.cache", "@cache"))
    ]
    assert offenders == []


@pytest.mark.parametrize("slots", [1, 8, 33, 48, 64, 256])
@pytest.mark.parametrize("percentile", [0.9, 0.99, 0.999])
def test_the_memoized_occupancy_is_the_plain_bisection(slots: int, percentile: float) -> None:
    """``slo.occupancy_at_objective`` through ``fast.memoized`` answers as the function it wraps, asked twice."""
    plain = slo.occupancy_at_objective.__wrapped__(slots, percentile)  # type: ignore[attr-defined]
    assert slo.occupancy_at_objective(slots, percentile) == plain
    assert slo.occupancy_at_objective(slots, percentile) == plain


@pytest.mark.parametrize("burstiness", [1.0, 2.5])
@pytest.mark.parametrize("rate", [3000.0, 5000.0])
def test_the_memoized_prefill_utilization_is_the_plain_bisection(burstiness: float, rate: float) -> None:
    lengths = sizing.Lengths(((750.0, 0.6), (1500.0, 0.3), (3500.0, 0.1)), 1000.0, 1.6e6, 0.0)
    wrapped = sizing._utilization_at_objective.__wrapped__  # type: ignore[attr-defined]
    plain = wrapped(lengths, rate, 2.0, 0.99, burstiness)
    for _ in range(2):
        assert sizing.prefill_utilization_at_objective(lengths, rate, 2.0, 0.99, burstiness) == plain


def test_collector_paused_restores_the_collector() -> None:
    assert gc.isenabled()
    inside: list[bool] = []

    def fail_inside() -> None:
        with collector_paused():
            inside.append(gc.isenabled())
            raise RuntimeError

    with pytest.raises(RuntimeError):
        fail_inside()
    assert inside == [False]
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled(), "a collector the caller had switched off stays off"
    finally:
        gc.enable()


class _Node:
    """A weak-referenceable object for building a garbage cycle."""

    other: object = None


def test_collector_paused_hands_what_it_built_to_the_oldest_generation_and_leaks_nothing() -> None:
    """After the block the youngest generation is empty (what was built is not traversed again by every young
    collection), and a garbage cycle made inside it is still freed by the next full collection."""
    assert gc.isenabled()
    with collector_paused():
        kept = [[i] for i in range(5000)]
        a, b = _Node(), _Node()
        a.other, b.other = b, a
        gone = weakref.ref(a)
        del a, b
    assert gc.get_count()[0] < 500, gc.get_count()
    assert gone() is not None  # a cycle: reference counting alone cannot free it
    gc.collect()
    assert gone() is None
    assert len(kept) == 5000


@pytest.mark.parametrize(
    "text",
    ["max(backlog / 10, kv / 0.8)", "a + b * c if a > 1 else min(b, c)", "ceil(x) ** 2", "1 +", "open(x)", "a" * 1100,
     "max(a, key=b)", "1e400 * a"],
)
def test_compiled_expressions_are_what_parse_gives(text: str) -> None:
    """The memoized parse answers as the plain one: the same tree and names, or the same refusal (twice)."""
    refusal: str | None = None
    try:
        tree = expressions.parse(text)
    except ValueError as exc:
        refusal = str(exc)
    if refusal is not None:
        for _ in range(2):
            with pytest.raises(ValueError, match=r"^expression") as refused:
                expressions.compiled(text)
            assert str(refused.value) == refusal
        return
    first, again = expressions.compiled(text), expressions.compiled(text)
    assert again is first
    assert ast.dump(first.tree) == ast.dump(tree)
    assert first.names == frozenset(expressions.names(tree))


def test_settle_long_lived_freezes_what_is_held_and_frees_the_garbage_cycles_first() -> None:
    """After ``settle_long_lived`` what the process held is frozen (no collection traverses it), a garbage
    cycle made before it was freed (it collects first), and a later settle unfreezes and collects again, so
    a cycle among objects frozen earlier does not outlive the next settle."""
    assert gc.get_freeze_count() == 0
    try:
        a, b = _Node(), _Node()
        a.other, b.other = b, a
        gone = weakref.ref(a)
        del a, b
        kept = _Node()
        settle_long_lived()
        assert gone() is None, "a cycle that was garbage before the settle is freed"
        assert gc.get_freeze_count() > 0
        assert gc.is_tracked(kept)
        assert not any(o is kept for o in gc.get_objects()), "frozen: in no generation"
        kept.other = _Node()
        kept.other.other = kept  # a cycle among a frozen object and a new one
        later = weakref.ref(kept)
        del kept
        gc.collect()
        assert later() is not None, "frozen: a full collection does not free it"
        settle_long_lived()
        assert later() is None, "the next settle collects what was frozen before"
    finally:
        gc.unfreeze()


def test_freeze_survivors_freezes_and_settles_once_the_frozen_set_grew_by_a_quarter() -> None:
    """What survived a round is frozen (in no generation: no full collection traverses it); a garbage cycle
    frozen with it waits, through any number of collections and of freezes that find little growth, for the
    settle that a growth past ``REGROW`` of the last settle's count brings (or for the next explicit settle)."""
    assert gc.get_freeze_count() == 0
    try:
        settled = settle_long_lived()
        assert settled == gc.get_freeze_count() > 0
        kept = _Node()
        kept.other = _Node()
        kept.other.other = kept  # a cycle made by a round, alive at its end
        assert freeze_survivors(settled) == settled  # little growth: frozen, no settle
        assert not any(o is kept for o in gc.get_objects()), "frozen: in no generation"
        later = weakref.ref(kept)
        del kept  # garbage now, frozen
        gc.collect()
        assert later() is not None, "frozen: a full collection does not free it"
        assert freeze_survivors(settled) == settled
        assert later() is not None, "no settle below the growth bound"
        grown = [_Node() for _ in range(int(settled * REGROW) + 100)]  # the rounds' survivors pile up
        assert freeze_survivors(settled, measure=False) == settled, "not measured: frozen only"
        assert later() is not None
        again = freeze_survivors(settled)
        assert later() is None, "past the bound: the settle collected it"
        assert again == gc.get_freeze_count() > settled
        assert not any(o is grown[0] for o in gc.get_objects()), "what is alive stays frozen"
    finally:
        gc.unfreeze()


def _immutable(value: object) -> bool:
    if isinstance(value, pydantic.BaseModel):
        return bool(value.model_config.get("frozen")) and all(_immutable(v) for v in dict(value).values())
    if isinstance(value, tuple | frozenset):
        return all(_immutable(v) for v in value)
    return value is None or isinstance(value, bool | int | float | str)


def test_shared_defaults_equal_fresh_ones_and_hold_nothing_mutable() -> None:
    """``fast.shared_default`` gives one value to every policy that takes the default: it must be what the model
    builds afresh, and frozen all the way down (a dict or list in it could be changed under every policy)."""
    import autoscaler.core.spec  # noqa: F401, PLC0415  (defines the models that use it)

    shared = [
        (cls, name, info.default_factory)
        for cls in specbase._MODELS
        for name, info in cls.model_fields.items()
        if info.default_factory is not None and "shared_default" in info.default_factory.__qualname__
    ]
    assert len(shared) >= 5, shared  # Spec's metricSafety, scaleToZero, actuation; slo's forecast, scaleDown
    for cls, name, factory in shared:
        value = factory()  # type: ignore[call-arg]
        assert factory() is value, (cls, name)  # type: ignore[call-arg]
        assert value == type(value)(), (cls, name)
        assert _immutable(value), (cls, name)


def test_number_keys_cover_every_spec_model_including_later_ones() -> None:
    """The loader skips the number check when no value under these keys can fail it: a model defined later (a
    policy type from a plug-in) must add its number fields."""
    import autoscaler.core.spec  # noqa: F401, PLC0415

    keys = specbase.number_keys()
    assert all(set(specbase._number_fields(cls)) <= keys for cls in specbase._MODELS)
    assert {"maxReplicas", "capacityPerReplica", "averageValue", "replicas"} <= keys

    class Later(specbase.SpecModel):
        later_count: int = 0

    try:
        assert {"laterCount", "later_count"} <= specbase.number_keys()
    finally:
        specbase._MODELS.remove(Later)  # the last one: the first n entries stay the same models
