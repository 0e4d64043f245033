"""Read-only cluster lookups for ``autoscaler observe``: a target's replica count and serving pods.

``observe`` lives with the sources, a layer below the controller; the command line passes ``cluster_lookups``
in, so ``observe`` run against a cluster sees the replicas and pods exactly as ``autoscaler run`` reads them
(the same ``ScaleTarget``), and writes nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import aiohttp

from autoscaler.controller import kube
from autoscaler.controller.targets import ScaleTarget
from autoscaler.controller.workloads import KueueGate
from autoscaler.core.engine import compile_policy
from autoscaler.core.model import ReplicaStatus, TargetRef
from autoscaler.core.spec import ScalingPolicy
from autoscaler.sources.base import PodRef
from autoscaler.sources.command import (
    ClusterUnavailable,
    ClusterUnreachable,
    LookupFailed,
    Lookups,
)

#: How long one target's read may take before observe calls the count unknown.
LOOKUP_TIMEOUT_S = 10.0

#: Owner name the read-only targets carry (they never write, so it appears nowhere).
_OBSERVER = "autoscaler-observe"


@asynccontextmanager
async def cluster_lookups(kubeconfig: str | None) -> AsyncIterator[Lookups]:
    """Lookups against the cluster of ``kubeconfig`` (else ``$KUBECONFIG``, in-cluster, ``~/.kube/config``)."""
    try:
        api = await kube.connect(kubeconfig)
    except kube.KubeConfigError as exc:
        raise ClusterUnavailable(str(exc)) from None
    targets: dict[str, ScaleTarget] = {}
    # observe asks for the pods first, then the replicas: one read of the target answers both. A failed read
    # is kept as its one-line reason.
    seen: dict[str, tuple[ReplicaStatus, tuple[PodRef, ...]] | LookupFailed] = {}

    def target(ref: TargetRef) -> ScaleTarget:
        if ref.key not in targets:
            targets[ref.key] = ScaleTarget(api, ref, owner=_OBSERVER)
        return targets[ref.key]

    async def read(ref: TargetRef) -> tuple[ReplicaStatus, tuple[PodRef, ...]] | LookupFailed:
        # An unreachable or black-holed API server is an unknown count, said in one line, within a deadline:
        # observe shows the signals anyway.
        try:
            async with asyncio.timeout(LOOKUP_TIMEOUT_S):
                return await target(ref).observe()
        except kube.KubeError as exc:
            return LookupFailed(f"cannot read {ref.key}: {exc}")
        except TimeoutError:
            return ClusterUnreachable(
                f"cannot read {ref.key}: the API server did not answer within {LOOKUP_TIMEOUT_S:g} s"
            )
        except (OSError, aiohttp.ClientError) as exc:
            why = " ".join(str(exc).split()) or type(exc).__name__
            return ClusterUnreachable(f"cannot read {ref.key}: cannot reach the API server: {why}")

    async def pods(ref: TargetRef) -> tuple[PodRef, ...]:
        seen[ref.key] = got = await read(ref)
        return () if isinstance(got, LookupFailed) else got[1]

    async def replicas(ref: TargetRef) -> ReplicaStatus:
        got = seen.pop(ref.key, None) or await read(ref)
        if isinstance(got, LookupFailed):
            raise got
        return got[0]

    gate = KueueGate(api)

    async def held(policies: Sequence[ScalingPolicy]) -> list[dict[str, Any]]:
        """The Workloads the controller holds down, as ``autoscaler run`` finds them (``KueueGate.held``)."""
        found = await gate.held([compile_policy(p) for p in policies])
        return [
            {"workload": h.workload.key, "uid": h.workload.uid, "chips": h.workload.chips, "resource": h.resource,
             "cluster_queue": h.cluster_queue, "admitted": h.workload.admitted, "held_s": h.held_s,
             "policy": h.policy, "target": h.target, "target_uid": h.target_uid, "covered": h.covered,
             "reason": h.reason}
            for h in found
        ]

    try:
        yield Lookups(replicas, pods, held)
    finally:
        await api.close()
