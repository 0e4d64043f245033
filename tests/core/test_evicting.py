"""A training Workload Kueue is already evicting on its own: pure.

Kueue marks a Workload it preempts with ``Evicted`` (reason ``Preempted``) and keeps its quota reserved and its
place held (``QuotaReserved``/``Admitted`` True) until its pods are gone; then the place goes to the workload Kueue
evicted it for. Read as running, it was a victim we could choose again and its chips room we could count, though
they are promised to Kueue's pending workload. ``TrainingWorkload.evicting`` says so, and the one arbitration rule
(``arbitration._ineligible``) neither stops it nor counts its chips, on chips and on a slice inventory alike.
"""

from __future__ import annotations

import dataclasses

from autoscaler.core import arbitration
from autoscaler.core.model import TrainingAction, TrainingWorkload
from tests.core import test_arbitration as chips
from tests.core import test_sliced_arbitration as sliced


def evicting(w: TrainingWorkload) -> TrainingWorkload:
    return dataclasses.replace(w, evicting=True, evicted_reason="Preempted")


def test_chips_an_evicting_workload_is_no_victim_even_the_cheapest() -> None:
    # 6 GPUs full: serving 2 + "fresh" 2 (checkpointed 10 s ago, the cheapest) + "stale" 2. Kueue is evicting
    # "fresh" for a workload of its own: one more serving replica (2 GPUs) must stop "stale".
    training = (evicting(chips.ckpt("fresh", 10, chips=2)), chips.ckpt("stale", 900, chips=2))
    result = arbitration.plan(spec=chips.SPEC, observation=chips.observe(1, 6, training), desired=2)
    assert chips.actions(result) == [("deactivate", "stale")]
    assert result.desired == 2
    # Without "stale", nothing can be freed: its 2 chips are not ours to count, serving stays at 1.
    result = arbitration.plan(spec=chips.SPEC, observation=chips.observe(1, 6, training[:1]), desired=2)
    assert (result.desired, result.training) == (1, ())
    assert "Kueue is already evicting it (Preempted)" in result.message


def test_chips_an_evicting_workload_is_not_freeing_either() -> None:
    training = (evicting(chips.ckpt("leaving", 10, chips=4)),)
    quota = chips.observe(1, 6, training).quota
    assert quota is not None
    acct = arbitration.budget(quota=quota, training=training, own_pending=0.0)
    assert (acct.available, acct.freeing, acct.for_serving) == (0.0, 0.0, 0.0)


def test_slices_an_evicting_workload_keeps_its_place_and_is_no_victim() -> None:
    # Both blocks full; "b-fresh" (the cheapest, 32 chips × 30 s) is being evicted by Kueue: its place is not
    # free and not ours, so one more group stops the next cheapest, "sub" (48 × 300 < b-stale's 32 × 600).
    training = (sliced.train("sub", 6, 300.0), sliced.train("b-stale", 4, 600.0),
                evicting(sliced.train("b-fresh", 4, 30.0)))
    result = arbitration.plan(spec=sliced.SPEC, observation=sliced.observe(sliced.FULL, training), desired=2)
    assert sliced.stops(result) == ["sub"]
    assert result.desired == 2
    assert all(d.workload.name != "b-fresh" for d in result.training if d.action is TrainingAction.DEACTIVATE)


def test_slices_nothing_else_stoppable_means_waiting_not_its_place() -> None:
    training = (evicting(sliced.train("sub", 6, 300.0)), evicting(sliced.train("b-stale", 4, 600.0)),
                evicting(sliced.train("b-fresh", 4, 30.0)))
    result = arbitration.plan(spec=sliced.SPEC, observation=sliced.observe(sliced.FULL, training), desired=2)
    assert (result.desired, result.training) == (1, ())


def test_the_handoff_eviction_time_leaves_it_out() -> None:
    leaving = evicting(chips.ckpt("leaving", 10, chips=2, grace_s=600.0))
    staying = chips.ckpt("staying", 10, chips=2, grace_s=30.0)
    capacity = chips.SPEC.capacity
    assert capacity is not None
    assert arbitration.handoff_eviction_s(capacity, (leaving, staying), 0.0) == 30.0
