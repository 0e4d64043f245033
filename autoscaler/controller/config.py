"""The controller's own configuration file (``autoscaler run --config FILE``), separate from policies.

Policies say *what* to scale and *how*; this file says how the controller process runs: the default
metric source for policies that name none, shadow mode, the namespaces it watches, leader election and
ports. Every field has a default, so running without ``--config`` is valid. Unknown fields are rejected
(``extra="forbid"``) and errors name the field, the line and the column, as ``validate`` words them, e.g.
``controller.yaml:7:25: leaderElection.leaseDurationSeconds: input should be greater than 0 (got 0)``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from autoscaler.core.sourcespec import SourceSpec
from autoscaler.core.specbase import SpecModel
from autoscaler.core.targetspec import DNS_LABEL_PATTERN
from autoscaler.core.topology import Shape
from autoscaler.policyfile import files, loader


class ConfigError(Exception):
    """The config file is unreadable or invalid; the message is one line per problem."""


#: A namespace or a Lease's name as the API server takes it (a namespace is a DNS label: lowercase, at most 63;
#: ``LLM`` or ``a b`` passed here and then failed every list and watch of that namespace, never said why).
Namespace = Annotated[str, Field(pattern=DNS_LABEL_PATTERN, max_length=63)]
ObjectName = Annotated[str, Field(pattern=DNS_LABEL_PATTERN, max_length=253)]


class LeaderElectionConfig(SpecModel):
    """A ``coordination.k8s.io/v1`` Lease; timings follow client-go's defaults (15 s / 10 s / 2 s)."""

    enabled: bool = Field(default=True, description="Off only for a single replica (or --once).")
    lease_name: ObjectName = "accel-autoscaler"
    lease_namespace: Namespace | None = Field(
        default=None, description="Default: the pod's namespace (service account), else 'default'."
    )
    identity: str | None = Field(default=None, description="Default: POD_NAME or the host name.")
    lease_duration_seconds: float = Field(default=15.0, gt=0)
    renew_deadline_seconds: float = Field(default=10.0, gt=0)
    retry_period_seconds: float = Field(default=2.0, gt=0)

    @model_validator(mode="after")
    def _ordered(self) -> LeaderElectionConfig:
        # client-go's rule: a leader must give up before others may take over, and retry more often.
        if not self.lease_duration_seconds > self.renew_deadline_seconds > self.retry_period_seconds:
            raise ValueError(
                "need leaseDurationSeconds > renewDeadlineSeconds > retryPeriodSeconds "
                f"(got {self.lease_duration_seconds:g} / {self.renew_deadline_seconds:g} / "
                f"{self.retry_period_seconds:g})"
            )
        return self


class PortsConfig(SpecModel):
    metrics: int = Field(default=8080, ge=0, le=65535, description="/metrics (0 = pick a free port).")
    health: int = Field(default=8081, ge=0, le=65535, description="/healthz and /readyz.")
    bind_address: str = "0.0.0.0"


class EventsConfig(SpecModel):
    api: Literal["events.k8s.io/v1", "v1"] = Field(
        default="events.k8s.io/v1", description="Which Event API to write (core v1 for old clusters)."
    )
    #: Repeats of the same (object, reason, message) within this window update one Event's series.
    aggregation_window_seconds: float = Field(default=600.0, gt=0)
    reporting_controller: str = "autoscaler.dev/controller"


class SliceFlavorConfig(SpecModel):
    """A ResourceFlavor carved into TPU slices whose nodes do not say where they sit in their block (its Topology
    has no ``cloud.google.com/gke-tpu-partition-*-id`` levels): the blocks declared (docs/tpu.md)."""

    block_shape: str = Field(description="One physical block, e.g. 4x4x4 (TPU7x: 64 chips, 16 VMs).")
    host_shape: str = Field(default="2x2x1", description="The chips of one node (TPU7x VM: 2x2x1, 4 chips).")
    block_label: str = Field(
        description="The node label whose value names a node's block (e.g. a node-pool label: one pool per "
        "block). Nodes of one block tile it row-major by name (estimate: GKE publishes no coordinates)."
    )

    @field_validator("block_shape", "host_shape")
    @classmethod
    def _shape(cls, value: str) -> str:
        Shape.parse(value)  # raises with the form expected
        return value

    @model_validator(mode="after")
    def _divides(self) -> SliceFlavorConfig:
        block, host = Shape.parse(self.block_shape), Shape.parse(self.host_shape)
        if any(b % h for b, h in zip(block.dims, host.dims, strict=True)):
            raise ValueError(f"hostShape {host} does not tile blockShape {block}")
        return self


