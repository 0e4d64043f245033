"""Sharing the accelerator quota between serving and training (Kueue Workloads).

(Interface placeholder: the controller work fills in the rule: deactivate the lowest-priority matching
Workloads until new serving replicas fit; reactivate them once serving no longer needs the room.)
"""

from __future__ import annotations

from dataclasses import dataclass

from autoscaler.core.model import Observation, TrainingDecision
from autoscaler.core.spec import Spec


@dataclass(frozen=True, slots=True)
class Plan:
    #: The replica count serving may have now (less than desired while training still holds the chips).
    desired: int
    training: tuple[TrainingDecision, ...]
    message: str = ""


def plan(*, spec: Spec, observation: Observation, desired: int) -> Plan:
    """Decide which training to deactivate or reactivate for ``desired`` serving replicas."""
    return Plan(desired=desired, training=())
