"""Kueue evicting a Workload the policy does *not* select to admit one of our waiting serving replicas: pure.

``test_making_room`` covers a Workload among the policy's own (its ``preemptible`` selection). Kueue chooses its
victims by its own order, not ours: on a shared ClusterQueue it may preempt a job no policy of ours selects (a
research team's job in the same namespace, another policy's Workload) for our replica. That Workload is not in
``Observation.training``, so its chips were missing from the account and the arbitration stopped one of ours for
a replica whose room Kueue was already making. The controller reads such Workloads with the ClusterQueue
(``QuotaStatus.evicting``); while the target they are evicted for has replicas waiting, their chips count as
``Budget.admitting`` and leave the slice inventory (``arbitration.unselected_making_room``), each Workload once.
"""

from __future__ import annotations

import dataclasses

from autoscaler.core import arbitration
from autoscaler.core.model import AskedReplicas, EvictedFor, Observation
from tests.core import test_arbitration as chips
from tests.core import test_making_room as selected
from tests.core import test_sliced_arbitration as sliced

OWN, OTHER = selected.OWN, selected.OTHER
#: Not among the policy's Workloads: another team's job on the ClusterQueue.
RESEARCH = "research/eval-job"


def with_evicting(obs: Observation, *evicting: EvictedFor) -> Observation:
    assert obs.quota is not None
    return dataclasses.replace(obs, quota=dataclasses.replace(obs.quota, evicting=evicting))


def test_an_unselected_workload_kueue_evicts_for_our_waiting_replica_is_its_room() -> None:
    # 6 GPUs full: serving 1 (2) + the research job (2, not ours to see or stop) + "stale" (2). A second
    # replica waits; Kueue evicts the research job for it. Nothing of ours is stopped.
    obs = selected.waiting(2, 1, 6, (chips.ckpt("stale", 900, chips=2),))
    result = arbitration.plan(spec=chips.SPEC, observation=with_evicting(obs, EvictedFor(RESEARCH, 2, OWN)),
                              desired=2)
    assert (result.desired, result.training) == (2, ())
    # Not said (the controller could not read it, or could not name the preemptor): one stop, as before.
    result = arbitration.plan(spec=chips.SPEC, observation=obs, desired=2)
    assert chips.actions(result) == [("deactivate", "stale")]


def test_only_while_the_target_it_is_evicted_for_waits() -> None:
    # Kueue names another target, or ours with nothing waiting any more: no room for us.
    training = (chips.ckpt("stale", 900, chips=2),)
    for target, (current, gated) in ((OTHER, (2, 1)), (OWN, (1, 0))):
        obs = with_evicting(selected.waiting(current, gated, 6, training), EvictedFor(RESEARCH, 2, target))
        result = arbitration.plan(spec=chips.SPEC, observation=obs, desired=2)
        assert chips.actions(result) == [("deactivate", "stale")], target


def test_a_further_scale_up_stops_one_workload_and_says_why() -> None:
    obs = with_evicting(selected.waiting(2, 1, 6, (chips.ckpt("stale", 900, chips=2),)),
                        EvictedFor(RESEARCH, 2, OWN))
    result = arbitration.plan(spec=chips.SPEC, observation=obs, desired=3)
    assert (result.desired, chips.actions(result)) == (3, [("deactivate", "stale")])
    assert "2 being released by training Kueue evicts for serving replicas waiting" in result.training[0].message


def test_for_another_targets_waiting_replica_in_the_ledger() -> None:
    # 8 GPUs full; another policy's target waits for one replica and Kueue evicts the research job for it: ours
    # grows 1→2 on "stale"'s chips. Without the research job's room the other's replica takes them first.
    asked = {OTHER: AskedReplicas(2, 1, 2.0)}
    obs = selected.waiting(1, 0, 8, (chips.ckpt("stale", 900, chips=2),), nominal=8, asked=asked)
    for evicting, want in (((EvictedFor(RESEARCH, 2, OTHER),), 2), ((), 1)):
        result = arbitration.plan(spec=chips.SPEC, observation=with_evicting(obs, *evicting), desired=2)
        assert (result.desired, chips.actions(result)) == (want, [("deactivate", "stale")]), evicting


def test_a_selected_workload_also_listed_with_the_queue_counts_once() -> None:
    # The controller lists every Workload Kueue evicts on the ClusterQueue; one the policy selects is in both
    # lists. 8 GPUs: serving 1 (2) + "leaving" (2, evicted for our second replica) + "stale" (2) + 2 free. The
    # policy wants 4: one replica waits (room: "leaving"), two are new (room: the 2 free GPUs, and "stale").
    # Counted twice, "leaving" would stand for the fourth replica's chips too and "stale" would be spared.
    leaving = selected.evicting_for(chips.ckpt("leaving", 10, chips=2), OWN)
    obs = with_evicting(selected.waiting(2, 1, 6, (leaving, chips.ckpt("stale", 900, chips=2)), nominal=8),
                        EvictedFor(leaving.key, 2, OWN))
    result = arbitration.plan(spec=chips.SPEC, observation=obs, desired=4)
    assert (result.desired, chips.actions(result)) == (4, [("deactivate", "stale")])


def test_slices_an_unselected_workload_kueue_evicts_for_our_waiting_group_is_its_place() -> None:
    # Both blocks full; decode's second group waits and Kueue evicts "b-fresh", which this policy does not
    # select, for it: its place is the group's, nothing is stopped. Unsaid: "b-stale" (the least loss) is.
    training = (sliced.train("sub", 6, 300.0), sliced.train("b-stale", 4, 600.0))
    obs = sliced.observe(sliced.FULL, training, current=2, gated=1)
    fresh = EvictedFor(f"{sliced.NS}/b-fresh", 32, sliced.TARGET.key)
    result = arbitration.plan(spec=sliced.SPEC, observation=with_evicting(obs, fresh), desired=2)
    assert (result.desired, result.training) == (2, ())
    result = arbitration.plan(spec=sliced.SPEC, observation=obs, desired=2)
    assert sliced.stops(result)
