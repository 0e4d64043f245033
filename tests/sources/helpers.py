"""Small builders shared by the sources tests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autoscaler.core.model import TargetKind, TargetRef
from autoscaler.core.sourcespec import SourceSpec
from autoscaler.core.spec import SignalSpec
from autoscaler.sources.base import PodRef, SignalRequest


def target(ref: str) -> TargetRef:
    """``Kind/namespace/name`` → TargetRef."""
    kind, namespace, name = ref.split("/")
    return TargetRef(TargetKind(kind), name, namespace)


def request(
    ref: str,
    source: SourceSpec,
    signal: Mapping[str, Any],
    *,
    name: str = "s",
    pods: tuple[PodRef, ...] = (),
    pod_urls: tuple[str, ...] = (),
    nodes: tuple[str, ...] = (),
) -> SignalRequest:
    return SignalRequest(
        target=target(ref),
        signal=SignalSpec.model_validate({"name": name, **signal}),
        source=source,
        pods=pods,
        pod_urls=pod_urls,
        nodes=nodes,
    )
