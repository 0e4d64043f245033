"""The policy document (``kind: ScalingPolicy``) as typed models.

These models are the single source of truth for the YAML policy language: ``policyfile`` loads YAML into
them and reports errors with file positions, and ``policies/schema.json`` is generated from them.
Unknown fields are rejected everywhere (``extra="forbid"``).
"""

from __future__ import annotations

import difflib
import keyword
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from autoscaler.core import catalog, expressions, fast
from autoscaler.core.policies.disaggregated import DisaggregatedPolicyConfig
from autoscaler.core.policies.hpa import HpaPolicyConfig
from autoscaler.core.policies.kpa import KpaPolicyConfig
from autoscaler.core.policies.queue import QueuePolicyConfig
from autoscaler.core.policies.slo import SloPolicyConfig
from autoscaler.core.sourcespec import SourceSpec
from autoscaler.core.specbase import MAX_REPLICAS, FieldError, SpecModel
from autoscaler.core.targetspec import DNS_LABEL_PATTERN, TargetSpec

__all__ = ["API_VERSION", "DNS_LABEL_PATTERN", "ScalingPolicy", "Spec", "TargetSpec"]

API_VERSION = "autoscaler.dev/v1alpha1"
SIGNAL_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"

#: Functions a composite signal expression may call (besides arithmetic).
EXPRESSION_FUNCTIONS = expressions.FUNCTION_NAMES

#: Signal presets, from the one catalog (``core.catalog``). The spec stores only the name; listing them lets
#: ``autoscaler validate`` (and the JSON Schema) reject a misspelt preset before a controller ever starts.
KNOWN_PRESETS = catalog.NAMES


class Metadata(SpecModel):
    name: str = Field(pattern=DNS_LABEL_PATTERN, max_length=253, description="Name of this policy.")
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class RateSpec(SpecModel):
    """The per-second rate of a counter over a window (PromQL ``rate``; pods: deltas between scrapes)."""

    window_seconds: float = Field(gt=0, description="Look-back window, e.g. 60 (at least two scrapes).")


class QuantileSpec(SpecModel):
    """A quantile of a histogram's observations over a window (``histogram_quantile`` over rated buckets)."""

    q: float = Field(gt=0, lt=1, description="The quantile, e.g. 0.9 for p90.")
    window_seconds: float = Field(gt=0, description="Look-back window, e.g. 60.")


