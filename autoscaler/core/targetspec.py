"""The policy language's reference to a serving workload (``spec.target``, and each pool of a policy with
several targets). Its own module so that policy types naming targets (``disaggregated``) and the policy
document (``core.spec``, which imports every policy type) share one model without an import cycle."""

from __future__ import annotations

from pydantic import Field

from autoscaler.core.model import TargetKind, TargetRef
from autoscaler.core.specbase import SpecModel

DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"


class TargetSpec(SpecModel):
    """The serving workload to scale. For a LeaderWorkerSet one replica is one group (slice)."""

    kind: TargetKind = Field(description="Deployment, StatefulSet or LeaderWorkerSet.")
    name: str = Field(pattern=DNS_LABEL_PATTERN)
    namespace: str = Field(default="default", pattern=DNS_LABEL_PATTERN)

    def ref(self) -> TargetRef:
        return TargetRef(kind=self.kind, name=self.name, namespace=self.namespace)
