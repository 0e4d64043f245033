"""The one interface every metric source implements.

A source answers, for a batch of (target, signal) requests, one ``core.model.SignalReading`` each, with
the sample's own timestamp (unix seconds) or an error. It never invents a zero: no data is ``value=None``
with an error or an empty-result reason. Sources batch: one query per signal per tick for all targets.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from autoscaler.core.model import SignalReading, TargetRef
from autoscaler.core.sourcespec import SourceSpec
from autoscaler.core.spec import SignalSpec


@dataclass(frozen=True)
class SignalRequest:
    """One signal wanted for one target, with the source it resolves to."""

    target: TargetRef
    signal: SignalSpec
    source: SourceSpec
    #: For the pods source in a cluster: the URLs of the target's pods (leaders of LWS groups, plus workers
    #: where the signal needs them), resolved by the caller from the Kubernetes API.
    pod_urls: tuple[str, ...] = field(default=())


#: (target key, signal name) -> reading
Readings = dict[tuple[str, str], SignalReading]


class MetricSource(Protocol):
    """A metric backend. Implementations: prometheus (and GMP), cloud_monitoring, pods."""

    async def read(self, requests: Sequence[SignalRequest], *, deadline_s: float) -> Readings:
        """Read every request within ``deadline_s`` seconds; unanswered ones come back with an error."""
        ...

    async def aclose(self) -> None: ...