class ControllerConfig(SpecModel):
    """``kind: ControllerConfig``; every field optional."""

    api_version: Literal["autoscaler.dev/v1alpha1"] = Field(default="autoscaler.dev/v1alpha1")
    kind: Literal["ControllerConfig"] = "ControllerConfig"
    mode: Literal["act", "dryRun"] = Field(
        default="act", description="dryRun (shadow mode): decide, log, emit Events and metrics, change nothing."
    )
    default_source: SourceSpec | None = Field(
        default=None, description="Source for policies and signals that name none."
    )
    namespaces: list[Namespace] = Field(
        default_factory=list, description="Namespaces to watch; empty = those the policies name."
    )
    watch_scaling_policies: bool = Field(
        default=False,
        description="Also run the ScalingPolicy objects of the namespaces above (all when empty), watched, and "
        "write their status (needs the CRD, deploy/base/crd.yaml).",
    )
    leader_election: LeaderElectionConfig = Field(default_factory=LeaderElectionConfig)
    ports: PortsConfig = Field(default_factory=PortsConfig)
    events: EventsConfig = Field(default_factory=EventsConfig)
    fast_poll_seconds: float = Field(
        default=0.75,
        ge=0,
        description="Between evaluations, re-read fast signals this often and evaluate at once when the "
        "decision would change (0 = off). A crossing waits up to one period for its pod's next scrape: the "
        "reaction's p99 is about 0.97 of this plus 0.06-0.1 s while a round fits in it; a round costs about "
        "95 us of CPU per probed policy (0.75: 0.13 ms/s per policy, 0.63 of a core at 5,000; every pod "
        "scraped 1.33 times a second).",
    )
    view_resync_seconds: float = Field(
        default=300.0, ge=10,
        description="Every target view a live watch vouches for (not read again for its age) is read again within "
        "this long, a few each probe round: a view kept wrong heals in bounded time, and a re-read that finds one "
        "wrong is counted (autoscaler_view_drift_total) and logged (view_drift).",
    )
    signal_deadline_seconds: float = Field(default=5.0, gt=0, description="Budget for one signal read.")
    api_deadline_seconds: float = Field(
        default=10.0, gt=0, le=300, description="Budget for one Kubernetes API call (a watch: for connecting, and "
        "for the silence between two reads beyond its server-side timeout)."
    )
    pass_deadline_seconds: float = Field(
        default=20.0, gt=0, le=600, description="Budget for one evaluation of one policy, and for a pass's bulk "
        "read; what is cut short is retried next time from the cluster's state."
    )
    liveness_stall_seconds: float = Field(
        default=60.0, gt=0, description="/healthz fails when the control loop made no progress for this long."
    )
    reload_poll_seconds: float = Field(default=2.0, gt=0, description="How often the policies dir is checked.")
    held_sweep_seconds: float = Field(
        default=10.0, gt=0,
        description="How often the Workloads this controller stopped are looked for (also at start-up and after "
        "every policy change): one no policy covers any more is resumed once it fits.",
    )
    held_sweep_all_namespaces: bool = Field(
        default=False,
        description="Look for held Workloads in every namespace (needs list on workloads cluster-wide); by "
        "default only in the policies' namespaces and those where a held Workload was seen.",
    )
    slice_flavors: dict[str, SliceFlavorConfig] = Field(
        default_factory=dict,
        description="ResourceFlavors carved into TPU slices whose nodes cannot say where they sit: their blocks "
        "declared, by flavor name. A flavor with a Topology of GKE TPU partition levels needs nothing here.",
    )
    log_level: Literal["debug", "info", "warning", "error"] = "info"

    @model_validator(mode="after")
    def _live_longer_than_a_pass(self) -> ControllerConfig:
        # One loop iteration is at most a bulk read plus an evaluation (each within passDeadlineSeconds) plus
        # one second of idle wait: a healthy loop must never look stalled.
        if self.liveness_stall_seconds < 2 * self.pass_deadline_seconds + 5:
            raise ValueError(
                "need livenessStallSeconds >= 2 x passDeadlineSeconds + 5 "
                f"(got {self.liveness_stall_seconds:g} and {self.pass_deadline_seconds:g})"
            )
        return self


def load_config(path: str | Path | None) -> ControllerConfig:
    """Load and validate the config file; ``None``, or a file without a document, gives the defaults.

    Read as policy and simulator files are (``loader.load_model``): the one bounded reader, validate's limits on
    the YAML graph, duplicate keys refused, every problem at FILE:LINE:COL with its field and validate's wording
    (until 2026-12-07 a loader of its own said ``c.yaml:1: (top): Value error, should be a finite number, not
    nan`` for ``fastPollSeconds: .nan`` and took a key written twice as its last value)."""
    if path is None:
        return ControllerConfig()
    p = Path(path)
    try:
        text = files.read_text(p, limit=files.MAX_YAML_BYTES, what="controller config YAML")
    except files.InputError as exc:
        raise ConfigError(f"{p}: cannot read: {exc.reason}") from None
    if all(not line.strip() or line.lstrip().startswith("#") or line.strip() in ("---", "...")
           for line in text.splitlines()):
        return ControllerConfig()
    try:
        return loader.load_model(p, ControllerConfig)
    except loader.PolicyFileError as exc:
        raise ConfigError("\n".join(str(problem) for problem in exc.problems)) from None


def default_identity() -> str:
    """The pod name (downward API ``POD_NAME``), else the host name: unique per replica."""
    return os.environ.get("POD_NAME") or os.uname().nodename


def default_namespace() -> str:
    """The namespace this pod runs in (service-account mount), else ``POD_NAMESPACE``, else ``default``."""
    sa = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
    try:
        return sa.read_text().strip()
    except OSError:
        return os.environ.get("POD_NAMESPACE", "default")
