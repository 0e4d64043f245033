"""The simulated cluster file (``kind: SimulatedCluster``): quota, serving pools, training, metric pipelines.

Validated like policies: pydantic models with unknown fields rejected and errors reported as
``FILE:LINE:COL: path: message``. Profiles are named here and defined in a profiles file (the bundled one
by default, or ``spec.profilesFile`` relative to the cluster file).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from autoscaler.core.model import TargetKind, TargetRef
from autoscaler.core.spec import DNS_LABEL_PATTERN, Metadata
from autoscaler.core.specbase import FieldError, SpecModel
from autoscaler.core.topology import Shape
from autoscaler.policyfile import loader
from autoscaler.sim import profiles as profiles_mod
from autoscaler.sim.yamldoc import SimFileError, load_model


def bundled(name: str) -> Path:
    """Path of a file bundled under ``autoscaler/data/sim`` (works from a wheel or a checkout)."""
    return Path(str(resources.files("autoscaler").joinpath("data").joinpath("sim").joinpath(name)))


class QuotaSpec(SpecModel):
    """The accelerator quota as a Kueue ClusterQueue holds it (one flavor, one resource)."""

    cluster_queue: str = Field(pattern=DNS_LABEL_PATTERN)
    resource: str = Field(description="e.g. nvidia.com/gpu or google.com/tpu")
    nominal: int = Field(gt=0, description="nominalQuota, in chips.")


class PoolTargetSpec(SpecModel):
    kind: TargetKind = TargetKind.DEPLOYMENT
    name: str = Field(pattern=DNS_LABEL_PATTERN)
    namespace: str = Field(default="default", pattern=DNS_LABEL_PATTERN)

    def ref(self) -> TargetRef:
        return TargetRef(self.kind, self.name, self.namespace)


class PoolSpec(SpecModel):
    """One serving pool: replicas of one profile. For a LeaderWorkerSet a replica is a group."""

    name: str = Field(pattern=DNS_LABEL_PATTERN)
    target: PoolTargetSpec
    profile: str
    chips_per_replica: int | None = Field(default=None, gt=0, description="Default: the profile's chips.")
    group_size: int = Field(default=1, ge=1, description="Pods per LWS group (informational).")
    min_replicas: int = Field(
        default=1, ge=0, description="At least 1, except for a disaggregation variant pool (another slice shape "
        "of a role, which may hold no group).",
    )
    max_replicas: int = Field(ge=1)
    routing: Literal["service", "least-request"] = Field(
        default="service",
        description="How requests reach replicas: 'service' = a ClusterIP Service (kube-proxy picks a ready "
                    "endpoint at random, blind to load; the TGI and vLLM tutorials' setup), 'least-request' = "
                    "an inference gateway routing to the replica with the fewest outstanding requests.",
    )
    client_timeout_seconds: float | None = Field(
        default=60.0, gt=0,
        description="A client gives up on a request that has not started (no slot) this long after it was "
                    "sent (estimate: a streaming client's read timeout); null = clients wait forever.",
    )
    initial_replicas: int | None = Field(
        default=None, ge=0,
        description="Replicas ready at time 0; default: the warm start (the fleet the oracle's schedule family "
                    "holds at the start of the simulated window, docs/simulate.md).",
    )
    slice_topology: str | None = Field(
        default=None,
        description="With spec.topology: the TPU slice one replica (LWS group) takes, e.g. 2x2x2 (the "
                    "cloud.google.com/gke-tpu-slice-topology annotation); its chips are the replica's chips.",
    )

    @model_validator(mode="after")
    def _bounds(self) -> PoolSpec:
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"minReplicas ({self.min_replicas}) is greater than maxReplicas ({self.max_replicas})")
        if self.initial_replicas is not None and self.initial_replicas > self.max_replicas:
            raise ValueError(f"initialReplicas ({self.initial_replicas}) is greater than maxReplicas "
                             f"({self.max_replicas})")
        _check_shape(self.slice_topology, self.chips_per_replica, "chipsPerReplica")
        return self


def _check_shape(text: str | None, chips: int | None, field_name: str) -> None:
    """A slice topology parses, and agrees with an explicit chip count."""
    if text is None:
        return
    shape = Shape.parse(text)  # ValueError with the reason
    if chips is not None and chips != shape.chips:
        raise ValueError(f"sliceTopology {text} is {shape.chips} chips but {field_name} is {chips}")


#: The shortest scrape interval or sync period a metric pipeline may have (seconds).
MIN_PERIOD_S = 1.0
#: Training jobs a cluster may hold in all (``count`` summed): an estimate, far above any ClusterQueue's share of
#: one accelerator pool; 10^9 made ``simulate`` run out of memory (robust3's sweep), 10^4 runs in ~6 s.
MAX_TRAINING_JOBS = 10_000


class TrainingSpec(SpecModel):
    """A checkpointed training job admitted by Kueue as one Workload (all its chips at once)."""

    name: str = Field(pattern=DNS_LABEL_PATTERN)
    namespace: str = Field(default="training", pattern=DNS_LABEL_PATTERN)
    priority: int = Field(default=100, description="WorkloadPriorityClass value; serving is higher.")
    chips: int = Field(gt=0)
    count: int = Field(default=1, ge=1, description="Identical jobs named NAME-0..NAME-(count-1).")
    checkpoint_interval_seconds: float = Field(gt=0, description="Training time between checkpoints.")
    checkpoint_save_seconds: float = Field(default=0.0, ge=0, description="Training pauses while it saves.")
    restore_seconds: float = Field(default=0.0, ge=0, description="Start-up + checkpoint load after resume.")
    termination_grace_period_seconds: float = Field(
        default=30.0, ge=0,
        description="The pods' terminationGracePeriodSeconds (Kubernetes default 30; the fine-tuning Job of "
                    "the mixed train/serve tutorial sets 60): a preempted job saves a checkpoint in it when "
                    "checkpointSaveSeconds fits, and its chips are held until it exits.",
    )
    save_on_preemption: bool = Field(
        default=True, description="The trainer saves a checkpoint on SIGTERM (within the grace period)."
    )
    staggered: bool = Field(
        default=True,
        description="The count identical jobs started at different times: at time 0, job i of n is i/n of a "
                    "checkpoint interval past its last checkpoint (False: all just checkpointed).",
    )
    declares_checkpoints: bool = Field(
        default=True,
        description="The job declares its checkpoint save time, whether it saves on SIGTERM and its interval "
                    "(annotations autoscaler.dev/checkpoint-save-seconds, -on-termination, -interval-seconds, and "
                    "-on-request when it honours requests) for the controller to read; false: only its last "
                    "checkpoint time and grace period are known (never asked to checkpoint).",
    )
    labels: dict[str, str] = Field(default_factory=dict, description="Workload labels (preemptible selectors).")
    checkpoint_on_request: bool = Field(
        default=False,
        description="The training loop honours autoscaler.dev/checkpoint-requested-at: it starts a save at "
        "once (checkpointSaveSeconds) when asked (policies with capacity.checkpointRequestSeconds), and "
        "declares so (autoscaler.dev/checkpoint-on-request, with declaresCheckpoints).",
    )
    slice_topology: str | None = Field(
        default=None,
        description="With spec.topology: the slice each job's Workload takes (a JobSet replica's "
                    "cloud.google.com/gke-tpu-slice-topology), e.g. 2x2x2, or 4x4x8 for a super-slice that "
                    "joins two 4x4x4 blocks; its chips must equal chips.",
    )

    @model_validator(mode="after")
    def _shape(self) -> TrainingSpec:
        _check_shape(self.slice_topology, self.chips, "chips")
        return self


class PipelineSpec(SpecModel):
    """What stands between a server's gauge and a policy: scraping, ingestion, the evaluation loop."""

    # At least 1 s, the policies' own evaluationPeriodSeconds floor: at 0.01 s a 60 s run of 40 requests had not
    # ended after 40 s (robust3's sweep; at 1e-6 it runs for ever), and no scrape or sync loop is that fast.
    scrape_interval_seconds: float = Field(ge=MIN_PERIOD_S)
    ingestion_delay_seconds: float = Field(default=0.0, ge=0, description="Scrape to queryable (adapter, GMP).")
    sync_period_seconds: float | None = Field(
        default=None, ge=MIN_PERIOD_S, description="Evaluation period; default the policy's evaluationPeriodSeconds."
    )

    @property
    def worst_case_s(self) -> float:
        return self.scrape_interval_seconds + self.ingestion_delay_seconds + (self.sync_period_seconds or 0.0)


