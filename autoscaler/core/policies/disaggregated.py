"""Policy type ``disaggregated``: prefill and decode pools sized together, in whole slices, within one budget.

A disaggregated deployment (the dynamic-slicing codelab, ``shared/seeds/003_…``) serves one model from two
pools of LeaderWorkerSets: **prefill** groups turn prompts into KV caches, **decode** groups receive the KV
cache and generate. Each LWS replica is one group on one TPU slice (``2x2x2``: 8 chips), so a pool grows and
shrinks by whole slices. A pool may be served by several *variants*: LWSs of the same role with different
slice shapes (``2x2x2`` and ``2x4x4`` groups). Changing a running LWS's group size in place is a rolling update
of every group, so this policy resizes through variants instead: it shifts groups between them.

This is the first policy type with more than one target: every variant names its own target, and one
evaluation decides all of them together (``engine.decide`` calls ``plan`` and turns the result into one
``ScaleDecision`` per target, after one joint capacity request).

Each evaluation, per role (``ready``/``spec`` groups per variant; ``T_v`` the variant's declared tokens/s per
group, a conservative prior from a profile):

0. **Learned capacity** (``κ`` per role, starts at 1 = the declared ``tokensPerSecond``), learned online by the
   ``slo`` type's own rule (``slo.learn_capacity_scale``, not a copy): when requests have waited on every ready
   group of the role for ``slo.SATURATED_EVALUATIONS`` evaluations in a row and over the token signal's whole
   rate window (the rate is a trailing average: under a younger burst it reads below capacity), its latency
   quantile at risk, on a ready count settled for ``slo.SETTLE_S``, the tokens/s the role serves per group
   of prior capacity *is* its capacity (κ moves toward it); otherwise what it serves is a lower bound (κ
   rises to it at once); within ``slo.CAPACITY_SCALE_BOUNDS``.
   Prefill learns from prompt tokens/s, decode from generated tokens/s; kept in ``DisaggState``.
0b. **Utilization at the SLO** (``c`` per role, starts at ``targetUtilization``), learned from the latency
   headroom by the ``slo`` type's rule (``sizing.learn_utilization``, shared, not a copy): while the role's
   quantile is at risk on a count the model thought enough, ``c`` drops in proportion to the excess; while it
   is comfortably met (≤ ``sizing.RELAX_FRACTION`` of the objective) on a settled count, ``c`` recovers and
   probes upward to the highest load per group proven comfortable / (1 − ``HYSTERESIS``), at most 1. The
   need below is sized at ``c``, so a role whose latency has room runs its groups hotter (fewer chips), and
   one whose latency suffers at ``targetUtilization`` runs them cooler. Unlike the ``slo`` type it keeps no
   memory of counts found short (the at-risk rule withdraws what was proven; a shrink waits for the peak).
   With ``waitForAdmission`` (the default, as in the ``slo`` type) a group asked for that waits for Kueue's
   admission is, to this loop, as one starting: ``c`` does not fall until every group asked for serves (the
   risk that asked for it is not new evidence while it waits for chips; it still recovers and probes).
0c. **Decode's slot occupancy** (opt-in ``decode.slotOccupancy``; ``slot_target``, ``slot_bound``): decode's
   saturation is a wait for a slot (vLLM's ``--max-num-seqs``), which in P/D serving neither its time per output
   token (a batch's step) nor prefill's TTFT shows. With ``signals.running`` (sequences holding a slot) over the
   ``slots`` each variant declares, on a settled count: ``o``, the mean occupancy over the token rate's window
   (the router's KV- and queue-aware picking is taken to fill every group alike: ``estimate``); ``o*`` = 1 −
   β/√slots of the smallest ready variant, β where the Halfin-Whitt delay probability ``[1 + βΦ(β)/φ(β)]⁻¹`` is
   ``1 − q``, ``q`` the TTFT quantile (the share of requests its objective lets a slot wait delay; exponential
   service is that limit's premise: ``estimate``); and ``slot_bound``, a load (of the learned capacity) the
   groups carry at ``o*``, from the concavity of a batch's throughput (a step is a fixed time plus a time per
   sequence) with the full batch at least the declared ``tokensPerSecond``. ``c`` probes up to that bound
   (rule 0b's pace, never above 1, not while the latency is at risk, requests wait on every group, or a group
   asked for is not serving); a shrink may land at it (rule 3b's landing, never above ``c``); and the need is
   at least ``o / o*`` of the ready capacity (the same load over more groups lowers each one's occupancy at
   least in proportion). No constant is fitted: ``o*`` follows from the slots and the objective's quantile.
1. **Need** in tokens/s of *declared* capacity, the largest of what is known:
   prefill: ``promptTokens / (c·κ)``; decode: ``generationTokens / (c·κ)`` and ``kvCacheUsage × ready capacity /
   kvTarget`` (a group's KV cache is taken as proportional to its token rate: ``estimate``). With
   ``coldStartSeconds`` (opt-in) the token rate is first raised to its forecast over the cold start
   (``sizing.trend_and_burst``: the trend's lower confidence bound, bursts; a floor only; a fresh controller's
   first rate window is not history). **Latency**: when the measured quantile (TTFT for prefill, time per
   output token for decode) is at or above its objective, or requests have waited on every ready group for
   ``slo.SATURATED_EVALUATIONS`` evaluations in a row (saturation as the ``slo`` type defines it: a moment's
   queue is not), and no group of the role is starting, the need is at least the ready capacity plus one group
   of the variant with the fewest chips.
1c. **Arriving prompts** (prefill, opt-in ``arrivingPromptTokens``: prompt tokens/s the router received over a
   short rate window ``W``, counted on arrival, so a burst shows while it still queues, where served counters
   stop at capacity): the need is at least ``arriving · W / (W + D) / (c·κ)``, ``D`` the TTFT objective
   (``arrival_need``: the window's prompts served by its end plus the objective, at the utilization and
   capacity learned by rules 0 and 0b, as the served rate is sized). It enters the need history like every
   need, so a shrink keeps what the bursts of the last ``scaleDownDelaySeconds`` needed (rule 3).
1d. **Latency evidence of the groups that serve now**: a latency quantile is a trailing window's (its signal's
   ``quantile.windowSeconds``); while that window still holds time before the role's ready count last rose, it
   is evidence of fewer groups than serve now, so it neither adds a group (rule 1's latency bump) nor lowers
   ``c`` (rule 0b) nor proves a load; it still forbids a shrink (rule 2). A fall of the ready count makes the
   quantile no staler (it was measured on more groups). A quantile whose window is not known counts at once.
2. **Unknown never shrinks.** With every demand signal of a role unknown the role holds (``need`` unknown);
   with some known, the known part is a lower bound: the role may grow on it, never shrink. A role also never
   shrinks while its latency quantile is unknown or at risk (≥ ``RISK_FRACTION`` of the objective), nor while
   requests wait on every ready group.
3. **Scale-down delay**: a shrink sizes for the highest need of the last ``scaleDownDelaySeconds`` with
   ``HYSTERESIS`` headroom, so a steady load is a fixed point; each past need is remembered as its load (the
   served and arriving tokens/s, ``NeedSample``) and sized at the utilization and capacity learned *now*, so a
   ``c`` or ``κ`` learned since is no rise or fall (the ``slo`` type's rule 6 recomputes its loads the same
   way); the parts that are capacity already (KV use, the latency bump) are remembered as they were. No
   shrink before a whole window has been observed since the policy's first evaluation. With
   ``coldStartSeconds``, not below ``(rate + rise) / (c·κ)``, ``rise``
   the largest rise of the rate within one cold start seen over ``sizing.lookback`` (the burst headroom the
   traffic has shown: a group released now is missing that long if it comes back).
3b. **Prefill's shrink headroom from a queue model** (``comfortable_load``, ``shrink_headroom``): the 20 %
   of rule 3 lands a shrink at ``c·(1 − HYSTERESIS)`` per group, at most the load proven comfortable (rule
   0b's probe). Each prefill group is a single-server queue (one prompt at a time); its wait grows as
   ``ρ/(1 − ρ)`` (Kingman's G/G/1), calibrated on the TTFT quantile measured at the most loaded settled
   readings of the last ``scaleDownDelaySeconds`` (the whole quantile taken as wait: only an over-estimate of
   its growth). Where that model predicts the quantile at most ``RELAX_FRACTION`` of the objective at a higher
   load ``ρ*``, the shrink may land there, never above ``c`` (where the need grows again). Not at all while
   any reading of that window was at risk or had requests waiting on every ready group (a burst the minute's
   quantile does not show), nor for decode (its time per output token is a batch's step, not a queue's wait).
4. **Mix** (``choose_mix``): the counts per variant that carry the need at the fewest chips, then the fewest
   new groups, then the most capacity, then the fewest changes from the current counts; within each
   variant's min/max and the role's ``minGroups``; with an inventory (``core.topology``), only mixes whose
   new groups can be placed (stopping preemptible training if it must), on the view the grant places into
   (``arbitration.sliced_view``: training Kueue evicts for a waiting group is room; every pool's groups that
   wait for admission take their places first, so no new group is counted on one of theirs; a mix adding no
   group needs no place). A variant's groups are removed
   only while the ready groups left still carry the need: a shift to another variant adds the new groups
   first and removes the old once the new are serving.
4b. **Make-room shift**: a larger shape may fit nowhere because the role's own smaller groups fragment the
   blocks (serving never yields, and adding first needs a free place). When the mix that carries the need
   at the fewest chips needs a larger group that fits nowhere, the role otherwise holds its count, every
   group is ready and a whole ``scaleDownDelaySeconds`` has been observed, one smaller group goes first:
   the one a scale-down of its variant removes (``SliceCapacity.removal_order``; unknown: no shift), and only
   when its region, once free, lets the larger group be placed (stopping preemptible training if it must)
   and the groups left still carry the need now (the load at the learned capacity and utilization). The
   next evaluations add the larger group, sized for what the role carried before (never more chips than
   before), and rule 4 removes the smaller ones once it serves. The shift waits for its place, not for a
   fixed time: while a removed group still holds its place in the inventory (its Workload not yet released
   by Kueue: pods terminating, a slow API server), the shift stands however long that takes; once the place
   is free and the larger group still cannot be added there (another tenant took it, the role's need
   changed), the shift ends and says so (``Places``). With the removal order unknown (a live cluster whose
   reader cannot say which group goes) the role never shifts this way.
5. **One budget** (``fit_budget``): the pools together never hold more than ``chipBudget`` chips (nor more
   than ``spec.maxReplicas`` groups): starting from each variant's minimum, slices are granted one at a time
   to the role whose need is least covered, so under pressure the split follows the two needs and neither
   pool gets more than its signals justify. A role that holds (unknown) keeps its count.

The engine then makes **one** capacity request for the chips of the whole plan (``arbitration``), so the two
pools can never together ask for more than is free or claim the same victim; what is granted is split again
by rule 5.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import Field, field_validator, model_validator

from autoscaler.core import sizing
from autoscaler.core.model import SignalValue
from autoscaler.core.policies import slo
from autoscaler.core.policies.base import Context, Recommendation
from autoscaler.core.policies.slo import RISK_FRACTION  # one design constant for both latency loops
from autoscaler.core.specbase import MAX_REPLICAS, FieldError, SpecModel
from autoscaler.core.targetspec import DNS_LABEL_PATTERN, TargetSpec
from autoscaler.core.topology import Inventory, Occupant, Shape, plan_groups

Role = Literal["prefill", "decode"]
ROLES: tuple[Role, Role] = ("prefill", "decode")

#: Headroom kept on a shrink: the smaller mix must carry the peak need / (1 − HYSTERESIS). Design constant, the
#: ``slo`` type's default hysteresis: a group released too early costs a whole cold start (minutes on TPU).
HYSTERESIS = 0.2
#: Above this many candidate mixes per role, the mix is chosen greedily (cheapest chips per token first).
EXHAUSTIVE_MIXES = 20_000
_EPS = 1e-9


class VariantSpec(SpecModel):
    """One LeaderWorkerSet serving a role on slices of one shape."""

    name: str = Field(pattern=DNS_LABEL_PATTERN, description="Names the variant in signals (pool:) and messages.")
    target: TargetSpec
    slice_topology: str = Field(description="The slice of one group, e.g. 2x2x2 (8 chips) or 2x4x4 (32 chips).")
    tokens_per_second: float = Field(
        gt=0,
        description="What one group serves at full load: prompt tokens/s for prefill, generated tokens/s for "
        "decode (a conservative prior: a profile or a measurement; say its source in the policy file).",
    )
    min_replicas: int = Field(default=0, ge=0, le=MAX_REPLICAS)
    max_replicas: int = Field(ge=1, le=MAX_REPLICAS)
    slots: int | None = Field(
        default=None, ge=1, le=1_000_000,
        description="Decode: the sequences one group runs at once (vLLM's --max-num-seqs; say its source in the "
        "policy file): with decode's slotOccupancy, rule 0c sizes decode by running over slots.",
    )

    @field_validator("slice_topology")
    @classmethod
    def _shape(cls, value: str) -> str:
        Shape.parse(value)  # ValueError with the form expected
        return value

    @model_validator(mode="after")
    def _bounds(self) -> VariantSpec:
        if self.min_replicas > self.max_replicas:
            raise FieldError(
                f"minReplicas ({self.min_replicas}) is greater than maxReplicas ({self.max_replicas})", "minReplicas"
            )
        return self

    @property
    def chips(self) -> int:
        return Shape.parse(self.slice_topology).chips


class PrefillSignalsSpec(SpecModel):
    """Names of the policy's signals (``spec.signals``), each the total over the prefill variants."""

    prompt_tokens: str | None = Field(default=None, description="Prompt tokens/s (a counter read as rate).")
    waiting: str | None = Field(default=None, description="Requests waiting for prefill.")
    ttft: str | None = Field(default=None, description="A time-to-first-token quantile, seconds.")
    arriving_prompt_tokens: str | None = Field(
        default=None,
        description="Prompt tokens/s *arriving* at the router, over a short rate window (rule 1c): e.g. "
        "router.request_bytes times a tokens-per-byte ratio measured from router.input_tokens. Served counters "
        "stop at capacity; this one sees a burst while it queues.",
    )

    def names(self) -> list[str]:
        return [n for n in (self.prompt_tokens, self.waiting, self.ttft, self.arriving_prompt_tokens)
                if n is not None]


