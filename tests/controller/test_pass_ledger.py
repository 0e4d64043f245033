"""The controller's pass ledger notes every pool of a ``disaggregated`` policy, as the simulator's does
(``Simulation.join_ledger`` joins every target of a policy with a ``capacity`` block): one rule,
``arbitration.asked_by`` with ``arbitration.ledger_keys``. Before, only the policy's primary target (decode) was
noted, so another policy on the same ClusterQueue never saw prefill's groups waiting for admission and counted
their room as free."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from autoscaler.controller.loop import Controller
from autoscaler.core.engine import compile_policy
from autoscaler.core.model import Observation, QuotaStatus, ReplicaStatus, TargetKind, TargetRef
from autoscaler.core.spec import ScalingPolicy
from autoscaler.core.topology import Shape
from tests.core import test_disaggregated as dg
from tests.core import test_sliced_arbitration as sliced

SUB = Shape(2, 2, 2)


def single() -> Any:
    doc = sliced.policy_doc()
    doc["metadata"]["name"] = "other"
    doc["spec"]["capacity"]["resource"] = "google.com/tpu"
    return compile_policy(ScalingPolicy.model_validate(doc))


def controller(*policies: Any) -> Controller:
    anything = cast(Any, None)
    store = SimpleNamespace(policies={cp.name: cp for cp in policies})
    return Controller(store=cast(Any, store), observer=anything, actuator=anything, telemetry=anything,
                      clock=anything, leader=anything)


def quota() -> QuotaStatus:
    return QuotaStatus("cq", "google.com/tpu", nominal=128.0, reserved=96.0)


def test_both_pools_of_a_disaggregated_policy_are_in_the_ledger_the_others_decide_on() -> None:
    pd, other = dg.compiled(capacity=True, budget=None), single()
    assert other.policy.spec.capacity.cluster_queue == pd.policy.spec.capacity.cluster_queue == "cq"
    ctl = controller(pd, other)
    # decode: 3 groups asked for, 2 waiting for admission; prefill: 2 asked for, 1 waiting.
    decode = ReplicaStatus(spec=3, ready=1, gated=2, slice=SUB)
    prefill = ReplicaStatus(spec=2, ready=1, gated=1, slice=SUB)
    seen = ctl._with_pending(pd, Observation(target=dg.DEC, replicas=decode, quota=quota(),
                                             members={dg.DEC.key: decode, dg.PRE.key: prefill}))
    # Its own view leaves out both its pools (its budget counts its waiting groups itself).
    assert seen.quota is not None
    assert (seen.quota.pending, dict(seen.quota.asked)) == (0.0, {})
    me = TargetRef(TargetKind.LEADER_WORKER_SET, sliced.TARGET.name, sliced.NS)
    view = ctl._with_pending(other, Observation(target=me, replicas=ReplicaStatus(spec=1, ready=1), quota=quota()))
    assert view.quota is not None
    assert sorted(view.quota.asked) == sorted([dg.DEC.key, dg.PRE.key])
    assert view.quota.pending == (2 + 1) * 8.0