class SignalSpec(SpecModel):
    """A named input. Exactly one of ``query`` (PromQL), ``preset`` (a known server metric),
    ``metric`` (a raw metric name or Cloud Monitoring metric type) or ``expr`` (a composite over
    other signals, e.g. ``max(backlog/10, kv/0.8)``)."""

    name: str = Field(pattern=SIGNAL_NAME_PATTERN, description="Referenced by policies and expressions.")
    query: str | None = Field(default=None, description="A PromQL query returning one value per target.")
    preset: str | None = Field(
        default=None,
        description="A signal preset, e.g. vllm.waiting (the catalog: docs/policies.md).",
        json_schema_extra={"enum": [*catalog.NAMES, None]},
    )
    metric: str | None = Field(default=None, description="A raw metric name (pods) or metric type.")
    expr: str | None = Field(default=None, description="An arithmetic expression over other signals.")
    labels: dict[str, str] = Field(default_factory=dict, description="Label matchers for a preset.")
    source: SourceSpec | None = Field(default=None, description="Where to read it; default spec.source.")
    aggregate: Literal["sum", "avg", "max", "min"] | None = Field(
        default=None, description="How per-pod values combine per target; default by preset."
    )
    scope: Literal["total", "perReplica"] = Field(
        default="total",
        description="total: the value is for the whole target; perReplica: an average per replica.",
    )
    max_age_seconds: float | None = Field(
        default=None, ge=1, le=86400, description="Older samples are unknown. Default spec.metricSafety."
    )
    rate: RateSpec | None = Field(
        default=None, description="Read a counter preset (or metric) as its per-second rate over windowSeconds."
    )
    quantile: QuantileSpec | None = Field(
        default=None, description="Read a histogram preset (or metric) as quantile q over windowSeconds."
    )
    pool: str | None = Field(
        default=None,
        pattern=DNS_LABEL_PATTERN,
        description="Policies with several targets (type disaggregated): the variant whose target's pods this "
        "signal reads. Default: spec.target.",
    )
    min_reporting_fraction: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="Per-pod signals: known when at least this fraction of the ready pods reported a fresh sample "
        "(default: every ready pod; partial data is unknown, since the pods whose scrapes fail are often the "
        "overloaded ones).",
    )

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        # An expression could not refer to such a signal: `True + 1` reads the constant, `max` the function,
        # `if` is a syntax error. Rejecting the name keeps expression dependencies exact.
        if keyword.iskeyword(value) or value in EXPRESSION_FUNCTIONS:
            raise ValueError(
                f"signal name {value!r} is reserved (a Python keyword or an expression function: "
                f"{', '.join(EXPRESSION_FUNCTIONS)})"
            )
        return value

    @field_validator("preset")
    @classmethod
    def _known_preset(cls, value: str | None) -> str | None:
        if value is not None and value not in KNOWN_PRESETS:
            close = difflib.get_close_matches(value, KNOWN_PRESETS, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ValueError(f"unknown preset {value!r}; {hint}known: {', '.join(KNOWN_PRESETS)}")
        return value

    @field_validator("expr")
    @classmethod
    def _valid_expression(cls, value: str | None) -> str | None:
        if value is not None:
            expressions.compiled(value)  # the limits and constructs: see autoscaler.core.expressions
        return value

    @model_validator(mode="after")
    def _exactly_one_definition(self) -> SignalSpec:
        given = [k for k in ("query", "preset", "metric", "expr") if getattr(self, k) is not None]
        if len(given) != 1:
            # Point at the second definition when there are several (the first is the one meant).
            raise FieldError(
                f"signal {self.name!r} needs exactly one of query, preset, metric, expr "
                f"(got {given or 'none'})",
                *given[1:2],
            )
        return self

    @model_validator(mode="after")
    def _form_fits_the_kind(self) -> SignalSpec:
        if self.rate is not None and self.quantile is not None:
            raise FieldError(f"signal {self.name!r}: rate and quantile exclude each other", "quantile")
        form = "rate" if self.rate is not None else "quantile" if self.quantile is not None else None
        if form is not None and self.preset is None and self.metric is None:
            raise FieldError(f"signal {self.name!r}: {form} applies to a preset or a metric", form)
        if self.preset is None or self.preset not in catalog.PRESETS:
            return self
        kind = catalog.get(self.preset).kind
        wanted = {"gauge": None, "counter": "rate", "histogram": "quantile"}[kind]
        if form != wanted:
            how = {
                "rate": "rate: {windowSeconds: 60}",
                "quantile": "quantile: {q: 0.9, windowSeconds: 60}",
            }
            hint = f"read it with {how[wanted]}" if wanted is not None else f"remove {form}"
            raise FieldError(f"signal {self.name!r}: preset {self.preset} is a {kind}; {hint}", form or "preset")
        return self

    def expression_names(self) -> frozenset[str]:
        """Names of the signals an ``expr`` refers to (empty for other signals)."""
        if self.expr is None:
            return frozenset()
        try:
            return expressions.compiled(self.expr).names
        except ValueError:
            return frozenset()  # only a spec that bypassed validation gets here; its composite is judged unknown


class FallbackSpec(SpecModel):
    """KEDA's fallback: once one trigger (a signal the policy reads) was unknown more than ``failureThreshold``
    consecutive evaluations, the fallback count joins the usable triggers' counts (the highest wins) and goes
    through the behavior stage like any recommendation; never from zero (docs/policies.md, "Fallback").

    ``static``: ``replicas``; ``currentReplicas``: the current count; ``currentReplicasIfHigher``:
    ``max(current, replicas)``; ``currentReplicasIfLower``: ``min(current, replicas)`` (KEDA's semantics).
    """

    failure_threshold: int = Field(
        ge=1, description="Consecutive unknown evaluations of one trigger tolerated; the next falls back (as KEDA)."
    )
    behavior: Literal["static", "currentReplicas", "currentReplicasIfHigher", "currentReplicasIfLower"] = (
        "static"
    )
    replicas: int | None = Field(
        default=None,
        ge=0,
        le=MAX_REPLICAS,
        description="Replica count for static, currentReplicasIfHigher and currentReplicasIfLower.",
    )

    @model_validator(mode="after")
    def _static_needs_replicas(self) -> FallbackSpec:
        if self.behavior != "currentReplicas" and self.replicas is None:
            raise FieldError(f"fallback behavior {self.behavior!r} needs 'replicas'", "replicas")
        return self


class MetricSafetySpec(SpecModel):
    """Missing, stale, NaN, infinite or negative values are unknown, never zero; unknown means hold."""

    max_age_seconds: float = Field(default=120.0, ge=1, le=86400, description="Default per-signal age limit.")
    fallback: FallbackSpec | None = None


class ActivationSpec(SpecModel):
    signal: str = Field(pattern=SIGNAL_NAME_PATTERN)
    threshold: float = Field(ge=0, description="Scale 0→1 when the signal is above this value.")


class ScaleToZeroSpec(SpecModel):
    """Scale to zero only when explicitly enabled, with an activation threshold (as KEDA)."""

    enabled: bool = False
    activation: ActivationSpec | None = None
    idle_seconds: float = Field(
        default=300.0, ge=0, le=86400, description="The signal must stay at or below the threshold this long."
    )

    @model_validator(mode="after")
    def _enabled_needs_activation(self) -> ScaleToZeroSpec:
        if self.enabled and self.activation is None:
            raise FieldError("scaleToZero.enabled needs an 'activation' signal and threshold", "activation")
        return self


class CapacitySpec(SpecModel):
    """The Kueue quota serving shares with training."""

    cluster_queue: str = Field(pattern=DNS_LABEL_PATTERN)
    resource: str = Field(description="e.g. nvidia.com/gpu or google.com/tpu")
    per_replica: float = Field(gt=0, description="Units of the resource one replica (or LWS group) uses.")
    min_run_seconds: float = Field(
        default=0.0, ge=0,
        description="A Workload this controller resumed is not stopped again for this long. 0 (default): off; "
        "what a resumed job risks is already counted (the time since its admission), and "
        "maxPreemptionsPerHour bounds how often one job is stopped. A minimum run time makes the arbitration "
        "stop a job with more unsaved work instead (docs/controller.md, the hand-off figures).",
    )
    checkpoint_request_seconds: float = Field(
        default=0.0, ge=0,
        description="0: off. Else, before stopping a victim whose last checkpoint is older than this, ask its "
        "job to checkpoint (annotation autoscaler.dev/checkpoint-requested-at on the Job/JobSet) and wait up to "
        "this long for a newer autoscaler.dev/last-checkpoint-time; serving's scale-up waits meanwhile. For "
        "training loops that honour the request.",
    )
    checkpoint_wait_seconds: float = Field(
        default=0.0, ge=0,
        description="0: off. Else, a victim whose next checkpoint is due within this many seconds (its "
        "interval: annotation autoscaler.dev/checkpoint-interval-seconds, or learned from successive "
        "autoscaler.dev/last-checkpoint-time values) is stopped right after it rather than now, when the work "
        "that saves (its chips × seconds since its last checkpoint) exceeds what serving goes without meanwhile "
        "(the chips it waits for × the wait); serving's scale-up waits. Victims are chosen counting the wait.",
    )
    wait_within_headroom: bool = Field(
        default=False,
        description="Wait for a victim's checkpoint only within the serving policy's latency headroom (type slo: "
        "how long its scale-up may wait before the measured latency quantile reaches the at-risk fraction of "
        "its objective, from the measured queue and the load's trend, less a cold start). A victim that loses "
        "work when stopped is left running until its own next checkpoint (its interval) or a requested one "
        "(checkpointRequestSeconds, for jobs that honour requests) when that save plus its eviction (its "
        "terminationGracePeriodSeconds) fits in the headroom; re-checked every evaluation, the wait ends "
        "when the headroom does. A requested save is then waited for only within the headroom.",
    )
    act_ahead: bool = Field(
        default=False,
        description="Act ahead of the policy's forecast (type slo): when it expects more replicas within a "
        "hand-off's lead than fit, stop now the training that has just checkpointed and start serving on its "
        "chips (reason HandoffAhead). Off by default: on the bundled traces it lost no less work and cost "
        "attainment in one cell (docs/controller.md, the hand-off figures). The forecast's reactivation "
        "hysteresis applies either way.",
    )
    yield_at_checkpoint: Literal["off", "balance", "band"] = Field(
        default="balance",
        description="For victims that lose work when stopped (they neither save on SIGTERM within their grace "
        "period nor honour checkpoint requests): stop one right after its own checkpoint, before serving needs "
        "its chips, when serving's count is likely to rise into them before its next checkpoint. The chance is "
        "measured from how the policy's wanted count moved in the last hour (a driftless random walk with that "
        "variance: reflection principle). balance (default): yield when the work and grace period a later stop "
        "would cost exceed the chips left idle if the rise does not come (chance > interval / (interval + "
        "grace period)); band: yield when the 95 % upper band reaches its chips (chance of 5 % or more); off: "
        "never. "
        "The same rule keeps such a Workload stopped rather than resume it into chips serving is as likely to "
        "take before its first checkpoint.",
    )
    max_preemptions_per_hour: int = Field(
        default=2, ge=0,
        description="This controller stops one Workload at most this many times in any hour; past it serving "
        "waits (WaitingForCapacity) or Kueue's own preemption decides.",
    )


class LabelSelectorSpec(SpecModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)
    match_labels: dict[str, str] = Field(default_factory=dict, alias="matchLabels")


#: Label keys the JobSet controller puts on the Jobs and pods it creates, never on the JobSet or its pod template
#: (jobset ``api/jobset/v1alpha2``: ``jobset-name``, ``replicatedjob-name``, ``job-index``, ``job-key``, …).
CHILD_ONLY_LABEL_PREFIX = "jobset.sigs.k8s.io/"


class PreemptibleSpec(SpecModel):
    """Training workloads this policy may deactivate to make room.

    ``selector.matchLabels`` is matched against each training job's own labels (Job, JobSet, RayJob) and its
    pod template's labels as written in the job (``spec.template``, ``spec.replicatedJobs[].template``), never
    against labels a controller adds to the children it creates later."""

    namespace: str = Field(pattern=DNS_LABEL_PATTERN)
    selector: LabelSelectorSpec = Field(
        default_factory=LabelSelectorSpec,
        description="Matched against each Job/JobSet/RayJob's own labels and its pod template's labels as "
        "written in the job; not against labels controllers add to child Jobs or pods.",
    )

    @field_validator("selector")
    @classmethod
    def _matchable(cls, selector: LabelSelectorSpec) -> LabelSelectorSpec:
        for key in selector.match_labels:
            if key.startswith(CHILD_ONLY_LABEL_PREFIX):
                raise ValueError(
                    f"matchLabels key {key!r} is set by the JobSet controller on the Jobs and pods it creates, "
                    "never on the JobSet or its pod template, which is what a preemptible selector is matched "
                    "against: it would select nothing; select by a label the JobSet itself carries (the codelab's "
                    "JobSets carry kueue.x-k8s.io/queue-name)"
                )
        return selector


class ActuationSpec(SpecModel):
    """How decisions reach the target: ``direct`` scales it; ``hpaFloor`` raises/lowers an existing
    HPA's minReplicas (advisory mode, beside a user's HPA)."""

    mode: Literal["direct", "hpaFloor"] = "direct"
    hpa_name: str | None = Field(default=None, description="The HPA to advise (mode hpaFloor).")


PolicyConfig = Annotated[
    HpaPolicyConfig | QueuePolicyConfig | KpaPolicyConfig | SloPolicyConfig | DisaggregatedPolicyConfig,
    Field(discriminator="type"),
]


class Spec(SpecModel):
    target: TargetSpec
    min_replicas: int = Field(default=1, ge=0, le=MAX_REPLICAS)
    max_replicas: int = Field(ge=1, le=MAX_REPLICAS)
    evaluation_period_seconds: float = Field(
        default=15.0, ge=1, le=3600, description="Default 15 s, the HPA sync period; 1 s to 1 h."
    )
    source: SourceSpec | None = Field(default=None, description="Default source for the signals.")
    signals: list[SignalSpec] = Field(min_length=1)
    policy: PolicyConfig
    metric_safety: MetricSafetySpec = Field(default_factory=fast.shared_default(MetricSafetySpec))
    scale_to_zero: ScaleToZeroSpec = Field(default_factory=fast.shared_default(ScaleToZeroSpec))
    capacity: CapacitySpec | None = None
    preemptible: list[PreemptibleSpec] = Field(default_factory=list)
    actuation: ActuationSpec = Field(default_factory=fast.shared_default(ActuationSpec))

    @model_validator(mode="after")
    def _consistent(self) -> Spec:
        # Each error names the field it is about (FieldError.loc), so `autoscaler validate` can print the
        # line of that field rather than the line of `spec:`.
        if self.min_replicas > self.max_replicas:
            raise FieldError(
                f"minReplicas ({self.min_replicas}) is greater than maxReplicas ({self.max_replicas})",
                "minReplicas",
            )
        if self.min_replicas == 0 and not self.scale_to_zero.enabled:
            raise FieldError(
                "minReplicas 0 needs scaleToZero.enabled: true (and an activation threshold)", "minReplicas"
            )
        names = [s.name for s in self.signals]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise FieldError(
                    f"signal names must be unique; {name!r} is defined twice", "signals", i, "name"
                )
        known = set(names)
        for i, sig in enumerate(self.signals):
            missing = sig.expression_names() - known
            if missing:
                raise FieldError(
                    f"signal {sig.name!r} refers to undefined signal(s) {', '.join(sorted(missing))}; "
                    f"defined: {', '.join(names)}",
                    "signals", i, "expr",
                )
        _check_no_cycles(self.signals)
        for i, sig in enumerate(self.signals):
            source = sig.source or self.source
            if sig.preset is not None and source is not None:
                why = catalog.get(sig.preset).why_unavailable(source.type)
                if why is not None:
                    raise FieldError(
                        f"signal {sig.name!r}: preset {sig.preset} cannot be read from a {source.type} source: {why}",
                        "signals", i, "preset",
                    )
        for ref in self.policy.signal_refs():
            if ref not in known:
                raise FieldError(
                    f"policy refers to undefined signal {ref!r}; defined: {', '.join(names)}",
                    "policy", *_locate(self.policy, ref),
                )
        self._check_targets()
        activation = self.scale_to_zero.activation
        if activation and activation.signal not in known:
            raise FieldError(
                f"scaleToZero.activation refers to undefined signal {activation.signal!r}; "
                f"defined: {', '.join(names)}",
                "scaleToZero", "activation", "signal",
            )
        if self.actuation.mode == "hpaFloor" and not self.actuation.hpa_name:
            raise FieldError("actuation mode hpaFloor needs 'hpaName'", "actuation", "hpaName")
        return self

    def _check_targets(self) -> None:
        """A policy with several targets: ``spec.target`` is one of them (the one its name, lease and logs go
        by) and every signal's ``pool`` names one; the pools are whole slices, so no scale-to-zero or HPA floor."""
        pools = self.pools()
        if not pools:
            for i, sig in enumerate(self.signals):
                if sig.pool is not None:
                    raise FieldError(
                        f"signal {sig.name!r}: pool applies to policies with several targets (type disaggregated)",
                        "signals", i, "pool",
                    )
            return
        keys = {t.ref().key for t in pools.values()}
        if self.target.ref().key not in keys:
            raise FieldError(
                f"spec.target {self.target.ref().key} must be one of the policy's variants' targets: "
                f"{', '.join(sorted(keys))}",
                "target",
            )
        for i, sig in enumerate(self.signals):
            if sig.pool is not None and sig.pool not in pools:
                raise FieldError(
                    f"signal {sig.name!r}: pool {sig.pool!r} is not a variant of the policy; variants: "
                    f"{', '.join(pools)}",
                    "signals", i, "pool",
                )
        if self.scale_to_zero.enabled:
            raise FieldError("a policy with several targets does not scale to zero", "scaleToZero", "enabled")
        if self.actuation.mode != "direct":
            raise FieldError("a policy with several targets scales them directly (actuation mode direct)",
                             "actuation", "mode")
        if self.metric_safety.fallback is not None:
            raise FieldError("a policy with several targets holds on unknown signals; fallback is not supported",
                             "metricSafety", "fallback")

    def pools(self) -> dict[str, TargetSpec]:
        """Variant name -> target, for a policy with several targets; empty for the others."""
        if isinstance(self.policy, DisaggregatedPolicyConfig):
            return self.policy.targets()
        return {}

    def targets(self) -> list[TargetSpec]:
        """Every target this policy scales: ``spec.target``, then the other pools' in the policy's order."""
        primary = self.target.ref().key
        return [self.target, *(t for t in self.pools().values() if t.ref().key != primary)]

    def signal_target(self, sig: SignalSpec) -> TargetSpec:
        """The target whose pods ``sig`` reads (its ``pool``'s, else ``spec.target``)."""
        return self.target if sig.pool is None else self.pools()[sig.pool]

    def signal(self, name: str) -> SignalSpec:
        for sig in self.signals:
            if sig.name == name:
                return sig
        raise KeyError(name)


def _locate(model: BaseModel, value: str) -> tuple[str | int, ...]:
    """The camelCase path of the first field under ``model`` holding ``value`` (how a policy type stores a
    signal reference is its own business: ``metrics[i].signal``, ``work[i]``, ``signal``...)."""

    def walk(obj: object, path: tuple[str | int, ...]) -> tuple[str | int, ...] | None:
        if obj == value:
            return path
        if isinstance(obj, BaseModel):
            for field_name, info in type(obj).model_fields.items():
                found = walk(getattr(obj, field_name), (*path, info.alias or field_name))
                if found is not None:
                    return found
        elif isinstance(obj, list | tuple):
            for i, item in enumerate(obj):
                found = walk(item, (*path, i))
                if found is not None:
                    return found
        return None

    return walk(model, ()) or ()


def _check_no_cycles(signals: list[SignalSpec]) -> None:
    if all(s.expr is None for s in signals):
        return  # no composite signal (most policies): nothing refers to another, nothing can form a cycle
    index = {s.name: i for i, s in enumerate(signals)}
    deps = {s.name: s.expression_names() for s in signals}
    if not any(deps.values()):
        return  # no signal refers to another: nothing can form a cycle
    visiting: set[str] = set()
    done: set[str] = set()
    for name in deps:
        _visit(name, [], deps, index, visiting, done)


def _visit(
    name: str, path: list[str], deps: dict[str, frozenset[str]], index: dict[str, int], visiting: set[str],
    done: set[str],
) -> None:
    # A module-level function, not a closure calling itself (a reference cycle per policy, through its cell).
    if name in done:
        return
    if name in visiting:
        cycle = " -> ".join([*path, name])
        raise FieldError(f"signal expressions form a cycle: {cycle}", "signals", index[name], "expr")
    visiting.add(name)
    for dep in sorted(deps.get(name, ())):
        _visit(dep, [*path, name], deps, index, visiting, done)
    visiting.discard(name)
    done.add(name)


class ScalingPolicy(BaseModel):
    """One ``kind: ScalingPolicy`` document."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True)

    api_version: Literal["autoscaler.dev/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["ScalingPolicy"]
    metadata: Metadata
    spec: Spec