class DecodeSignalsSpec(SpecModel):
    """Names of the policy's signals, each over the decode variants (KV use: their average, 0-1)."""

    generation_tokens: str | None = Field(default=None, description="Generated tokens/s (a counter read as rate).")
    kv_cache_usage: str | None = Field(default=None, description="KV-cache use of the decode groups, 0-1.")
    waiting: str | None = Field(default=None, description="Requests waiting for a decode slot.")
    time_per_output_token: str | None = Field(default=None, description="A time-per-output-token quantile, s.")
    running: str | None = Field(
        default=None,
        description="Sequences running on the decode groups, the total over the variants (vllm.running): over "
        "the variants' declared slots, the slot occupancy rule 0c (slotOccupancy) reads.",
    )

    def names(self) -> list[str]:
        return [
            n for n in (self.generation_tokens, self.kv_cache_usage, self.waiting, self.time_per_output_token,
                        self.running)
            if n is not None
        ]


class _RoleSpec(SpecModel):
    target_utilization: float = Field(
        default=0.7, gt=0, le=1, description="The share of a group's declared tokens/s the need is sized at."
    )
    min_groups: int = Field(default=1, ge=0, le=MAX_REPLICAS, description="Groups of this role, at least.")
    variants: list[VariantSpec] = Field(min_length=1, max_length=4)


class PrefillSpec(_RoleSpec):
    ttft_seconds: float = Field(gt=0, description="The TTFT objective (at the signal's quantile).")
    signals: PrefillSignalsSpec

    @model_validator(mode="after")
    def _demand(self) -> PrefillSpec:
        if self.signals.prompt_tokens is None and self.signals.waiting is None:
            raise FieldError("prefill needs a demand signal: promptTokens or waiting", "signals")
        return self


class DecodeSpec(_RoleSpec):
    time_per_output_token_seconds: float = Field(gt=0, description="The time-per-output-token objective.")
    kv_target: float = Field(default=0.8, gt=0, le=1, description="KV-cache use the decode groups are sized at.")
    slot_occupancy: bool = Field(
        default=False,
        description="Rule 0c (opt-in): decode sized by its slot occupancy, signals.running over the variants' "
        "slots: it runs at the load its groups carry at a mean occupancy 1 - beta/sqrt(slots) (square-root "
        "staffing at the share of requests the TTFT quantile leaves waiting), bounded by the concavity of a "
        "batch's throughput. Needs signals.running, generationTokens and every decode variant's slots. Measured, "
        "not shipped (docs/tpu.md, codelab7): the variants window from 1.228 to 1.108 times the oracle at equal "
        "attainment, but 0.03 chip-h more training lost.",
    )
    signals: DecodeSignalsSpec

    @model_validator(mode="after")
    def _demand(self) -> DecodeSpec:
        s = self.signals
        if s.generation_tokens is None and s.kv_cache_usage is None and s.waiting is None:
            raise FieldError("decode needs a demand signal: generationTokens, kvCacheUsage or waiting", "signals")
        if self.slot_occupancy:
            if s.running is None:
                raise FieldError("slotOccupancy (rule 0c) needs signals.running: the sequences holding a slot",
                                 "signals", "running")
            for i, v in enumerate(self.variants):
                if v.slots is None:
                    raise FieldError(f"slotOccupancy (rule 0c) needs every decode variant's slots; {v.name!r} "
                                     "declares none", "variants", i, "slots")
            if s.generation_tokens is None:
                raise FieldError("slotOccupancy (rule 0c) needs generationTokens: the load it bounds",
                                 "signals", "generationTokens")
        return self