class KueueSpec(SpecModel):
    """Latencies of Kueue itself (each an estimate; docs/simulate.md gives the reasoning)."""

    admission_seconds: float = Field(
        default=2.0, ge=0,
        description="A pending Workload is admitted (or its preemption issued) this long after it could be: "
                    "the Workload controller's reconcile and the scheduler's cycle (estimate).",
    )


class TopologySpec(SpecModel):
    """Physical TPU blocks carved into slices on admission (GKE dynamic slicing, the TPU7x codelab).

    With it, admission is by placement (``autoscaler.core.topology``, the controller's own fit check), not
    by the ClusterQueue's number: a slice is admitted only where a whole aligned region of its shape is free
    (a super-slice takes whole free blocks), and Kueue's preemption stops the training that frees one.
    """

    block_shape: str = Field(default="4x4x4", description="One block's topology (TPU7x: 4x4x4, 64 chips).")
    blocks: list[str] = Field(min_length=1, description="The blocks' names (the codelab: two node pools).")
    provisioning_seconds: float = Field(
        default=0.0, ge=0,
        description="From Kueue's admission to a usable slice: the slice controller's AdmissionCheck "
                    "configuring the ICI/OCS links of the carved slice (estimate). Paid by serving groups "
                    "(before their cold start) and by re-admitted training (before its restore).",
    )

    @model_validator(mode="after")
    def _valid(self) -> TopologySpec:
        Shape.parse(self.block_shape)
        if len(set(self.blocks)) != len(self.blocks):
            raise ValueError("block names must be unique")
        return self

    @property
    def shape(self) -> Shape:
        return Shape.parse(self.block_shape)

    @property
    def total_chips(self) -> int:
        return self.shape.chips * len(self.blocks)


