"""The TPU slice inventory of a ClusterQueue's flavor, read from the cluster (or declared where it cannot say).

The core's ``SliceCapacity`` (a ``core.topology.Inventory`` with what occupies it) is built here, for a policy
whose ClusterQueue has a flavor with topology-aware admission (the same for every policy on it):

1. (The target's slice shape is read with its replicas: ``kinds.template_slice``, ``ReplicaStatus.slice``; a
   target that names none is sized by the chip quota, inventory or not.)
2. **The flavor**: the ClusterQueue's flavors that cover the capacity resource, first to last; the first
   ResourceFlavor with a ``topologyName`` (or declared in the controller config, ``sliceFlavors``) is used.
3. **The blocks**: the Nodes the flavor's ``nodeLabels`` select. With a Kueue Topology whose levels are GKE's
   TPU partitions (``cloud.google.com/gke-tpu-partition-<AxBxC>-id``, as the codelab's ``slice-topology``), the
   block is the partition whose shape is the node's ``cloud.google.com/gke-tpu-topology`` (the node pool's
   4x4x4), and each node's place in its block follows from its partition ids: every level splits its parent
   into equal parts, ordered by id (GKE publishes no coordinates: the order is ``estimate``, only the nesting
   is read). A slice is then placed only as one of those partitions (``Inventory.levels``), as Kueue does.
   Declared (``sliceFlavors.<flavor>``: ``blockShape``, ``hostShape``, ``blockLabel``): the nodes of each
   ``blockLabel`` value, by name, tile the block row-major (``estimate``), any aligned orientation.
4. **What is where**: every admitted Workload whose podSet assignments use the flavor, at the nodes its
   ``status.admission.podSetAssignments[].topologyAssignment`` names (v1beta1 ``domains``, v1beta2 ``slices``;
   a domain is the nodes whose labels carry its values at the assignment's levels). Workloads are listed
   cluster-wide when allowed, else in the policy's namespaces (the source says which): an admitted Workload
   without an assignment is counted in the source text, not placed.
5. **Which group a scale-down removes** (``SliceCapacity.removal_order``, per LeaderWorkerSet target): the LWS
   controller removes the groups of the highest indices first (its leader StatefulSet scales down from the
   highest ordinal), so the order is ``spec.replicas - 1`` down to 0, each index named by its group's Workload:
   Kueue's ``kueue.x-k8s.io/component-workload-index`` annotation on the Workload (Kueue's LWS integration sets
   it with the LWS as controller owner), else the group's pods (``leaderworkerset.sigs.k8s.io/group-index``
   with the Workload name Kueue put in ``kueue.x-k8s.io/prebuilt-workload-name`` or ``…/pod-group-name``). An
   index without a Workload holds no place (named ``<namespace>/<lws>#<index>``, it frees nothing); where a
   Workload of the LWS cannot be given its index, the order stops there (what follows is not known).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from kubernetes_asyncio import client

from autoscaler.controller import kinds
from autoscaler.controller.kube import Forbidden, NotFound, call, get_json, parse_quantity
from autoscaler.core.engine import CompiledPolicy
from autoscaler.core.model import SliceCapacity, TargetKind
from autoscaler.core.topology import Inventory, Occupant, Region, Shape

JsonObj = dict[str, Any]

KUEUE_GROUP = "kueue.x-k8s.io"
SLICE_TOPOLOGY = kinds.SLICE_TOPOLOGY_ANNOTATION
NODE_TOPOLOGY = "cloud.google.com/gke-tpu-topology"
PARTITION = re.compile(r"^cloud\.google\.com/gke-tpu-partition-(\d+x\d+x\d+)-id$")
LWS_API = "/apis/leaderworkerset.x-k8s.io/v1"
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
#: Kueue's LWS integration: the group index on each group's Workload, and the Workload's name on its pods.
WORKLOAD_INDEX = "kueue.x-k8s.io/component-workload-index"
POD_WORKLOAD = ("kueue.x-k8s.io/prebuilt-workload-name", "kueue.x-k8s.io/pod-group-name")


@dataclass(frozen=True, slots=True)
class DeclaredBlocks:
    """``sliceFlavors.<flavor>`` of the controller config: what the nodes cannot say about their blocks."""

    block_shape: Shape
    host_shape: Shape
    block_label: str


def workload_slices(wl: JsonObj, resource: str) -> tuple[Shape, ...]:
    """The slices a Workload asks for: per podSet, ``count`` pods in slices of the annotated topology
    (pods per slice = the slice's chips ÷ the chips one pod requests)."""
    out: list[Shape] = []
    for pod_set in (wl.get("spec") or {}).get("podSets") or []:
        template = pod_set.get("template") or {}
        text = ((template.get("metadata") or {}).get("annotations") or {}).get(SLICE_TOPOLOGY)
        if not text:
            continue
        try:
            shape = Shape.parse(str(text))
        except ValueError:
            continue
        per_pod = 0.0
        for ctr in (template.get("spec") or {}).get("containers") or []:
            res = ctr.get("resources") or {}
            qty = (res.get("requests") or {}).get(resource, (res.get("limits") or {}).get(resource))
            if qty is not None:
                per_pod += parse_quantity(qty)
        if per_pod <= 0 or shape.chips % per_pod:
            continue
        pods_per_slice = int(shape.chips // per_pod)
        out.extend([shape] * (int(pod_set.get("count", 1)) // pods_per_slice))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class AssignedDomains:
    """A ``topologyAssignment``: its topology levels, and one value per level for each domain assigned."""

    levels: list[str]
    domains: list[list[str]]


def assigned_domains(assignment: JsonObj) -> AssignedDomains:
    """A ``topologyAssignment``'s levels and domains, in either API version's form."""
    levels = [str(x) for x in assignment.get("levels") or []]
    domains = [[str(v) for v in d.get("values") or []] for d in assignment.get("domains") or []]
    for piece in assignment.get("slices") or []:  # v1beta2: values compressed per level
        count = int(piece.get("domainCount") or 0)
        per_level: list[list[str]] = []
        for values in piece.get("valuesPerLevel") or []:
            universal = values.get("universal", values.get("universalValue"))
            if universal is not None:
                per_level.append([str(universal)] * count)
            else:
                # ``individual: {prefix, roots, suffix}``, or the same fields flat on the level (the form one
                # v1beta2 revision declared, with ``universalValue``: kueue workload_types.go at 02237e7).
                ind = values.get("individual") or values
                prefix = ind.get("prefix") or ind.get("commonPrefix") or ""
                suffix = ind.get("suffix") or ind.get("commonSuffix") or ""
                per_level.append([f"{prefix}{root}{suffix}" for root in ind.get("roots") or []])
        domains.extend([lv[i] for lv in per_level] for i in range(count))
    return AssignedDomains(levels, domains)


def _unravel(index: int, counts: tuple[int, int, int]) -> tuple[int, int, int]:
    """Row-major: the last axis varies fastest."""
    z = index % counts[2]
    y = (index // counts[2]) % counts[1]
    x = index // (counts[1] * counts[2])
    return x, y, z


def _split(parent: Shape, child: Shape) -> tuple[int, int, int] | None:
    if any(p % c for p, c in zip(parent.dims, child.dims, strict=True)):
        return None
    return parent.x // child.x, parent.y // child.y, parent.z // child.z


@dataclass(frozen=True, slots=True)
class Blocks:
    """Nodes placed in blocks: each node's region, and the partition shapes when the cluster fixes them."""

    block_shape: Shape
    regions: dict[str, Region]  # node name -> its cells
    levels: tuple[Shape, ...] = ()


def blocks_from_partitions(nodes: Sequence[JsonObj], levels: Sequence[str]) -> Blocks | None:
    """Blocks from GKE's TPU partition labels (see the module docstring, step 3), or None when the Topology's
    levels name no partitions or the nodes do not nest into them."""
    parts = [(lv, Shape.parse(m.group(1))) for lv in levels if (m := PARTITION.match(lv))]
    if not parts or not nodes:
        return None
    pool = {str(((n.get("metadata") or {}).get("labels") or {}).get(NODE_TOPOLOGY) or "") for n in nodes}
    start = 0
    for i, (_, shape) in enumerate(parts):
        if len(pool) == 1 and str(shape) == next(iter(pool)).lower().strip():
            start = i
            break
    block_label, block_shape = parts[start]
    below = parts[start + 1:]
    regions: dict[str, Region] = {}
    siblings: dict[tuple[str, str], list[str]] = {}
    labelled = [(str((n.get("metadata") or {}).get("name")), (n.get("metadata") or {}).get("labels") or {})
                for n in nodes]
    for _, labels in labelled:
        parent = str(labels.get(block_label, ""))
        for label, _ in below:
            value = str(labels.get(label, ""))
            siblings.setdefault((label, parent), [])
            if value not in siblings[(label, parent)]:
                siblings[(label, parent)].append(value)
            parent = value
    for name, labels in labelled:
        if not labels.get(block_label) or any(not labels.get(label) for label, _ in below):
            return None  # a node outside the partition tree: the nesting cannot be read
        origin = [0, 0, 0]
        parent_value, parent_shape = str(labels[block_label]), block_shape
        for label, shape in below:
            counts = _split(parent_shape, shape)
            if counts is None:
                return None
            value = str(labels[label])
            index = sorted(siblings[(label, parent_value)]).index(value)
            if index >= counts[0] * counts[1] * counts[2]:
                return None  # more parts than the level's shape allows
            offset = _unravel(index, counts)
            origin = [o + i * d for o, i, d in zip(origin, offset, shape.dims, strict=True)]
            parent_value, parent_shape = value, shape
        host = below[-1][1] if below else block_shape
        regions[name] = Region(str(labels[block_label]), (origin[0], origin[1], origin[2]), host)
    return Blocks(block_shape, regions, tuple(shape for _, shape in parts))


def blocks_declared(nodes: Sequence[JsonObj], declared: DeclaredBlocks) -> Blocks | None:
    """Blocks as declared: the nodes of each ``blockLabel`` value, by name, tile the block row-major."""
    counts = _split(declared.block_shape, declared.host_shape)
    if counts is None:
        return None
    by_block: dict[str, list[str]] = {}
    for n in nodes:
        meta = n.get("metadata") or {}
        block = (meta.get("labels") or {}).get(declared.block_label)
        if block:
            by_block.setdefault(str(block), []).append(str(meta.get("name")))
    regions: dict[str, Region] = {}
    for block, names in by_block.items():
        for index, name in enumerate(sorted(names)[: counts[0] * counts[1] * counts[2]]):
            offset = _unravel(index, counts)
            origin = tuple(i * d for i, d in zip(offset, declared.host_shape.dims, strict=True))
            regions[name] = Region(block, (origin[0], origin[1], origin[2]), declared.host_shape)
    return Blocks(declared.block_shape, regions) if regions else None


class Occupancy(NamedTuple):
    """``occupants``' answer: the Workloads placed on the flavor, and how many on it had no assignment to read."""

    placed: list[Occupant]
    unplaced: int


class _Flavor(NamedTuple):
    """A flavor carved into slices: its nodes, their blocks, and where the blocks were read from."""

    nodes: list[JsonObj]
    blocks: Blocks
    source: str


class _Listed(NamedTuple):
    """The Workloads listed, and where (all namespaces, or the ones allowed)."""

    items: list[JsonObj]
    where: str


def occupants(
    workloads: Iterable[JsonObj], flavor: str, nodes: Sequence[JsonObj], blocks: Blocks,
    owners: dict[str, str] | None = None,
) -> Occupancy:
    """Every Workload holding a place on the flavor (quota reserved: admitted, or while an AdmissionCheck is
    pending) at the nodes its topology assignment names; and how many on the flavor had no assignment to read
    (not placed). Each occupant's controller owner goes into ``owners``: key → ``Kind/namespace/name``."""
    labelled = [(str((n.get("metadata") or {}).get("name")), (n.get("metadata") or {}).get("labels") or {})
                for n in nodes]
    out: list[Occupant] = []
    unplaced = 0
    for wl in workloads:
        admission = (wl.get("status") or {}).get("admission") or {}
        assignments = [a for a in admission.get("podSetAssignments") or []
                       if flavor in ((a.get("flavors") or {}).values())]
        if not assignments:
            continue
        names: list[str] = []
        for a in assignments:
            ta = a.get("topologyAssignment")
            if not ta:
                continue
            assigned = assigned_domains(ta)
            for values in assigned.domains:
                wanted = dict(zip(assigned.levels, values, strict=False))
                names.extend(n for n, labels in labelled
                             if all(str(labels.get(k)) == v for k, v in wanted.items()) and n not in names)
        regions = tuple(blocks.regions[n] for n in names if n in blocks.regions)
        if not regions:
            unplaced += 1
            continue
        meta = wl.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        out.append(Occupant(key=key, regions=regions))
        owner = next((r for r in meta.get("ownerReferences") or [] if r.get("controller")), None)
        if owners is not None and owner is not None:
            owners[key] = f"{owner.get('kind')}/{meta.get('namespace')}/{owner.get('name')}"
    return Occupancy(out, unplaced)


def removal_order(
    namespace: str, lws: str, replicas: int, indexed: Mapping[int, str], unindexed: int
) -> tuple[str, ...]:
    """The groups of a LeaderWorkerSet in the order a scale-down removes them (module docstring, step 5).

    ``indexed``: group index → its Workload's key (``namespace/name``); ``unindexed``: how many Workloads of
    the LWS could not be given an index. An index with no Workload while none is unindexed holds no place;
    with some unindexed, the order ends before it (which Workload it is, is not known)."""
    order: list[str] = []
    for index in range(replicas - 1, -1, -1):
        key = indexed.get(index)
        if key is None:
            if unindexed:
                break
            key = f"{namespace}/{lws}#{index}"
        order.append(key)
    return tuple(order)


def _index(text: object) -> int | None:
    try:
        index = int(str(text))
    except ValueError:
        return None
    return index if index >= 0 else None


class SliceReader:
    """Reads a policy's ``SliceCapacity`` (module docstring); None when its target or flavor has no slices."""

    def __init__(self, api: client.ApiClient, *, declared: Mapping[str, DeclaredBlocks] | None = None) -> None:
        self.api = api
        self.declared = dict(declared or {})
        self._custom: Any = client.CustomObjectsApi(api)
        #: Workloads may be listed cluster-wide (set False once refused: per namespace from then on).
        self.list_all = True

    async def read(self, policy: CompiledPolicy, version: str) -> SliceCapacity | None:
        spec = policy.policy.spec
        capacity = spec.capacity
        if capacity is None:
            return None
        ref = spec.target.ref()
        cq: JsonObj = await call(self._custom.get_cluster_custom_object(
            KUEUE_GROUP, version, "clusterqueues", capacity.cluster_queue))
        for flavor in _flavors(cq, capacity.resource):
            found = await self._flavor(flavor, version)
            if found is None:
                continue
            blocks = found.blocks
            targets = [t.ref() for t in spec.targets()]
            namespaces = sorted({ref.namespace, *(t.namespace for t in targets),
                                 *(p.namespace for p in spec.preemptible)})
            listed = await self._workloads(version, namespaces)
            owners: dict[str, str] = {}
            occupancy = occupants(listed.items, flavor, found.nodes, blocks, owners)
            placed, unplaced = occupancy.placed, occupancy.unplaced
            names = sorted({r.block for r in blocks.regions.values()})
            inventory = Inventory(blocks.block_shape, tuple(names), tuple(placed), blocks.levels)
            text = f"{found.source}; Workloads read {listed.where}"
            if unplaced:
                text += f"; {unplaced} admitted Workload(s) on it without a topology assignment not placed"
            order: dict[str, tuple[str, ...]] = {}
            for target in targets:
                if target.kind is TargetKind.LEADER_WORKER_SET:
                    groups = await self._removal_order(target.namespace, target.name, listed.items)
                    if groups is not None:
                        order[target.key] = groups
            return SliceCapacity(flavor, inventory, text, owners, order)
        return None

    async def _removal_order(self, namespace: str, name: str, workloads: Sequence[JsonObj]) -> tuple[str, ...] | None:
        """A LeaderWorkerSet's groups in the order a scale-down removes them (module docstring, step 5); None
        when the LWS cannot be read."""
        try:
            lws = await get_json(self.api, f"{LWS_API}/namespaces/{namespace}/leaderworkersets/{name}")
        except (NotFound, Forbidden):
            return None
        meta = lws.get("metadata") or {}
        replicas = (lws.get("spec") or {}).get("replicas")
        replicas = 1 if replicas is None else int(replicas)  # the LWS API's default
        uid = meta.get("uid")
        mine: list[JsonObj] = []
        for wl in workloads:
            wl_meta = wl.get("metadata") or {}
            owner = next((r for r in wl_meta.get("ownerReferences") or [] if r.get("controller")), None)
            if (owner is not None and owner.get("kind") == "LeaderWorkerSet" and owner.get("name") == name
                    and wl_meta.get("namespace") == namespace and (not uid or owner.get("uid") in (None, uid))):
                mine.append(wl)
        indexed: dict[int, str] = {}
        without: list[JsonObj] = []
        for wl in mine:
            index = _index(((wl.get("metadata") or {}).get("annotations") or {}).get(WORKLOAD_INDEX))
            if index is None:
                without.append(wl)
            else:
                indexed[index] = f"{namespace}/{wl['metadata']['name']}"
        if without:
            # Older Kueue: no index on the Workload; the group's pods carry both the index and the Workload name.
            pods = await get_json(self.api, f"/api/v1/namespaces/{namespace}/pods",
                                  query={"labelSelector": f"{LWS_NAME}={name}"})
            by_name: dict[str, int] = {}
            for pod in pods.get("items") or []:
                labels = (pod.get("metadata") or {}).get("labels") or {}
                index = _index(labels.get(LWS_GROUP_INDEX))
                wl_name = next((labels[k] for k in POD_WORKLOAD if labels.get(k)), None)
                if index is not None and wl_name:
                    by_name[str(wl_name)] = index
            left = 0
            for wl in without:
                index = by_name.get(str(wl["metadata"]["name"]))
                if index is None:
                    left += 1
                else:
                    indexed[index] = f"{namespace}/{wl['metadata']['name']}"
            return removal_order(namespace, name, replicas, indexed, left)
        return removal_order(namespace, name, replicas, indexed, 0)

    async def _flavor(self, flavor: str, version: str) -> _Flavor | None:
        try:
            rf: JsonObj = await call(self._custom.get_cluster_custom_object(
                KUEUE_GROUP, version, "resourceflavors", flavor))
        except (NotFound, Forbidden):
            # No flavor object (or not allowed to read flavors: the shipped RBAC allows it): nothing says the
            # flavor is carved into slices, so the quota rule applies, as before topology-aware admission.
            return None
        rf_spec = rf.get("spec") or {}
        selector = ",".join(f"{k}={v}" for k, v in sorted((rf_spec.get("nodeLabels") or {}).items()))
        declared = self.declared.get(flavor)
        topology_name = rf_spec.get("topologyName")
        if declared is None and not topology_name:
            return None
        listed = await get_json(self.api, "/api/v1/nodes", query={"labelSelector": selector} if selector else None)
        nodes: list[JsonObj] = listed.get("items") or []
        if declared is not None:
            blocks = blocks_declared(nodes, declared)
            source = (f"{len(nodes)} nodes, blocks declared in the controller config (sliceFlavors.{flavor}: "
                      f"{declared.block_shape} by {declared.block_label})")
        else:
            topo: JsonObj = await call(self._custom.get_cluster_custom_object(
                KUEUE_GROUP, version, "topologies", str(topology_name)))
            levels = [str(lv.get("nodeLabel")) for lv in (topo.get("spec") or {}).get("levels") or []]
            blocks = blocks_from_partitions(nodes, levels)
            source = f"{len(nodes)} nodes placed by the TPU partition levels of Topology {topology_name}"
        if blocks is None:
            return None
        return _Flavor(nodes, blocks, source)

    async def _workloads(self, version: str, namespaces: Sequence[str]) -> _Listed:
        if self.list_all:
            try:
                listed = await call(self._custom.list_cluster_custom_object(KUEUE_GROUP, version, "workloads"))
                return _Listed(list(listed.get("items") or []), "in all namespaces")
            except (Forbidden, NotFound):
                self.list_all = False
        items: list[JsonObj] = []
        for ns in namespaces:
            try:
                listed = await call(self._custom.list_namespaced_custom_object(KUEUE_GROUP, version, ns, "workloads"))
            except (Forbidden, NotFound):
                continue
            items.extend(listed.get("items") or [])
        return _Listed(items, f"in namespace(s) {', '.join(namespaces)} only (not allowed to list them cluster-wide)")


def _flavors(cq: JsonObj, resource: str) -> list[str]:
    names: list[str] = []
    for group in (cq.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            if any(r.get("name") == resource for r in flavor.get("resources") or []):
                names.append(str(flavor.get("name")))
    return list(dict.fromkeys(names))

