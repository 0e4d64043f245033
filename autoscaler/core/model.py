"""Plain data the core consumes and produces: targets, observations, decisions, state.

All types are frozen dataclasses or enums so a snapshot can be shared, compared and replayed.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from autoscaler.core.fast import quick_init
from autoscaler.core.topology import Inventory, Shape


class TargetKind(enum.StrEnum):
    """Kinds of serving target the controller scales."""

    DEPLOYMENT = "Deployment"
    STATEFUL_SET = "StatefulSet"
    LEADER_WORKER_SET = "LeaderWorkerSet"


@dataclass(frozen=True, slots=True)
class TargetRef:
    """A serving target. For a LeaderWorkerSet, one replica is one group (a multi-host slice)."""

    kind: TargetKind
    name: str
    namespace: str = "default"

    @property
    def key(self) -> str:
        """``Kind/namespace/name``, the identity used in logs, replay output and ``observe``."""
        return f"{self.kind.value}/{self.namespace}/{self.name}"


@quick_init
@dataclass(frozen=True, slots=True)
class SignalReading:
    """One signal's raw value as a source returned it, before the core judges it.

    ``timestamp`` is the sample's own time (seconds, same clock as ``now``); ``error`` is set when the
    source failed, in which case ``value`` is None. ``per_replica`` optionally carries one value per
    pod/group (HPA's Pods metrics use it for the missing/unready-pod rules) and ``pod_times`` each pod's own
    sample time (and, for a histogram, ``buckets``): with them the core combines the pods into the target's value
    (``signals.SignalJudge.combine``: only fresh samples of ready pods, and only when enough of them reported).
    """

    value: float | None
    timestamp: float | None
    source: str = ""
    error: str | None = None
    per_replica: Mapping[str, float] | None = None
    pod_times: Mapping[str, float] | None = None
    #: Histogram signals (``quantile``): each pod's bucket rates over the window (upper bound -> observations per
    #: second at or below it, ``+Inf`` included); the core sums the reporting pods' and takes the quantile.
    buckets: Mapping[str, Mapping[float, float]] | None = None


#: The reason a histogram signal is unknown when its every reporting pod gave fresh buckets holding no request in
#: the window (``signals.judge``): the pipeline answered, there is no latency to take a quantile of.
NO_OBSERVATIONS = "no observations: "


class SignalState(enum.StrEnum):
    OK = "ok"
    UNKNOWN = "unknown"


@quick_init
@dataclass(frozen=True, slots=True)
class SignalValue:
    """A signal as the core judged it: a usable value, or unknown with the reason why."""

    name: str
    state: SignalState
    value: float | None
    reason: str = ""
    age_s: float | None = None
    source: str = ""
    #: A histogram signal whose source gave the pods' buckets (pods, simulator, recorded replay): the reporting
    #: pods' bucket rates summed (upper bound -> observations per second at or below it, ``+Inf`` last), the
    #: distribution the quantile ``value`` was read from. None for other signals and for sources that return
    #: the quantile whole (PromQL ``histogram_quantile``).
    histogram: Mapping[float, float] | None = field(default=None, compare=False, repr=False)

    @property
    def ok(self) -> bool:
        return self.state is SignalState.OK


@dataclass(frozen=True, slots=True)
class PodStatus:
    """One replica (pod, or LWS group leader) as the HPA replica calculator sees it."""

    name: str
    ready: bool
    #: Seconds since the pod started; HPA ignores unready pods during their initialisation period.
    age_s: float = 0.0
    failed: bool = False
    deleting: bool = False


@quick_init
@dataclass(frozen=True, slots=True)
class ReplicaStatus:
    """Replica counts of the target (groups for a LeaderWorkerSet).

    ``spec`` is the desired count currently set on the target (HPA's ``currentReplicas``);
    ``ready`` are serving; ``starting`` are admitted (or not under Kueue) and scheduling, pulling or loading
    the model; ``gated`` wait for Kueue admission and are *not* starting: no capacity is on its way for them
    until Kueue admits them (``spec = ready + starting + gated``, unready pods of ready replicas aside).
    """

    spec: int
    ready: int
    starting: int = 0
    pods: tuple[PodStatus, ...] | None = None
    #: Of ``spec``, replicas Kueue has not admitted yet: pods still carrying the ``kueue.x-k8s.io/admission``
    #: scheduling gate, plus replicas whose pods do not exist yet. Their chips are asked for but not reserved.
    gated: int = 0
    #: The TPU slice one replica (group) takes: ``cloud.google.com/gke-tpu-slice-topology`` on its pod
    #: template; None when it names none (then no slice inventory applies to it).
    slice: Shape | None = None


@dataclass(frozen=True, slots=True)
class TrainingWorkload:
    """A Kueue Workload of a checkpointed training job that serving may displace."""

    namespace: str
    name: str
    priority: int
    chips: int
    active: bool
    admitted: bool
    uid: str = ""
    #: True when this controller deactivated it (recorded on the Workload so a restart can resume it).
    deactivated_by_us: bool = False
    #: Seconds since the last completed checkpoint, when known (the ``autoscaler.dev/last-checkpoint-time``
    #: annotation on the Job/JobSet): what stopping it now loses, per chip. Unknown is never taken as fresh.
    since_checkpoint_s: float | None = None
    #: When this controller stopped it (unix seconds) within the last hour, oldest first (annotation
    #: ``autoscaler.dev/preempted-at``): the per-job cap on preemptions reads it.
    preempted_at: tuple[float, ...] = ()
    #: When this controller last resumed it (unix seconds), for the minimum run time after a resume.
    resumed_at: float | None = None
    #: When this controller last asked its job to checkpoint (``autoscaler.dev/checkpoint-requested-at``).
    checkpoint_requested_at: float | None = None
    #: The TPU slices it asks for (``cloud.google.com/gke-tpu-slice-topology`` on its pods, one entry per
    #: slice: six ``2x2x2`` for the codelab's sub-slicing JobSet, one ``4x4x8`` for its super-slicing one);
    #: empty when it names none. Where it runs is in ``SliceCapacity.inventory`` (its key).
    slices: tuple[Shape, ...] = ()
    #: Its pods' ``terminationGracePeriodSeconds`` (the longest over its pod templates; Kubernetes' default 30
    #: when a template leaves it out), None when no template was read: after SIGTERM, what it has to save in,
    #: and at most how long its chips stay held (``arbitration.eviction_s``).
    grace_s: float | None = None
    #: How long one checkpoint save takes (``autoscaler.dev/checkpoint-save-seconds``, declared), when known.
    save_s: float | None = None
    #: It saves a checkpoint on SIGTERM (``autoscaler.dev/checkpoint-on-termination: "true"``, declared): when
    #: ``save_s`` fits in ``grace_s`` a stop loses nothing (``arbitration.saves_within_grace``).
    saves_on_termination: bool = False
    #: Seconds between its checkpoints: declared (``autoscaler.dev/checkpoint-interval-seconds``) or learned
    #: from successive ``last-checkpoint-time`` values (``arbitration.learn_interval``); None when neither.
    checkpoint_interval_s: float | None = None
    #: It honours checkpoint requests (``autoscaler.dev/checkpoint-on-request: "true"``, declared): asked
    #: (``autoscaler.dev/checkpoint-requested-at``), it saves at once and finishes that save before it exits,
    #: SIGTERM or not. Only such a job is asked and waited for (capacity ``checkpointRequestSeconds``); an
    #: undeclared one is stopped without asking, so serving never waits for a request nobody reads.
    honours_requests: bool = False
    #: Kueue is evicting it on its own (its ``Evicted`` condition True with the Workload still active: reason
    #: ``Preempted``, ``PodsReadyTimeout``, …) while it still holds its place (Kueue keeps ``QuotaReserved`` and
    #: ``Admitted`` True until its pods are gone). That place is promised to whatever Kueue evicts it for: it is
    #: neither a victim nor room for us (``arbitration._ineligible``). Not set for a Workload set inactive
    #: (reason ``Deactivated``: ``active`` False says that).
    evicting: bool = False
    #: The ``Evicted`` condition's reason while ``evicting`` (for messages).
    evicted_reason: str = ""
    #: While ``evicting``: the serving target (``TargetRef.key``) one of whose replicas waiting for admission
    #: Kueue evicts it for (the preemptor its ``Preempted`` condition names, resolved by the controller; the
    #: simulator's Kueue sets it); "" when not known or not a serving target. Then its chips are room already
    #: being made for that replica (``arbitration.making_room``), not a reason to stop one more Workload.
    evicted_for: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class SliceCapacity:
    """Where TPU slices can still go in one ResourceFlavor: its physical blocks and what occupies them (every
    admitted Workload, keyed ``namespace/name``). The same for every policy on the ClusterQueue; the slice one
    replica of a target takes is ``ReplicaStatus.slice``."""

    flavor: str
    inventory: Inventory
    #: Where the inventory was read from, for messages ("nodes placed by the TPU partition levels of …").
    source: str = ""
    #: Each occupant's controller owner (``Kind/namespace/name``), by key: a serving target's groups that hold a
    #: place (admitted, or reserved while an AdmissionCheck such as GKE's slice controller provisions the slice,
    #: their pods still gated) are found by it, so a group is never placed twice.
    owners: Mapping[str, str] = field(default_factory=dict)
    #: Per serving target (``Kind/namespace/name``): its groups' occupant keys in the order a scale-down
    #: removes them (a LeaderWorkerSet: the highest group index first). A target missing: not known, and no
    #: policy counts on which group a scale-down frees (the make-room shift of ``disaggregated`` needs it).
    removal_order: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class EvictedFor:
    """A Workload on the ClusterQueue that Kueue is evicting (still admitted, its chips held until its pods are
    gone) for a serving replica it names, read whether or not the deciding policy's ``preemptible`` selects it
    (``QuotaStatus.evicting``)."""

    #: ``namespace/name`` (``TrainingWorkload.key``; a slice inventory's occupant key).
    key: str
    #: What it holds of the ClusterQueue's resource.
    chips: float
    #: The serving target (``TargetRef.key``) whose replica waiting for admission Kueue evicts it for (the
    #: preemptor its ``Preempted`` condition names, resolved as for ``TrainingWorkload.evicted_for``).
    target: str


@dataclass(frozen=True, slots=True)
class AskedReplicas:
    """What one serving target asked for, as the controller last saw or wrote it (an entry of the pass ledger:
    ``arbitration.in_pass``)."""

    spec: int
    #: Its replicas (groups) asked for and not admitted by Kueue yet.
    gated: int
    #: Chips one of its replicas counts against the ClusterQueue's quota (its policy's ``perReplica``).
    per_replica: float = 0.0


@dataclass(frozen=True, slots=True)
class Ahead:
    """A policy's forecast for the hand-off: it expects to need ``replicas`` within ``within_s`` seconds.

    ``within_s`` is the lead a hand-off takes (the victim's eviction plus serving's cold start), so a policy
    that knows its cold start can say early what the arbitration would otherwise learn only when the
    replicas are due. It never raises the count the policy decides now; the arbitration uses it to stop
    training ahead of need at a checkpoint and to keep stopped training down while the need is forecast."""

    replicas: int
    within_s: float
    #: How long the replicas wanted now may wait before the policy's latency objective is at risk
    #: (``core.headroom.latency_headroom``: from the objective, the measured quantile and queue, the trend);
    #: None when the policy does not say (then the arbitration never waits within it). Item 1b of issue 11:
    #: the arbitration waits for a victim's checkpoint only within it (``capacity.waitWithinHeadroom``).
    headroom_s: float | None = None
    #: One clause with the headroom's numbers, for the arbitration's messages.
    headroom_text: str = ""


@dataclass(frozen=True, slots=True)
class Reacquire:
    """What getting back serving replicas released now would take, in the training stops the preemption budget
    still allows (``arbitration.reacquire``, for ``scaleDown.priceReacquire`` of type ``slo``).

    A replica released while training this controller stopped waits for chips is resumed on them
    (``arbitration._reactivate``); getting it back then takes a stop, and a Workload stopped
    ``maxPreemptionsPerHour`` times in the last hour (or within ``minRunSeconds`` of its resume) cannot be stopped
    again until that ages out. Index ``k - 1`` of each tuple is about releasing ``k`` replicas."""

    #: The most replicas the target could have now: its count plus the room for serving and the chips of every
    #: running Workload the arbitration may stop now, at most ``maxReplicas``.
    reachable: int
    #: After releasing ``k`` replicas and the training resumed on their chips: the same count, as things stand.
    after: tuple[int, ...]
    #: Seconds until, after that release, the budget lets the target reach ``reachable`` again (0: at once, the
    #: release costs no reach; ``math.inf``: not within the budget's hour as now known).
    regained_in_s: tuple[float, ...]
    #: The Workloads resumed on the released chips, with their stops in the last hour, for messages.
    resumed: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class QueueQuota:
    """One ClusterQueue of a cohort, for one resource, as ``arbitration.kueue_borrowable`` needs it (summed
    over the queue's flavors)."""

    nominal: float
    reserved: float
    #: ``borrowingLimit`` (None: unlimited within the cohort).
    borrowing_limit: float | None = None
    #: ``lendingLimit`` (None: all of its nominal quota may be lent while unused).
    lending_limit: float | None = None
    name: str = ""
    #: ``spec.preemption.reclaimWithinCohort`` is not ``Never``: Kueue preempts the cohort's borrowers to give
    #: this queue back its nominal quota, so what others borrow of it still counts as its room.
    reclaims: bool = False
    #: Serving chips asked for on this queue and not admitted yet (the controller's pass ledger): Kueue will
    #: admit them into its quota, and what exceeds its unlent part into the cohort's.
    pending: float = 0.0


@dataclass(frozen=True, slots=True)
class QuotaStatus:
    """The accelerator quota serving shares, as a Kueue ClusterQueue holds it for one resource."""

    cluster_queue: str
    resource: str
    nominal: float
    reserved: float
    #: What Kueue would lend on top of ``nominal`` now (``kueue_borrowable``: the cohort's unused quota capped by
    #: ``borrowingLimit``), including what is already borrowed. Not ``borrowingLimit`` itself, which is a cap.
    #: Negative when other members borrow of ``nominal`` and the queue does not reclaim it.
    borrowable: float = 0.0
    #: Chips that serving replicas of *other* targets on this ClusterQueue have asked for and Kueue has not
    #: admitted yet (the controller's pass ledger): spoken for, though not in ``reserved``.
    pending: float = 0.0
    #: The physical slice inventory of the ClusterQueue's flavor, when it has one (Kueue topology-aware
    #: admission): then what serving can get is what still fits as whole slices, not the quota number.
    slices: SliceCapacity | None = None
    #: Each *other* serving target on this ClusterQueue, by target key (the controller's pass ledger): its
    #: replicas asked for and those waiting for admission; with ``slices``, those not holding a place yet take
    #: free room first.
    asked: Mapping[str, AskedReplicas] = field(default_factory=dict)
    #: The ClusterQueue's cohort ("" without one): policies on its members share one lock and one account.
    cohort: str = ""
    #: Every ClusterQueue of the cohort for the resource as read (this one included), so that ``borrowable`` can
    #: be counted again with what their serving replicas ask for (``arbitration.lent``).
    members: tuple[QueueQuota, ...] = ()
    #: Of the cohort's lendable quota, the chips serving replicas asked for on its other members will take
    #: (already out of ``borrowable``; kept for the messages).
    cohort_pending: float = 0.0
    #: Workloads on this ClusterQueue that Kueue evicts for a named serving replica (``EvictedFor``), read
    #: beyond the policy's ``preemptible`` selection: one it does not select is room being made for that replica
    #: all the same (``arbitration.unselected_making_room``).
    evicting: tuple[EvictedFor, ...] = ()

    @property
    def free(self) -> float:
        return self.nominal + self.borrowable - self.reserved


@quick_init
@dataclass(frozen=True, slots=True)
class Observation:
    """Everything the core may know at one evaluation: a snapshot, nothing live."""

    target: TargetRef
    replicas: ReplicaStatus
    signals: Mapping[str, SignalReading] = field(default_factory=dict)
    training: tuple[TrainingWorkload, ...] = ()
    quota: QuotaStatus | None = None
    #: Policies with several targets (type ``disaggregated``): every target's replica status by
    #: ``TargetRef.key`` (``target``'s too). A target missing here is unknown: the policy holds.
    members: Mapping[str, ReplicaStatus] = field(default_factory=dict)


class Reason(enum.StrEnum):
    """Why a decision came out as it did. Used verbatim as Kubernetes Event reasons."""

    SCALE_UP = "ScaleUp"
    SCALE_DOWN = "ScaleDown"
    STEADY = "Steady"  # the recommendation equals the current count
    WITHIN_TOLERANCE = "WithinTolerance"
    METRICS_UNKNOWN = "MetricsUnknown"  # hold: a signal needed is missing, stale or invalid
    FALLBACK = "Fallback"  # KEDA-style fallback after N consecutive failures
    STABILIZING = "Stabilizing"  # a stabilization window holds the count
    RATE_LIMITED = "RateLimited"  # behavior policies cap the change
    LIMITED_BY_MAX = "LimitedByMax"
    LIMITED_BY_MIN = "LimitedByMin"
    SCALING_DISABLED = "ScalingDisabled"  # current replicas 0 with minReplicas > 0, or selectPolicy Disabled
    WAITING_FOR_STARTING = "WaitingForStarting"  # starting replicas will absorb the load
    WAITING_FOR_ADMISSION = "WaitingForAdmission"  # replicas asked for wait for Kueue admission (quota, topology)
    PANIC = "Panic"  # fast window triggered
    SCALE_TO_ZERO = "ScaleToZero"
    ACTIVATE_FROM_ZERO = "ActivateFromZero"
    DEACTIVATE_TRAINING = "DeactivateTraining"
    REQUEST_CHECKPOINT = "CheckpointRequested"  # a victim is asked to save before it is stopped
    REACTIVATE_TRAINING = "ReactivateTraining"
    WAITING_FOR_CAPACITY = "WaitingForCapacity"  # serving wants more than quota can give
    HANDOFF_AHEAD = "HandoffAhead"  # replicas started ahead of a forecast need, on chips training just saved
    #: replicas a scale-up asked for, deferred while a victim checkpointed, started once it saved
    HANDOFF_AFTER_CHECKPOINT = "HandoffAfterCheckpoint"


@quick_init
@dataclass(frozen=True, slots=True)
class ScaleDecision:
    """The desired replica count for one target, with why, in one sentence with the numbers."""

    target: TargetRef
    current: int
    desired: int
    reason: Reason
    message: str
    signals: Mapping[str, SignalValue] = field(default_factory=dict)

    @property
    def changes(self) -> bool:
        return self.desired != self.current


class TrainingAction(enum.StrEnum):
    DEACTIVATE = "deactivate"
    REACTIVATE = "reactivate"
    REQUEST_CHECKPOINT = "request-checkpoint"


@dataclass(frozen=True, slots=True)
class TrainingDecision:
    """Deactivate or reactivate one Kueue Workload (``Workload.spec.active``)."""

    workload: TrainingWorkload
    action: TrainingAction
    reason: Reason
    message: str


Decision = ScaleDecision | TrainingDecision


@dataclass(frozen=True, slots=True)
class DeferredScale:
    """A scale-up the arbitration deferred while its victims checkpoint (``Plan.waiting_for_checkpoint``)."""

    #: The replica count it was for.
    replicas: int
    #: When it was first deferred (the wait is bounded from there).
    since: float


@dataclass(frozen=True, slots=True)
class DemandJump:
    """One change of the count a policy wanted (``DemandHistory``)."""

    at: float
    change: int


@dataclass(frozen=True, slots=True)
class DemandHistory:
    """How the count a policy with ``capacity`` wanted moved: its changes within the arbitration's lookback
    (``arbitration.observe_demand``). Their measured variability is what the yield-at-checkpoint rule reads."""

    #: The first evaluation this history covers (the observed span starts here while it is younger than
    #: the lookback).
    since: float
    #: The latest count wanted.
    count: int
    jumps: tuple[DemandJump, ...] = ()


@quick_init
@dataclass(frozen=True, slots=True)
class PolicyState:
    """Everything one policy remembers between evaluations, passed in and returned explicitly.

    ``recommendations`` and the scale event histories serve HPA's stabilization windows and rate
    policies; ``algorithm`` is the policy type's own state (opaque to the engine).
    """

    recommendations: tuple[tuple[float, int], ...] = ()
    scale_up_events: tuple[tuple[float, int], ...] = ()
    scale_down_events: tuple[tuple[float, int], ...] = ()
    #: Consecutive evaluations each trigger (a signal the policy reads) was unknown, ``(signal, count)`` for the
    #: failing ones only; KEDA keeps the same count per trigger (``status.health``) for its fallback.
    signal_failures: tuple[tuple[str, int], ...] = ()
    last_decision_time: float | None = None
    last_scale_time: float | None = None
    #: When the activation signal last went to or below its threshold (scale-to-zero), else None.
    idle_since: float | None = None
    algorithm: object | None = None
    #: A scale-up deferred while training checkpoints: kept while the policy holds its count, so the
    #: hand-off finishes as it would have had the replicas started at once (the policy would keep them).
    deferred: DeferredScale | None = None
    #: With ``capacity``: how the wanted count moved (``arbitration.observe_demand``).
    demand: DemandHistory | None = None

    @property
    def consecutive_failures(self) -> int:
        """The longest run of unknown evaluations of any one trigger (0 when all are usable)."""
        return max((n for _, n in self.signal_failures), default=0)

    def with_scale_history(
        self,
        scale_up_events: tuple[tuple[float, int], ...],
        scale_down_events: tuple[tuple[float, int], ...],
        last_scale_time: float | None,
    ) -> PolicyState:
        """This state with another scale history (replay's recorded mode puts the recorded one in); the same as
        ``dataclasses.replace`` on those three fields, without its cost at every evaluation."""
        return PolicyState(
            self.recommendations,
            scale_up_events,
            scale_down_events,
            self.signal_failures,
            self.last_decision_time,
            last_scale_time,
            self.idle_since,
            self.algorithm,
            self.deferred,
            self.demand,
        )
