"""Where a signal is read from: the ``source:`` block of a signal or of a policy's spec.

Pure configuration; the I/O lives in ``autoscaler.sources``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from autoscaler.core.specbase import SpecModel


class PrometheusSourceSpec(SpecModel):
    """Any Prometheus HTTP API, e.g. the GMP frontend ``http://frontend.gmp-system.svc:9090``."""

    type: Literal["prometheus"]
    url: str = Field(description="Base URL of the Prometheus HTTP API.")
    cluster: str | None = Field(
        default=None, description="Add cluster=\"...\" to preset queries (a Prometheus shared by clusters)."
    )
    timeout_seconds: float = Field(default=5.0, gt=0, le=300)


class GmpSourceSpec(SpecModel):
    """Google Managed Prometheus queried directly with application-default credentials."""

    type: Literal["gmp"]
    project: str
    location: str = "global"
    cluster: str | None = Field(
        default=None, description="GKE cluster name: preset queries add cluster=\"...\" (GMP is project-wide)."
    )
    timeout_seconds: float = Field(default=5.0, gt=0, le=300)


class CloudMonitoringSourceSpec(SpecModel):
    """Cloud Monitoring time series (e.g. kubernetes.io/node/accelerator/memory_used)."""

    type: Literal["cloud-monitoring"]
    project: str
    cluster: str | None = Field(default=None, description="Restrict to this GKE cluster name.")
    timeout_seconds: float = Field(default=10.0, gt=0, le=300)


class PodsSourceSpec(SpecModel):
    """Scrape ``/metrics`` of the target's pods directly, or of static endpoints outside a cluster."""

    type: Literal["pods"]
    endpoints: list[str] | None = Field(default=None, description="Static URLs instead of the target's pods.")
    port: int | None = Field(default=None, ge=1, le=65535, description="Metrics port on the pods.")
    path: str = "/metrics"
    scheme: Literal["http", "https"] = "http"
    timeout_seconds: float = Field(default=2.0, gt=0, le=300)


SourceSpec = Annotated[
    PrometheusSourceSpec | GmpSourceSpec | CloudMonitoringSourceSpec | PodsSourceSpec,
    Field(discriminator="type"),
]