class KvTransferSpec(SpecModel):
    """Moving a prompt's KV cache from the prefill group that computed it to the decode group that continues
    it (the codelab's TPUConnectorHMA, kv_producer -> kv_consumer): ``baseMs + tokens × bytesPerToken /
    gigabytesPerSecond``. It occupies neither group's compute (an estimate: the transfer overlaps decoding)."""

    base_ms: float = Field(default=20.0, ge=0, description="Fixed cost per request: handshake, routing (estimate).")
    bytes_per_token: float = Field(gt=0, description="KV bytes per prompt token of the model.")
    gigabytes_per_second: float = Field(gt=0, description="Achieved bandwidth between the two slices.")
    sources: dict[str, str] = Field(default_factory=dict, description="Per field: a source or 'estimate: why'.")

    def seconds(self, tokens: int) -> float:
        return self.base_ms / 1000.0 + tokens * self.bytes_per_token / (self.gigabytes_per_second * 1e9)


class DisaggregationSpec(SpecModel):
    """Prefill and decode on separate pools (llm-d P/D): a request is prefilled by the prefill pool, its KV
    cache moves to a decode group, which generates the rest. TTFT ends when the decode group has the request
    in its batch (the first token streams from there, as llm-d's decode sidecar returns it)."""

    prefill_pool: str = Field(pattern=DNS_LABEL_PATTERN)
    decode_pool: str = Field(pattern=DNS_LABEL_PATTERN)
    kv_transfer: KvTransferSpec
    prefill_variants: list[str] = Field(
        default_factory=list, max_length=3,
        description="Further pools of the prefill role: LeaderWorkerSet variants of other slice shapes (each its "
        "own target and profile). The router spreads the role's requests over every ready group of all its "
        "pools; the baselines and the oracle size prefillPool and decodePool only.",
    )
    decode_variants: list[str] = Field(default_factory=list, max_length=3,
                                       description="Further pools of the decode role, as prefillVariants.")

    def roles(self) -> dict[str, list[str]]:
        """Role -> its pools' names, the primary pool first."""
        return {"prefill": [self.prefill_pool, *self.prefill_variants],
                "decode": [self.decode_pool, *self.decode_variants]}


class SloSpec(SpecModel):
    ttft_seconds: float = Field(default=2.0, gt=0)
    attainment: float = Field(default=0.99, gt=0, le=1, description="The oracle meets at least this fraction.")


class ScenarioSpec(SpecModel):
    """Defaults for how the trace is replayed on this cluster (each can be overridden on the command line)."""

    rate_scale: float = Field(default=1.0, gt=0)
    time_scale: float = Field(default=1.0, gt=0)
    duration_seconds: float | None = Field(default=None, gt=0)


