"""Where a signal is read from: the ``source:`` block of a signal or of a policy's spec.

Pure configuration; the I/O lives in ``autoscaler.sources``.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, field_validator

from autoscaler.core.specbase import SpecModel

#: An HTTP(S) URL with a host: what aiohttp can send a request to. ``frontend:9090`` (no scheme) and ``ftp://x``
#: passed validation and then failed every read ("request to frontend:9090 failed").
_HTTP_URL = re.compile(r"https?://[^/\s?#]+(?:[/?#]\S*)?")


def _http_url(value: str, what: str) -> str:
    if _HTTP_URL.fullmatch(value) is None:
        raise ValueError(f"{what} must be an http:// or https:// URL with a host, e.g. "
                         f"http://prometheus.monitoring.svc:9090 (got {value!r})")
    return value


class PrometheusSourceSpec(SpecModel):
    """Any Prometheus HTTP API, e.g. the GMP frontend ``http://frontend.gmp-system.svc:9090``."""

    type: Literal["prometheus"]
    url: str = Field(description="Base URL of the Prometheus HTTP API.")
    cluster: str | None = Field(
        default=None, description="Add cluster=\"...\" to preset queries (a Prometheus shared by clusters)."
    )
    timeout_seconds: float = Field(default=5.0, gt=0, le=300)

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return _http_url(value, "url")


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

    @field_validator("endpoints")
    @classmethod
    def _endpoints(cls, value: list[str] | None) -> list[str] | None:
        for url in value or ():
            _http_url(url, "each endpoint")
        return value


SourceSpec = Annotated[
    PrometheusSourceSpec | GmpSourceSpec | CloudMonitoringSourceSpec | PodsSourceSpec,
    Field(discriminator="type"),
]
