"""Kueue evicting training to admit one of *our* waiting serving replicas: pure.

Kueue preempts a lower-priority Workload for a serving replica that waits for quota (its pod, or its group, pending
admission) and names the preemptor in the victim's ``Preempted`` condition. The victim holds its chips until its
pods are gone, and then they go to that replica. Counted as neither victim nor room (``TrainingWorkload.evicting``
alone), the replica's chips were still missing from the account, and the arbitration stopped one more Workload
for it: one stop too many, the training work it computed lost. ``TrainingWorkload.evicted_for`` names the target
of the replica Kueue evicts for; while that target has replicas waiting (this policy's own, or another target's in
the pass ledger), the Workload is room already being made (``arbitration.making_room``, ``Budget.admitting``),
in the one rule (``budget``, the sliced inventory through ``serving_view``). A preemptor not named, or not one of
ours, leaves today's rule as it was.
"""

from __future__ import annotations

import dataclasses

from autoscaler.core import arbitration
from autoscaler.core.model import AskedReplicas, Observation, QuotaStatus, ReplicaStatus, TrainingWorkload
from tests.core import test_arbitration as chips
from tests.core import test_sliced_arbitration as sliced

OWN = chips.TARGET.key
OTHER = "Deployment/llm/other-serving"


def evicting_for(w: TrainingWorkload, target: str) -> TrainingWorkload:
    return dataclasses.replace(w, evicting=True, evicted_reason="Preempted", evicted_for=target)


def waiting(current: int, gated: int, reserved: float, training: tuple[TrainingWorkload, ...], *,
            nominal: float = 6, asked: dict[str, AskedReplicas] | None = None) -> Observation:
    """This target at ``current`` replicas, ``gated`` of them waiting for admission; ``asked``: the ledger's
    other targets (their waiting chips are ``pending``, as ``arbitration.in_pass`` makes them)."""
    quota = QuotaStatus("cluster-queue", chips.GPU, nominal=nominal, reserved=reserved)
    if asked is not None:
        quota = arbitration.in_pass(quota, mine={OWN}, ledger=asked)
    return Observation(
        target=chips.TARGET,
        replicas=ReplicaStatus(spec=current, ready=current - gated, gated=gated),
        training=training,
        quota=quota,
    )


def test_kueues_eviction_for_our_waiting_replica_is_its_room_no_second_stop() -> None:
    # 6 GPUs full: serving 1 (2) + "leaving" (2) + "stale" (2). A second replica waits for admission; Kueue
    # evicts "leaving" for it. Nothing more is stopped: its 2 GPUs are on their way to that replica.
    training = (evicting_for(chips.ckpt("leaving", 10, chips=2), OWN), chips.ckpt("stale", 900, chips=2))
    result = arbitration.plan(spec=chips.SPEC, observation=waiting(2, 1, 6, training), desired=2)
    assert (result.desired, result.training) == (2, ())


def test_the_preemptor_unknown_falls_back_to_todays_rule() -> None:
    # The same picture with the preemptor not named (an older Kueue's message, or one we could not resolve):
    # "leaving" is neither victim nor room, so the waiting replica stops "stale", as before this rule.
    training = (evicting_for(chips.ckpt("leaving", 10, chips=2), ""), chips.ckpt("stale", 900, chips=2))
    result = arbitration.plan(spec=chips.SPEC, observation=waiting(2, 1, 6, training), desired=2)
    assert chips.actions(result) == [("deactivate", "stale")]


def test_a_preemptor_with_nothing_waiting_is_no_room() -> None:
    # Kueue names our target, but none of its replicas waits any more (admitted meanwhile, or scaled away):
    # the Workload's place is not ours to count; one more replica stops "stale".
    training = (evicting_for(chips.ckpt("leaving", 10, chips=2), OWN), chips.ckpt("stale", 900, chips=2))
    result = arbitration.plan(spec=chips.SPEC, observation=waiting(1, 0, 6, training), desired=2)
    assert chips.actions(result) == [("deactivate", "stale")]
    assert result.desired == 2


def test_a_further_scale_up_stops_one_workload_for_one_replica() -> None:
    # While Kueue evicts "leaving" for the waiting second replica, the policy wants a third: exactly one stop
    # ("stale", for the third), the second's room being "leaving"'s.
    training = (evicting_for(chips.ckpt("leaving", 10, chips=2), OWN), chips.ckpt("stale", 900, chips=2))
    result = arbitration.plan(spec=chips.SPEC, observation=waiting(2, 1, 6, training), desired=3)
    assert chips.actions(result) == [("deactivate", "stale")]
    assert result.desired == 3
    assert "2 being released by training Kueue evicts for serving replicas waiting" in result.training[0].message


def test_for_another_targets_waiting_replica_in_the_ledger() -> None:
    # 8 GPUs full. Another policy's target waits for one replica (2 GPUs, in the pass ledger) and Kueue evicts
    # "leaving" for it: ours grows 1→2 with one stop ("stale"). Unnamed, "leaving" is no room, the other's
    # replica takes "stale"'s chips first, and ours stays at 1 after stopping "stale" all the same.
    asked = {OTHER: AskedReplicas(2, 1, 2.0)}
    for target, want in ((OTHER, 2), ("", 1)):
        training = (evicting_for(chips.ckpt("leaving", 10, chips=2), target), chips.ckpt("stale", 900, chips=2))
        result = arbitration.plan(spec=chips.SPEC, observation=waiting(1, 0, 8, training, nominal=8, asked=asked),
                                  desired=2)
        assert (result.desired, chips.actions(result)) == (want, [("deactivate", "stale")]), target


def test_waiting_targets_are_own_and_ledger_targets_with_replicas_waiting() -> None:
    quota = arbitration.in_pass(QuotaStatus("cq", chips.GPU, nominal=8, reserved=8), mine={OWN}, ledger={
        OTHER: AskedReplicas(2, 1, 2.0), "Deployment/llm/idle": AskedReplicas(3, 0, 2.0)})
    assert arbitration.waiting_targets(quota, {OWN: 1}) == {OWN, OTHER}
    assert arbitration.waiting_targets(quota, {OWN: 0}) == {OTHER}


def test_slices_kueues_eviction_for_our_waiting_group_is_its_place() -> None:
    # Both blocks full; decode's second group waits for admission and Kueue evicts "b-fresh" for it: its place
    # is the group's, nothing more is stopped. Unnamed, today's rule: "b-fresh" is no victim, "sub" is stopped.
    named = (sliced.train("sub", 6, 300.0), sliced.train("b-stale", 4, 600.0),
             evicting_for(sliced.train("b-fresh", 4, 30.0), sliced.TARGET.key))
    result = arbitration.plan(spec=sliced.SPEC, observation=sliced.observe(sliced.FULL, named, current=2, gated=1),
                              desired=2)
    assert (result.desired, result.training) == (2, ())
    unnamed = (*named[:2], evicting_for(named[2], ""))
    result = arbitration.plan(spec=sliced.SPEC, observation=sliced.observe(sliced.FULL, unnamed, current=2, gated=1),
                              desired=2)
    assert sliced.stops(result) == ["sub"]