class ClusterSpec(SpecModel):
    profiles_file: str | None = Field(default=None, description="Relative to this file; default bundled.")
    quota: QuotaSpec
    serving_priority: int = Field(default=1000)
    pools: list[PoolSpec] = Field(min_length=1)
    training: list[TrainingSpec] = Field(default_factory=list)
    metric_pipelines: dict[str, PipelineSpec] = Field(default_factory=dict)
    policy_pipelines: dict[str, str] = Field(
        default_factory=dict, description="Policy name -> pipeline name; others use pipeline 'default'."
    )
    kueue: KueueSpec = Field(default_factory=KueueSpec)
    topology: TopologySpec | None = Field(
        default=None, description="Physical TPU blocks: admission by slice placement (docs/simulate.md)."
    )
    disaggregation: DisaggregationSpec | None = Field(
        default=None, description="Prefill and decode pools of one model, sized and scored together."
    )
    slo: SloSpec = Field(default_factory=SloSpec)
    scenario: ScenarioSpec = Field(default_factory=ScenarioSpec)

    @model_validator(mode="after")
    def _consistent(self) -> ClusterSpec:
        names = [p.name for p in self.pools]
        if len(set(names)) != len(names):
            raise ValueError("pool names must be unique")
        jobs = [t.name for t in self.training]
        if len(set(jobs)) != len(jobs):
            raise ValueError("training names must be unique")
        total = sum(t.count for t in self.training)
        if total > MAX_TRAINING_JOBS:
            raise FieldError(f"{total:,} training jobs in all (count summed); the simulator takes at most "
                             f"{MAX_TRAINING_JOBS:,}", "training")
        if "default" not in self.metric_pipelines:
            raise ValueError("metricPipelines needs a 'default' pipeline (the one policies see unless mapped)")
        if self.topology is not None:
            self._check_topology(self.topology)
        dis = self.disaggregation
        variants: set[str] = set()
        if dis is not None:
            for role, name in (("prefillPool", dis.prefill_pool), ("decodePool", dis.decode_pool)):
                if name not in names:
                    raise ValueError(f"disaggregation.{role} names unknown pool {name!r}; pools: {', '.join(names)}")
            if dis.prefill_pool == dis.decode_pool:
                raise ValueError("disaggregation: prefillPool and decodePool must be different pools")
            for role, listed in (("prefillVariants", dis.prefill_variants), ("decodeVariants", dis.decode_variants)):
                for name in listed:
                    if name not in names:
                        raise ValueError(f"disaggregation.{role} names unknown pool {name!r}; pools: "
                                         f"{', '.join(names)}")
            every = [n for pools in dis.roles().values() for n in pools]
            if len(set(every)) != len(every):
                raise ValueError("disaggregation: a pool is named twice (each pool serves one role once)")
            variants = set(dis.prefill_variants) | set(dis.decode_variants)
        for p in self.pools:
            if p.min_replicas == 0 and p.name not in variants:
                raise ValueError(f"pools.{p.name}: minReplicas 0 is only for a disaggregation variant pool")
        for policy, pipe in self.policy_pipelines.items():
            if pipe not in self.metric_pipelines:
                raise ValueError(
                    f"policyPipelines.{policy} names unknown pipeline {pipe!r}; "
                    f"defined: {', '.join(sorted(self.metric_pipelines))}"
                )
        return self

    def _check_topology(self, topo: TopologySpec) -> None:
        block = topo.shape
        units = [(f"pools.{p.name}", p.slice_topology) for p in self.pools] + [
            (f"training.{t.name}", t.slice_topology) for t in self.training
        ]
        for where, text in units:
            if text is None:
                raise ValueError(f"{where}: sliceTopology is required when spec.topology is set")
            shape = Shape.parse(text)
            if shape.chips > block.chips:
                if shape.chips % block.chips or shape.chips // block.chips > len(topo.blocks):
                    raise ValueError(f"{where}: sliceTopology {text} ({shape.chips} chips) is not a whole number "
                                     f"of the {len(topo.blocks)} blocks of {topo.block_shape}")
            elif not any(all(b % s == 0 for s, b in zip(o.dims, block.dims, strict=True))
                         for o in shape.orientations()):
                raise ValueError(f"{where}: sliceTopology {text} does not tile a {topo.block_shape} block "
                                 "in any orientation (each side must divide the block's)")


