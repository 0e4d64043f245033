"""The simulator's Kueue preempting, for one of our waiting serving replicas, a trainer the policy does not select:
the ClusterQueue's picture names it (``QuotaStatus.evicting``, as the controller reads every Workload Kueue evicts
on the ClusterQueue), and the one arbitration counts it as room already being made for that replica
(``arbitration.unselected_making_room``), in ``simulate`` as in ``run`` (tests/core/test_unselected_making_room.py,
tests/controller/test_handoff.py::test_kueue_evicting_an_unselected_workload_for_our_waiting_replica_is_its_room).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from autoscaler.core import arbitration
from autoscaler.core.model import Observation, TrainingAction
from tests.sim.test_making_room import full_tpu_with_kueue_victim


@pytest.mark.parametrize("named", [True, False], ids=["named", "unnamed-falls-back"])
def test_chips_kueues_unselected_victim_for_our_waiting_replica_is_its_room(tmp_path: Path, named: bool) -> None:
    # The policy is made not to select the trainer Kueue evicts (a research team's job on the same ClusterQueue).
    policy, pc, sim, victim = full_tpu_with_kueue_victim(tmp_path)
    leaving = [victim]
    if not named:
        leaving[0].evicted_for = ""  # as the controller reads a message that names no preemptor
    target = policy.spec.target.ref()
    now = 310.0
    training = sim.training_workloads(now, lambda j: j is not leaving[0] and pc._selected(j))
    assert leaving[0].name not in {w.name for w in training}  # the premise: the policy does not see it
    obs = Observation(target=target, replicas=sim.replica_status(now, sim.pool), training=training,
                      quota=sim.quota_status(mine={target.key}))
    result = arbitration.plan(spec=policy.spec, observation=obs, desired=obs.replicas.spec, now=now)
    stops = [d.workload.name for d in result.training if d.action is TrainingAction.DEACTIVATE]
    if named:
        assert stops == []  # the replica's room is on its way: nothing of ours is stopped
    else:
        assert len(stops) == 1  # today's rule: one of ours for it
