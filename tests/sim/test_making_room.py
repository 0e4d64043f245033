"""The simulator's Kueue, preempting training for one of our serving replicas waiting for admission, names that
replica's target on its victim (``TrainingJob.evicted_for``: what the controller resolves from Kueue's
``Preempted`` message), and the one arbitration counts the victim as room already being made for it
(``arbitration.making_room``), in ``simulate`` as in ``run`` (tests/core/test_making_room.py,
tests/controller/test_handoff.py::test_kueue_evicting_for_our_waiting_replica_is_its_room_not_a_reason_to_stop_more).

The replica is one the policy did not ask for itself (a ``kubectl scale``, a rollout's surge pod, a restart of
ours between its scale and its stop): the policy, deciding next, wants it too. Kueue's eviction takes the
victim's grace period, and the policy's pass falls inside it.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pytest

from autoscaler.core import arbitration
from autoscaler.core.engine import compile_policy
from autoscaler.core.model import Observation, TrainingAction
from autoscaler.core.spec import ScalingPolicy
from autoscaler.policyfile.loader import load_file
from autoscaler.sim import cluster as cluster_mod
from autoscaler.sim import kueue, traces
from autoscaler.sim.simulation import PolicyController, Simulation
from bench import handoff

ROOT = Path(__file__).resolve().parents[2]


def _trace() -> traces.Trace:
    raw = traces.load(cluster_mod.bundled("AzureLLMInferenceTrace_code.csv"))
    return traces.reshape(raw, time_scale=1.0, rate_scale=1.0, duration_s=600.0, start_s=0.0, seed=0)


def _stops(sim: Simulation, pc: PolicyController, pool_name: str, now: float) -> list[str]:
    """What the policy's arbitration stops at ``now`` for its pool's count as it stands (the replicas waiting
    included), on the picture the simulator gives it (``PolicyController``'s observation)."""
    spec = pc.compiled.policy.spec
    target = spec.target.ref()
    pool = next(p for p in sim.pools if p.name == pool_name)
    obs = Observation(target=target, replicas=sim.replica_status(now, pool),
                      training=sim.training_workloads(now, pc._selected), quota=sim.quota_status(mine={target.key}))
    result = arbitration.plan(spec=spec, observation=obs, desired=obs.replicas.spec, now=now)
    return [d.workload.name for d in result.training if d.action is TrainingAction.DEACTIVATE]


class KueueVictim(NamedTuple):
    """``full_tpu_with_kueue_victim``'s world: the policy, its controller, the simulation, the trainer Kueue evicts."""

    policy: ScalingPolicy
    controller: PolicyController
    sim: Simulation
    victim: kueue.TrainingJob


def full_tpu_with_kueue_victim(tmp_path: Path) -> KueueVictim:
    """The TPU cluster: 48 chips, one serving replica (8) and five 8-chip trainers: full. A second replica is
    asked for at 300 s; Kueue preempts one trainer for it (its 60 s grace period)."""
    _, _, cluster, policy_file = handoff.SCENARIOS[1]
    cl = cluster_mod.load(handoff.cluster_file(cluster, trainers="neither", into=tmp_path))
    policy = load_file(policy_file)[0]
    pc = PolicyController(compile_policy(policy), cl.pipeline_for(policy.metadata.name), "default")
    sim = Simulation(cluster=cl, trace=_trace(), controller=pc, initial_replicas=1)
    pc.start(sim)
    sim.set_desired(2, 300.0, pool=sim.pool)
    leaving = [j for j in sim.jobs if j.state is kueue.JobState.TERMINATING]
    assert len(leaving) == 1
    return KueueVictim(policy, pc, sim, leaving[0])


@pytest.mark.parametrize("named", [True, False], ids=["named", "unnamed-falls-back"])
def test_chips_kueues_victim_for_our_waiting_replica_is_its_room(tmp_path: Path, named: bool) -> None:
    policy, pc, sim, victim = full_tpu_with_kueue_victim(tmp_path)
    leaving = [victim]
    assert leaving[0].evicted_for == policy.spec.target.ref().key
    if not named:
        leaving[0].evicted_for = ""  # as the controller reads a message that names no preemptor
    stops = _stops(sim, pc, sim.pool.name, 310.0)
    if named:
        assert stops == []  # the replica's room is on its way: nothing more is stopped
    else:
        assert len(stops) == 1  # today's rule: one more trainer for it
        assert stops != [leaving[0].name]


@pytest.mark.parametrize("named", [True, False], ids=["named", "unnamed-falls-back"])
def test_slices_kueues_victim_for_our_waiting_group_is_its_place(named: bool) -> None:
    # The codelab: two 4x4x4 blocks full (prefill 2 + decode 2 groups and the sub-slice trainers). A third
    # decode group is asked for at 60 s; Kueue preempts the trainer whose place fits it.
    cl = cluster_mod.load(cluster_mod.bundled("cluster-tpu7x-codelab.yaml"))
    pols = list(load_file(ROOT / "policies" / "lws-prefill-decode.yaml"))
    decode = next(p for p in pols if "decode" in p.spec.target.name)
    pc = PolicyController(compile_policy(decode), cl.pipeline_for(decode.metadata.name), "default")
    sim = Simulation(cluster=cl, trace=_trace(), controller=pc, initial_by_pool={"prefill": 2, "decode": 2})
    pc.start(sim)
    pool = next(p for p in sim.pools if p.name == "decode")
    sim.set_desired(3, 60.0, pool=pool)
    leaving = [j for j in sim.jobs if j.state is kueue.JobState.TERMINATING]
    assert len(leaving) == 1
    assert leaving[0].evicted_for == decode.spec.target.ref().key
    if not named:
        leaving[0].evicted_for = ""
    stops = _stops(sim, pc, "decode", 61.0)
    if named:
        assert stops == []
    else:
        assert len(stops) == 1
        assert stops != [leaving[0].name]