class SimulatedCluster(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True)

    api_version: Literal["autoscaler.dev/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["SimulatedCluster"]
    metadata: Metadata
    spec: ClusterSpec


class Cluster:
    """A loaded cluster with its profiles resolved (what the simulator uses)."""

    def __init__(self, doc: SimulatedCluster, profiles: dict[str, profiles_mod.Profile], source: str) -> None:
        self.doc = doc
        self.spec = doc.spec
        self.profiles = profiles
        self.source = source
        problems = []
        for i, p in enumerate(self.spec.pools):
            if p.profile not in profiles:
                # At the field's line, as every other cluster problem (audit4's sweep: this one had none).
                at = loader.locate(source, ("spec", "pools", i, "profile")) if Path(source).is_file() else None
                where = f"{source}:{at[0]}:{at[1]}" if at else source
                problems.append(f"{where}: spec.pools[{i}].profile: unknown profile {p.profile!r} (pool {p.name}); "
                                f"known: {', '.join(sorted(profiles))}")
        if problems:
            raise SimFileError(problems)

    @property
    def name(self) -> str:
        return self.doc.metadata.name

    def profile(self, pool: PoolSpec) -> profiles_mod.Profile:
        return self.profiles[pool.profile]

    def chips_per_replica(self, pool: PoolSpec) -> int:
        if pool.slice_topology is not None:
            return Shape.parse(pool.slice_topology).chips
        return pool.chips_per_replica or self.profile(pool).chips

    def lead_seconds(self, pool: PoolSpec) -> float:
        """From asking for a replica to its serving, with room for it: Kueue's admission, the slice's
        provisioning (with a topology) and the cold start."""
        topo = self.spec.topology
        return (self.profile(pool).cold_start.total + self.spec.kueue.admission_seconds
                + (topo.provisioning_seconds if topo is not None else 0.0))

    def pool_named(self, name: str) -> PoolSpec:
        return next(p for p in self.spec.pools if p.name == name)

    @property
    def disaggregated(self) -> tuple[PoolSpec, PoolSpec] | None:
        """(prefill, decode) pools when the cluster serves disaggregated, else None."""
        dis = self.spec.disaggregation
        if dis is None:
            return None
        return self.pool_named(dis.prefill_pool), self.pool_named(dis.decode_pool)

    @property
    def role_pools(self) -> dict[str, list[PoolSpec]] | None:
        """Role -> its pools (the primary first, then its variants) when the cluster serves disaggregated."""
        dis = self.spec.disaggregation
        if dis is None:
            return None
        return {role: [self.pool_named(n) for n in names] for role, names in dis.roles().items()}

    @property
    def capacity_chips(self) -> int:
        """Chips serving and training can hold: the quota, or fewer when the blocks hold fewer (the TPU7x
        codelab's ClusterQueue declares 999999 chips; its two blocks have 128)."""
        topo = self.spec.topology
        nominal = self.spec.quota.nominal
        return nominal if topo is None else min(nominal, topo.total_chips)

    def pipeline_for(self, policy_name: str) -> PipelineSpec:
        return self.spec.metric_pipelines[self.spec.policy_pipelines.get(policy_name, "default")]

    def pipeline_name_for(self, policy_name: str) -> str:
        return self.spec.policy_pipelines.get(policy_name, "default")


def load(path: str | Path | None = None) -> Cluster:
    """Load a cluster file (default: the bundled one) and its profiles."""
    p = Path(path) if path is not None else bundled("cluster.yaml")
    doc = load_model(p, SimulatedCluster)
    if not doc.spec.profiles_file:
        return Cluster(doc, profiles_mod.load(bundled("profiles.yaml")), str(p))
    prof_path = p.parent / doc.spec.profiles_file
    try:
        profiles = profiles_mod.load(prof_path)
    except SimFileError as exc:
        # The profiles file's own problems (FILE:LINE:COL in it), after the cluster field that names it: a
        # missing file said "nothere.yaml:1:1: (file): no such file" without saying which file asked for it.
        at = loader.locate(p, ("spec", "profilesFile"))
        field = f"{p}:{at[0]}:{at[1]}: spec.profilesFile" if at else f"{p}: spec.profilesFile"
        head = f"{field}: {doc.spec.profiles_file!r} (relative to the cluster file)"
        if len(exc.problems) == 1:
            raise SimFileError([f"{head}: {exc.problems[0]}"]) from None
        raise SimFileError([f"{head} has {len(exc.problems)} problems:", *exc.problems]) from None
    return Cluster(doc, profiles, str(p))
