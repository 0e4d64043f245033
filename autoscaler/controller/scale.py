"""One client for the ``/scale`` subresource of every kind of target (HPA's ``scaleNamespacer`` idea).

A Deployment, a StatefulSet and a custom resource that declares ``subresources.scale`` (a LeaderWorkerSet)
all answer ``GET .../<plural>/<name>/scale`` with an ``autoscaling/v1`` ``Scale``; so one read and one write
serve them all, and the kind only decides the path (``kinds.TargetKindInfo.scale_path``).

The write is a JSON merge patch (``application/merge-patch+json``) carrying the resourceVersion that was read:
- every API server accepts a merge patch on every kind (a strategic merge patch is refused with 415 on custom
  resources, and the client sends a dict as ``json-patch+json`` unless told otherwise, which the server
  rejects: see FACTS.md, client pitfalls);
- the resourceVersion makes it conditional: a concurrent change answers 409 and the caller re-reads;
- ``dry_run=True`` sends ``dryRun=All``: the server validates and admits the write (RBAC, admission webhooks,
  the resourceVersion) and stores nothing, so a plan can be checked before it is committed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio import client

from autoscaler.controller import kinds
from autoscaler.controller.kube import MERGE_PATCH, get_json, request_json
from autoscaler.core.model import TargetRef


@dataclass(frozen=True, slots=True)
class Scale:
    """A target's ``autoscaling/v1`` Scale as the server answered it."""

    #: ``spec.replicas``: the count asked for (groups for a LeaderWorkerSet).
    replicas: int
    #: ``status.replicas``: the count the workload controller last observed.
    observed: int
    #: ``status.selector``: the pods an HPA would read (LeaderWorkerSet: leaders only).
    selector: str
    resource_version: str

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Scale:
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        return cls(
            replicas=int(spec.get("replicas") or 0),
            observed=int(status.get("replicas") or 0),
            selector=str(status.get("selector") or ""),
            resource_version=str((obj.get("metadata") or {}).get("resourceVersion") or ""),
        )


class ScaleClient:
    """Reads and writes the ``/scale`` subresource of any target kind."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api

    async def read(self, ref: TargetRef) -> Scale:
        return Scale.from_json(await get_json(self.api, kinds.of(ref.kind).scale_path(ref)))

    async def write(self, ref: TargetRef, replicas: int, *, read: Scale, dry_run: bool = False) -> Scale:
        """Set ``spec.replicas``, on condition that the Scale is still the one ``read`` (409 otherwise)."""
        if replicas < 0:
            raise ValueError(f"cannot scale {ref.key} to {replicas}")
        body = {"metadata": {"resourceVersion": read.resource_version}, "spec": {"replicas": replicas}}
        answer = await request_json(
            self.api, "PATCH", kinds.of(ref.kind).scale_path(ref), body=body, content_type=MERGE_PATCH,
            query={"dryRun": "All"} if dry_run else None,
        )
        return Scale.from_json(answer)
