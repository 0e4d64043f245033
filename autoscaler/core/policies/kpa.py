"""Policy type ``kpa``: Knative KPA's stable and panic windows: fast up on bursts, no scale-down in panic."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from autoscaler.core.policies.base import PolicyAlgorithm
from autoscaler.core.specbase import SpecModel


class KpaPolicyConfig(SpecModel):
    type: Literal["kpa"]
    signal: str = Field(description="A total load signal (e.g. concurrent requests).")
    target_per_replica: float = Field(gt=0)
    stable_window_seconds: float = Field(default=60.0, gt=0)
    panic_window_seconds: float = Field(default=6.0, gt=0)
    panic_threshold: float = Field(default=2.0, gt=1.0, description="Panic when panic-window demand ≥ this × current.")

    def signal_refs(self) -> list[str]:
        return [self.signal]


def build(config: KpaPolicyConfig) -> PolicyAlgorithm:
    raise NotImplementedError("kpa algorithm: being written")
