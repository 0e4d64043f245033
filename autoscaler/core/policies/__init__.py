"""The built-in policy types, one module each, and the explicit registry that maps ``type`` to them.

To add a type: a module with its config model (``type: Literal[...]``) and an algorithm implementing
``base.PolicyAlgorithm``, a line in ``REGISTRY``, and the config in ``spec.PolicyConfig``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autoscaler.core.policies import disaggregated, hpa, kpa, queue, slo
from autoscaler.core.policies.base import PolicyAlgorithm

#: type name -> factory building the algorithm from its config model. Sorted by name.
REGISTRY: dict[str, Callable[[Any], PolicyAlgorithm]] = {
    "disaggregated": disaggregated.build,
    "hpa": hpa.build,
    "kpa": kpa.build,
    "queue": queue.build,
    "slo": slo.build,
}


def build(config: Any) -> PolicyAlgorithm:
    return REGISTRY[config.type](config)
