"""Policy type ``queue``: replicas from total outstanding work over per-replica capacity, for LLM servers.

Counts replicas that are starting or loading the model as capacity that is on its way, so it does not
scale again for load they will absorb (the cascading over-scale HPA users hit).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from autoscaler.core.policies.hpa import BehaviorSpec
from autoscaler.core.policies.base import PolicyAlgorithm
from autoscaler.core.specbase import SpecModel


class QueuePolicyConfig(SpecModel):
    type: Literal["queue"]
    work: list[str] = Field(
        min_length=1, description="Signals summed into total outstanding work (e.g. waiting + running)."
    )
    capacity_per_replica: float = Field(gt=0, description="Work one replica serves at its target.")
    behavior: BehaviorSpec | None = None

    def signal_refs(self) -> list[str]:
        return list(self.work)


def build(config: QueuePolicyConfig) -> PolicyAlgorithm:
    raise NotImplementedError("queue algorithm: being written")
