"""Two policies on one ClusterQueue deciding in one pass (``arbitration.in_pass``, the pass ledger): pure.

The codelab's two-policy example (one policy per LeaderWorkerSet, prefill and decode) grows both pools on full
blocks in the same pass. The first policy stops a Workload and asks for a group for its place; Kueue has not
evicted it yet (its chips and place are *freeing*) nor admitted the group (*pending*). The second policy decides
on the same ClusterQueue after that write: it must count neither the freeing place nor the freeing chips as its
own (they are the first policy's group's), nor claim the first's victim. Else the two ask for more groups than
their victims free, and Kueue preempts one more Workload by its own order (seen in simulation: 5 groups added
against 4 of our deactivations and 5 preemptions, docs/tpu.md "Two policies in one pass").

Each pass here is what the controller's loop and the simulator do: every policy's view is
``in_pass(quota, mine=its targets, ledger=…)``; after it acts, its victims read deactivated and still admitted
and its ledger entry holds the count it asked for and the groups not admitted yet.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from autoscaler.core import arbitration, topology
from autoscaler.core.model import (
    AskedReplicas,
    Observation,
    QuotaStatus,
    ReplicaStatus,
    SliceCapacity,
    TargetKind,
    TargetRef,
    TrainingAction,
    TrainingWorkload,
)
from autoscaler.core.spec import ScalingPolicy, Spec
from autoscaler.core.topology import Inventory, Occupant
from tests.core.test_sliced_arbitration import NS, SUB, TPU, policy_doc, sub, train, world

PREFILL = TargetRef(TargetKind.LEADER_WORKER_SET, "kueue-vllm-prefill-model-streamer", NS)
DECODE = TargetRef(TargetKind.LEADER_WORKER_SET, "kueue-vllm-decode-model-streamer", NS)


def spec_for(target: TargetRef, **capacity: Any) -> Spec:
    doc = policy_doc()
    doc["metadata"]["name"] = target.name
    doc["spec"]["target"]["name"] = target.name
    doc["spec"]["capacity"].update(capacity)
    return ScalingPolicy.model_validate(doc).spec


#: Two blocks full: two prefill and two decode groups, twelve single-slice fine-tunes checkpointed 10 s to
#: 120 s ago (the cheapest to stop first: ft-0).
SERVING = {f"{NS}/prefill-{i}": PREFILL.key for i in range(2)} | {f"{NS}/decode-{i}": DECODE.key for i in range(2)}
AGES = {f"ft-{i}": 10.0 * (i + 1) for i in range(12)}


def full_world() -> tuple[Inventory, tuple[TrainingWorkload, ...]]:
    places = [("cube-a", i) for i in range(8)] + [("cube-b", i) for i in range(8)]
    occupants = [Occupant(key, sub(*places[i])) for i, key in enumerate(SERVING)]
    occupants += [Occupant(f"{NS}/{name}", sub(*places[4 + i])) for i, name in enumerate(AGES)]
    return world(*occupants), tuple(train(name, 1, age) for name, age in AGES.items())


@dataclasses.dataclass
class Cluster:
    """What the pass reads: the inventory (Kueue's, unchanged until it acts), the Workloads as last written, and
    each target's count and groups waiting for admission."""

    inventory: Inventory
    training: tuple[TrainingWorkload, ...]
    spec: dict[str, int]
    gated: dict[str, int]

    def ledger(self) -> dict[str, AskedReplicas]:
        return {k: AskedReplicas(self.spec[k], self.gated[k], 8.0) for k in self.spec}

    def quota(self, *, slices: bool) -> QuotaStatus:
        used = float(self.inventory.used_chips)
        capacity = SliceCapacity("slice-rf", self.inventory, "test", owners=SERVING) if slices else None
        return QuotaStatus("cq", TPU, nominal=128.0, reserved=used, slices=capacity)


def one_pass(cluster: Cluster, wants: dict[TargetRef, int], *, slices: bool = True) -> dict[str, list[str]]:
    """Every policy decides in turn on ``in_pass``'s view and its writes land before the next decides (as the
    controller's queue lock and the simulator's tickers order them); Kueue does nothing meanwhile. Returns the
    Workloads each policy stopped."""
    stopped: dict[str, list[str]] = {}
    for target, desired in wants.items():
        spec = spec_for(target)
        current, gated = cluster.spec[target.key], cluster.gated[target.key]
        quota = arbitration.in_pass(cluster.quota(slices=slices), mine={target.key}, ledger=cluster.ledger())
        obs = Observation(
            target=target,
            replicas=ReplicaStatus(spec=current, ready=current - gated, gated=gated, slice=SUB if slices else None),
            training=cluster.training, quota=quota)
        result = arbitration.plan(spec=spec, observation=obs, desired=desired, now=1000.0)
        victims = [d.workload.name for d in result.training if d.action is TrainingAction.DEACTIVATE]
        stopped[target.name] = victims
        cluster.training = tuple(
            dataclasses.replace(w, active=False, deactivated_by_us=True) if w.name in victims else w
            for w in cluster.training)
        cluster.gated[target.key] = gated + max(0, result.desired - current)
        cluster.spec[target.key] = result.desired
    return stopped


def kueue_places(cluster: Cluster) -> int:
    """Where Kueue can put the groups waiting once the stopped Workloads are gone: the free 2x2x2 places."""
    gone = [w.key for w in cluster.training if not w.active]
    return len(topology.free_places(cluster.inventory.without(gone), SUB, 16))


@pytest.mark.parametrize("order", [(PREFILL, DECODE), (DECODE, PREFILL)], ids=["prefill-first", "decode-first"])
def test_two_policies_in_one_pass_claim_disjoint_victims_and_never_more_places_than_freed(
    order: tuple[TargetRef, TargetRef],
) -> None:
    inv, training = full_world()
    cluster = Cluster(inv, training, {PREFILL.key: 2, DECODE.key: 2}, {PREFILL.key: 0, DECODE.key: 0})
    wants = {PREFILL: 3, DECODE: 5}
    stopped = one_pass(cluster, {t: wants[t] for t in order})
    every = [name for names in stopped.values() for name in names]
    # Each group added stopped exactly one single-slice Workload: 1 + 3, none twice, the four cheapest.
    assert len(every) == len(set(every)) == 4
    assert sorted(every) == ["ft-0", "ft-1", "ft-2", "ft-3"]
    assert (cluster.spec[PREFILL.key], cluster.spec[DECODE.key]) == (3, 5)
    # Kueue finds a place for every group waiting in what our victims free: nothing left for it to preempt.
    assert sum(cluster.gated.values()) == 4
    assert kueue_places(cluster) == 4


def test_the_next_pass_before_kueue_acts_stops_nothing_more() -> None:
    # Kueue has evicted nothing and admitted nothing yet (its reconcile and the victims' grace period take time):
    # the groups waiting are the ledger's, the victims' places are freeing. Neither is counted twice.
    inv, training = full_world()
    cluster = Cluster(inv, training, {PREFILL.key: 2, DECODE.key: 2}, {PREFILL.key: 0, DECODE.key: 0})
    one_pass(cluster, {PREFILL: 3, DECODE: 5})
    again = one_pass(cluster, {PREFILL: 3, DECODE: 5})
    assert again == {PREFILL.name: [], DECODE.name: []}
    # One more decode group now needs one more victim, not a place another group is waiting for.
    more = one_pass(cluster, {PREFILL: 3, DECODE: 6})
    assert more == {PREFILL.name: [], DECODE.name: ["ft-4"]}
    assert kueue_places(cluster) == sum(cluster.gated.values()) == 5


def test_two_policies_in_one_pass_on_a_chip_budget_never_ask_for_more_than_is_freed() -> None:
    # The same pass on a ClusterQueue without a slice inventory (GPUs: 128 chips nominal, all held): the second
    # policy must not count the first's victim's chips, freeing, as room for its own replicas.
    inv, training = full_world()
    cluster = Cluster(inv, training, {PREFILL.key: 2, DECODE.key: 2}, {PREFILL.key: 0, DECODE.key: 0})
    stopped = one_pass(cluster, {PREFILL: 3, DECODE: 5}, slices=False)
    every = [name for names in stopped.values() for name in names]
    assert len(every) == len(set(every)) == 4
    freed = sum(w.chips for w in cluster.training if not w.active)
    assert freed == 8 * sum(cluster.gated.values()) == 32


def test_in_pass_leaves_out_the_deciding_policys_own_targets() -> None:
    quota = QuotaStatus("cq", TPU, nominal=128.0, reserved=128.0)
    ledger = {PREFILL.key: AskedReplicas(3, 1, 8.0), DECODE.key: AskedReplicas(5, 3, 8.0)}
    seen = arbitration.in_pass(quota, mine={DECODE.key}, ledger=ledger)
    assert (seen.pending, dict(seen.asked)) == (8.0, {PREFILL.key: AskedReplicas(3, 1, 8.0)})
    both = arbitration.in_pass(quota, mine={PREFILL.key, DECODE.key}, ledger=ledger)
    assert (both.pending, dict(both.asked)) == (0.0, {})

