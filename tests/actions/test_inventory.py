"""Issue 14: the TPU slice inventory read from the cluster (nodes, Topology, ResourceFlavor, admitted Workloads)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from autoscaler.controller import inventory
from autoscaler.controller.config import ControllerConfig
from autoscaler.controller.runtime import Runtime
from autoscaler.controller.workloads import KueueGate
from autoscaler.core import topology
from autoscaler.core.engine import compile_policy
from autoscaler.core.topology import Region, Shape
from autoscaler.policyfile import loader
from tests.actions.policies import FAST_RETRY
from tests.actions.test_codelab_selector import EXAMPLE
from tests.controller.helpers import ManualClock, pool_on
from tests.kube import codelab
from tests.kube.emulator import Emulator
from tests.kube.kueue import V1BETA2
from tests.kube.tas import LWS, LiveTas

SUB = Shape(2, 2, 2)
DECODE, PREFILL = "kueue-vllm-decode-model-streamer", "kueue-vllm-prefill-model-streamer"


def apply_codelab(kube: Emulator, *, decode: int = 1, prefill: int = 1) -> LiveTas:
    for obj in [*codelab.kueue_resources(), *codelab.nodes()]:
        kube.add(obj)
    kube.add(codelab.vllm_lws("decode", replicas=decode))
    kube.add(codelab.vllm_lws("prefill", replicas=prefill))
    kube.add(codelab.subslicing_jobset())
    tas = LiveTas(kube)
    for t in (0.0, 0.1, 1.0, 3.0):  # create, reserve, provision, ready
        tas.step(t)
    return tas


def policies() -> list[Any]:
    return [compile_policy(p) for p in loader.load_file(EXAMPLE)]


async def test_the_codelab_inventory_is_read_from_its_nodes_and_workloads(
    kube: Emulator, kube_client: client.ApiClient
) -> None:
    tas = apply_codelab(kube)
    assert tas.violations == []
    gate = KueueGate(kube_client, retry=FAST_RETRY, now=lambda: 1796032800.0)
    training, quota = await gate.training(policies()[1])
    # The quota number is still read (999999), but the slices say what is left.
    assert quota is not None
    assert quota.nominal == 999999
    slices = quota.slices
    assert slices is not None
    inv = slices.inventory
    assert (slices.flavor, inv.block_shape, inv.blocks) == ("slice-rf", Shape(4, 4, 4), ("cube-a", "cube-b"))
    assert inv.levels == (Shape(4, 4, 4), Shape(2, 4, 4), Shape(2, 2, 4), Shape(2, 2, 2), Shape(2, 2, 1))
    assert "32 nodes placed by the TPU partition levels of Topology slice-topology" in slices.source
    held = {o.key: o for o in inv.occupants}
    ns = codelab.NAMESPACE
    decode_wl = f"{ns}/{tas.group_workload(DECODE, 0)}"
    assert sorted(held) == sorted([f"{ns}/jobset-kueue-jobset-simple-subslicing", decode_wl,
                                   f"{ns}/{tas.group_workload(PREFILL, 0)}"])
    # 6 + 1 + 1 slices of 8 chips; each a whole 2x2x2 partition (2 VMs of 2x2x1).
    assert inv.used_chips == 64
    decode = held[decode_wl]
    assert {r.shape for r in decode.regions} == {Shape(2, 2, 1)}
    cells = {(r.block, c) for r in decode.regions for c in r.cells()}
    assert len(cells) == 8
    assert len({b for b, _ in cells}) == 1
    assert len(topology.free_places(inv, SUB, 64)) == 16 - 8
    # The training Workload knows the slices it asks for (the reactivation places them).
    sub = next(w for w in training if w.name == "jobset-kueue-jobset-simple-subslicing")
    assert sub.slices == (SUB,) * 6
    assert sub.chips == 48


def test_partition_labels_nest_into_coordinates() -> None:
    nodes = codelab.nodes(("cube-a",))
    blocks = inventory.blocks_from_partitions(nodes, codelab.LEVELS)
    assert blocks is not None
    # x0y0z0w0 is the origin; w1 the next VM along z; z1 the next 2x2x2 along z; y1 along y; x1 along x.
    assert blocks.regions["gke-tpu7-cube-a-0000"] == Region("cube-a", (0, 0, 0), Shape(2, 2, 1))
    assert blocks.regions["gke-tpu7-cube-a-0001"] == Region("cube-a", (0, 0, 1), Shape(2, 2, 1))
    assert blocks.regions["gke-tpu7-cube-a-0010"] == Region("cube-a", (0, 0, 2), Shape(2, 2, 1))
    assert blocks.regions["gke-tpu7-cube-a-0100"] == Region("cube-a", (0, 2, 0), Shape(2, 2, 1))
    assert blocks.regions["gke-tpu7-cube-a-1000"] == Region("cube-a", (2, 0, 0), Shape(2, 2, 1))
    every = {(r.origin, c) for r in blocks.regions.values() for c in r.cells()}
    assert len({c for _, c in every}) == 64  # the 16 VMs tile the block, no overlap
    # A Topology without partition levels says nothing about places: declare them instead.
    assert inventory.blocks_from_partitions(nodes, ["kubernetes.io/hostname"]) is None
    declared = inventory.blocks_declared(nodes, inventory.DeclaredBlocks(
        Shape(4, 4, 4), Shape(2, 2, 1), "cloud.google.com/gke-tpu-partition-4x4x4-id"))
    assert declared is not None
    assert len({c for r in declared.regions.values() for c in r.cells()}) == 64


@pytest.mark.parametrize(
    "assignment",
    [
        pytest.param({"levels": ["kubernetes.io/hostname"],
                      "domains": [{"values": ["h-1"], "count": 1}, {"values": ["h-2"], "count": 1}]}, id="v1beta1"),
        pytest.param({"levels": ["kubernetes.io/hostname"], "slices": [{
            "domainCount": 2, "valuesPerLevel": [{"individual": {"prefix": "h-", "roots": ["1", "2"]}}],
            "podCounts": {"universal": 1}}]}, id="v1beta2-individual"),
        # The flat form one version of v1beta2 declared (kueue apis/kueue/v1beta2/workload_types.go at 02237e7:
        # TopologyAssignmentSliceLevelValues{prefix, suffix, roots, universalValue}, podCounts a list).
        pytest.param({"levels": ["kubernetes.io/hostname"], "slices": [{
            "domainCount": 2, "valuesPerLevel": [{"prefix": "h-", "roots": ["1", "2"]}], "universalPodCount": 1}]},
            id="v1beta2-flat"),
    ],
)
def test_both_topology_assignment_forms(assignment: dict[str, Any]) -> None:
    assert inventory.assigned_domains(assignment) == inventory.AssignedDomains(
        ["kubernetes.io/hostname"], [["h-1"], ["h-2"]])


def test_universal_values_repeat_per_domain() -> None:
    assignment = {"levels": ["block", "kubernetes.io/hostname"], "slices": [{
        "domainCount": 2, "valuesPerLevel": [{"universal": "b"}, {"individual": {"roots": ["x", "y"]}}]}]}
    assert inventory.assigned_domains(assignment).domains == [["b", "x"], ["b", "y"]]
    flat = {"levels": ["block", "kubernetes.io/hostname"], "slices": [{
        "domainCount": 2, "valuesPerLevel": [{"universalValue": "b"}, {"roots": ["x", "y"], "suffix": "-0"}],
        "podCounts": [1, 1]}]}
    assert inventory.assigned_domains(flat).domains == [["b", "x-0"], ["b", "y-0"]]


@pytest.mark.parametrize("declare", [True, False], ids=["declared", "not-declared"])
async def test_blocks_declared_in_the_controller_config_are_what_the_controller_reads(
    kube: Emulator, kube_client: client.ApiClient, tmp_path: Path, declare: bool
) -> None:
    """Where the cluster cannot say where a node sits (here the ResourceFlavor names no Topology), the blocks
    declared in the controller config (``sliceFlavors``) are the inventory the controller's arbitration gets,
    through the Runtime as it is built from its config; without them the flavor has no slices (quota rule)."""
    apply_codelab(kube)
    kube.modify("kueue.x-k8s.io/v1beta2", "ResourceFlavor", "slice-rf", None,
                lambda rf: rf["spec"].pop("topologyName", None))
    flavors = {"slice-rf": {"blockShape": "4x4x4", "hostShape": "2x2x1",
                            "blockLabel": "cloud.google.com/gke-tpu-partition-4x4x4-id"}}
    cfg = ControllerConfig.model_validate(
        {"leaderElection": {"enabled": False}, **({"sliceFlavors": flavors} if declare else {})})
    clock = ManualClock()
    rt = Runtime(api=kube_client, config=cfg, policies_dir=tmp_path, clock=clock, identity="controller-a",
                 namespace="autoscaler", source=pool_on(clock))
    _, quota = await rt.training.inner.training(policies()[1])
    assert quota is not None
    if not declare:
        assert quota.slices is None
        return
    assert quota.slices is not None
    assert "blocks declared in the controller config (sliceFlavors.slice-rf: 4x4x4" in quota.slices.source
    inv = quota.slices.inventory
    assert (inv.block_shape, inv.blocks, inv.used_chips) == (Shape(4, 4, 4), ("cube-a", "cube-b"), 64)


@pytest.mark.parametrize("annotated", [True, False], ids=["index-on-the-workload", "index-from-the-pods"])
async def test_the_groups_a_scale_down_removes_first_are_read_from_the_cluster(
    kube: Emulator, kube_client: client.ApiClient, annotated: bool
) -> None:
    """``removal_order``: an LWS scale-down removes its highest group indices first; each index is named by its
    group's Workload, whose name does not say it (Kueue hashes the owner's UID into it): from Kueue's index
    annotation, or (an older Kueue) from the group's pods. What the core's make-room shift counts on."""
    for obj in [*codelab.kueue_resources(), *codelab.nodes()]:
        kube.add(obj)
    kube.add(codelab.vllm_lws("decode", replicas=3))
    kube.add(codelab.vllm_lws("prefill", replicas=1))
    tas = LiveTas(kube, index_annotation=annotated)
    for t in (0.0, 0.1, 1.0, 3.0):
        tas.step(t)
    gate = KueueGate(kube_client, retry=FAST_RETRY, now=lambda: 1796032800.0)
    key = f"LeaderWorkerSet/{codelab.NAMESPACE}/{DECODE}"

    async def order() -> tuple[str, ...]:
        _, quota = await gate.training(policies()[1])
        assert quota is not None
        assert quota.slices is not None
        return tuple(quota.slices.removal_order.get(key, ()))

    ns = codelab.NAMESPACE
    assert await order() == tuple(f"{ns}/{tas.group_workload(DECODE, i)}" for i in (2, 1, 0))
    # Scaled up to 4 before Kueue made the new group's Workload: the first group removed holds no place.
    kube.modify(LWS, "LeaderWorkerSet", DECODE, ns, lambda o: o["spec"].update(replicas=4))
    assert (await order())[:2] == (f"{ns}/{DECODE}#3", f"{ns}/{tas.group_workload(DECODE, 2)}")
    kube.modify(LWS, "LeaderWorkerSet", DECODE, ns, lambda o: o["spec"].update(replicas=3))
    # A Workload of the LWS whose index cannot be read (no annotation, no pods naming it): the order stops at
    # the first index it could be, never guessing.
    for pod in kube.list("v1", "Pod", ns):
        if pod["metadata"]["labels"].get("leaderworkerset.sigs.k8s.io/group-index") == "1":
            kube.remove("v1", "Pod", pod["metadata"]["name"], ns)
    kube.modify(V1BETA2, "Workload", tas.group_workload(DECODE, 1), ns,
                lambda o: o["metadata"].pop("annotations", None))
    assert await order() == (f"{ns}/{tas.group_workload(DECODE, 2)}",)


def test_the_removal_order_names_every_index_from_the_highest() -> None:
    assert inventory.removal_order("ns", "d", 3, {0: "ns/a", 1: "ns/b", 2: "ns/c"}, 0) == ("ns/c", "ns/b", "ns/a")
    assert inventory.removal_order("ns", "d", 3, {0: "ns/a", 1: "ns/b"}, 0) == ("ns/d#2", "ns/b", "ns/a")
    assert inventory.removal_order("ns", "d", 3, {0: "ns/a", 2: "ns/c"}, 1) == ("ns/c",)
    assert inventory.removal_order("ns", "d", 2, {0: "ns/a", 1: "ns/b", 2: "ns/c"}, 0) == ("ns/b", "ns/a")
