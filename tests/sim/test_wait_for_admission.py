"""The ``slo`` policy's latency loop while a replica it asked for waits for Kueue's admission, in the closed loop
(``waitForAdmission``; tests/core/test_slo.py has the rule on its own numbers).

The bundled conversation trace at rate 1 on the TGI cluster, the policy without its ``capacity`` block (as the
``kueue-only`` baseline: Kueue's own preemption), trainers that do not save on SIGTERM, so each preempted trainer
holds its chips for its whole grace period and every scale-up waits for admission a minute or more. The simulator
hands the policy its pending replicas as ``ReplicaStatus.gated`` (``Simulation.replica_status``), the count the
controller reads from Kueue's scheduling gate (``controller.kinds.gated_replicas``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from autoscaler.core.engine import compile_policy
from autoscaler.core.model import Observation
from autoscaler.core.policies import slo
from autoscaler.core.spec import ScalingPolicy
from autoscaler.policyfile.loader import load_file
from autoscaler.sim import baselines, traces
from autoscaler.sim import cluster as cluster_mod
from autoscaler.sim.simulation import PolicyController, Simulation
from bench import handoff
from tests.sim.recording import Counts, Recording, Seen


def _utilization(pc: PolicyController) -> float | None:
    state = pc.state.algorithm
    return state.utilization if isinstance(state, slo.SloState) else None


def _counts(obs: Observation) -> Counts:
    return Counts(obs.replicas.gated, obs.replicas.starting)


def _run(tmp_path: Path, *, option: bool) -> list[Seen]:
    _, trace_file, cluster_file, policy_file = handoff.SCENARIOS[0]
    cl = cluster_mod.load(handoff.cluster_file(cluster_file, trainers="on-request", into=tmp_path))
    kueue_only = baselines.kueue_only_policy(load_file(policy_file)[0])
    assert kueue_only is not None
    doc = kueue_only.model_dump(mode="json", by_alias=True, exclude_none=True)
    doc["spec"]["policy"]["waitForAdmission"] = option
    policy = ScalingPolicy.model_validate(doc)
    pc = Recording(compile_policy(policy), cl.pipeline_for(policy.metadata.name), "default", learned=_utilization,
                   counts=_counts)
    trace = traces.reshape(traces.load(trace_file), time_scale=1.0, rate_scale=1.0, duration_s=960.0, start_s=0.0,
                           seed=0)
    sim = Simulation(cluster=cl, trace=trace, controller=pc, initial_replicas=4)
    sim.run()
    return pc.seen


def _fell(s: Seen) -> bool:
    return s.before is not None and s.after is not None and s.after < s.before - 1e-9


@pytest.mark.parametrize("option", [True, False], ids=["waitForAdmission", "as-before"])
def test_the_loop_does_not_lower_the_utilization_while_a_replica_it_asked_for_waits_for_admission(
    tmp_path: Path, option: bool
) -> None:
    seen = _run(tmp_path, option=option)
    waiting = [s for s in seen if s.gated > 0 and s.starting == 0]
    # The premise: Kueue keeps replicas the policy asked for waiting for admission, with nothing starting.
    assert len(waiting) >= 12
    lowered = [s for s in waiting if _fell(s)]
    if option:
        assert lowered == []
    else:
        assert lowered, "the premise of the rule: without it the loop lowers c while a replica waits for admission"

