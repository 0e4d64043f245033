"""HPA ``behavior``: stabilization windows, scale rate policies and min/max clamping.

(Interface placeholder: the full HPA-exact implementation replaces the body of ``normalize``.)
"""

from __future__ import annotations

from dataclasses import dataclass

from autoscaler.core.model import PolicyState, Reason
from autoscaler.core.policies.hpa import BehaviorSpec


@dataclass(frozen=True, slots=True)
class Normalized:
    desired: int
    reason: Reason | None  # None: the recommendation passed unchanged
    message: str
    state: PolicyState


def normalize(
    *,
    behavior: BehaviorSpec | None,
    min_replicas: int,
    max_replicas: int,
    current: int,
    recommended: int,
    state: PolicyState,
    now: float,
) -> Normalized:
    """Apply stabilization, rate limits and bounds to a raw recommendation, as HPA does."""
    desired = max(min_replicas, min(max_replicas, recommended))
    reason = None
    if desired > recommended:
        reason = Reason.LIMITED_BY_MIN
    elif desired < recommended:
        reason = Reason.LIMITED_BY_MAX
    return Normalized(desired, reason, "", state)