class DisaggregatedPolicyConfig(SpecModel):
    type: Literal["disaggregated"]
    prefill: PrefillSpec
    decode: DecodeSpec
    chip_budget: int | None = Field(
        default=None, ge=1, le=10**7,
        description="The most chips the pools may hold together (both roles, every variant). Kueue capacity "
        "(spec.capacity) limits them further.",
    )
    scale_down_delay_seconds: float = Field(
        default=300.0, ge=0, le=86400, description="A shrink sizes for the highest need seen this long."
    )
    cold_start_seconds: float | None = Field(
        default=None, gt=0, le=7200,
        description="From asking for a group to its serving (Kueue admission, slice provisioning, model load). "
        "With it, each role's demand is forecast over it (trend and bursts) and a shrink keeps room for the "
        "largest rise seen within it (rule 3); without it, neither.",
    )
    wait_for_admission: bool = Field(
        default=True,
        description="Rule 0b lowers a role's utilization at the SLO only when every group asked for serves: not "
        "while one starts (as always) nor while one waits for Kueue's admission (its pods carry Kueue's scheduling "
        "gate, or do not exist yet). The latency at risk that asked for the group is not new evidence while the "
        "group waits for chips (the ``slo`` type's ``waitForAdmission``, the same rule: "
        "``sizing.learn_utilization``'s ``admitting``). false restores the old rule.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> DisaggregatedPolicyConfig:
        seen_names: set[str] = set()
        seen_targets: set[str] = set()
        for role in ROLES:
            for i, v in enumerate(self.role(role).variants):
                if v.name in seen_names:
                    raise FieldError(f"variant name {v.name!r} is used twice", role, "variants", i, "name")
                key = v.target.ref().key
                if key in seen_targets:
                    raise FieldError(f"target {key} is named by two variants", role, "variants", i, "target")
                seen_names.add(v.name)
                seen_targets.add(key)
        refs = self.signal_refs()
        dupes = sorted({n for n in refs if refs.count(n) > 1})
        if dupes:
            raise FieldError(f"one signal in two roles: {', '.join(dupes)}", "decode", "signals")
        if self.chip_budget is not None:
            floor = sum(v.min_replicas * v.chips for r in ROLES for v in self.role(r).variants)
            if floor > self.chip_budget:
                raise FieldError(
                    f"the variants' minReplicas hold {floor} chips, more than chipBudget {self.chip_budget}",
                    "chipBudget",
                )
        return self

    def role(self, role: Role) -> PrefillSpec | DecodeSpec:
        return self.prefill if role == "prefill" else self.decode

    def variants(self) -> list[tuple[Role, VariantSpec]]:
        return [(r, v) for r in ROLES for v in self.role(r).variants]

    def targets(self) -> dict[str, TargetSpec]:
        """Variant name -> its target: every target this policy scales."""
        return {v.name: v.target for _, v in self.variants()}

    def signal_refs(self) -> list[str]:
        return [*self.prefill.signals.names(), *self.decode.signals.names()]


# ---------------------------------------------------------------------------------------------- the pure rule


@dataclass(frozen=True, slots=True)
class VariantStatus:
    """One variant's target at this evaluation (groups)."""

    spec: int
    ready: int
    starting: int = 0
    #: Groups asked for that wait for Kueue's admission (``ReplicaStatus.gated``): not starting, no capacity on
    #: its way for them until Kueue admits them (rule 0b's ``waitForAdmission``).
    gated: int = 0


@dataclass(frozen=True, slots=True)
class RoleNeed:
    """What one role's signals justify, in tokens/s of capacity."""

    role: Role
    #: None: no demand signal known (the role holds).
    need: float | None
    #: Whether the signals allow a shrink (all known, latency known and not at risk, nothing waiting).
    may_shrink: bool
    message: str
    #: A shrink keeps at least this (tokens/s of declared capacity): the load now plus the largest rise seen
    #: within one cold start (rule 3); 0 without ``coldStartSeconds``.
    keep: float = 0.0
    keep_text: str = ""
    #: The need's parts as rule 3 remembers them (``NeedSample``): the load in tokens/s that was divided by the
    #: utilization and capacity learned (served and arriving tokens), and the largest part that was not (KV
    #: use, the latency bump: capacity already).
    load: float = 0.0
    fixed: float = 0.0


@dataclass(frozen=True, slots=True)
class QueueSample:
    """One settled evaluation's prefill load per ready group (of the learned capacity) and its TTFT quantile
    over the objective (rule 3b)."""

    t: float
    load: float
    ratio: float


def kingman_factor(load: float) -> float:
    """``ρ/(1 − ρ)``: how a single-server queue's wait grows with its utilization ρ (Kingman's G/G/1
    approximation of the mean wait, ``E[W] ≈ ρ/(1 − ρ) · E[S] · (c_a² + c_s²)/2``: J. F. C. Kingman, "The
    single server queue in heavy traffic", Proc. Cambridge Philosophical Society 57(4), 1961)."""
    return load / (1.0 - load)


def comfortable_load(samples: Sequence[QueueSample], *, relax: float, hysteresis: float) -> QueueModel | None:
    """Rule 3b: the load per prefill group up to which the TTFT quantile is predicted comfortably met (≤
    ``relax`` of its objective), by a G/G/1 queue per group calibrated on what was measured.

    Each prefill group works one prompt at a time behind the router: a single-server queue whose TTFT is its
    own prefill plus its wait. The wait grows as ``ρ/(1 − ρ)`` (``kingman_factor``; the burstiness and the
    prompt lengths are the factor ``E[S]·(c_a² + c_s²)/2`` the measurement calibrates, not assumed). The whole
    measured quantile is taken as wait (none as the prompt's own prefill), which only over-predicts its growth
    (a constant part does not grow); the quantile's own tail grows more slowly than the mean wait above 3 % of
    load (the ``slo`` type's ``sizing.prefill_miss``: ``ln(ρ/(1 − q))/(1 − ρ)`` against ``ρ/(1 − ρ)``), so the
    mean wait's growth is the conservative one. And ρ is the load over the *learned* capacity, which is at most
    the true one (κ rises only to what was served, or is learned at saturation): a lower true utilization
    grows the wait more slowly still. Calibrated on the most loaded measurements (within ``hysteresis`` of the
    highest load measured: the shortest extrapolation), by the worst of them. None without a measurement, or
    when any reading of the window was at risk (≥ ``RISK_FRACTION``) or had requests waiting on every ready
    group (a burst the minute's quantile at its mean load does not show; ``ratio`` infinite): then only what
    was proven counts (rule 0b)."""
    usable = [s for s in samples if 0.0 < s.load < 1.0 and math.isfinite(s.ratio)]
    if not usable or any(s.ratio >= RISK_FRACTION for s in samples):
        return None
    top = max(s.load for s in usable)
    band = [s for s in usable if s.load >= top * (1.0 - hysteresis)]
    worst = max(band, key=lambda s: s.ratio / kingman_factor(s.load))
    per_factor = worst.ratio / kingman_factor(worst.load)
    if per_factor <= 0:
        return QueueModel(1.0, worst)
    x = relax / per_factor
    return QueueModel(min(1.0, x / (1.0 + x)), worst)


@dataclass(frozen=True, slots=True)
class QueueModel:
    """Rule 3b's answer: the load per group predicted comfortable, and the measurement it was calibrated on."""

    load: float
    calibrated: QueueSample


def shrink_headroom(utilization: float, comfortable: float | None) -> float:
    """Rules 3b and 0c: the headroom a shrink keeps on the peak need. ``HYSTERESIS`` lands a shrink at ``c·(1 −
    HYSTERESIS)`` per group, at most the load proven comfortable (rule 0b); where a model predicts the
    objective met at a higher load ``comfortable`` (prefill: the queue model's ``ρ*``; decode: the slot bound),
    the shrink may land there, never above ``c`` (the load at which the need grows again), so the headroom is
    ``1 − min(c, max(c·(1 − HYSTERESIS), ρ*))/c``."""
    if comfortable is None or utilization <= 0:
        return HYSTERESIS
    land = max(utilization * (1.0 - HYSTERESIS), comfortable)
    return max(0.0, 1.0 - land / utilization)  # at most c: no headroom below 0


def halfin_whitt_wait(beta: float) -> float:
    """The probability that a request waits for a free server (here: a decode slot) when ``s`` servers carry an
    offered load ``R`` at ``s = R + β·√R`` (utilization ``1 − β/√s``), in the many-server heavy-traffic limit of
    Erlang's delay formula: ``[1 + β·Φ(β)/φ(β)]⁻¹`` (S. Halfin and W. Whitt, "Heavy-traffic limits for queues
    with many exponential servers", Operations Research 29(3):567-588, 1981). Exponential service is its
    premise (an ``estimate`` for a decode slot, held for a request's output tokens)."""
    density = math.exp(-beta * beta / 2.0) / math.sqrt(2.0 * math.pi)
    below = 0.5 * (1.0 + math.erf(beta / math.sqrt(2.0)))
    return 1.0 / (1.0 + beta * below / density)


def halfin_whitt_beta(wait_fraction: float) -> float:
    """The ``β`` at which ``halfin_whitt_wait(β)`` is ``wait_fraction`` (it falls from 1 at ``β`` 0; bisection)."""
    lo, hi = 0.0, 10.0  # halfin_whitt_wait(10) < 1e-20
    for _ in range(60):
        mid = (lo + hi) / 2.0
        if halfin_whitt_wait(mid) > wait_fraction:
            lo = mid
        else:
            hi = mid
    return hi


def slot_target(slots: int, wait_fraction: float) -> float:
    """Rule 0c's ``o*``: the mean slot occupancy of a group of ``slots`` slots at which at most ``wait_fraction`` of
    the requests wait for a slot, ``1 − β/√slots`` (square-root staffing, ``halfin_whitt_beta``)."""
    return max(0.0, 1.0 - halfin_whitt_beta(wait_fraction) / math.sqrt(slots))


def slot_bound(load: float, occupancy: float, target: float) -> float:
    """Rule 0c: a load (of the learned capacity) that decode's groups carry at a slot occupancy of at most
    ``target`` (``o*``), from one measurement: ``load`` ``L`` at mean occupancy ``occupancy`` ``o``.

    A batch's throughput ``T(B)`` is concave in its batch ``B``: a decode step takes a fixed time plus a time per
    sequence (the weights read once per step, each sequence's KV read once), so ``T(B) = B/(a + b·B)``; with
    ``T(0) = 0`` and the full batch at least the learned capacity (``T(1) ≥ 1``: the declared ``tokensPerSecond``
    is the conservative prior its field asks for, κ learned at most to what was served or at saturation), the
    curve lies above its chords: ``T(o*) ≥ o*`` (the chord from the origin), and for ``o < o*`` ``T(o*) ≥ L + (1 −
    L)·(o* − o)/(1 − o)`` (the chord from the measured point to the full batch), for ``o ≥ o*`` ``T(o*) ≥ L·o*/o``.
    The mean of ``T`` over a varying batch is at most ``T`` of the mean batch (concavity again), so a measured
    ``L`` below the curve only lowers the bound. Returns the largest of these, at most 1."""
    lo = min(1.0, max(0.0, load))
    if occupancy <= 0.0:
        through = target
    elif occupancy < target:
        through = lo + (1.0 - lo) * (target - occupancy) / (1.0 - occupancy)
    else:
        through = lo * target / occupancy
    return min(1.0, max(target, through))


@dataclass(frozen=True, slots=True)
class SlotReading:
    """Rule 0c at one evaluation: decode's mean slot occupancy over the token rate's window, the target ``o*``
    of its smallest ready variant, the load it carried (of the learned capacity) and the bound on the load it
    carries at ``o*``."""

    occupancy: float
    target: float
    load: float
    bound: float
    #: The share of requests that may wait for a slot, ``o*`` is set by.
    wait_fraction: float


@dataclass(frozen=True, slots=True)
class Learned:
    """One role's capacity learned online (rule 0; the ``slo`` type's rule 2, by its own functions)."""

    #: κ: what a group serves over its declared ``tokensPerSecond`` (1.0 = the prior).
    scale: float = 1.0
    #: Saturated samples κ has learned from (the first is taken whole, later ones averaged).
    samples: int = 0
    #: Consecutive evaluations with requests waiting on every ready group of the role.
    saturated_run: int = 0
    #: When the current run of such evaluations began (None: no queue now). The served rate is a trailing
    #: average over its rate window, so it reads the capacity only once the queue has held over a whole window.
    queued_since: float | None = None
    #: The ready group count and since when it holds (served rates are trailing averages).
    ready: int = -1
    ready_since: float = 0.0
    #: ``c``: the utilization (of the learned capacity) the role may run at and keep its latency objective
    #: (rule 0b, ``sizing.learn_utilization``); None until the first evaluation (then ``targetUtilization``).
    utilization: float | None = None
    #: The highest load per ready group at which the latency quantile was comfortably met (the upward probe).
    proven: float = 0.0
    #: ``(time, tokens/s)`` the role served, over ``sizing.lookback`` of the cold start (forecast, rises).
    rates: tuple[tuple[float, float], ...] = ()
    #: When the ready count last rose (None: not since the first evaluation). A latency quantile whose window
    #: began before it is evidence of fewer groups than serve now (rule 1d).
    rose_at: float | None = None
    #: Prefill only (rule 3b): each settled evaluation's load per ready group with its TTFT quantile over the
    #: objective, over the last ``scaleDownDelaySeconds``: what the queue model is calibrated on.
    queue_samples: tuple[QueueSample, ...] = ()
    #: This evaluation only: the groups asked for that wait for Kueue's admission when they held ``c`` from
    #: falling (rule 0b's ``waitForAdmission``; 0: nothing was held). For the message.
    held_for_admission: int = 0
    #: Decode only (rule 0c): ``(time, ready groups, slot occupancy)`` of the evaluations within the token
    #: rate's window, and this evaluation's reading (None: the rule had nothing to read or may not apply now).
    occupancy: tuple[tuple[float, int, float], ...] = ()
    slots: SlotReading | None = None

    def latency_of_now(self, now: float, window_s: float) -> bool:
        """Rule 1d: the latency quantile, over its window ``window_s``, is evidence of the ready count now: the
        count has not risen within the window (0: the window is not known, every quantile counts)."""
        return window_s <= 0 or self.rose_at is None or now - self.rose_at >= window_s

    @property
    def saturated(self) -> bool:
        return self.saturated_run >= slo.SATURATED_EVALUATIONS


@dataclass(frozen=True, slots=True)
class Shift:
    """A make-room shift under way (rule 4b): a smaller group was removed to free a place for a larger one."""

    #: The larger variant a group of which is to be added once its place is free.
    larger: str
    #: What the role's mix was sized to carry when the shift began (tokens/s of declared capacity).
    carry: float
    #: The role's chips before the removal: the shift never ends up holding more.
    chips: int
    at: float
    #: The occupant keys of the removed groups (``SliceCapacity.removal_order``): the shift waits while any
    #: of them still holds its place in the inventory (Kueue has not released it yet).
    freeing: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Places:
    """Rule 4b's word on places: each variant's groups (occupant keys) in the order a scale-down of it removes
    them (``SliceCapacity.removal_order``), and the occupant keys that hold a place in the inventory now."""

    removal_order: Mapping[str, Sequence[str]]
    held: frozenset[str]

    def first(self, variant: str, n: int) -> tuple[str, ...]:
        """The occupant keys of the ``n`` groups a scale-down of ``variant`` removes first."""
        return tuple(self.removal_order.get(variant, ())[:n])

    def holding(self, keys: Sequence[str]) -> tuple[str, ...]:
        """Those of ``keys`` that still hold a place."""
        return tuple(k for k in keys if k in self.held)


@dataclass(frozen=True, slots=True)
class NeedSample:
    """One evaluation's need as rule 3 remembers it: ``load`` tokens/s sized at the utilization ``c`` and the
    capacity ``κ`` learned *when the peak is taken* (``need``), and ``fixed`` tokens/s of capacity that are
    not (KV use, the latency bump). So a utilization or capacity learned since is no rise or fall of the
    need (the ``slo`` type's rule 6 recomputes its past loads the same way)."""

    t: float
    load: float
    fixed: float

    def need(self, utilization: float, kappa: float) -> float:
        return max(self.load / (utilization * kappa), self.fixed)


@dataclass(frozen=True, slots=True)
class DisaggState:
    """Remembered between evaluations (``PolicyState.algorithm``): each role's recent needs and learned
    capacity."""

    #: Each role's needs over the last ``scaleDownDelaySeconds``.
    prefill: tuple[NeedSample, ...] = ()
    decode: tuple[NeedSample, ...] = ()
    #: The first evaluation: no shrink before a whole ``scaleDownDelaySeconds`` has been observed (a fresh
    #: controller's first rates cover a partial window, and it has seen no peak yet).
    since: float | None = None
    prefill_learned: Learned = Learned()
    decode_learned: Learned = Learned()
    #: The previous evaluation (the capacity average's step is per second, not per evaluation).
    last_t: float | None = None
    #: Make-room shifts under way (rule 4b), at most one per role.
    shifts: tuple[Shift, ...] = ()

    def history(self, role: Role) -> tuple[NeedSample, ...]:
        return self.prefill if role == "prefill" else self.decode

    def learned(self, role: Role) -> Learned:
        return self.prefill_learned if role == "prefill" else self.decode_learned


@dataclass(frozen=True, slots=True)
class VariantCount:
    """The count the plan gives one variant, with why."""

    role: Role
    name: str
    current: int
    desired: int
    message: str


@dataclass(frozen=True, slots=True)
class JointPlan:
    counts: tuple[VariantCount, ...]
    needs: tuple[RoleNeed, ...]
    #: True when a role held because its demand is unknown.
    held: tuple[Role, ...]
    message: str


def _value(signals: Mapping[str, SignalValue], name: str | None) -> float | None:
    """A usable signal's value; None when not configured or unknown."""
    if name is None:
        return None
    sig = signals.get(name)
    if sig is None or not sig.ok or sig.value is None:
        return None
    return float(sig.value)


def _unknown(signals: Mapping[str, SignalValue], name: str | None) -> bool:
    return name is not None and _value(signals, name) is None


def capacity(variants: Sequence[VariantSpec], counts: Mapping[str, int]) -> float:
    return sum(v.tokens_per_second * counts.get(v.name, 0) for v in variants)


def chips(variants: Sequence[VariantSpec], counts: Mapping[str, int]) -> int:
    return sum(v.chips * counts.get(v.name, 0) for v in variants)


@dataclass(frozen=True, slots=True)
class _DemandNames:
    """What a role's rules read: its served tokens/s signal, its waiting signal, its latency quantile with that
    one's objective (s) and name in messages, and (decode only) its KV-cache gauge."""

    tokens: str | None
    waiting: str | None
    latency: str | None
    objective: float
    what: str
    kv: str | None = None


def _demand_names(spec: PrefillSpec | DecodeSpec) -> _DemandNames:
    if isinstance(spec, PrefillSpec):
        return _DemandNames(spec.signals.prompt_tokens, spec.signals.waiting, spec.signals.ttft, spec.ttft_seconds,
                            "TTFT")
    return _DemandNames(spec.signals.generation_tokens, spec.signals.waiting, spec.signals.time_per_output_token,
                        spec.time_per_output_token_seconds, "time per output token", spec.signals.kv_cache_usage)


def learn(
    config: DisaggregatedPolicyConfig, role: Role, signals: Mapping[str, SignalValue],
    status: Mapping[str, VariantStatus], prev: Learned, now: float, dt: float, *, warm: bool = True,
    rate_window_s: float = 0.0, latency_window_s: float = 0.0, slot_wait_fraction: float | None = None,
) -> Learned:
    """Rule 0: one role's κ after this evaluation, by the ``slo`` type's rule (``slo.learn_capacity_scale``).
    ``rate_window_s``: the token signals' rate window (a queue teaches κ only once held over a whole one);
    ``slot_wait_fraction``: the share of requests that may wait for a decode slot (rule 0c; None: no rule)."""
    spec = config.role(role)
    names = _demand_names(spec)
    tokens_name, waiting_name, latency_name, objective = names.tokens, names.waiting, names.latency, names.objective
    ready_groups = sum(status[v.name].ready for v in spec.variants)
    starting = sum(status[v.name].starting for v in spec.variants)
    # ``waitForAdmission``: groups asked for that wait for Kueue's admission are, to the latency loop, as
    # starting ones (the risk that asked for them is not new evidence until they serve).
    admitting = sum(status[v.name].gated for v in spec.variants) if config.wait_for_admission else 0
    ready_cap = capacity(spec.variants, {v.name: status[v.name].ready for v in spec.variants})
    ready_since = prev.ready_since if prev.ready == ready_groups else now
    rose_at = now if 0 <= prev.ready < ready_groups else prev.rose_at
    # Rule 1d: a quantile whose window began before the last rise of the ready count is no evidence of the
    # groups that serve now (neither lowers c nor proves a load).
    of_now = Learned(rose_at=rose_at).latency_of_now(now, latency_window_s)
    settled = now - ready_since >= slo.SETTLE_S and ready_groups > 0 and starting == 0
    queued_now = slo.queued_on_every_replica(_value(signals, waiting_name), ready_groups)
    run = prev.saturated_run + 1 if queued_now else 0
    queued_since = (prev.queued_since if prev.queued_since is not None and prev.saturated_run > 0 else now) \
        if queued_now else None
    scale, samples = prev.scale, prev.samples
    rate = _value(signals, tokens_name)
    if rate is not None and ready_cap > 0:
        # The served rate is a trailing average and the queue a gauge of now: a prefill group works one prompt
        # at a time, so bursts queue on every group at half its capacity, and the average then reads as half the
        # capacity (seen in the codelab simulation: κ 0.5 at its first burst, TTFT 0.65 s of 2 s). Where the
        # role has a latency quantile, saturation teaches κ only while the queue also holds the latency at risk;
        # otherwise what is served stays a lower bound (``slo``'s rule for an unsaturated replica).
        latency = _value(signals, latency_name)
        hurting = latency_name is None or (latency is not None and latency >= RISK_FRACTION * objective)
        # And only from a queue held over the whole rate window: the rate is a trailing average, so under a
        # burst that began within the window it still averages the quieter seconds before the burst and reads
        # below the capacity (the codelab simulation, conv ×10 30-60: 134 prompts waiting on 2 groups for
        # under a minute taught κ 0.60 and held a third group for 12 minutes).
        held = queued_since is not None and now - queued_since >= rate_window_s
        saturated = run >= slo.SATURATED_EVALUATIONS and hurting and held
        scale = slo.learn_capacity_scale(
            scale, saturated=saturated, served=rate / ready_cap, settled=settled,
            alpha=slo.capacity_alpha(samples, dt),
        )
        samples += int(saturated)
    # Rule 0b: the utilization at the SLO, by the ``slo`` type's rule (``sizing.learn_utilization``), in
    # groups of the role's mean ready group: load = what the ready groups serve over their learned capacity.
    c = spec.target_utilization if prev.utilization is None else prev.utilization
    proven = prev.proven
    held_for_admission = 0
    latency = _value(signals, latency_name) if of_now else None
    # Rule 3b's calibration: the prefill queue's measurements over the window a shrink looks back on.
    queue_samples = tuple(q for q in prev.queue_samples if now - q.t < config.scale_down_delay_seconds)
    if rate is not None and ready_groups > 0 and ready_cap > 0:
        load = rate / (scale * ready_cap / ready_groups)
        headroom = sizing.learn_utilization(
            c, proven, target=spec.target_utilization,
            ratio=None if latency is None else latency / objective,
            latency_unknown=latency_name is not None and latency is None and of_now, demand_zero=rate <= 0,
            load=load,
            served_load=load, ready=ready_groups, starting=starting, settled=settled,
            # No memory of counts found short here (the ``slo`` type keeps one): the at-risk rule withdraws
            # what was proven, and a shrink still waits for the peak of scaleDownDelaySeconds.
            near_short=False, hysteresis=HYSTERESIS, dt=dt, admitting=admitting,
        )
        c, proven = headroom.utilization, headroom.proven
        held_for_admission = admitting if headroom.held_for_admission else 0
        if role == "prefill" and latency is not None and settled:
            queue_samples = (*queue_samples, QueueSample(now, load, latency / objective))
    if role == "prefill":
        # Every reading at risk, or with requests waiting on every ready group, whether or not the count was
        # settled or the quantile is of the groups now: within the window the traffic has come in bursts the
        # minute's quantile at its mean load does not show (a queue on every group of a role that works one
        # prompt at a time), so the model calibrated on it is no evidence beyond the load proven (rule 3b).
        raw = _value(signals, latency_name)
        if (raw is not None and raw >= RISK_FRACTION * objective) or queued_now:
            queue_samples = (*queue_samples, QueueSample(now, 0.0, math.inf))
    rates = prev.rates
    if config.cold_start_seconds is not None and rate is not None and warm:
        span = sizing.lookback(config.cold_start_seconds)
        rates = (*(r for r in prev.rates if now - r[0] < span), (now, rate))
    occupancy: tuple[tuple[float, int, float], ...] = ()
    slot_reading: SlotReading | None = None
    if isinstance(spec, DecodeSpec) and spec.slot_occupancy and slot_wait_fraction is not None:
        # Rule 0c: the slot occupancy's mean over the token rate's window (the gauge is an instant, the rate an
        # average), on the ready count of now.
        running = _value(signals, spec.signals.running)
        ready_slots = sum((v.slots or 0) * status[v.name].ready for v in spec.variants)
        occupancy = tuple(o for o in prev.occupancy if now - o[0] < rate_window_s and o[1] == ready_groups)
        if running is not None and ready_slots > 0:
            occupancy = (*occupancy, (now, ready_groups, running / ready_slots))
        latency_ok = latency_name is None or (latency is not None and latency < RISK_FRACTION * objective)
        if occupancy and occupancy[-1][0] == now and rate is not None and ready_cap > 0 and settled:
            mean = sum(o[2] for o in occupancy) / len(occupancy)
            target = min(slot_target(v.slots or 1, slot_wait_fraction)
                         for v in spec.variants if status[v.name].ready > 0)
            load_now = rate / (scale * ready_cap)
            bound = slot_bound(load_now, mean, target)
            slot_reading = SlotReading(mean, target, load_now, bound, slot_wait_fraction)
            # The upward probe to the bound (rule 0b's, at its pace): at ``c = bound`` no group's mean occupancy
            # passes ``o*``, where at most ``slot_wait_fraction`` of the requests wait for a slot. Not while the
            # latency is at risk or unknown, requests wait on every group, or a group asked for is not serving.
            ceiling = min(sizing.PROBE_MAX_UTILIZATION, bound)
            if mean < target and ceiling > c and latency_ok and not queued_now and admitting == 0:
                c = ceiling - (ceiling - c) * math.exp(-dt / sizing.RECOVER_TAU_S)
    return Learned(scale, samples, run, queued_since, ready_groups, ready_since, c, proven, rates, rose_at,
                   queue_samples, held_for_admission, occupancy, slot_reading)


def arrival_need(arriving: float, *, window_s: float, objective_s: float, utilization: float, kappa: float) -> float:
    """Rule 1c: the declared prefill capacity (tokens/s) that serves the prompt tokens arriving within one rate
    window (``arriving`` tokens/s over ``window_s``) by the window's end plus the TTFT objective, ``W + D``, at
    the utilization ``c`` the role keeps its objective at (rule 0b, learned from the latency headroom, as the
    served rate is sized) and the learned capacity ``κ`` per declared token/s: ``arriving·W / (W + D) / (c·κ)``.
    The arrival curve's delay bound at the one interval the signal measures; a burst shorter than the window is
    averaged over it."""
    return arriving * window_s / (window_s + objective_s) / (utilization * kappa)


def role_need(
    config: DisaggregatedPolicyConfig, role: Role, signals: Mapping[str, SignalValue],
    status: Mapping[str, VariantStatus], learned: Learned | None = None, *, arrival_window_s: float = 0.0,
    now: float = 0.0, latency_window_s: float = 0.0,
) -> RoleNeed:
    """Rule 1 and 2 of the module docstring, for one role (with its capacity learned so far, rule 0).
    ``arrival_window_s``: the rate window of prefill's ``arrivingPromptTokens`` signal (rule 1c);
    ``latency_window_s``: the window of the role's latency quantile (rule 1d; 0: not known)."""
    learned = learned or Learned()
    kappa = learned.scale
    spec = config.role(role)
    variants = spec.variants
    u = spec.target_utilization if learned.utilization is None else learned.utilization
    ready = {v.name: status[v.name].ready for v in variants}
    ready_groups = sum(ready.values())
    starting = sum(status[v.name].starting for v in variants)
    ready_cap = capacity(variants, ready)
    parts: list[str] = []
    needs: list[float] = []
    #: The parts of ``needs`` before the division by ``c·κ``, and the parts that are capacity already.
    loads: list[float] = []
    fixed_needs: list[float] = []
    unknown: list[str] = []
    names = _demand_names(spec)
    tokens_name, waiting_name, latency_name, kv_name = names.tokens, names.waiting, names.latency, names.kv
    objective, what = names.objective, names.what
    demand_known = False
    keep, keep_text = 0.0, ""
    if tokens_name is not None:
        rate = _value(signals, tokens_name)
        if rate is None:
            unknown.append(tokens_name)
        else:
            demand_known = True
            learned_text = "" if kappa == 1.0 else f" and learned capacity {kappa:.2f}× the declared"
            learned_from = "the latency headroom" + (" and the slot bound" if learned.slots is not None else "")
            u_text = (f"{u:g}" if u == spec.target_utilization else
                      f"{u:.2f} (learned from {learned_from}; target {spec.target_utilization:g})")
            ahead, fc_text = rate, ""
            horizon = config.cold_start_seconds
            if horizon is not None and learned.rates:
                # Rule 1's forecast over the cold start (the ``slo`` type's trend and burst rule): a floor only.
                fc = sizing.trend_and_burst(learned.rates, learned.rates[-1][0], rate, horizon,
                                            slo.ForecastSpec().burst_ratio, None)
                if fc.value > rate:
                    ahead, fc_text = fc.value, f"; forecast {fc.value:.0f} over the {horizon:g}s cold start{fc.text}"
                # Rule 3: what the load rose by within one cold start lately may come back before a group
                # released now could return.
                rise = sizing.largest_rise(learned.rates, horizon)
                keep = (rate + rise) / (u * kappa)
                keep_text = (f"not below {keep:.0f} (load {rate:.0f} + the largest rise within {horizon:g}s "
                             f"lately, {rise:.0f} tokens/s)")
            needs.append(ahead / (u * kappa))
            loads.append(ahead)
            parts.append(f"{rate:.0f} tokens/s at utilization {u_text}{learned_text} needs "
                         f"{ahead / (u * kappa):.0f}{fc_text}")
    arriving_name = spec.signals.arriving_prompt_tokens if isinstance(spec, PrefillSpec) else None
    if arriving_name is not None:
        arriving = _value(signals, arriving_name)
        if arriving is None or arrival_window_s <= 0:
            unknown.append(arriving_name)
        else:
            demand_known = True
            a_need = arrival_need(arriving, window_s=arrival_window_s, objective_s=objective, utilization=u,
                                  kappa=kappa)
            needs.append(a_need)
            loads.append(a_need * u * kappa)
            parts.append(f"{arriving:.0f} prompt tokens/s arriving over {arrival_window_s:g}s, served within "
                         f"{arrival_window_s:g}s + the {objective:g}s {what} objective at utilization {u:.2f}, "
                         f"needs {a_need:.0f}")
    if kv_name is not None:
        kv = _value(signals, kv_name)
        if kv is None:
            unknown.append(kv_name)
        else:
            demand_known = True
            assert isinstance(spec, DecodeSpec)
            kv_need = kv * ready_cap / spec.kv_target
            needs.append(kv_need)
            fixed_needs.append(kv_need)
            parts.append(f"KV use {kv:.2f} of {ready_groups} ready group(s) at target {spec.kv_target:g} needs "
                         f"{kv_need:.0f}")
    slot = learned.slots if isinstance(spec, DecodeSpec) else None
    if slot is not None and slot.target > 0 and ready_cap > 0:
        # Rule 0c's need: the same load over more groups lowers each group's occupancy at least in proportion
        # (``T`` concave, ``T(0) = 0``), so this capacity brings the mean occupancy to at most ``o*``.
        slot_need = slot.occupancy * ready_cap / slot.target
        needs.append(slot_need)
        fixed_needs.append(slot_need)
        parts.append(f"slot occupancy {slot.occupancy:.2f} of {ready_groups} ready group(s) at target "
                     f"{slot.target:.2f} (at most {slot.wait_fraction:.2%} of requests wait for a slot) needs "
                     f"{slot_need:.0f}; load {slot.load:.2f} bounds the load carried at that occupancy at "
                     f"{slot.bound:.2f}")
    waiting = _value(signals, waiting_name)
    if waiting_name is not None:
        if waiting is None:
            unknown.append(waiting_name)
        else:
            demand_known = True
    latency = _value(signals, latency_name)
    if latency_name is not None and latency is None:
        unknown.append(latency_name)
    at_risk = latency is not None and latency >= RISK_FRACTION * objective
    queued = slo.queued_on_every_replica(waiting, ready_groups)
    # A moment's queue forbids a shrink. What adds a group is the latency at risk where the role has a latency
    # quantile (what its objective is about; at risk, not over, since a group serves minutes after it is asked
    # for), and saturation (rule 1: queued for several evaluations) only where it has none: a prefill group
    # works one prompt at a time, so requests wait on every group under bursts at half its capacity (the
    # codelab simulation added a 4th prefill group on such a queue at a TTFT of 1.33 s of 2 s, held it 12 min).
    saturated = queued and learned.saturated and latency_name is None
    if latency is not None:
        parts.append(f"{what} {latency:.3g}s vs objective {objective:g}s")
    if learned.held_for_admission:
        parts.append(f"utilization not lowered: {learned.held_for_admission} group(s) asked for wait for Kueue's "
                     "admission")
    if waiting is not None:
        parts.append(f"{waiting:g} waiting")
    of_now = learned.latency_of_now(now, latency_window_s)
    if at_risk and not saturated and starting == 0 and not of_now:
        assert learned.rose_at is not None
        parts.append(f"{what} at risk over a {latency_window_s:g}s window that began before the ready groups rose "
                     f"to {ready_groups} ({now - learned.rose_at:.0f}s ago): evidence of fewer groups, no group "
                     "added on it")
    elif (at_risk or saturated) and starting == 0:
        smallest = min(variants, key=lambda v: (v.chips, v.name))
        bump = ready_cap + smallest.tokens_per_second
        needs.append(bump)
        fixed_needs.append(bump)
        why = (f"{what} at risk ({RISK_FRACTION:g} of its objective)" if at_risk else
               f"requests waited on every ready group for {learned.saturated_run} evaluations")
        parts.append(f"{why}: at least one more group ({bump:.0f})")
    elif (at_risk or saturated) and starting:
        parts.append(f"{starting} group(s) starting will add capacity")
    spec_groups = sum(status[v.name].spec for v in variants)
    if waiting is not None and waiting > 0 and spec_groups == 0:
        # No group at all (every variant at minReplicas 0) and requests wait: one group of the smallest variant.
        smallest = min(variants, key=lambda v: (v.chips, v.name))
        needs.append(smallest.tokens_per_second)
        fixed_needs.append(smallest.tokens_per_second)
        parts.append(f"no group and {waiting:g} waiting: one group ({smallest.tokens_per_second:.0f})")
    if unknown:
        parts.append(f"unknown: {', '.join(unknown)}")
    if not demand_known:
        return RoleNeed(role, None, False, f"{role}: no demand signal known ({', '.join(unknown)}): holding")
    need = max(needs, default=0.0)
    load = max(loads, default=0.0)
    fixed = max(fixed_needs, default=0.0)
    may_shrink = not unknown and not at_risk and not queued
    if not may_shrink and not unknown:
        parts.append("no shrink while latency is at risk or requests queue")
    return RoleNeed(role, need, may_shrink, f"{role} needs {need:.0f} tokens/s ({'; '.join(parts)})", keep,
                    keep_text, load, fixed)


#: Whether these new groups (variant name -> how many more) can be placed; None: no inventory, all fit.
FitCheck = Callable[[Mapping[str, int]], bool]
#: Whether new groups (second argument) could be placed once groups of the first argument's variants (variant
#: name -> how many fewer) are removed, the groups a scale-down of each removes first (rule 4b).
RoomCheck = Callable[[Mapping[str, int], Mapping[str, int]], bool]


def choose_mix(
    variants: Sequence[VariantSpec], current: Mapping[str, int], need: float, *, min_groups: int,
    fits: FitCheck | None = None,
) -> dict[str, int]:
    """The counts carrying ``need`` at the fewest chips, then the fewest changes; the most capacity within
    the bounds (and what fits) when nothing carries it."""

    def bounds(v: VariantSpec) -> range:
        top = v.max_replicas
        # Beyond what alone carries the need (or the current count) a variant only adds chips.
        useful = max(current.get(v.name, 0), v.min_replicas, math.ceil(need / v.tokens_per_second - _EPS), min_groups)
        return range(v.min_replicas, min(top, useful) + 1)

    ranges = [bounds(v) for v in variants]
    total = math.prod(len(r) for r in ranges)
    if total <= EXHAUSTIVE_MIXES:
        candidates: Sequence[tuple[int, ...]] = list(itertools.product(*ranges))
    else:
        candidates = [_greedy(variants, need, min_groups)]

    def placeable(counts: tuple[int, ...]) -> bool:
        if fits is None:
            return True
        more = {v.name: n - current.get(v.name, 0) for v, n in zip(variants, counts, strict=True)}
        return fits({k: n for k, n in more.items() if n > 0})

    def key(counts: tuple[int, ...]) -> tuple[float, int, float, int, int, tuple[int, ...]]:
        named = {v.name: n for v, n in zip(variants, counts, strict=True)}
        pairs = list(zip(variants, counts, strict=True))
        added = sum(max(0, n - current.get(v.name, 0)) for v, n in pairs)
        changes = sum(abs(n - current.get(v.name, 0)) for v, n in pairs)
        # At equal chips: the fewest new groups (each a cold start), then the most capacity (the same cost
        # with more headroom: a 2x4x4 group kept over four 2x2x2 ones once it serves), then the fewest changes.
        return (chips(variants, named), added, -capacity(variants, named), changes, -sum(counts), counts)

    ok = [c for c in candidates if sum(c) >= min_groups]
    carrying = sorted(
        (c for c in ok if capacity(variants, {v.name: n for v, n in zip(variants, c, strict=True)}) >= need - _EPS),
        key=key,
    )
    for c in carrying:
        if placeable(c):
            return {v.name: n for v, n in zip(variants, c, strict=True)}
    # Nothing carries it (or nothing that carries it fits): the most capacity that fits, then the fewest chips.
    rest = sorted(
        ok,
        key=lambda c: (-capacity(variants, {v.name: n for v, n in zip(variants, c, strict=True)}), key(c)),
    )
    for c in rest:
        if placeable(c):
            return {v.name: n for v, n in zip(variants, c, strict=True)}
    return {v.name: current.get(v.name, v.min_replicas) for v in variants}


def _greedy(variants: Sequence[VariantSpec], need: float, min_groups: int) -> tuple[int, ...]:
    counts = {v.name: v.min_replicas for v in variants}
    order = sorted(variants, key=lambda v: (v.chips / v.tokens_per_second, v.name))
    for v in order:
        while (capacity(variants, counts) < need - _EPS or sum(counts.values()) < min_groups) and (
            counts[v.name] < v.max_replicas
        ):
            counts[v.name] += 1
    return tuple(counts[v.name] for v in variants)


def fit_budget(
    config: DisaggregatedPolicyConfig,
    desired: Mapping[str, int],
    current: Mapping[str, int],
    needs: Mapping[Role, RoleNeed],
    *,
    chip_budget: float | None,
    group_budget: int | None,
) -> dict[str, int]:
    """Rule 5: ``desired`` when it fits both budgets; else, from the minimums (a role that may not shrink,
    its signals unknown or its latency at risk, keeps its current counts), one slice at a time to the role
    whose need is least covered, in the order its mix wants them. Never gives a variant more than
    ``desired``, so a budget only ever takes slices away from what the signals justify."""
    pairs = config.variants()
    total_chips = sum(v.chips * desired[v.name] for _, v in pairs)
    total_groups = sum(desired[v.name] for _, v in pairs)
    if (chip_budget is None or total_chips <= chip_budget + _EPS) and (
        group_budget is None or total_groups <= group_budget
    ):
        return dict(desired)
    alloc: dict[str, int] = {}
    locked = {r for r in ROLES if needs[r].need is None or not needs[r].may_shrink}
    for role, v in pairs:
        base = min(v.min_replicas, desired[v.name])
        alloc[v.name] = min(current[v.name], desired[v.name]) if role in locked else base
    wanted: dict[Role, list[VariantSpec]] = {r: [] for r in ROLES}
    for role, v in pairs:
        if desired[v.name] > alloc[v.name]:
            # Larger slices first within a role: they are what the mix chose to carry most of the need.
            wanted[role].extend([v] * (desired[v.name] - alloc[v.name]))
    for role in ROLES:
        wanted[role].sort(key=lambda v: (-v.tokens_per_second, v.name))

    def used() -> tuple[int, int]:
        return sum(v.chips * alloc[v.name] for _, v in pairs), sum(alloc.values())

    def covered(role: Role) -> float:
        need = needs[role].need or 0.0
        have = capacity(config.role(role).variants, alloc)
        return have / need if need > _EPS else math.inf

    while True:
        c_used, g_used = used()
        choices = []
        for role in ROLES:
            for i, v in enumerate(wanted[role]):
                chip_ok = chip_budget is None or c_used + v.chips <= chip_budget + _EPS
                group_ok = group_budget is None or g_used + 1 <= group_budget
                if chip_ok and group_ok:
                    choices.append((covered(role), ROLES.index(role), i, role, v))
                    break
        if not choices:
            return alloc
        _, _, i, role, v = min(choices, key=lambda c: (c[0], c[1]))
        wanted[role].pop(i)
        alloc[v.name] += 1


def plan(
    config: DisaggregatedPolicyConfig,
    signals: Mapping[str, SignalValue],
    status: Mapping[str, VariantStatus],
    state: DisaggState,
    now: float,
    *,
    fits: FitCheck | None = None,
    room: RoomCheck | None = None,
    places: Places | None = None,
    group_budget: int | None = None,
    rate_window_s: float = 0.0,
    arrival_window_s: float = 0.0,
    latency_windows: Mapping[Role, float] | None = None,
    slot_wait_fraction: float | None = None,
) -> tuple[JointPlan, DisaggState]:
    """Rules 1-5: each variant's count before the capacity request, and the new state. ``rate_window_s``: the
    token signals' rate window (a fresh controller's rates within it are not history); ``arrival_window_s``:
    the rate window of prefill's arriving prompt tokens (rule 1c); ``latency_windows``: each role's latency
    quantile window (rule 1d; a role missing: not known); ``slot_wait_fraction``: the share of requests that may
    wait for a decode slot, ``1 − q`` of the TTFT quantile ``q`` (rule 0c; None: the rule is off); ``places``: the
    groups' places (rule 4b: which groups a scale-down removes and whether they still hold their place; None:
    no make-room shift)."""
    lw = latency_windows or {}
    needs: list[RoleNeed] = []
    histories: dict[Role, tuple[NeedSample, ...]] = {}
    desired: dict[str, int] = {}
    messages: dict[str, str] = {}
    current = {v.name: status[v.name].spec for _, v in config.variants()}
    since = now if state.since is None else state.since
    dt = 0.0 if state.last_t is None else max(0.0, now - state.last_t)
    warm = now - since >= rate_window_s
    learned = {
        role: learn(config, role, signals, status, state.learned(role), now, dt, warm=warm, rate_window_s=rate_window_s,
                    latency_window_s=lw.get(role, 0.0), slot_wait_fraction=slot_wait_fraction)
        for role in ROLES
    }
    #: New groups the roles planned before this one (prefill first): decode's must fit beside them.
    additions: dict[str, int] = {}
    shifts: list[Shift] = []
    for role in ROLES:
        spec = config.role(role)
        rn = role_need(config, role, signals, status, learned[role], arrival_window_s=arrival_window_s, now=now,
                       latency_window_s=lw.get(role, 0.0))
        needs.append(rn)
        history = tuple(h for h in state.history(role) if now - h.t < config.scale_down_delay_seconds)
        if rn.need is None:
            histories[role] = history
            for v in spec.variants:
                desired[v.name] = current[v.name]
                messages[v.name] = rn.message
            continue
        history = (*history, NeedSample(now, rn.load, rn.fixed))
        histories[role] = history
        cur = {v.name: current[v.name] for v in spec.variants}
        spec_cap = capacity(spec.variants, cur)
        fit = _after(fits, additions)
        if rn.need > spec_cap + _EPS:
            mix = choose_mix(spec.variants, cur, rn.need, min_groups=spec.min_groups, fits=fit)
            how, carry = "grow", rn.need
            if fit is not None and mix != choose_mix(spec.variants, cur, rn.need, min_groups=spec.min_groups):
                how += ("; the cheaper mix does not fit as whole slices in the blocks, even with the training this "
                        "policy may stop")
        else:
            # Rule 3's peak, each past need sized at the utilization and capacity learned now.
            lr = learned[role]
            c_now = spec.target_utilization if lr.utilization is None else lr.utilization
            peak = max(h.need(c_now, lr.scale) for h in history)
            model = (comfortable_load(lr.queue_samples, relax=sizing.RELAX_FRACTION, hysteresis=HYSTERESIS)
                     if role == "prefill" else None)
            # Rule 0c: decode's groups carry the slot bound at a mean occupancy of at most ``o*`` (read now).
            slot = lr.slots if role == "decode" and lr.slots is not None and lr.slots.occupancy < lr.slots.target \
                else None
            headroom = shrink_headroom(c_now, model.load if model is not None else
                                       slot.bound if slot is not None else None)
            target = max(peak / (1.0 - headroom), rn.keep)
            window = config.scale_down_delay_seconds
            carry = min(target, spec_cap)
            mix = choose_mix(spec.variants, cur, carry, min_groups=spec.min_groups, fits=fit)
            if not rn.may_shrink:
                mix = {k: max(n, cur[k]) for k, n in mix.items()}
            how = f"peak {peak:.0f} tokens/s over {window:g}s with {headroom:.0%} headroom"
            if model is not None and headroom < HYSTERESIS:
                q = model.calibrated
                how += (f" (the prefill queue model, calibrated at load {q.load:.2f} per group with TTFT "
                        f"at {q.ratio:.2f} of its objective, predicts it at most {sizing.RELAX_FRACTION:g} of the "
                        f"objective up to load {model.load:.2f}; utilization {c_now:.2f})")
            if slot is not None and headroom < HYSTERESIS:
                how += (f" (the slot bound: load {slot.bound:.2f} per group at slot occupancy at most "
                        f"{slot.target:.2f}; utilization {c_now:.2f})")
            if rn.keep_text:
                how += f", {rn.keep_text}"
            if now - since < window and any(mix[k] < cur[k] for k in cur):
                mix = {k: max(n, cur[k]) for k, n in mix.items()}
                how += f"; no shrink before a whole {window:g}s window is observed ({now - since:.0f}s so far)"
        # A shift to another variant never removes groups before the ready ones left carry the need: the new
        # groups start first, the old ones go once the new serve.
        ready_left = {v.name: min(mix[v.name], status[v.name].ready) for v in spec.variants}
        if any(mix[k] < cur[k] for k in cur) and capacity(spec.variants, ready_left) < carry - _EPS:
            mix = {k: max(n, cur[k]) for k, n in mix.items()}
            how += "; groups of the other variant(s) stay until the new ones serve"
        names = {v.name for v in spec.variants}
        shift = next((sh for sh in state.shifts if sh.larger in names), None)
        if shift is not None and mix == cur:
            # Rule 4b's second step: the larger group, sized for what the role carried when the shift began,
            # once its place is free; the smaller groups stay until it serves (above). The shift waits for the
            # place as long as a removed group holds it, and ends once the place is free and still no larger
            # group can be added.
            up = choose_mix(spec.variants, cur, shift.carry, min_groups=spec.min_groups, fits=fit)
            still = places.holding(shift.freeing) if places is not None else ()
            if rn.may_shrink and up[shift.larger] > cur[shift.larger] and chips(spec.variants, up) <= shift.chips:
                mix = {k: max(n, cur[k]) for k, n in up.items()}
                how += (f"; make-room shift: the {shift.larger} group now fits where the removed group was "
                        f"(mix {_mix_text(spec.variants, up)} carries {shift.carry:.0f} on "
                        f"{chips(spec.variants, up)} chips)")
            elif still:
                shifts.append(shift)
                how += (f"; make-room shift: waiting for {', '.join(still)} to release its place for the "
                        f"{shift.larger} group ({now - shift.at:.0f}s since it was removed)")
            else:
                how += (f"; make-room shift ended: the removed group's place is free and no {shift.larger} group "
                        f"can be added there now (mix {_mix_text(spec.variants, up)} for {shift.carry:.0f}"
                        f"{'' if rn.may_shrink else '; latency at risk or requests queue'})")
        elif room is not None and places is not None and fit is not None and rn.may_shrink and mix == cur and (
            now - since >= config.scale_down_delay_seconds
        ):
            made = _make_room(spec.variants, cur, status, rn.need, carry, spec.min_groups, fit,
                              _room_after(room, additions))
            if made is not None:
                mix = made.counts
                how += f"; {made.message}"
                shifts.append(Shift(made.larger, carry, chips(spec.variants, cur), now,
                                    places.first(made.smaller, made.removed)))
        mix_cap = capacity(spec.variants, mix)
        additions.update({k: n - cur[k] for k, n in mix.items() if n > cur[k]})
        for v in spec.variants:
            desired[v.name] = mix[v.name]
            messages[v.name] = (
                f"{rn.message}; mix {_mix_text(spec.variants, mix)} = {mix_cap:.0f} tokens/s on "
                f"{chips(spec.variants, mix)} chips ({how})"
            )
    by_role = {rn.role: rn for rn in needs}
    budgeted = fit_budget(
        config, desired, current, by_role, chip_budget=config.chip_budget, group_budget=group_budget
    )
    counts: list[VariantCount] = []
    for role, v in config.variants():
        message = messages[v.name]
        if budgeted[v.name] != desired[v.name]:
            message += (
                f"; {budgeted[v.name]} of the {desired[v.name]} group(s) wanted fit the budget "
                f"({_budget_text(config, group_budget)}), split by how much of each role's need is covered"
            )
        counts.append(VariantCount(role, v.name, current[v.name], budgeted[v.name], message))
    held = tuple(rn.role for rn in needs if rn.need is None)
    total = sum(v.chips * budgeted[v.name] for _, v in config.variants())
    summary = (
        f"prefill {_role_groups(config, 'prefill', budgeted)} + decode {_role_groups(config, 'decode', budgeted)}"
        f" = {total} chips"
    )
    nxt = DisaggState(histories["prefill"], histories["decode"], since, learned["prefill"], learned["decode"], now,
                      tuple(shifts))
    return JointPlan(tuple(counts), tuple(needs), held, summary), nxt


@dataclass(frozen=True, slots=True)
class _MadeRoom:
    """Rule 4b's answer: the counts after the smaller groups go, the larger variant they make room for, and why."""

    counts: dict[str, int]
    larger: str
    message: str
    #: The smaller variant and how many of its groups go (the first of its removal order).
    smaller: str = ""
    removed: int = 0


def _make_room(
    variants: Sequence[VariantSpec], cur: Mapping[str, int], status: Mapping[str, VariantStatus], need: float,
    carry: float, min_groups: int, fit: FitCheck, room: RoomCheck,
) -> _MadeRoom | None:
    """Rule 4b, the make-room shift: when the mix that carries ``carry`` at the fewest chips needs a larger
    shape that fits nowhere (the role's own smaller groups fragment the blocks) and the role holds its count,
    remove the fewest smaller groups whose regions, once freed, let one larger group be placed (the groups a
    scale-down of their variant removes first: ``RoomCheck``), never more than the cheaper mix removes. Only
    when every group of the role is ready (one step at a time) and the ready groups left still carry the need
    now (``need``: the load at the learned capacity and utilization), so the shift never drops below what the
    load needs; the larger group is added once its place is free (the next evaluations, ``plan``), the other
    smaller groups go once it serves (rule 4). Returns the counts, the larger variant and the message."""
    if any(status[v.name].starting or status[v.name].ready < status[v.name].spec for v in variants):
        return None
    free = choose_mix(variants, cur, carry, min_groups=min_groups)
    if chips(variants, free) >= chips(variants, cur) or fit({k: n - cur[k] for k, n in free.items() if n > cur[k]}):
        return None
    larger = [w for w in variants if free[w.name] > cur[w.name]]
    for v in sorted((v for v in variants if free[v.name] < cur[v.name]), key=lambda v: (v.chips, v.name)):
        # The fewest of this variant's groups (those a scale-down removes first) whose places, once free,
        # let one larger group be placed; never more than the cheaper mix itself removes.
        for k in range(1, cur[v.name] - free[v.name] + 1):
            left = {**cur, v.name: cur[v.name] - k}
            if sum(left.values()) < max(min_groups, 1) or capacity(variants, left) < need - _EPS:
                break
            for w in larger:
                if w.chips > v.chips and room({v.name: k}, {w.name: 1}):
                    return _MadeRoom(left, w.name, (
                        f"make room: {k} {v.slice_topology} group(s) ({v.name}) go first, freeing a place for "
                        f"a {w.slice_topology} group ({w.name}), the cheaper mix {_mix_text(variants, free)} "
                        f"({chips(variants, free)} chips); the {sum(left.values())} groups left carry "
                        f"{capacity(variants, left):.0f} ≥ the need {need:.0f} tokens/s"
                    ), v.name, k)
    return None


def _room_after(room: RoomCheck, before: Mapping[str, int]) -> RoomCheck:
    """``room`` for groups placed after ``before`` (the other role's new groups of this plan)."""
    placed = dict(before)
    return lambda removed, more: room(removed, {**placed, **more})


def _after(fits: FitCheck | None, before: Mapping[str, int]) -> FitCheck | None:
    """``fits`` for more groups placed after ``before`` (one inventory, so two roles never share a place)."""
    if fits is None:
        return None
    placed = dict(before)
    return lambda more: fits({**placed, **more})


def _mix_text(variants: Sequence[VariantSpec], mix: Mapping[str, int]) -> str:
    return " + ".join(f"{mix[v.name]}×{v.slice_topology} ({v.name})" for v in variants)


def _role_groups(config: DisaggregatedPolicyConfig, role: Role, counts: Mapping[str, int]) -> str:
    return "+".join(f"{counts[v.name]}×{v.slice_topology}" for v in config.role(role).variants)


def _budget_text(config: DisaggregatedPolicyConfig, group_budget: int | None) -> str:
    parts = []
    if config.chip_budget is not None:
        parts.append(f"chipBudget {config.chip_budget}")
    if group_budget is not None:
        parts.append(f"maxReplicas {group_budget} groups")
    return ", ".join(parts) or "no budget"


class DisaggregatedPolicy:
    """The algorithm object the registry builds. ``joint``: the engine calls ``plan`` (not ``recommend``)."""

    uses_behavior = False
    joint = True

    def __init__(self, config: DisaggregatedPolicyConfig) -> None:
        self.config = config

    def recommend(self, ctx: Context, state: object | None) -> tuple[Recommendation, object | None]:
        raise TypeError("the disaggregated policy decides several targets at once: engine.decide calls plan()")


def build(config: DisaggregatedPolicyConfig) -> DisaggregatedPolicy:
    return DisaggregatedPolicy(config)


def inventory_fit(
    config: DisaggregatedPolicyConfig, inventory: Inventory, costs: Mapping[str, float],
    pending: Mapping[str, int] | None = None,
) -> FitCheck:
    """A ``FitCheck`` from the physical inventory (``core.topology``): the new groups, larger slices first,
    placed one after another (stopping preemptible training where it must, at the least lost work).
    ``pending``: variant name -> its groups asked for that hold no place yet (waiting for Kueue's admission):
    placed with the new ones, as the grant places them (``arbitration.sliced_view``), so a new group is never
    counted on a place a waiting one will take (no new group: nothing to place, it fits)."""
    by_name = {v.name: v for _, v in config.variants()}
    waiting = dict(pending or {})
    return lambda more: not any(n > 0 for n in more.values()) or _placeable(
        by_name, inventory, costs, _with_pending(more, waiting))


def inventory_room(
    config: DisaggregatedPolicyConfig, inventory: Inventory, costs: Mapping[str, float],
    removal_order: Mapping[str, Sequence[str]], pending: Mapping[str, int] | None = None,
) -> RoomCheck:
    """A ``RoomCheck``: would the new groups fit once the named variants' next groups were removed?
    ``removal_order``: variant name -> its groups' occupant keys in the order a scale-down removes them
    (``SliceCapacity.removal_order``); a variant missing, or with fewer known groups than removed: False (the
    policy never counts on a place it cannot name). A removed group not in the inventory (pending) frees
    nothing. ``pending``: as for ``inventory_fit``, placed with the new groups."""
    by_name = {v.name: v for _, v in config.variants()}
    waiting = dict(pending or {})

    def room(removed: Mapping[str, int], more: Mapping[str, int]) -> bool:
        gone: list[str] = []
        for name, n in removed.items():
            order = removal_order.get(name)
            if order is None or len(order) < n:
                return False
            gone.extend(order[:n])
        return _placeable(by_name, inventory.without(gone), costs, _with_pending(more, waiting))

    return room


def _with_pending(more: Mapping[str, int], pending: Mapping[str, int]) -> dict[str, int]:
    """The groups to place: the new ones (``more``) and those asked for that hold no place yet."""
    return {k: more.get(k, 0) + pending.get(k, 0) for k in {*more, *pending}}


def _placeable(
    by_name: Mapping[str, VariantSpec], inventory: Inventory, costs: Mapping[str, float], more: Mapping[str, int]
) -> bool:
    left = inventory
    order = sorted((k for k, n in more.items() if n > 0), key=lambda k: (-by_name[k].chips, k))
    for name in order:
        shape = Shape.parse(by_name[name].slice_topology)
        placed = plan_groups(left, shape, more[name], costs, owner_prefix=f"new-{name}")
        if placed.unplaceable:
            return False
        left = left.without(placed.victims)
        for i, choice in enumerate(placed.placed):
            left = left.with_occupant(Occupant(key=f"new-{name}-{i}", regions=choice.regions))
    return True
