"""Policy type ``slo``: replicas from the TTFT objective itself, with capacity learned online in tokens.

The user states the objective (TTFT target and percentile, optionally time per output token) and the facts of
one replica (an LWS group for a LeaderWorkerSet) that the serving config already states: its slots (TGI
``--max-batch-size``, vLLM ``--max-num-seqs``, JetStream decode slots), its KV cache in tokens, its cold
start, and a conservative prior for its throughput (prompt tokens/s while prefilling, generated tokens/s at
a full batch; from a profile or declared). No capacity number tuned on a trace.

Each evaluation (``N`` spec, ``R`` ready, ``S`` starting replicas):

1. **Load** in replica-equivalents (1.0 = one replica fully busy), the largest of what is known:
   tokens ``prompt/(κ·P)`` (served prompt tokens/s over the learned prefill capacity: ``P`` the prior,
   ``κ`` the learned capacity scale), plus ``generation/(κ·G)`` only when no gauge sees the decode, a
   time-per-output-token objective is set, or ``countDecode``: the first token waits for prefill compute and for
   a slot, and continuous-batching servers run a new prompt's prefill ahead of (TGI, JetStream) or within the
   token budget of (vLLM) the decode steps, so the decode delays it through the slots and KV it holds (with
   ``countDecode`` the sum is the busy share whose 1 is where the slots fill: a slot gauge is an occupancy,
   convex in that share where a decode step has a fixed part, so it understates the load below the knee); slots
   ``(running + waiting) / slot unit`` (``waiting`` is the backlog the served rates do not show; the slot unit
   is the mean occupancy at which, behind random routing, a replica's usable slots are all taken for at most
   ``1 − percentile`` of arrivals (Poisson occupancy, ``occupancy_at_objective``), over ``targetUtilization``);
   KV cache ``kvUsage × R`` (with ``kvTokens``, TGI's: the tokens the batches reserve over ``R × kvCacheTokens``,
   the budget its router admits against). The first rate window of a fresh controller is not history (its rates
   ramp from nothing). With ``promptTokensBurst`` (the prompt counter over a short window) the prompt work's burstiness
   ``b`` is measured (the Allan factor of its windows over a Poisson stream's, ``sizing.work_burstiness``; prior
   ``BURSTINESS_PRIOR``, never below 1), split over the ready replicas (``1 + (b − 1)/R``), and widens both
   queues: the prefill's to a G/G/1 (Kingman) and the slots' occupancy (Hayward). With ``slotWait`` a wait for a
   slot is priced, not counted: the slot unit is the mean occupancy at which at most ``1 − percentile`` of
   requests wait longer than the objective leaves them after their own prefill (M/M/n per replica, Erlang C,
   with the slot release rate measured by Little's law; ``sizing.occupancy_at_wait_objective``). With
   ``workWithinObjective`` (opt-in) the token load counts a rate window's work as what must be served within the
   window plus the TTFT objective (``× w / (w + ttftSeconds)``, the fluid bound of a FIFO queue), so that the
   prompt counter may be read over a few scrapes, at the timescale a first token feels bursts of work.
2. **Learned capacity** (``κ``, starts at 1 = the prior). When the replicas are saturated (requests wait on
   every ready replica, checked replica by replica where the source gives each replica's count, ``R``
   unchanged for a minute) the served tokens/s per replica *is* their capacity:
   ``κ`` moves toward it (exponential average, time constant ``CAPACITY_TAU_S``), and so does the usable
   share of the slots (from the sequences running), unless a KV gauge shows the cache emptier than the
   slots (then the queue waits for prefill, not for a slot). When they are not, what they serve is a lower bound of
   their capacity: ``κ`` rises to it at once. So ``κ`` converges within minutes of the first busy period; it
   is kept in ``SloState`` so replay and simulation reproduce it.
3. **Utilization at the SLO** (``c``, starts at ``targetUtilization``): the fraction of capacity a replica
   may run at and keep the objective. The measured latency quantiles (TTFT, queue time, TPOT) against the
   objective close the loop: at risk (≥ ``RISK_FRACTION`` of the target) ``c`` drops in proportion to the
   excess; comfortably met (≤ ``RELAX_FRACTION``) it recovers toward ``targetUtilization`` with time
   constant ``RECOVER_TAU_S``, and **probes upward**: it may rise to ``proven / (1 − hysteresis)`` (at most
   ``PROBE_MAX_UTILIZATION``), ``proven`` being the highest load per replica at which the quantile was
   comfortably met on a settled count, so a scale-down goes at most to a utilization seen to hold the
   objective. No probe near a load where a count was found short; a risk withdraws what was proven. With
   ``proveOverWindow`` (opt-in) only a load the quantile is evidence of is proven: the lowest load of its window
   (the requests of a load reached at the window's end are still waiting), nothing while requests wait, and
   nothing until the history spans a window. With ``observedAtEnd`` (opt-in: the server observes a request's latency
   as it ends, as TGI's queue time) a window is evidence of capacity to spare (recovery and probe) only once the
   requests that waited have ended: not while any waits, nor until the mean time in system (Little's law) has
   passed since the last wait. Over the target with nothing starting, at least ``R + 1`` whatever
   the model says. With ``waitForAdmission`` (the default) a replica waiting for Kueue's admission is, to the loop, as
   one starting: ``c`` does not fall until every replica asked for serves (the risk that asked for it is not new
   evidence while it waits for chips). With ``breachOverWindow`` (opt-in, measured, not shipped) a quantile over
   the target is judged at the highest load of its window: the ``R + 1`` floor holds only while the load now is
   within the hysteresis of it, and ``c`` drops only where the model was content there.
   With ``proveAtMix`` (opt-in) a proof holds at the prompt lengths it was made at (the ``promptLength``
   histogram's mean when ``proven`` was last raised): prompts grown beyond those by more than the hysteresis band
   withdraw it, and ``c`` comes back to at most ``targetUtilization`` until a load is proven at the prompts now.
   With ``ttftAfterQueue`` (opt-in, for a TTFT counted from the queue's end, as JetStream's) the TTFT the loop
   judges is what users feel, queue time + TTFT: the quantile of the sum of the two windows, whose latencies are
   independent (a FIFO wait does not depend on the request's own prefill; ``sizing.quantile_of_sum``), each read
   uniform within its buckets, or with ``bucketReading: exponential`` (opt-in) as an exponential fitted from the
   neighbouring buckets' counts (``sizing.bucket_pieces``).
4. **Forecast** over the cold start ``H``: the load's linear trend over the last ``H`` (only upward, at most
   doubling the load, never extrapolated further ahead than the history spans), a burst flag (the last
   ``BURST_SHORT_S`` average ≥ ``burstRatio`` × the window's), and, when ``seasonality`` is set and a previous
   period was seen, the load of the same phase one period ago at ``now + H``. The forecast is a floor:
   ``need = ceil(max(load, forecast) / c)``; it never lowers what the current load needs. With
   ``forecast.arrivals`` the trend and the burst are measured on the arrivals (``signals.arrivals``, else
   ``promptTokens``, else the ``promptLength`` histogram's observation rate) whenever they are read: the forecast
   is the load now times the arrivals' forecast over their level (Little's law: at a given time in system the
   occupancy is proportional to the arrival rate), so servers filling from empty are not a trend; with no
   arrival signal, or one unknown or zero now, the load's own trend and burst. With ``forecast.ramp`` (opt-in) a
   slow ramp, too slow for the trend over two cold starts to tell from an occupancy gauge's noise, is looked for over
   4, 8, … cold starts (``sizing.ramp_trend``: least squares, the slope's error corrected for the samples' lag-1
   autocorrelation); the shortest window whose slope's lower bound (2 standard errors) is positive, unless the last
   two cold starts' own trend rejects it, adds its slope times the cold start to the level: only ever more.
5. **Scale up** to ``need`` when above ``N``; while ``R < need ≤ N`` with starting replicas it waits for
   them (no cascading over-scale during a cold start). With ``loadLevel`` (opt-in) the scale-up sizes the lower of
   the load now and the value now of the line the trend fits (unless a queue has held on every replica as long as
   saturation takes): the slot unit is a mean occupancy whose fluctuations the Poisson rule already prices, so one
   sample's peak is not counted twice; the fitted line is the mean's estimate now, a ramp's without lag.
6. **Scale down, cost-aware**: to ``max(ceil(max(peak, forecast) / (c·(1 − hysteresis))), ceil((load + rise) / c))``,
   where ``peak`` is the highest load of the last ``holdSeconds`` (default the cold start) and ``rise`` the
   largest rise within one cold start seen lately, from a load at least the load now (``riseFromLevel``: a
   climb out of a lower trough has partly happened already; with ``riseFromBelow``, opt-in, such a climb counts for
   the part of it above the load now, the part that has not happened): a replica released now and needed again within
   its cold start costs more than keeping it. The two margins are not stacked: the band keeps the steady need, the
   measured rise is its own margin. Past loads are recomputed with the capacity learned now
   (``LoadSample``), so a re-learned capacity is not a rise. Never below the count found needed when a count
   was short at a comparable load (``ShortCount``: the SLO missed, or a queue on every replica for as long
   as saturation takes); the loop that found it may relax, the count it found is remembered. The band
   between the scale-up count and this one is the hysteresis; at a steady load the count is a fixed point.
   With ``scaleDown.releaseShortCounts`` the short counts, and with ``scaleDown.releaseRise`` (opt-in) the
   largest rise, are released once ``MIN_RECURRENCE_FALLS`` cold starts of evidence have followed them and the
   last recurrence: an evidence clock counts the seconds of evaluations that held the SLO on known signals (no
   miss, no queue held on every replica); an unknown signal stops it (missing data releases nothing), a miss or
   a held queue restarts it. With no recurrence in ``n`` lead-long stretches the 95 % upper bound of its chance
   per stretch is ``3/n`` (the rule of three), below one half from 6 on, the bar ``scaleDown.recurrence`` uses.
   With ``scaleDown.riseAbsorbed`` (opt-in) a rise the ready count then carried with the SLO held (measured
   throughout, every wait measured too) keeps at most that count (``sizing.absorbing_counts``, ``_rise_keep``).
   With ``scaleDown.releaseRiseStepwise`` (opt-in, with ``releaseRise``) that evidence is evidence at the ready
   count that held it: the released rise lowers the count at most to one replica below the lowest ready count
   with ``MIN_RECURRENCE_FALLS`` cold starts of evidence of its own (``_evidenced_count``; evidence at fewer
   replicas counts for more, not the other way round), so each step waits for that evidence at the count the
   last one left. An occupancy gauge's rise depends on the count it is measured at (Little's law: fewer replicas
   hold each sequence longer), so rises seen while the memory kept more replicas understate those at fewer.
   With ``scaleDown.recurrence`` (opt-in) demand's measured recurrence against the lead decides where it has
   the evidence (``sizing.recurrence``, ``_recurrence_keep``): the band keeps ``max(load, forecast)`` at
   ``c·(1 − hysteresis)``, and the k-th replica above it is kept while, in the history, a release as late into
   a fall below ``(k − 1)·c`` as now would have missed more than ``1 − percentile`` of the requests while a
   replacement started, or the demand came back on average within the lead (cold start plus a victim's
   eviction); otherwise it is released on at least ``MIN_RECURRENCE_FALLS`` such falls, and on fewer the hold
   window's peak and the largest rise decide as above. The history it reads is ``SloState.history``, so replay
   and simulation reproduce it.
7. **Unknown never shrinks.** With a configured signal unknown, the known load is a lower bound: the policy
   scales up on it when it alone needs more than ``N`` and ``R + S``; otherwise it returns unknown and the
   engine holds (or falls back). An unknown latency quantile allows no scale-down and no recovery of ``c``,
   except while the known demand is exactly zero (an empty histogram has no quantile).

Every message carries the numbers: load and its parts, learned capacity, utilization at the SLO, forecast,
measured quantile vs objective, the hold window and the hysteresis. ``uses_behavior`` is false: the hold
window and the hysteresis are this type's smoothing; the engine still applies min/max and arbitration.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import Field, model_validator

from autoscaler.core import fast
from autoscaler.core.headroom import latency_headroom
from autoscaler.core.model import NO_OBSERVATIONS, Ahead, Reason
from autoscaler.core.policies.base import Context, PolicyAlgorithm, Recommendation
from autoscaler.core.sizing import (
    BURST_SHORT_S,
    BURSTINESS_PRIOR,
    BURSTINESS_SPAN_S,
    CAPACITY_SCALE_BOUNDS,
    MIN_UTILIZATION,
    QUANTILE_CONFIDENCE,
    RISK_FRACTION,
    SATURATED_EVALUATIONS,
    SETTLE_S,
    RampTrend,
    Within,
    WorkSample,
    absorbing_counts,
    capacity_alpha,
    fitted_level,
    largest_rise,
    learn_burstiness,
    learn_capacity_scale,
    learn_prefill_rate,
    learn_release_rate,
    learn_utilization,
    lengths_from_histogram,
    lookback,
    measured_prefill_rate,
    occupancy_at_wait_objective,
    peaked_occupancy,
    prefill_utilization_at_objective,
    quantile_of_sum,
    queued_on_every_replica,
    ramp_trend,
    recurrence,
    seasonal,
    slot_release_rate,
    split_burstiness,
    supported_quantile,
    supported_quantile_of_sum,
    trend_and_burst,
    trend_span,
    ttft_slacks,
    work_burstiness,
)
from autoscaler.core.sizing import ceil_count as _ceil
from autoscaler.core.specbase import FieldError, SpecModel

#: The falls below a replica's need (``sizing.recurrence``) that must have lasted as long as the one now before
#: their record may release a replica the margins it replaces would keep: with ``n`` falls and none back within
#: the lead, the 95 % upper bound of the chance of a return is about ``3/n`` (the rule of three, Hanley and
#: Lippman-Hand 1983), below one half from 6 on. Keeping on less evidence is on the safe side and needs none.
MIN_RECURRENCE_FALLS = 6
#: Counts remembered as short (the most recent ones).
MAX_SHORT = 32
#: The learned share of usable slots stays above this.
MIN_SLOT_SCALE = 0.05
#: ``Recommendation.ahead`` forecasts a hand-off's lead: the victims' eviction plus the cold start. When the engine
#: gives no eviction (``Context.eviction_s``: no capacity, or no victim's grace period read), this many cold
#: starts (estimate: grace periods of 30-60 s against cold starts of minutes, so at most one more cold start).
HANDOFF_LEAD_COLD_STARTS = 2.0


class ObjectiveSpec(SpecModel):
    """The service-level objective the policy holds."""

    ttft_seconds: float = Field(gt=0, description="Time to first token the percentile must stay within.")
    percentile: float = Field(default=0.99, gt=0, lt=1, description="e.g. 0.99 for p99 TTFT.")
    time_per_output_token_seconds: float | None = Field(
        default=None, gt=0, description="Optional inter-token latency objective at the same percentile."
    )


class PriorSpec(SpecModel):
    """A conservative prior for one replica's throughput; the policy learns the real one online."""

    prefill_tokens_per_second: float = Field(gt=0, description="Prompt tokens/s while prefilling.")
    generation_tokens_per_second: float = Field(gt=0, description="Generated tokens/s at a full batch.")
    source: str = Field(default="declared", description="Where the numbers come from (a profile, a benchmark).")


class ReplicaFactsSpec(SpecModel):
    """What one replica (one LWS group) is, as its serving config states it."""

    slots: int = Field(
        gt=0, description="Concurrent sequences: TGI --max-batch-size, vLLM --max-num-seqs, JetStream decode slots."
    )
    kv_cache_tokens: int | None = Field(
        default=None, gt=0, description="Tokens of KV cache (for the messages; kvFromTokens bounds the slots with it)."
    )
    cold_start_seconds: float = Field(
        ge=0, description="Admission to serving: scheduling, image pull, model load (and compilation)."
    )
    prior: PriorSpec | None = Field(default=None, description="Needed when token-rate signals are given.")


class SloSignalsSpec(SpecModel):
    """Which policy signals mean what. Totals over the target unless the signal has scope perReplica;
    ``slotsUsed`` and ``kvCacheUsage`` are fractions (0-1) averaged over the ready replicas."""

    waiting: str | None = Field(default=None, description="Requests waiting for a slot (or for prefill).")
    running: str | None = Field(default=None, description="Requests holding a slot (batch size).")
    slots_used: str | None = Field(default=None, description="Fraction of slots in use, 0-1 (JetStream).")
    kv_cache_usage: str | None = Field(default=None, description="Fraction of the KV cache in use, 0-1.")
    kv_tokens: str | None = Field(
        default=None,
        description="KV-cache tokens the running batches reserve, total over the target (TGI's "
        "tgi_batch_current_max_tokens, preset tgi.batch_max_tokens: each request's prompt + max_new_tokens). Over "
        "replica.kvCacheTokens per ready replica (TGI's --max-batch-total-tokens, the token budget its router admits "
        "against) it is the KV use, read as kvCacheUsage is; for servers that export their KV cache in tokens, not as "
        "a fraction. Needs replica.kvCacheTokens; not with kvCacheUsage (one KV reading).",
    )
    queue_time_evidence: str | None = Field(
        default=None,
        description="The queue-time quantile (e.g. preset jetstream.queue_time, p99 over a minute) read only as "
        "evidence that requests waiting were served within the objective's risk line, for scaleDown.riseAbsorbed; "
        "not in the latency loop (signals.queueTime puts it there). JetStream's TTFT holds no wait in its prefill "
        "backlog.",
    )
    prompt_tokens: str | None = Field(default=None, description="Prompt tokens/s served (a counter's rate).")
    generation_tokens: str | None = Field(default=None, description="Generated tokens/s (a counter's rate).")
    ttft: str | None = Field(default=None, description="TTFT at the objective's percentile, seconds.")
    queue_time: str | None = Field(default=None, description="Queue time at the objective's percentile, seconds.")
    time_per_output_token: str | None = Field(default=None, description="TPOT at the percentile, seconds.")
    prompt_length: str | None = Field(
        default=None,
        description="The prompt-length histogram read as a quantile (presets tgi/vllm/jetstream.prompt_length): its "
        "buckets size the prefill queue per replica (M/G/1); needs promptTokens. Sources that return the quantile "
        "whole (PromQL) give no buckets: then the prefill counts by its mean.",
    )

    prompt_tokens_burst: str | None = Field(
        default=None,
        description="The prompt-token counter rated over a short window (a few evaluation periods, e.g. 10 s), total "
        "over the target: the differences of windows that do not overlap measure how bursty prompt work arrives "
        "(its index of dispersion over a Poisson stream's), which widens the prefill queue (G/G/1, Kingman) and the "
        "slots' occupancy (Hayward); needs promptTokens and promptLength. Unknown keeps the last; not measured yet, a "
        "conservative prior.",
    )

    arrivals: str | None = Field(
        default=None,
        description="Arrivals per second, total over the target (a counter's rate: prompt tokens, e.g. preset "
        "jetstream.prompt_tokens, or requests), for forecast.arrivals only: the forecast's trend and burst are "
        "measured on it. It counts in no load. Default: promptTokens, else the promptLength histogram's observation "
        "rate (unknown in a window without requests).",
    )

    prefill_seconds: str | None = Field(
        default=None,
        description="Prefill seconds per second, total over the target (a counter's rate of a prefill-time "
        "histogram's running sum: presets vllm.prefill_seconds, tgi.prefill_seconds with labels {method: prefill}). "
        "With promptTokens it measures each replica's prefill rate, which replaces the prior's in the prefill "
        "queue once measured (never above what was measured; unknown keeps the last); needs promptTokens.",
    )

    def names(self) -> list[str]:
        """The signal names given, in field order (what ``model_dump`` lists, without building the dump: this
        runs in validation, for every policy of this type)."""
        return [v for v in map(self.__dict__.get, type(self).model_fields) if isinstance(v, str)]


class ForecastSpec(SpecModel):
    """The short-horizon forecast over the cold start; it only ever adds capacity ahead of need."""

    enabled: bool = True
    burst_ratio: float = Field(
        default=2.0, gt=1, description="A burst: the last 20 s average is at least this times the cold-start window's."
    )
    seasonality_period_seconds: float | None = Field(
        default=None, gt=0, description="e.g. 86400: the load one period ago at now + cold start is a floor."
    )
    seasonality_buckets: int = Field(default=96, ge=2, le=10080, description="Phases kept per period.")
    arrivals: bool = Field(
        default=False,
        description="Measure the trend and the burst on the arrivals rather than on the load, whenever an arrival "
        "signal is read: promptTokens' rate, or without token counters the promptLength histogram's observation "
        "rate (requests/s). The load's forecast is then the load now times the arrivals' forecast over the arrivals "
        "now (Little's law: at a given time in system, occupancy is proportional to the arrival rate), so servers "
        "filling from empty (an occupancy gauge climbing while demand does not) are not a trend. Without an arrival "
        "signal, or with it unknown or zero now, the load's own trend and burst, as before. The arrivals' first "
        "window is not history (its rate ramps from nothing).",
    )
    ramp: bool = Field(
        default=False,
        description="Also forecast a slow ramp, one too slow for the trend over two cold starts to tell from the "
        "noise: the load's least-squares trend over 4, 8, ... cold starts (as long as the history kept and observed "
        "covers), its standard error corrected for the samples' lag-1 autocorrelation (effective samples n(1 - r1)/"
        "(1 + r1)); the shortest window whose slope less 2 standard errors is positive (a ramp, not noise) adds its "
        "slope times the cold start to the level the scale-up sizes, unless the last two cold starts' own trend "
        "rejects it (its slope plus 2 standard errors below that slope: the ramp has turned). It only adds: the "
        "forecast is never below the level. Samples with a queue on every replica are not fitted (they show "
        "capacity, not demand). Opt-in: measured, not shipped (docs/slo.md, Session 21: with loadLevel it gained a "
        "TPU row and lost SLO on TGI conversation rows and the TPU slow ramp; alone it raised the TPU slow ramp "
        "94.29 -> 95.92 % at more hours elsewhere).",
    )


class ScaleDownSpec(SpecModel):
    """Cost-aware scale-down."""

    hysteresis: float = Field(
        default=0.2,
        gt=0,
        lt=1,
        description="Scale down only to a count running at most (1 - this) x the SLO utilization.",
    )
    hold_seconds: float | None = Field(
        default=None, ge=0, description="The peak of this window must fit after a scale-down; default the cold start."
    )
    rise_from_level: bool = Field(
        default=True,
        description="The largest rise within a cold start counts only rises that start from a load at least the load "
        "now: a climb out of a lower trough has partly happened already (from the trough up to now), and an "
        "occupancy gauge filling from empty climbs from nothing. False: rises from any level (before 2026-12-02).",
    )
    rise_from_below: bool = Field(
        default=False,
        description="Opt-in, with riseFromLevel. A climb that starts below the load now counts too, for its part above "
        "the load now (its peak within a cold start less the load now) rather than not at all: of a climb out of a "
        "lower trough, the part up to the load now has happened, the part above it has not. Work arriving in bursts "
        "separated by silence (prompt work, read at the timescale of a few scrapes) climbs from near zero each time, "
        "and the first samples of the next burst (a load a little above the trough) would otherwise forget what the "
        "last bursts reached. A gauge that filled from empty up to the load now and stays adds nothing (its peak is "
        "the load now). docs/slo.md, Session 33.",
    )
    release_short_counts: bool = Field(
        default=False,
        description="Release a count found short once 6 cold starts of evidence have followed it: every "
        "evaluation's signals known, the SLO not missed and no queue held on every replica (a latency window with no "
        "request and none waiting counts as held). A signal unknown stops the evidence (missing data releases "
        "nothing); a miss or a held queue restarts it (and finds a short count anew). With no recurrence in n "
        "lead-long stretches the 95 % upper bound of the chance of one per stretch is 3/n (the rule of three), "
        "below one half from 6 on. False: a short count is kept until that ready count is seen enough at that load "
        "(one found at a served load near 0 applies at every load, and at a higher count for good). Measured and "
        "shipped in the JetStream policy (docs/slo.md, Session 13).",
    )
    release_rise: bool = Field(
        default=False,
        description="Opt-in. Release the largest rise within a cold start on the same evidence as releaseShortCounts "
        "(6 cold starts of it after the rise, dated by its end, and after the last recurrence), rather than keeping it "
        "for its 15-cold-start lookback whatever follows. Alone, measured and not shipped: on a compressed daily swing "
        "the rise released was the best estimate of the next day's (docs/slo.md, Session 13); shipped in the JetStream "
        "policy with releaseRiseStepwise (Session 14).",
    )
    rise_absorbed: bool = Field(
        default=False,
        description="Opt-in. A rise within a cold start that the ready replicas absorbed with the SLO held keeps at "
        "most the highest ready count over the cold start up to its peak: that many replicas carried it with the "
        "objective met. Held: every evaluation from a cold start before the peak to the latency quantile's window "
        "after it measured (no gap longer than that window), no miss, no queue held on every replica, the quantile "
        "under the risk line, and nothing waiting unless a queue-time quantile measures the waits (signals.queueTime, "
        "or signals.queueTimeEvidence for this alone): a waiting request is in no latency window yet, and JetStream's "
        "TTFT holds no wait in its prefill backlog. Rises not so absorbed keep as before. Needs a latency signal. An "
        "occupancy gauge's rise depends on the count it is seen at (Little's law); the margin kept for it yields to "
        "what was measured at that count (docs/slo.md, Session 34).",
    )
    release_rise_stepwise: bool = Field(
        default=False,
        description="Opt-in, with releaseRise. Evidence that the SLO held is evidence at the ready count that held it: "
        "a largest rise released on it lowers the scale-down count at most to one replica below the lowest ready "
        "count that has itself held the SLO for 6 cold starts of evidence since the last recurrence (one replica a "
        "step; the next step waits for that much evidence at the count the step left). An occupancy gauge's rise "
        "depends on the count it was measured at (Little's law: fewer replicas hold each sequence longer), so rises "
        "seen while the memory kept more replicas understate the rises at fewer. Measured and shipped in the JetStream "
        "policy (docs/slo.md, Session 14).",
    )
    recurrence: bool = Field(
        default=False,
        description="Opt-in. Release a replica by demand's measured recurrence against its lead (cold start, plus a "
        "training victim's eviction when known): kept while, in the demand history, releasing it as long after a "
        "fall below its need as now would have cost more than the SLO's budget (1 - percentile) of requests while "
        "a replacement started, or while the demand came back on average within the lead; released on that "
        "record (6 falls at least) even where the hold window's peak and the largest rise within a cold start "
        "would keep it; with less evidence those margins decide.",
    )
    price_reacquire: bool = Field(
        default=False,
        description="Price a release against what getting the replica back will cost in training stops (with "
        "spec.capacity). A replica released while training this controller stopped waits for chips is resumed on "
        "them, and getting it back takes a stop; a job stopped maxPreemptionsPerHour times in the last hour (or "
        "within minRunSeconds of its resume) cannot be stopped again until that ages out, so the release can leave "
        "the pool unable to reach, for that long, the count it can reach now (arbitration.reacquire). Such a "
        "replica takes that long plus a hand-off's lead to come back, and is released as the hold window's rule "
        "releases one that takes a cold start: only on a history observed and kept that spans that time, and only "
        "when the load expected over it fits the count below at the scale-down utilization (the highest load of "
        "that time and, where a slow ramp shows, the load now plus the ramp's slope over that time, no further "
        "than the window that showed it). A release that costs no reach (the chips stay free, or the job resumed "
        "can still be stopped) is as before. Without spec.capacity, or with a TPU slice inventory, nothing changes. "
        "Opt-in (docs/slo.md, Session 27).",
    )


class SloPolicyConfig(SpecModel):
    type: Literal["slo"]
    objective: ObjectiveSpec
    replica: ReplicaFactsSpec
    signals: SloSignalsSpec
    target_utilization: float = Field(
        default=0.8, gt=0, le=1, description="Utilization at the SLO to start from; the latency loop only lowers it."
    )
    slot_wait: bool = Field(
        default=False,
        description="Price a wait for a slot against the TTFT slack (the objective less the request's own prefill) "
        "instead of counting every wait as a miss: per replica an M/M/n queue on the usable slots, P(wait > slack) = "
        "C(n, a) * exp(-(n - a) * mu * slack) (Erlang C), kept within the SLO's budget (1 - percentile), with mu the "
        "slot release rate measured from the servers (arrivals over sequences running, Little's law; arrivals from "
        "promptTokens over the prompt lengths' mean, or the promptLength histogram's rate) and the slack from the "
        "promptLength buckets at the prefill rate. Needs promptLength, replica.prior and running or slotsUsed; until "
        "measured, every wait counts as a miss (the Poisson slot model). Opt-in: measured, not shipped "
        "(docs/slo.md, Session 10).",
    )
    latency_evidence: bool = Field(
        default=False,
        description="The latency loop acts on what a quantile's window is evidence of. (1) A measured quantile is "
        "the lower one-sided 95 % confidence bound of that quantile given the window's observations (the order "
        "statistic X_(k) with P(Binomial(n, q) >= k) >= 0.95, read from the histogram's buckets), not the point "
        "estimate: with many observations the same within a few ranks; with few, a p99 is not the largest one "
        "(one slow request among twenty is what a 1 % tail gives by chance, two are not). Sources that return the "
        "quantile whole (PromQL) give no buckets: their value as before. (2) A window in which no request was "
        "observed (no observations) while none is waiting is quiet, not unknown: no request is late, the loop "
        "abstains and the model decides, as without a latency signal. Needs signals.waiting for (2). Opt-in "
        "(docs/slo.md, Session 12).",
    )
    ttft_after_queue: bool = Field(
        default=False,
        description="signals.ttft counts from the end of the queue time, not from arrival (JetStream's "
        "jetstream_time_to_first_token starts as the prefill thread takes the request off the prefill backlog, "
        "and jetstream_queue_duration is that backlog's wait, plus the transfer and generate backlogs'): the TTFT "
        "users feel is queue time + TTFT, and the loop judges that sum's quantile against the objective, one "
        "latency in place of the two. From the two windows' buckets it is the quantile of the sum of two "
        "independent latencies (a FIFO wait does not depend on the request's own prefill: Lindley's recursion), "
        "each uniform within its buckets as histogram_quantile reads one; with latencyEvidence the one the "
        "window's requests support (their number: the smaller histogram's). Sources that return each quantile "
        "whole (PromQL) give no buckets: the sum of the two quantiles. Either unknown (or one with no request "
        "observed while the other has some) makes it unknown; both quiet, quiet. Needs signals.ttft and "
        "signals.queueTime. Opt-in (docs/slo.md, Session 19).",
    )
    bucket_reading: Within = Field(
        default="uniform",
        description="How ttftAfterQueue reads the observations within each histogram bucket when it convolves the "
        "two windows. uniform: spread evenly, as histogram_quantile reads a bucket (a wide bucket where the "
        "density falls is read too high: +0.3 to +0.8 s median on the sum's p99, docs/slo.md Session 24). "
        "exponential: a density proportional to exp(-theta x) within the bucket, theta fitted by maximum "
        "likelihood to the counts of the bucket and its two neighbours (the bucket's own count kept; falling or "
        "rising as those counts say). Needs ttftAfterQueue. Opt-in (docs/slo.md, Session 29).",
    )
    prove_over_window: bool = Field(
        default=False,
        description="The upward probe proves only a load the measured quantile is evidence of: the lowest load over "
        "the quantile's window (the longest latency signal's windowSeconds), not the load now. A quantile over a "
        "trailing window holds the requests that finished their wait within it; a load reached at its end has not "
        "been judged yet (the requests it queues are waiting, not in the histogram), so taking it as proven lets "
        "the probe raise the utilization at the SLO as the load climbs, and delays the scale-up the climb needs. "
        "For the same reason nothing is proven while requests wait (or signals.waiting is unknown or not given). "
        "Opt-in: measured, not shipped (docs/slo.md, Session 15).",
    )
    observed_at_end: bool = Field(
        default=False,
        description="The latency quantiles are observed as each request ends (TGI's tgi_request_queue_duration, "
        "vLLM's queue time), so a request that waited is in no window while it decodes. A window comfortably met is "
        "then evidence of capacity to spare (the recovery of the utilization at the SLO and its upward probe) only "
        "once the requests that waited have ended: not while any waits (signals.waiting above 0, unknown or not "
        "given), nor until, since the last evaluation that saw one waiting, the mean time in system has passed: "
        "Little's law, the requests in the system (running + waiting) over the rate at which the quantile observes "
        "them (requests ending per second, from its histogram; unknown: the longest latency window). A quantile at "
        "risk still lowers the utilization. Needs signals.waiting. Opt-in (docs/slo.md, Session 20).",
    )
    breach_over_window: bool = Field(
        default=False,
        description="The floor of one replica more when a latency quantile is over its objective (\"the SLO is "
        "missed now\") holds only while the load now is comparable to the highest load of the quantile's window (at "
        "least (1 - scaleDown.hysteresis) of it, the comparability a count found short is remembered at). A quantile "
        "over a trailing window holds the requests that finished within it: over the objective, it is evidence that "
        "the ready count was short at a load the window held, at most its highest; once the load has fallen well "
        "below that (a burst that has passed), a replica started now, ready a cold start later, answers no request "
        "the window saw. The loop still lowers the utilization at the SLO and the count found short is still "
        "remembered; the model sizes with them. Opt-in: measured, not shipped (docs/slo.md, Session 17: it lost the "
        "TPU slow ramp and a code row, where a passed burst's miss warned of the next).",
    )
    load_level: bool = Field(
        default=False,
        description="The scale-up sizes the load's level: the lower of the load now and the value now of the line the "
        "trend fits (the calm samples of the last two cold starts), not one evaluation's sample. The slot unit is a "
        "mean occupancy: the Poisson rule sizes the mean so that its fluctuations fill a replica's slots for at most "
        "1 - percentile of arrivals, so one sample of the gauge is that mean plus a fluctuation the unit already "
        "allows for; counted again, a peak of a steady load starts a replica the unit had priced. The fitted line is "
        "the mean's estimate now, a ramp's without the lag of an average. A queue held on every replica as long as "
        "saturation takes is no fluctuation, and fewer than 4 samples fit no line: then the load now. The trend and "
        "the burst (the forecast's floor is the level) and the scale-down band are as before. Opt-in: measured, not "
        "shipped (docs/slo.md, Session 17: it lost the TPU slow ramp, where the samples' noise had been the margin "
        "ahead of a ramp too slow for the trend).",
    )
    wait_for_admission: bool = Field(
        default=True,
        description="The latency loop lowers the utilization at the SLO only when every replica asked for serves: "
        "not while one starts (as always) nor while one waits for Kueue's admission (its pods carry Kueue's "
        "scheduling gate, or do not exist yet). A quantile at risk with the ready replicas the model found enough "
        "lowers the utilization once and asks for more (the floor of one replica more); until the replica asked "
        "for serves, the risk persisting is that same evidence again, however long the wait for chips, not a new "
        "measure of what a replica can carry. Without this, the longer a replica waits for chips, the further the "
        "utilization falls, and the low value it reaches costs later. The replica asked for is still asked for, the "
        "floor still holds, and a quantile comfortably met still raises it. Replay's recorded mode counts every "
        "replica not ready as starting, so it reads the same either way. On by default since 2026-12-07 (docs/slo.md, "
        "Session 23: no row of the grid or the hand-off bench changed its verdict); false restores the old rule.",
    )
    kv_from_tokens: bool = Field(
        default=False,
        description="The KV cache the replica states (replica.kvCacheTokens) bounds the sequences it can hold, at the "
        "tokens a sequence reserves as measured now: a server admits a request only when its prompt and its output "
        "fit in the cache (TGI's token budget, --max-batch-total-tokens; vLLM's blocks), so with long prompts or "
        "long outputs the cache, not --max-batch-size, is what fills. A sequence's tokens are the prompt lengths' "
        "mean (signals.promptLength's buckets) times 1 + generated/prompt tokens per second (the output per request "
        "over the prompt per request, both from the token counters over the same window). The usable slots are then "
        "at most kvCacheTokens over that (never more than the slots times the learned share); a running sequence is on "
        "average longer than an arriving one (long outputs run longer), so this bound is an upper one: the cache "
        "holds at most that many, often fewer. For servers that export no KV gauge (TGI); with "
        "signals.kvCacheUsage the gauge counts already. Unknown (no requests in the windows): no bound. Needs "
        "replica.kvCacheTokens, signals.promptLength, promptTokens and generationTokens. Opt-in: measured on a "
        "held-out set and the bundled TGI rows, not shipped (docs/slo.md, Session 25).",
    )
    breach_on_evidence: bool = Field(
        default=False,
        description="A missed SLO counts as missed (the floor of one more replica whatever the model says, a count "
        "remembered as short, a recurrence for the release rules) only where the window's requests show it: the "
        "quantile they support at 95 % (the order statistic X_(k) with P(Binomial(n, q) >= k) >= 0.95, n the "
        "requests the histogram's +Inf rate times its window counts) over the objective, not the point estimate. "
        "For a p99: one request over the objective shows a miss in a window of at most 5 requests (0.99^5 >= "
        "0.95); from 6 to 35 requests it takes two, from 36 to 82 three. The point estimate still moves the "
        "utilization at the SLO (at risk it drops, as before): a thin window warns, it does not add a replica on "
        "its own. Sources that return the quantile whole (PromQL) give no buckets: the point estimate, as before. "
        "With latencyEvidence every reading is the supported one already. Opt-in: measured, not shipped (docs/slo.md, "
        "Session 30: held-out TGI very-low met, decode-heavy 1.3 points lost; no bundled verdict moved).",
    )
    count_decode: bool = Field(
        default=False,
        description="Generated tokens count in the token load even where a gauge (slots, running, KV) sees the "
        "decode: the load is prompt/(kappa P) + generation/(kappa G), the replica's busy share on a server that "
        "pauses its decode steps for each prefill (JetStream, TGI), whose 1 is where its slots fill and its queue "
        "grows. A slot gauge is an occupancy: the sequences running are the arrivals times their time in a batch, "
        "and a decode step's fixed part makes a small batch's step nearly as long as a full one's, so below the "
        "knee the slots read the busy share times step(batch)/step(full) (JetStream v5e: about 12/20 at a small "
        "batch) and reach the slots only where the busy share reaches 1: sized at the utilization at the SLO, "
        "the occupancy leaves no margin for a rise. Needs promptTokens and generationTokens (with replica.prior). "
        "Opt-in (docs/slo.md, Session 32).",
    )
    work_within_objective: bool = Field(
        default=False,
        description="The token load counts a rate window's work as what must be served within the window plus the TTFT "
        "objective, not within the window alone: prompt tokens/s x w / (w + ttftSeconds), w the promptTokens signal's "
        "rate window. Work W arriving within w waits at most the objective on replicas that serve W in w + ttftSeconds "
        "(the fluid bound of a FIFO queue: the last of it starts by then). Over a short window (a few scrapes, to see "
        "work arriving in bursts at the timescale a first token feels it) the window alone asks a replica for a burst "
        "the objective absorbs; over a minute it changes little (60/62). Capacity is still learned from what was "
        "served, unscaled. Needs promptTokens with a rate. Opt-in (docs/slo.md, Session 33).",
    )
    kv_at_onset: bool = Field(
        default=False,
        description="The KV-cache gauge (signals.kvCacheUsage) is an occupancy, not a throughput: a request waits for "
        "the cache only once the fill leaves no room for it, so the KV part of the load is judged at the fill at "
        "which requests start to wait (the onset), not at the utilization at the SLO. The onset is learned from the "
        "server's own saturation: while requests wait on every replica (as long as saturation takes) with the cache "
        "fuller than the slots (the cache binds), the fill each replica holds is the onset, averaged like the "
        "learned capacity; a fill seen with no queue is below it (the onset rises to it at once); the stated cache "
        "full (1.0) until either is seen. The KV part then needs ceil(fill x ready / onset), tightened by "
        "target / utilization when the latency loop has lowered the utilization at the SLO below the target. A "
        "queue the cache causes is the cache's to size: it no longer teaches the slots a usable share (which would "
        "price the same limit again, at the slots' Poisson margin and the utilization at the SLO). Needs "
        "signals.kvCacheUsage. Set in recommended-jetstream since 2026-12-07 (docs/slo.md, Session 30: every bundled "
        "TPU row identical, held-out mooncake-long 1.56x -> 1.26x the oracle).",
    )
    prove_at_mix: bool = Field(
        default=False,
        description="The upward probe's proof holds at the prompt lengths it was made at. A load comfortably met is "
        "evidence of what a replica carries at the prompts it served then (the prompt lengths' mean, "
        "signals.promptLength's buckets); when the mean grows beyond it by more than the hysteresis band (the mean "
        "now x (1 - scaleDown.hysteresis) above the mean the proof was made at), the proof is withdrawn and the "
        "utilization at the SLO comes back to at most targetUtilization, to be proven again at the prompts now. "
        "Longer prompts hold more of the KV cache and of the prefill each: the same fill or count swings further, and "
        "the occupancy a replica reaches once one is released grows faster than the load. Prompts that shrink, or "
        "none in the window, keep the proof. Below the target (the loop found a risk) nothing changes. The outputs' "
        "length is not read: the generated tokens' rate over a minute against the prompts' swings too far to tell one "
        "mix from another (measured: docs/slo.md, Session 36). Needs signals.promptLength.",
    )
    forecast: ForecastSpec = Field(default_factory=fast.shared_default(ForecastSpec))
    scale_down: ScaleDownSpec = Field(default_factory=fast.shared_default(ScaleDownSpec))

    @model_validator(mode="after")
    def _usable(self) -> SloPolicyConfig:
        s = self.signals
        if self.kv_from_tokens and (
            self.replica.kv_cache_tokens is None or s.prompt_length is None or s.prompt_tokens is None
        ):
            raise FieldError(
                "kvFromTokens bounds the slots by the KV cache at the measured tokens per sequence: it needs "
                "replica.kvCacheTokens, signals.promptLength, promptTokens and generationTokens",
                "kvFromTokens",
            )
        if self.prove_at_mix and s.prompt_length is None:
            raise FieldError(
                "proveAtMix keeps the probe's proof at the prompt lengths it was made at: it needs "
                "signals.promptLength",
                "proveAtMix",
            )
        if self.kv_at_onset and s.kv_cache_usage is None:
            raise FieldError(
                "kvAtOnset judges the KV-cache gauge at the fill where requests start to wait: it needs "
                "signals.kvCacheUsage",
                "kvAtOnset",
            )
        if self.count_decode and s.prompt_tokens is None:
            raise FieldError(
                "countDecode counts the generated tokens in the token load: it needs signals.promptTokens and "
                "generationTokens",
                "countDecode",
            )
        if (s.prompt_tokens is None) != (s.generation_tokens is None):
            given = "promptTokens" if s.prompt_tokens is not None else "generationTokens"
            raise FieldError(
                "promptTokens and generationTokens come together (a replica's work is both)", "signals", given
            )
        if s.prompt_tokens is not None and self.replica.prior is None:
            raise FieldError("token-rate signals need replica.prior (a conservative throughput)", "replica")
        if not any((s.waiting, s.running, s.slots_used, s.kv_cache_usage, s.kv_tokens, s.prompt_tokens)):
            raise FieldError(
                "needs at least one demand signal: promptTokens + generationTokens, running, slotsUsed, "
                "kvCacheUsage, kvTokens or waiting",
                "signals",
            )
        if s.kv_tokens is not None and (self.replica.kv_cache_tokens is None or s.kv_cache_usage is not None):
            raise FieldError(
                "signals.kvTokens is the KV use in tokens: it needs replica.kvCacheTokens (the budget it fills, TGI's "
                "--max-batch-total-tokens) and replaces kvCacheUsage (one KV reading, not two)",
                "signals",
                "kvTokens",
            )
        if s.prefill_seconds is not None and s.prompt_tokens is None:
            raise FieldError("signals.prefillSeconds measures the prefill rate: it needs promptTokens", "signals")
        if s.prompt_tokens_burst is not None and (s.prompt_tokens is None or s.prompt_length is None):
            raise FieldError(
                "signals.promptTokensBurst measures bursts of prompt work: it needs promptTokens and promptLength",
                "signals",
            )
        alone = self.slot_wait or self.forecast.arrivals
        if s.prompt_length is not None and s.prompt_tokens is None and not alone:
            raise FieldError(
                "signals.promptLength sizes the prefill queue: it needs promptTokens (or slotWait or "
                "forecast.arrivals, which read the arrivals from it alone)",
                "signals",
            )
        if self.slot_wait and (s.prompt_length is None or self.replica.prior is None):
            raise FieldError(
                "slotWait prices a wait for a slot against the TTFT slack: it needs signals.promptLength (the "
                "arrivals and the prompt lengths) and replica.prior (the prefill rate)",
                "slotWait",
            )
        if self.slot_wait and s.running is None and s.slots_used is None:
            raise FieldError(
                "slotWait measures the slot release rate from the sequences running: it needs signals.running or "
                "signals.slotsUsed",
                "slotWait",
            )
        if self.scale_down.rise_absorbed and s.ttft is None and s.queue_time is None and (
            s.time_per_output_token is None
        ):
            raise FieldError(
                "scaleDown.riseAbsorbed judges a rise by the latency measured through it: it needs signals.ttft, "
                "queueTime or timePerOutputToken",
                "scaleDown",
            )
        if s.queue_time_evidence is not None and not self.scale_down.rise_absorbed:
            raise FieldError(
                "signals.queueTimeEvidence is read by scaleDown.riseAbsorbed only: set it or drop the role", "signals"
            )
        if self.work_within_objective and s.prompt_tokens is None:
            raise FieldError(
                "workWithinObjective scales the token load of the prompt counter's rate window: it needs "
                "signals.promptTokens",
                "workWithinObjective",
            )
        if self.scale_down.rise_from_below and not self.scale_down.rise_from_level:
            raise FieldError(
                "scaleDown.riseFromBelow counts climbs from below the load now for their part above it: it needs "
                "riseFromLevel (without it every climb counts whole)",
                "scaleDown",
            )
        if self.scale_down.release_rise_stepwise and not self.scale_down.release_rise:
            raise FieldError("scaleDown.releaseRiseStepwise bounds releaseRise: set releaseRise too", "scaleDown")
        if s.arrivals is not None and not self.forecast.arrivals:
            raise FieldError("signals.arrivals is read by forecast.arrivals only: set it or drop the role", "signals")
        if self.ttft_after_queue and (s.ttft is None or s.queue_time is None):
            raise FieldError(
                "ttftAfterQueue judges queue time + TTFT: it needs signals.ttft and signals.queueTime",
                "ttftAfterQueue",
            )
        if self.bucket_reading != "uniform" and not self.ttft_after_queue:
            raise FieldError(
                "bucketReading is how ttftAfterQueue reads the two histograms' buckets: set ttftAfterQueue too",
                "bucketReading",
            )
        if s.time_per_output_token is not None and self.objective.time_per_output_token_seconds is None:
            raise FieldError(
                "signals.timePerOutputToken needs objective.timePerOutputTokenSeconds", "objective"
            )
        names = s.names()
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise FieldError(f"one signal in two roles: {', '.join(dupes)}", "signals")
        return self

    @property
    def hold_s(self) -> float:
        hold = self.scale_down.hold_seconds
        return self.replica.cold_start_seconds if hold is None else hold

    def signal_refs(self) -> list[str]:
        return self.signals.names()


@dataclass(frozen=True, slots=True)
class ShortCount:
    """A ready count found not enough (SLO missed, or requests waiting on every replica)."""

    at: float
    ready: int
    #: The served load then (replica-equivalents): the memory applies at a comparable load only.
    served: float
    #: The count that served load needed at the utilization learned then (at least ``ready + 1``). The loop
    #: that lowered ``c`` to find it may later recover; the count it found is what is remembered, not ``c``.
    enough: int
    #: The evidence clock when found (``SloState.evidence``, ``scaleDown.releaseShortCounts`` / ``releaseRise``).
    evidence: float = 0.0


@dataclass(frozen=True, slots=True)
class LoadSample:
    """One evaluation's demand in the units of the stated facts, not of the learned model: the load it was is
    recomputed with the capacity learned now. A capacity re-learned (fewer usable slots found in a burst) would
    otherwise show as a rise of every later load against the earlier ones: a rise of the model, not of demand."""

    t: float
    #: Prefill work in replicas of the prior (prompt tokens/s over the prior's prefill rate; ``None`` without
    #: token signals).
    tokens: float | None
    #: Running + waiting over the stated slots of one replica.
    slots: float | None
    #: KV-cache use in replicas (a fraction of the ready replicas' caches).
    kv: float | None
    #: Generated-token work in replicas of the prior, where it counts (``SloAlgorithm._generation_counts``).
    generated: float = 0.0
    #: The arrivals (``forecast.arrivals``: prompt tokens/s, or requests/s from the prompt-length histogram);
    #: None: not read, unknown, or within the arrival signal's first window.
    arrivals: float | None = None
    #: The evidence clock then (``SloState.evidence``, ``scaleDown.releaseShortCounts`` / ``releaseRise``).
    evidence: float = 0.0
    #: The ready count then (``scaleDown.releaseRiseStepwise``: evidence is evidence at the count that held it).
    ready: int = 0
    #: This evaluation held the SLO on known signals: no miss, no queue held on every replica
    #: (``scaleDown.riseAbsorbed``).
    held: bool = False

    def load(self, kappa: float, slot_unit: float, prefill_scale: float = 1.0, kv_unit: float = 1.0) -> float:
        """The load with capacity scale ``kappa``, ``slot_unit`` (the slots one replica-equivalent counts,
        over the stated slots: ``SloAlgorithm.slot_unit`` / slots), ``prefill_scale`` (the prefill rate
        measured now over the prior's) and ``kv_unit`` (the cache fill one replica-equivalent counts,
        ``SloAlgorithm._kv_unit``)."""
        return max(
            (self.tokens / prefill_scale + self.generated) / kappa if self.tokens is not None else 0.0,
            self.slots / slot_unit if self.slots is not None else 0.0,
            self.kv / kv_unit if self.kv is not None else 0.0,
        )


@dataclass(frozen=True, slots=True)
class SloState:
    """What the policy learns and remembers (``PolicyState.algorithm``): replay and simulation reproduce it."""

    #: κ: learned capacity over the prior (1.0 = the prior).
    capacity_scale: float = 1.0
    #: The share of the slots a replica can really fill (KV cache, prefill or the server bind first), learned
    #: like κ: sequences running per replica while saturated.
    slot_scale: float = 1.0
    #: Saturated samples the capacities have learned from.
    capacity_samples: int = 0
    #: Consecutive evaluations with requests waiting on every ready replica.
    saturated_run: int = 0
    #: The last time each count was not enough: scale-down does not go below what was then found needed, at a
    #: comparable load, until that count is seen to be enough.
    short: tuple[ShortCount, ...] = ()
    #: The highest load per ready replica (replica-equivalents) at which the measured quantile was comfortably
    #: met on a settled count: the upward probe of c goes at most to what it allows.
    proven: float = 0.0
    #: c: utilization at the SLO (None until the first evaluation sets it from the config).
    utilization: float | None = None
    #: The demand of each evaluation over the longest window any estimate reads, oldest first.
    history: tuple[LoadSample, ...] = ()
    #: The times of the samples in ``history`` taken without a queue on every replica (the trend's).
    calm: tuple[float, ...] = ()
    #: The ready count and since when it holds.
    ready: int = -1
    ready_since: float = 0.0
    #: Seasonal profile: per phase bucket, ``(load, time last seen)``; empty without seasonality.
    seasonal: tuple[tuple[float, float], ...] = ()
    #: The last time a burst was detected.
    burst_at: float | None = None
    #: The prefill utilization at the objective from the prompt-length distribution (``prefill_unit``), kept while
    #: the distribution is unknown (an empty window is not a lighter one); 1.0 until a distribution is seen.
    prefill_unit: float = 1.0
    #: The prefill rate (prompt tokens/s of one replica while prefilling) measured from the servers'
    #: prefill-time histograms (``signals.prefillSeconds``); None: not measured yet, the prior's.
    prefill_rate: float | None = None
    #: The prompt tokens of each evaluation's short window over the last ``BURSTINESS_SPAN_S``
    #: (``signals.promptTokensBurst``), oldest first.
    work: tuple[WorkSample, ...] = ()
    #: The prompt work's burstiness (``sizing.work_burstiness``) the queue models use; None: not measured yet
    #: (``BURSTINESS_PRIOR``) or not configured (1, Poisson).
    burstiness: float | None = None
    #: The slot release rate (sequences finishing per running sequence per second, ``slotWait``); None: not
    #: measured yet (every wait for a slot counts as a miss).
    release_rate: float | None = None
    #: What the objective leaves each prompt length to wait for a slot (``sizing.ttft_slacks``: seconds, share),
    #: kept while the prompt lengths are unknown; empty: not seen yet.
    slacks: tuple[tuple[float, float], ...] = ()
    #: The time of the previous evaluation (the learning rates are per second, not per evaluation).
    last_t: float | None = None
    #: The first evaluation: nothing is released before a whole hold window has been observed.
    since: float | None = None
    #: ``scaleDown.releaseShortCounts`` / ``releaseRise``: the evidence clock (seconds of evaluations that held
    #: the SLO on known signals), its value at the last recurrence (an SLO miss or a held queue), and the value
    #: at or before which the memories formed are released (None: none yet).
    evidence: float = 0.0
    recurred: float = 0.0
    released: float | None = None
    #: ``observedAtEnd``: the last evaluation at which requests waited (or their number was unknown); None: none yet.
    waited_at: float | None = None
    #: ``kvAtOnset``: the KV-cache fill (0-1 of a replica's cache) at which requests start to wait, learned from
    #: saturation with the cache binding (``SloAlgorithm._learn_kv_onset``); 1.0 (the cache full) until seen.
    kv_onset: float = 1.0
    #: ``proveAtMix``: the prompt lengths' mean (tokens) when ``proven`` was last raised; None: nothing proven at a
    #: known mean yet.
    proven_mix: float | None = None


@dataclass(frozen=True, slots=True)
class _Wait:
    """``slotWait``'s measured numbers: the slot release rate and the TTFT slacks (``SloAlgorithm._slot_wait``)."""

    release_rate: float
    slacks: tuple[tuple[float, float], ...]

    @staticmethod
    def of(release_rate: float | None, slacks: tuple[tuple[float, float], ...]) -> _Wait | None:
        """None (every wait a miss) until both are known. The rate is taken to three significant figures, rounded
        down (a slower release is the conservative side), so that successive evaluations ask the cached bisection
        the same question."""
        if release_rate is None or not release_rate > 0 or not slacks:
            return None
        step = 10.0 ** (math.floor(math.log10(release_rate)) - 2)
        return _Wait(math.floor(release_rate / step) * step, slacks)

    def occupancy(self, servers: int, percentile: float) -> float:
        """``sizing.occupancy_at_wait_objective`` with these numbers (the slot model's ``occupancy`` callable)."""
        return occupancy_at_wait_objective(servers, percentile, self.release_rate, self.slacks)


@dataclass(frozen=True, slots=True)
class _RiseKeep:
    """The count the largest rise within a cold start keeps (``SloAlgorithm._rise_keep``)."""

    #: ``ceil((load + rise) / c)``, at most the count that absorbed the rise with ``scaleDown.riseAbsorbed``.
    count: int
    #: The rise that sets it, in replica-equivalents.
    rise: float
    #: The message's addition ("" unless an absorbed rise is the largest).
    text: str


@dataclass(frozen=True, slots=True)
class _Proof:
    """``proveAtMix``'s outcome (``SloAlgorithm._proof_at_mix``)."""

    #: The utilization at the SLO after it.
    utilization: float
    #: The load proven (0 when the proof is withdrawn).
    proven: float
    #: The prompt lengths' mean the proof was made at (None: none kept).
    mix: float | None
    #: The message's addition ("" unless the proof is withdrawn).
    text: str


@dataclass(frozen=True, slots=True)
class _KvUse:
    """``signals.kvTokens`` read as the KV use (``SloAlgorithm._kv_reserved``)."""

    #: 0-1, averaged over the ready replicas; None: unknown, or no replica ready.
    fraction: float | None
    #: The numbers it comes from, for the message ("" when unknown).
    text: str


@dataclass(frozen=True, slots=True)
class _ReacquireKeep:
    """What ``scaleDown.priceReacquire`` keeps (``SloAlgorithm._reacquire_keep``)."""

    #: The count a release the preemption budget could not buy back keeps; 0: none binds.
    count: int
    #: Its clause for the message ("" when none binds).
    clause: str


@dataclass(frozen=True, slots=True)
class _Reading:
    """The signals of one evaluation, turned into the quantities the model needs."""

    load: float
    #: The load without the waiting requests (what was being served): the basis to compare loads across time.
    served_load: float
    #: The parts of ``load`` in the units of the stated facts (what history keeps).
    tokens_prior: float | None
    generated_prior: float
    slots_stated: float | None
    kv_replicas: float | None
    parts: tuple[str, ...]
    served_prior: float | None  # served tokens/s per ready replica over the prior capacity
    waiting: float | None
    running: float | None
    latency_ratio: float | None  # the worst measured quantile over its objective
    #: ``breachOnEvidence``: the worst quantile the windows' requests support, over its objective (else
    #: ``latency_ratio``): what a miss is judged on.
    miss_ratio: float | None
    latency_text: str
    unknown: tuple[str, ...]
    latency_unknown: bool
    demand_zero: bool


@dataclass(frozen=True, slots=True)
class SloAlgorithm:
    config: SloPolicyConfig
    #: The hold window and the hysteresis band are this type's smoothing.
    uses_behavior = False

    @property
    def prices_release(self) -> bool:
        """The engine gives ``Context.reacquire`` (``scaleDown.priceReacquire``)."""
        return self.config.scale_down.price_reacquire

    def _read(
        self, ctx: Context, kappa: float, slot_scale: float, prefill_unit: float = 1.0, prefill_scale: float = 1.0,
        peakedness: float = 1.0, wait: _Wait | None = None, kv_unit: float = 1.0,
    ) -> _Reading:
        cfg, roles = self.config, self.config.signals
        ready = ctx.replicas.ready
        unknown: list[str] = []

        def total(name: str | None) -> float | None:
            if name is None:
                return None
            value = _target_total(ctx, name)
            if value is None:
                unknown.append(name)
            return value

        def fraction(name: str | None) -> float | None:
            if name is None:
                return None
            sig = ctx.signals[name]
            if not sig.ok or sig.value is None or ready == 0:
                unknown.append(name)
                return None
            return min(1.0, sig.value)

        slots = cfg.replica.slots
        waiting = total(roles.waiting)
        running = total(roles.running)
        used = fraction(roles.slots_used)
        if running is None and used is not None:
            running = used * slots * ready
        kv = fraction(roles.kv_cache_usage)
        kv_of = ""
        if roles.kv_tokens is not None:
            kv_use = self._kv_reserved(total(roles.kv_tokens), ready)
            kv, kv_of = kv_use.fraction, kv_use.text
            if kv is None and roles.kv_tokens not in unknown:
                unknown.append(roles.kv_tokens)  # no replica ready: a fraction of nothing, as kvCacheUsage's
        prompt, gen = total(roles.prompt_tokens), total(roles.generation_tokens)

        parts: list[str] = []
        load = served_load = 0.0
        served_prior: float | None = None
        tokens_prior = slots_stated = kv_replicas = None
        generated_prior = 0.0
        prior = cfg.replica.prior
        if prompt is not None and gen is not None and prior is not None:
            # The first token waits for prefill compute and for a slot. Continuous-batching servers run a new
            # prompt's prefill ahead of (TGI, JetStream) or within the token budget of (vLLM, chunked) the
            # running sequences' decode steps, so generated tokens delay it through the slots and the KV cache
            # they hold, which the gauges measure, not through their compute. Generated tokens count as work
            # when nothing else sees them: no concurrency gauge, or a time-per-output-token objective; and with
            # ``countDecode``, where the slots' occupancy is convex in the busy share (a decode step's fixed
            # part), so the busy share is the load below the knee and the gauges only at it.
            gen_counts = self._generation_counts()
            # The prefill part at the measured prefill rate (``prefill_scale`` of the prior's), the rest at the
            # prior's: κ, learned from saturation, scales both.
            tokens_prior = prompt / prior.prefill_tokens_per_second
            generated_prior = gen / prior.generation_tokens_per_second if gen_counts else 0.0
            busy_prior = tokens_prior / prefill_scale + generated_prior
            if ready > 0:
                served_prior = busy_prior / ready  # what was served: capacity is learned from it unscaled
            # ``workWithinObjective``: the work of the rate window, served within the window and the objective.
            within, within_text = self._work_within_objective(ctx)
            tokens_prior, generated_prior = tokens_prior * within, generated_prior * within
            busy_prior *= within
            tok = busy_prior / (kappa * prefill_unit)
            load = max(load, tok)
            served_load = max(served_load, tok)
            parts.append(
                f"tokens {tok:.2f} ({prompt:.0f} prompt + {gen:.0f} generated tok/s"
                + ("" if gen_counts else ", prefill only: the gauges hold decode")
                + (f"; 1 replica-equivalent = {prefill_unit:.2f} of a replica's prefill" if prefill_unit < 1 else "")
                + within_text
                + ")"
            )
        if running is not None or waiting is not None:
            conc = (running or 0.0) + (waiting or 0.0)
            effective = self.slot_unit(slot_scale, peakedness, wait)
            slots_stated = conc / slots
            load = max(load, conc / effective)
            served_load = max(served_load, (running or 0.0) / effective)
            parts.append(
                f"slots {conc / effective:.2f} ({running or 0:.0f} running + {waiting or 0:.0f} waiting "
                f"of {effective:.0f}/replica)"
            )
        if kv is not None:
            kv_replicas = kv * ready
            load = max(load, kv * ready / kv_unit)
            served_load = max(served_load, kv * ready / kv_unit)
            parts.append(
                f"KV {kv * ready / kv_unit:.2f} ({kv:.0%} of {ready}{kv_of}"
                + (f"; 1 replica-equivalent = {kv_unit:.0%} of a cache" if kv_unit != 1.0 else "")
                + ")"
            )

        obj = cfg.objective
        ratios: list[tuple[float, str]] = []
        misses: list[float] = []
        quiet: list[str] = []
        latency_unknown = False
        pct = f"p{obj.percentile * 100:g}"
        after_queue = cfg.ttft_after_queue
        for name, target, label in (
            (None if after_queue else roles.ttft, obj.ttft_seconds, "TTFT"),
            (None if after_queue else roles.queue_time, obj.ttft_seconds, "queue time"),
            (roles.ttft if after_queue else None, obj.ttft_seconds, "queue time + TTFT"),
            (roles.time_per_output_token, obj.time_per_output_token_seconds, "TPOT"),
        ):
            if name is None or target is None:
                continue
            if after_queue and name == roles.ttft:
                assert roles.queue_time is not None  # the validator's
                value, text = self._latency_after_queue(ctx, roles.queue_time, name, waiting)
            else:
                value, text = self._latency(ctx, name, waiting)
            if value is None and text:
                quiet.append(f"{label}: {text}")
                continue
            if value is None:
                latency_unknown = True
                if after_queue and name == roles.ttft:
                    # The sum is unknown through the parts that are (or, both known, too few to support one).
                    both = (roles.queue_time, name)
                    unknown.extend([n for n in both if n and not ctx.signals[n].ok] or [n for n in both if n])
                else:
                    unknown.append(name)
                continue
            ratios.append((value / target, f"{label} {pct} {value:.3g}s vs {target:g}s{text}"))
            # The sum of two windows (``ttftAfterQueue``) has its own supported reading with latencyEvidence.
            after = after_queue and name == roles.ttft
            misses.append(value / target if after else self._supported_miss(ctx, name, value, target))
        worst = max(ratios) if ratios else None
        miss = max(misses, default=None) if self._judges_misses_on_evidence() else (worst[0] if worst else None)
        known_demand = [v for v in (prompt, gen, running, waiting) if v is not None]
        demand_zero = bool(known_demand) and all(v == 0 for v in known_demand)
        return _Reading(
            load=load,
            served_load=served_load,
            tokens_prior=tokens_prior,
            generated_prior=generated_prior,
            slots_stated=slots_stated,
            kv_replicas=kv_replicas,
            parts=tuple(parts),
            served_prior=served_prior,
            waiting=waiting,
            running=running,
            latency_ratio=worst[0] if worst else None,
            miss_ratio=miss,
            latency_text="; ".join([*(t for _, t in ratios), *quiet]),
            unknown=tuple(unknown),
            latency_unknown=latency_unknown,
            demand_zero=demand_zero,
        )

    def recommend(self, ctx: Context, state: object | None) -> tuple[Recommendation, object | None]:
        cfg = self.config
        prev = state if isinstance(state, SloState) else SloState()
        now = ctx.now
        ready, starting, current = ctx.replicas.ready, ctx.replicas.starting, ctx.replicas.spec
        dt = 0.0 if prev.last_t is None else max(0.0, now - prev.last_t)
        ready_since = prev.ready_since if prev.ready == ready else now

        # 2. Learned capacity, from what the replicas served (before the load is computed with it).
        kappa, slot_scale, samples = prev.capacity_scale, prev.slot_scale, prev.capacity_samples
        # 1a. The prefill rate measured from the servers' prefill time (the prior's until measured).
        prefill_rate, measured = self._prefill_rate(ctx, prev.prefill_rate, dt)
        scale = self._prefill_scale(prefill_rate)
        peak_prev = self._peakedness(prev.burstiness, ready)
        wait_prev = _Wait.of(prev.release_rate, prev.slacks)
        # ``kvFromTokens``: the slots the KV cache holds at the tokens a sequence reserves now bound the learned share
        # for sizing (the learned share itself is not changed by it).
        kv_scale, kv_text = self._kv_slot_scale(ctx)

        def sizing(share: float) -> float:
            return share if kv_scale is None else min(share, kv_scale)

        # ``kvAtOnset``: the cache fill one replica-equivalent counts (1.0 without it).
        kv_onset = prev.kv_onset
        kv_unit_prev = self._kv_unit(kv_onset, prev.utilization)
        probe = self._read(
            ctx, kappa, sizing(slot_scale), prev.prefill_unit, self._prefill_scale(prev.prefill_rate), peak_prev,
            wait_prev, kv_unit_prev,
        )
        settled = now - ready_since >= SETTLE_S and ready > 0 and starting == 0
        # Saturated: requests have waited on every ready replica for SATURATED_EVALUATIONS evaluations in a
        # row. Then what each replica serves (tokens/s) and runs (sequences) is what it can: its capacity.
        queued = queued_on_every_replica(
            probe.waiting, ready, ctx.per_replica.get(cfg.signals.waiting) if cfg.signals.waiting else None
        )
        run = prev.saturated_run + 1 if queued and not probe.unknown else 0
        alpha = capacity_alpha(samples, dt)
        if not probe.unknown and ready > 0:
            kappa = learn_capacity_scale(
                kappa, saturated=run >= SATURATED_EVALUATIONS, served=probe.served_prior, settled=settled, alpha=alpha
            )
            if run >= SATURATED_EVALUATIONS:
                samples += 1
                # Sequences running is a gauge of now: what the replicas admit with a queue waiting. The token
                # load counts prefill only when gauges are given (``_read``), so a queue the KV cache or the
                # slots cause is not the prefill's: the usable share of the slots is learned too. The load is
                # the larger of the two parts, not their sum: learning both does not count the queue twice.
                # Fewer usable slots than stated has one cause a server shows: the KV cache (or a token budget
                # standing for it, TGI's --max-batch-total-tokens) admits no more. Where a KV gauge shows the
                # cache fuller than the slots, or no KV gauge is given, a queue with slots free is that; where
                # the cache is emptier than the slots, the requests wait for prefill, not for a slot (JetStream's
                # prefill backlog holds slots already), and the slots are not learned from it.
                per = probe.running / ready / cfg.replica.slots if probe.running is not None else None
                kv_binds = probe.kv_replicas is None or per is None or probe.kv_replicas / ready >= per
                if cfg.kv_at_onset and probe.kv_replicas is not None:
                    # ``kvAtOnset``: a queue the cache causes is the cache's: its fill is the onset, and the
                    # slots learn nothing from it (they would price the same limit again).
                    if per is not None and kv_binds:
                        kv_onset += alpha * (probe.kv_replicas / ready - kv_onset)
                elif per is not None and kv_binds and (probe.served_prior is None or not self._generation_counts()):
                    slot_scale += alpha * (per - slot_scale)
            elif probe.running is not None and not queued:
                slot_scale = max(slot_scale, probe.running / ready / cfg.replica.slots)
            if cfg.kv_at_onset and probe.kv_replicas is not None and probe.waiting == 0:
                # No request waits anywhere: every replica's fill, and so their mean, is below its onset.
                kv_onset = max(kv_onset, probe.kv_replicas / ready)
            slot_scale = min(1.0, max(MIN_SLOT_SCALE, slot_scale))
            kv_onset = min(1.0, max(MIN_SLOT_SCALE, kv_onset))
        # 1b. The prefill queue per replica from the prompt-length distribution, at the capacity learned now.
        # 1c. The burstiness of the prompt work, measured from the short-window counter's rate.
        work, burstiness, burst_text = self._burstiness(ctx, prev, dt)
        peak = self._peakedness(burstiness, ready)
        prefill_unit, prefill_text = self._prefill_unit(ctx, kappa, prev.prefill_unit, prefill_rate, peak)
        if burst_text:
            prefill_text = f"{prefill_text}; {burst_text}" if prefill_text else burst_text
        # 1d. A wait for a slot priced against the TTFT slack (``slotWait``): the release rate and the slacks.
        release_rate, slacks, wait_text = self._slot_wait(ctx, probe, prev, kappa, prefill_rate, dt)
        wait = _Wait.of(release_rate, slacks)
        if wait_text:
            prefill_text = f"{prefill_text}; {wait_text}" if prefill_text else wait_text
        if kv_text:
            prefill_text = f"{prefill_text}; {kv_text}" if prefill_text else kv_text
        kv_unit = self._kv_unit(kv_onset, prev.utilization)
        changed = (kappa, slot_scale, prefill_unit, prefill_rate, peak, wait, kv_unit) != (
            prev.capacity_scale, prev.slot_scale, prev.prefill_unit, prev.prefill_rate, peak_prev, wait_prev,
            kv_unit_prev,
        )
        share = sizing(slot_scale)
        reading = self._read(ctx, kappa, share, prefill_unit, scale, peak, wait, kv_unit) if changed else probe

        # 3. Utilization at the SLO, corrected by the measured latency.
        u_max = cfg.target_utilization
        c = prev.utilization if prev.utilization is not None else u_max
        ratio = reading.latency_ratio
        at_risk = ratio is not None and ratio >= RISK_FRACTION
        h = cfg.scale_down.hysteresis
        # A load near one at which a count was found short: no upward probe there (the memory below).
        near_short = any(reading.served_load >= (1.0 - h) * x.served for x in prev.short)
        judged = (
            self._judged_load(ctx, prev.history, reading.load, reading.waiting, kappa * prefill_unit,
                              self.slot_unit(share, peak, wait) / cfg.replica.slots, scale, kv_unit)
            if cfg.prove_over_window
            else None
        )
        # ``breachOverWindow``: the highest load of the quantile's window, what a quantile over its objective is
        # evidence the count was short at.
        window_peak = (
            self._window_peak(ctx, prev.history, reading.load, kappa * prefill_unit,
                              self.slot_unit(share, peak, wait) / cfg.replica.slots, scale, kv_unit)
            if cfg.breach_over_window
            else None
        )
        # ``observedAtEnd``: whether the quantile's window is evidence of capacity to spare yet.
        waited_at, unobserved_text = (
            self._unobserved_waits(ctx, reading, prev.waited_at) if cfg.observed_at_end else (None, "")
        )
        # ``waitForAdmission``: a risk while replicas asked for wait for admission lowers nothing.
        admitting = self._admitting(ctx)
        headroom = learn_utilization(
            c, prev.proven, target=u_max, ratio=ratio, latency_unknown=reading.latency_unknown,
            demand_zero=reading.demand_zero, load=reading.load, served_load=reading.served_load, ready=ready,
            starting=starting, settled=settled, near_short=near_short, hysteresis=h, dt=dt,
            judged_load=judged, risk_load=window_peak, spare_evidence=not unobserved_text,
            admitting=admitting,
        )
        c, proven = headroom.utilization, headroom.proven
        # ``proveAtMix``: a proof made at shorter prompts than now is withdrawn.
        proof = self._proof_at_mix(ctx, c, proven, prev.proven, prev.proven_mix)
        c, proven, proven_mix, mix_text = proof.utilization, proof.proven, proof.mix, proof.text
        admission_text = (
            f" (not lowered: {admitting} replica(s) asked for wait for Kueue's admission)"
            if headroom.held_for_admission
            else ""
        )

        # 4. History, burst, trend, seasonality.
        load = reading.load
        fc = cfg.forecast
        horizon = cfg.replica.cold_start_seconds
        hold = cfg.hold_s
        keep = max(hold, lookback(horizon), BURST_SHORT_S)
        history = tuple(x for x in prev.history if x.t > now - keep)
        calm = tuple(t for t in prev.calm if t > now - keep)
        # Until the counters' rate windows have filled, a fresh controller's rates ramp from nothing: that
        # would read as a rise and a trend. Those first samples are not history.
        warm = prev.since is not None and now - prev.since >= self._rate_window(ctx)
        # 4a. The arrivals (``forecast.arrivals``), None when not read or unknown; history only once their
        # signal's window has filled, for the same reason.
        arrivals, arrivals_window = self._arrivals(ctx)
        arrivals_warm = prev.since is not None and now - prev.since >= arrivals_window
        if not reading.unknown and warm:
            # Held (``scaleDown.riseAbsorbed``): no queue held, the quantile under the risk line (so not missed
            # either), and every request's latency measured: nothing waiting, or the waits' own latency read
            # (``_waits_measured``).
            held_now = (
                run < SATURATED_EVALUATIONS
                and not at_risk
                and (reading.waiting == 0 or self._waits_measured(ctx, reading.waiting))
            )
            history = (
                *history,
                LoadSample(
                    now, reading.tokens_prior, reading.slots_stated, reading.kv_replicas, reading.generated_prior,
                    arrivals if arrivals_warm else None, prev.evidence, ready, held_now,
                ),
            )
            if not queued:
                # While requests queue on every replica the served rates show the replicas' capacity, not
                # the demand: those samples would fake a trend as capacity is added. The trend skips them.
                calm = (*calm, now)
        forecast, ftext, burst_at, season = load, "", prev.burst_at, prev.seasonal
        # For the capacity arbitration (``Recommendation.ahead``): the trend over a hand-off's lead, a training
        # victim's eviction plus this cold start.
        reach = self._handoff_lead(ctx, horizon)
        further = load
        # What each earlier evaluation's demand is in the capacity learned now (``LoadSample``).
        series = tuple(
            (x.t, x.load(kappa * prefill_unit, self.slot_unit(share, peak, wait) / cfg.replica.slots, scale, kv_unit))
            for x in history
        )
        # ``loadLevel``: what the scale-up sizes, the lower of the load now and the trend's fitted line now.
        level, level_text = load, ""
        if cfg.load_level and run < SATURATED_EVALUATIONS:
            calm_now = set(calm)
            line = fitted_level([(t, v) for t, v in series if t in calm_now and t > now - trend_span(horizon)], now)
            if line is not None and line < load:
                level = line
                level_text = f"; sized at its level {line:.2f}, the trend's fitted line now"
        forecast = level
        if fc.enabled and series:
            calm_set = set(calm)
            if arrivals is not None and arrivals > 0:
                # On the arrivals: the load now times their forecast over them now. At a given time in system
                # the occupancy is proportional to the arrival rate (Little's law); a gauge filling from empty
                # climbs while the arrivals do not. Never below the load now (the forecast is ≥ the arrivals now).
                arrived = [(x.t, a) for x in history if (a := x.arrivals) is not None]
                trend = trend_and_burst(
                    arrived, now, arrivals, horizon, fc.burst_ratio, burst_at,
                    trend_samples=[(t, v) for t, v in arrived if t in calm_set] if not queued else [],
                    reach=reach,
                )
                # Over their level (the fitted line's value now, never below the arrivals now: a dip below the
                # line is no growth to come); at most doubling the load, as the load's own trend.
                grow, grow_further = (min(2.0, max(1.0, v / trend.level)) for v in (trend.value, trend.further))
                forecast, burst_at = level * grow, trend.burst_at
                further = max(forecast, level * grow_further)
                ftext = f" (on arrivals {arrivals:.3g}/s: ×{grow:.2f}{trend.text})"
            else:
                trend = trend_and_burst(
                    series, now, level, horizon, fc.burst_ratio, burst_at,
                    trend_samples=[(t, v) for t, v in series if t in calm_set] if not queued else [],
                    reach=reach,
                )
                forecast, ftext, burst_at, further = trend.value, trend.text, trend.burst_at, trend.further
            if fc.ramp and not queued:
                ramped, ramp_text = self._ramp(series, calm_set, now, level, horizon)
                if ramped > forecast:
                    forecast, ftext = ramped, ftext + ramp_text
                    further = max(further, forecast)
            if fc.seasonality_period_seconds is not None:
                season, season_load = seasonal(
                    prev.seasonal, fc.seasonality_period_seconds, fc.seasonality_buckets, now, horizon,
                    None if reading.unknown else load,
                )
                if season_load is not None and season_load > forecast:
                    forecast = season_load
                    ftext += f"; seasonal {season_load:.2f} one period ago at +{horizon:g}s"
        peak = max([v for t, v in series if t > now - hold] or [load])
        by_recurrence = cfg.scale_down.recurrence
        # Nothing is released before a whole hold window has been observed (after the rate windows filled).
        observed = max(0.0, now - (prev.since if prev.since is not None else now) - self._rate_window(ctx))

        # Not enough: the SLO missed (the quantile is already a window's), or a queue on every replica that held
        # for as many evaluations as saturation needs to teach capacity. A moment's backlog (a few prompts
        # landing together on one replica behind random routing) is not a short count: remembered, it would bar
        # every scale-down at that load for as long as the memory lasts.
        sustained = run >= SATURATED_EVALUATIONS
        missed = reading.miss_ratio is not None and reading.miss_ratio > 1.0
        insufficient = ready > 0 and starting == 0 and (sustained or missed)
        short = prev.short
        if not reading.unknown and ready > 0 and starting == 0:
            served = reading.served_load
            if insufficient:
                # What the served load needs at the utilization the loop has now (the queue's backlog is not
                # served load: a burst's backlog must not be remembered as a standing need).
                found = ShortCount(now, ready, served, max(ready + 1, _ceil(load / c)), prev.evidence)
                short = (*(x for x in short if x.ready != ready), found)[-MAX_SHORT:]
            elif not queued:
                # The count is enough now at this load: what was short at a lower load is disproved.
                short = tuple(x for x in short if not (x.ready == ready and x.served <= served))
        # The burst memories released on evidence (``scaleDown.releaseShortCounts`` / ``releaseRise``). The
        # evidence clock counts the seconds of evaluations that held the SLO on known signals (no miss, no held
        # queue); an evaluation with a signal unknown adds nothing (missing data releases nothing), a miss or a
        # held queue is a recurrence and restarts the count. A memory (a load sample a rise starts from, a count
        # found short) is released once as many lead-long stretches as the rule of three needs
        # (``MIN_RECURRENCE_FALLS`` cold starts) of evidence have followed both it and the last recurrence.
        evidence, recurred, released = prev.evidence, prev.recurred, prev.released
        sd = cfg.scale_down
        if sd.release_short_counts or sd.release_rise:
            if not reading.unknown:
                if sustained or missed:
                    recurred = evidence
                else:
                    evidence += dt
            cut = evidence - MIN_RECURRENCE_FALLS * horizon
            if recurred <= cut and (released is None or cut > released):
                released = cut
            if released is not None and sd.release_short_counts:
                short = tuple(x for x in short if x.evidence > released)
        # Measured against the level it starts from (``sizing.largest_rise``): rises from a load at least the load
        # now; with memories released, the rises that may end after them (that start within a cold start before).
        from_level = load if cfg.scale_down.rise_from_level else None
        # ``scaleDown.riseAbsorbed``: the count that absorbed each sample's rise with the SLO held (None: not absorbed).
        absorbed = self._absorbed(ctx, history, horizon) if sd.rise_absorbed else None
        kept = [
            i for i, x in enumerate(history)
            if released is None or not sd.release_rise or x.evidence > released - horizon
        ]
        rise_kept = self._rise_keep(
            [series[i] for i in kept], None if absorbed is None else [absorbed[i] for i in kept],
            horizon, from_level=from_level, load=load, c=c, from_below=sd.rise_from_below,
        )
        rise_keep, rise, absorbed_text = rise_kept.count, rise_kept.rise, rise_kept.text
        # ``releaseRiseStepwise``: the rise released on evidence lowers the count one replica below the lowest ready
        # count with that evidence of its own (``_evidenced_count``), never further in one step.
        step_keep, step_text = 0, ""
        if sd.release_rise_stepwise and released is not None:
            whole_keep = self._rise_keep(
                series, absorbed, horizon, from_level=from_level, load=load, c=c, from_below=sd.rise_from_below,
            ).count
            if whole_keep > rise_keep:
                held = self._evidenced_count(history, prev.evidence, recurred, horizon)
                step_keep = whole_keep if held is None else min(whole_keep, held - 1)
                step_text = f", and not below {step_keep}: " + (
                    f"one below the {held} ready the evidence that released the rise was gathered at"
                    if held is not None
                    else "no ready count has held the SLO long enough to release the rise below it"
                )

        need_now = _ceil(level / c)
        need = max(need_now, _ceil(forecast / c))
        ahead = None
        if fc.enabled and not reading.unknown:
            # How long the replicas wanted now may wait for a training victim's checkpoint (issue 11, 1b).
            room = latency_headroom(ratio=ratio, latency_unknown=reading.latency_unknown,
                                    ttft_s=cfg.objective.ttft_seconds, load=load, forecast=forecast,
                                    horizon_s=horizon, ready=ready)
            ahead = Ahead(max(need, _ceil(further / c)), reach, headroom_s=room.seconds, headroom_text=room.text)
        breach_floor, breach_text = 0, ""
        thin_text = ""
        if ratio is not None and ratio > 1.0 and not missed:
            thin_text = (
                f" (over the objective on too few of its window's requests to show a miss at "
                f"{QUANTILE_CONFIDENCE:.0%}: no floor, the model sizes)"
            )
        if missed and starting == 0 and ready > 0:
            if window_peak is None or load >= (1.0 - h) * window_peak:
                breach_floor = ready + 1  # the SLO is missed now: more capacity whatever the model says
                need = max(need, breach_floor)
            else:
                breach_text = (
                    f" (SLO missed with {ready} ready at a load up to {window_peak:.2f} in the quantile's window; "
                    f"{load:.2f} now is below {1.0 - h:.2f} of it: no floor, the model sizes)"
                )

        new_state = SloState(
            capacity_scale=kappa,
            slot_scale=slot_scale,
            capacity_samples=samples,
            saturated_run=run,
            short=short,
            utilization=c,
            proven=proven,
            history=history,
            calm=calm,
            ready=ready,
            ready_since=ready_since,
            seasonal=season,
            burst_at=burst_at,
            prefill_unit=prefill_unit,
            prefill_rate=prefill_rate,
            work=work,
            burstiness=burstiness,
            release_rate=release_rate,
            slacks=slacks,
            last_t=now,
            since=prev.since if prev.since is not None else now,
            evidence=evidence,
            recurred=recurred,
            released=released,
            waited_at=waited_at,
            kv_onset=kv_onset,
            proven_mix=proven_mix,
        )

        prior = cfg.replica.prior
        rate_text = ""
        if prior is not None and cfg.signals.prefill_seconds is not None:
            rate_text = (
                f"prefill {prefill_rate:.0f} tok/s "
                + (f"measured {measured:.0f}" if measured is not None else "measured unknown, keeping the last")
                + f", prior {prior.prefill_tokens_per_second:.0f}; "
                if prefill_rate is not None
                else f"prefill rate not measured yet, the prior's {prior.prefill_tokens_per_second:.0f} tok/s; "
            )
        cap_text = rate_text + (
            f"capacity {kappa * (prefill_rate or prior.prefill_tokens_per_second):.0f} prompt / "
            f"{kappa * prior.generation_tokens_per_second:.0f} generated tok/s per replica "
            + (f"({kappa:.2f}× prior), " if prefill_rate is None else f"({kappa:.2f}× measured prefill/prior decode), ")
            + f"{slot_scale * cfg.replica.slots:.0f} of "
            f"{cfg.replica.slots} slots usable "
            f"({samples} saturated samples)"
            if prior is not None
            else f"{slot_scale * cfg.replica.slots:.0f} of {cfg.replica.slots} slots usable per replica "
            f"({samples} saturated samples)"
        )
        load_text = f"load {load:.2f} replica-equivalents ({', '.join(reading.parts) or 'nothing known'})"
        if prefill_text:
            load_text += f"; {prefill_text}"
        slo_text = (
            f"{reading.latency_text}{unobserved_text} ⇒ utilization {c:.2f} at the SLO{admission_text}{mix_text}"
            if reading.latency_text
            else f"utilization {c:.2f} at the SLO (no latency measured)"
        )
        fc_text = f"forecast {forecast:.2f} over the {horizon:g}s cold start{ftext}{level_text}"
        need_text = f"{load_text}; {cap_text}; {slo_text}; {fc_text} ⇒ needs {need}"
        if breach_floor:
            need_text += f" (SLO missed with {ready} ready: at least {breach_floor})"
        need_text += breach_text + thin_text
        have_text = f"{ready} ready + {starting} starting, spec {current}"

        no_down = ""
        if reading.unknown:
            names = ", ".join(reading.unknown)
            latency = self._latency_names()
            if need > current and need > ready + starting:
                # What is known is a lower bound of the load (every part is ≥ 0): scaling up on it is safe.
                return Recommendation(
                    need, Reason.SCALE_UP,
                    f"scaling up to at least {need} on known signals: {need_text}; {have_text}; unknown: {names}",
                ), new_state
            if any(n not in latency for n in reading.unknown):
                return Recommendation(
                    None, Reason.METRICS_UNKNOWN,
                    f"cannot size on partial data ({need_text}); unknown: {names}", reading.unknown,
                ), new_state
            # Only a latency quantile is unknown. Of an idle target that is expected (an empty histogram has
            # no quantile); otherwise the model may still add capacity, but nothing may be released.
            no_down = "" if reading.demand_zero else f"no scale-down while {names} is unknown"

        if need > current:
            return Recommendation(
                need, Reason.SCALE_UP, f"{need_text}; {have_text}: scaling to {need}", ahead=ahead
            ), new_state
        if starting > 0 and need > ready:
            return Recommendation(
                current, Reason.WAITING_FOR_STARTING,
                f"{need_text}; {have_text}: the starting replicas cover it, not scaling again", ahead=ahead,
            ), new_state
        down_u = c * (1.0 - cfg.scale_down.hysteresis)
        # Two margins, each for its own risk, not stacked: the band (hysteresis) keeps the steady need, the peak
        # of the hold window and the forecast, so that a steady load is a fixed point; the largest rise within
        # a cold start is itself a measured margin (what the load did before while a replica started), so
        # ``load + rise`` is kept at the SLO utilization ``c``, not at ``c·(1 − hysteresis)`` again.
        keep_for = max(peak, forecast)
        margins = max(need, _ceil(keep_for / down_u), rise_keep, step_keep)
        down, recur_text = margins, ""
        if by_recurrence:
            # The band keeps the level now and the forecast (a steady load stays a fixed point); whether a
            # replica above that is needed again soon is the recurrence's to say where it has the evidence, in
            # place of the hold window's peak and the largest rise (each a margin for demand coming back within
            # a lead); where it has none, those margins stand.
            lead = self._release_lead(ctx, horizon)
            base = max(need, _ceil(max(load, forecast) / down_u))
            down, recur_text = self._recurrence_keep(
                series, base=base, margins=margins, current=current, c=c, lead=lead, now=now
            )
        # Below what was found needed when a count was short at a comparable load (within the hysteresis) is
        # not returned to: without this, ``c`` recovering would walk the count back into the shortfall.
        too_few = max(
            (x.enough for x in short if reading.served_load >= (1.0 - cfg.scale_down.hysteresis) * x.served),
            default=0,
        )
        down = max(down, too_few)
        # Nor below what the forecast over a hand-off's lead needs: a replica started ahead of need on a
        # training victim's chips (``HandoffAhead``) is not released by the next pass, before the need arrives.
        # At the scale-down utilization, like the rest of the band: a forecast wobbling at a count's edge does
        # not start and release that replica in turns.
        lead_keep = _ceil(further / down_u) if ahead is not None else 0
        lead_keep = lead_keep if lead_keep > need else 0
        down = max(down, lead_keep)
        # ``scaleDown.priceReacquire``: not below what a release the preemption budget could not buy back needs.
        reacquire = self._reacquire_keep(
            ctx, series, calm, down=down, current=current, load=max(load, forecast), down_u=down_u, lead=reach,
            observed=observed, kept=keep,
        )
        down = max(down, reacquire.count)
        band = (
            (
                f"scale-down keeps max(load {load:.2f}, forecast) at ≤ {down_u:.2f} utilization (hysteresis "
                f"{cfg.scale_down.hysteresis:g}); {recur_text}"
            )
            if by_recurrence
            else f"scale-down keeps max(peak {peak:.2f} of the last {hold:g}s, forecast) at ≤ {down_u:.2f} utilization "
            f"(hysteresis {cfg.scale_down.hysteresis:g}) and load + the largest rise within a cold start "
            + (
                ("from a load at least this one (from below it, its part above) " if sd.rise_from_below
                 else "from a load at least this one ")
                if cfg.scale_down.rise_from_level
                else ""
            )
            + f"seen in {lookback(horizon):g}s "
            + (
                f"(less what {MIN_RECURRENCE_FALLS} cold starts of evidence with the SLO held released) "
                if released is not None and sd.release_rise
                else ""
            )
            + f"({load:.2f} + {rise:.2f}) at ≤ {c:.2f}{absorbed_text}"
            + (step_text if step_keep > rise_keep else "")
            + (f", and not below {too_few}: found needed when fewer were short at a comparable load" if too_few else "")
            + (f", and not below {lead_keep}: forecast within {reach:g}s (a hand-off's lead)" if lead_keep else "")
        ) + reacquire.clause
        if down < current and observed < hold:
            no_down = no_down or f"observed {observed:g}s < the {hold:g}s hold window"
        if down < current and queued:
            no_down = no_down or "requests are waiting on every replica"
        if down < current and not at_risk and not no_down:
            return Recommendation(
                down, Reason.SCALE_DOWN, f"{need_text}; {band} ⇒ {down}; {have_text}: scaling down to {down}",
                ahead=ahead,
            ), new_state
        why = no_down or ("the SLO is at risk" if at_risk else f"{band} ⇒ {down}")
        unknown_hold = bool(reading.unknown) and down < current
        return Recommendation(
            current, Reason.METRICS_UNKNOWN if unknown_hold else Reason.STEADY,
            f"{need_text}; {have_text}: holding {current} ({why})", ahead=ahead,
        ), new_state

    def _reacquire_keep(
        self, ctx: Context, series: tuple[tuple[float, float], ...], calm: tuple[float, ...], *, down: int,
        current: int, load: float, down_u: float, lead: float, observed: float, kept: float,
    ) -> _ReacquireKeep:
        """``scaleDown.priceReacquire``: the count a release the preemption budget could not buy back keeps, and its
        clause for the message (``_ReacquireKeep``; count 0 and no clause when none binds). Releasing the k-th replica
        below ``current`` that leaves the pool unable to reach what it reaches now for ``wait`` seconds
        (``Context.reacquire``) is a replica that takes ``wait`` plus a hand-off's lead (``lead``) to come back: it is
        released only when the load expected over that time fits the count below it at the scale-down utilization
        ``down_u``, as the hold window's peak must for a replica that takes a cold start to come back, and on as much
        evidence: nothing is released before the history observed (``observed``) spans that time, or the whole history
        kept (``kept``, the longest evidence the policy keeps) when that time is longer (the hold window's rule: nothing
        before a whole window is observed). That load is the highest of the time it takes to come back (``series``;
        never below ``load``, the load now or its forecast) and, where the calm samples show a slow ramp
        (``sizing.ramp_trend``: its slope less 2 standard errors positive), the load now plus the ramp's slope over that
        time, extrapolated no further than the window that showed it: a rising load needs the replica back sooner than
        its past peak says."""
        r = ctx.reacquire
        if not self.config.scale_down.price_reacquire or r is None or down >= current or not series:
            return _ReacquireKeep(0, "")
        now = ctx.now
        horizon = self.config.replica.cold_start_seconds
        ramp: RampTrend | None = None
        ramp_read = False
        for k in range(1, current - down + 1):
            wait = r.regained_in_s[k - 1]
            if not wait > 0:
                continue
            back = wait + lead
            peak = max([v for t, v in series if t > now - back] + [load])
            seen = now - min((t for t, _ in series if t > now - back), default=now)
            if not ramp_read:
                calm_set = set(calm)
                ramp = ramp_trend([(t, v) for t, v in series if t in calm_set], now, horizon, now - series[0][0])
                ramp_read = True
            rising = 0.0 if ramp is None else load + ramp.slope * min(back, ramp.window)
            needs = _ceil(max(peak, rising) / down_u)
            if observed < min(back, kept):
                keep = current - k + 1
                when = "within the budget's hour as known" if math.isinf(wait) else f"for {wait:.0f}s"
                return _ReacquireKeep(keep, (
                    f", and not below {keep}: releasing {current}→{current - k} resumes "
                    f"{r.resumed[k - 1] or 'training'} and the preemption budget could not buy it back {when} "
                    f"(the pool could reach {r.after[k - 1]} of the {r.reachable} it can now); {back:.0f}s to come "
                    f"back, and the load history observed spans {observed:.0f}s of the {min(back, kept):.0f}s it needs"
                ))
            if needs > current - k:
                keep = current - k + 1
                when = "within the budget's hour as known" if math.isinf(wait) else f"for {wait:.0f}s"
                expected = (
                    f"the load now {load:.2f} + the slow ramp's +{ramp.slope * 60:.3f}/min (over the last "
                    f"{ramp.window:g}s) over {min(back, ramp.window):.0f}s = {rising:.2f}"
                    if ramp is not None and rising >= peak
                    else f"the peak {peak:.2f} of the last {seen:.0f}s"
                )
                return _ReacquireKeep(keep, (
                    f", and not below {keep}: releasing {current}→{current - k} resumes "
                    f"{r.resumed[k - 1] or 'training'} and the preemption budget could not buy it back {when} "
                    f"(the pool could reach "
                    f"{r.after[k - 1]} of the {r.reachable} it can now); over the {back:.0f}s it takes to come back "
                    f"{expected} at ≤ {down_u:.2f} needs {needs}"
                ))
        return _ReacquireKeep(0, "")

    def _admitting(self, ctx: Context) -> int:
        """Replicas asked for that wait for Kueue's admission, for the latency loop (``waitForAdmission``, the
        default; 0 with it off). ``ReplicaStatus.gated``: the controller counts pods carrying Kueue's scheduling
        gate and replicas whose pods do not exist yet, the simulator its pending replicas; replay's recorded mode
        counts them as starting, which the loop treats alike."""
        return ctx.replicas.gated if self.config.wait_for_admission else 0

    def _ramp(
        self, series: tuple[tuple[float, float], ...], calm: set[float], now: float, level: float, horizon: float
    ) -> tuple[float, str]:
        """``forecast.ramp``: the level the scale-up sizes plus the rise a slow ramp's trend predicts over the cold
        start (``sizing.ramp_trend``, on the calm samples), and its text; the level itself and "" when no ramp is
        shown. Never below the level: it only adds capacity ahead of need."""
        if not series:
            return level, ""
        trend = ramp_trend([(t, v) for t, v in series if t in calm], now, horizon, now - series[0][0])
        if trend is None:
            return level, ""
        return level + trend.rise, (
            f" (slow ramp +{trend.slope * 60:.3f}/min over the last {trend.window:g}s, ≥ +{trend.low * 60:.3f}/min "
            f"at 2 standard errors on {trend.effective:.0f} effective samples: +{trend.rise:.2f} over the cold start)"
        )

    def _latency(self, ctx: Context, name: str, waiting: float | None) -> tuple[float | None, str]:
        """A latency quantile signal as the loop takes it: ``(value, text)``. ``(None, "")``: unknown; ``(None,
        text)``: quiet (``latencyEvidence``: no request observed in the window, or too few to support any value of
        the quantile, while none is waiting: nothing is late, the loop abstains); else the value, with
        ``latencyEvidence`` the lower confidence bound of the quantile its observations support
        (``sizing.supported_quantile``) where the source gives the buckets, and a text saying so."""
        sig = ctx.signals[name]
        if not self.config.latency_evidence:
            return (sig.value, "") if sig.ok and sig.value is not None else (None, "")
        none_waiting = waiting is not None and waiting == 0
        if not sig.ok or sig.value is None:
            if none_waiting and sig.reason.startswith(NO_OBSERVATIONS):
                return None, "no request observed in its window and none waiting (quiet)"
            return None, ""
        quantile = ctx.spec.signal(name).quantile
        if sig.histogram is None or quantile is None:
            return sig.value, ""
        window = quantile.window_seconds
        n = round(sig.histogram.get(math.inf, 0.0) * window)
        supported = supported_quantile(sig.histogram, quantile.q, window)
        if supported is None:
            if none_waiting:
                return None, f"{n} requests in its window support no p{quantile.q * 100:g}, none waiting (quiet)"
            return None, ""
        if supported >= sig.value - 1e-12:
            return sig.value, ""
        return supported, (
            f" (supported by its {n} requests at {QUANTILE_CONFIDENCE:.0%}; point estimate {sig.value:.3g}s)"
        )

    def _judges_misses_on_evidence(self) -> bool:
        cfg = self.config
        return cfg.breach_on_evidence and not cfg.latency_evidence

    def _supported_miss(self, ctx: Context, name: str, value: float, target: float) -> float:
        """``breachOnEvidence``: a latency quantile over its objective as a miss is judged, the lower of its point
        estimate ``value`` and the quantile its window's requests support (``sizing.supported_quantile``; their
        number is the histogram's +Inf rate times the window); 0 when they support none (too few to show any
        value). Without buckets (a source returning the quantile whole) the point estimate."""
        sig, quantile = ctx.signals[name], ctx.spec.signal(name).quantile
        if not self._judges_misses_on_evidence() or sig.histogram is None or quantile is None:
            return value / target
        supported = supported_quantile(sig.histogram, quantile.q, quantile.window_seconds)
        return 0.0 if supported is None else min(value, supported) / target

    def _latency_after_queue(
        self, ctx: Context, queue: str, ttft: str, waiting: float | None
    ) -> tuple[float | None, str]:
        """``ttftAfterQueue``: the TTFT users feel, queue time + a TTFT that counts from the queue's end, as the loop
        takes it (``(value, text)``, with ``_latency``'s unknown and quiet): the quantile of the sum of the two
        (independent, ``sizing.quantile_of_sum``) at the objective's percentile, with ``latencyEvidence`` the one
        the windows' requests support; without both windows' buckets, the sum of the two quantiles."""
        parts = [self._latency(ctx, queue, waiting), self._latency(ctx, ttft, waiting)]
        if all(v is None and text for v, text in parts):
            return None, "both windows quiet: " + "; ".join(text for _, text in parts)
        if any(v is None for v, _ in parts):
            return None, ""  # one unknown, or quiet while the other holds requests whose queue time it lacks
        sq, st = ctx.signals[queue], ctx.signals[ttft]
        q_spec, t_spec = ctx.spec.signal(queue).quantile, ctx.spec.signal(ttft).quantile
        q = self.config.objective.percentile
        if sq.histogram is None or st.histogram is None or q_spec is None or t_spec is None:
            vq, vt = (v for v, _ in parts)
            assert vq is not None
            assert vt is not None
            return vq + vt, f" (the sum of the two quantiles: {vq:.3g}s + {vt:.3g}s)"
        within = self.config.bucket_reading
        point = quantile_of_sum(sq.histogram, st.histogram, q, within=within)
        how = "independent sum of the two windows" + ("" if within == "uniform" else f", {within} within buckets")
        if not self.config.latency_evidence:
            return point, f" ({how})"
        window = min(q_spec.window_seconds, t_spec.window_seconds)
        supported = supported_quantile_of_sum(sq.histogram, st.histogram, q, window, within=within)
        if supported is None:
            if waiting is not None and waiting == 0:
                return None, f"their windows support no p{q * 100:g}, none waiting (quiet)"
            return None, ""
        value, n = supported
        if value >= point - 1e-12:
            return point, f" ({how})"
        return value, (
            f" ({how}, supported by their {n} requests at {QUANTILE_CONFIDENCE:.0%}; "
            f"point estimate {point:.3g}s)"
        )

    @staticmethod
    def _evidenced_count(
        history: tuple[LoadSample, ...], evidence: float, recurred: float, horizon: float
    ) -> int | None:
        """``scaleDown.releaseRiseStepwise``: the lowest ready count that has held the SLO, by itself or with fewer
        replicas, for ``MIN_RECURRENCE_FALLS`` cold starts of evidence since the last recurrence (``recurred``), the
        evidence up to ``evidence`` (the clock before this evaluation); None: no count has. Each history sample
        carries the clock before its evaluation, so the evidence between two samples is what the earlier one's
        evaluation added: it is credited to that one's count (the count that held it)."""
        need = MIN_RECURRENCE_FALLS * horizon
        credit: dict[int, float] = {}
        for x, y in itertools.pairwise(history):
            if y.evidence > recurred and x.ready > 0:
                credit[x.ready] = credit.get(x.ready, 0.0) + max(0.0, y.evidence - max(x.evidence, recurred))
        total = 0.0
        for count in sorted(credit):
            total += credit[count]
            if total >= need - 1e-9:
                return count
        return None

    def _absorbed(self, ctx: Context, history: tuple[LoadSample, ...], horizon: float) -> list[int | None] | None:
        """``scaleDown.riseAbsorbed``: for each history sample, the count that absorbed a rise ending at it with the
        SLO held over the cold start before it and the latency quantile's window after it (the longest latency
        signal's ``windowSeconds``; ``sizing.absorbing_counts``). None where no latency signal states a window:
        without a measured latency there is no evidence that a rise was carried, and every rise counts."""
        window = self._latency_window(ctx)
        if window is None:
            return None
        return absorbing_counts(
            [x.t for x in history], [x.held for x in history], [x.ready for x in history],
            before=horizon, after=window,
        )

    def _waits_measured(self, ctx: Context, waiting: float | None) -> bool:
        """``scaleDown.riseAbsorbed``: whether requests waiting now are evidence that the SLO held. A request
        waiting is in no latency window until it is served, and a server's TTFT may hold no wait before it
        (JetStream measures it from the prefill thread taking the request, not from its arrival): its wait is
        measured only by a queue-time quantile. Where the loop reads one (``signals.queueTime``, or
        ``ttftAfterQueue``) the miss and the risk already judge it; ``signals.queueTimeEvidence`` reads one for
        this evidence alone, below the risk line of the TTFT objective (the wait is part of the first token's
        time); without either, a wait is no evidence."""
        s = self.config.signals
        if s.queue_time is not None:
            return True
        if s.queue_time_evidence is None:
            return False
        value, _ = self._latency(ctx, s.queue_time_evidence, waiting)
        return value is not None and value < RISK_FRACTION * self.config.objective.ttft_seconds

    @staticmethod
    def _rise_keep(
        series: Sequence[tuple[float, float]], absorbed: Sequence[int | None] | None, horizon: float, *,
        from_level: float | None, load: float, c: float, from_below: bool = False,
    ) -> _RiseKeep:
        """The count the largest rise within a cold start keeps, ``ceil((load + rise) / c)``, with the rise that
        counts and the message's addition. With ``absorbed`` (``scaleDown.riseAbsorbed``) a rise the ready count
        then carried with the SLO held keeps at most that count: what that many replicas absorbed with the
        objective met needs no more of them; the others keep as before."""
        if absorbed is None:
            rise = largest_rise(series, horizon, from_level=from_level, from_below=from_below)
            return _RiseKeep(_ceil((load + rise) / c), rise, "")
        free = largest_rise(
            series, horizon, from_level=from_level, ends=[a is None for a in absorbed], from_below=from_below,
        )
        keep, rise, text = _ceil((load + free) / c), free, ""
        # Each count separately: a rise absorbed at k keeps at most k (a few distinct counts, one pass each).
        for k in sorted({a for a in absorbed if a is not None}):
            carried = largest_rise(
                series, horizon, from_level=from_level, ends=[a == k for a in absorbed], from_below=from_below,
            )
            if carried > rise:
                text = f" (a rise of {carried:.2f} absorbed by {k} ready with the SLO held keeps at most {k})"
            if min(_ceil((load + carried) / c), k) > keep:
                keep, rise = min(_ceil((load + carried) / c), k), carried
        return _RiseKeep(keep, rise, text)

    def _judged_load(
        self, ctx: Context, history: tuple[LoadSample, ...], load: float, waiting: float | None, kappa: float,
        slot_unit: float, scale: float, kv_unit: float = 1.0,
    ) -> float | None:
        """The load the measured latency quantile is evidence of (``proveOverWindow``): the lowest of the load now
        and the loads of the quantile's window (the longest latency signal's ``windowSeconds``), recomputed with the
        capacity learned now (``LoadSample``); None where no latency signal states a window (then the load now, as
        without the option). A quantile over a trailing window holds the requests that finished within it: it says
        the objective held at every load the window held throughout, not at one reached at its end, whose requests
        are still waiting. 0 (nothing proven) until the history holds the whole window, and while requests wait
        (or their number is unknown): the latency of those waiting is in no window yet."""
        window = self._latency_window(ctx)
        if window is None:
            return None
        since = ctx.now - window
        if waiting is None or waiting > 0:
            return 0.0  # requests waiting now: their latency is not in the window, the load now not judged
        if not history or history[0].t > since:
            return 0.0  # the window is not yet all in the history: nothing judged, nothing proven
        return min([load, *(x.load(kappa, slot_unit, scale, kv_unit) for x in history if x.t >= since)])

    def _unobserved_waits(
        self, ctx: Context, reading: _Reading, waited_at: float | None
    ) -> tuple[float | None, str]:
        """``observedAtEnd``: ``(waited_at, text)``, the last evaluation that saw requests waiting (for the state),
        and why the latency window is not yet evidence of capacity to spare ("" when it is). A server that observes
        a request's latency as the request ends has not observed those that waited and still decode: the window is
        evidence once they have ended. While any waits (or the number is unknown), it is not; after the last wait,
        not until the mean time in system has passed (Little's law: in the system, running + waiting, over the rate
        at which the latency histograms observe requests, the lowest of them; without a histogram, or with none
        observed while some are in the system, the longest latency window)."""
        now = ctx.now
        waiting = reading.waiting
        if waiting is None or waiting > 0:
            what = "unknown" if waiting is None else f"{waiting:.0f}"
            return now, f"; {what} waiting, observed only as each ends: no evidence of capacity to spare"
        if waited_at is None:
            return None, ""
        in_system = reading.running
        windows, rates = [], []
        for name in self._latency_names():
            sig = ctx.signals[name]
            quantile = ctx.spec.signal(name).quantile
            if quantile is not None:
                windows.append(quantile.window_seconds)
            rates.append(sig.histogram.get(math.inf, 0.0) if sig.ok and sig.histogram is not None else 0.0)
        rate = min(rates, default=0.0)
        if in_system is None:
            lag, how = math.inf, "requests running unknown"
        elif in_system == 0:
            lag, how = 0.0, "none in the system"
        elif rate > 0:
            lag, how = in_system / rate, f"{in_system:.0f} in the system / {rate:.2f} observed/s"
        else:
            lag, how = max(windows, default=math.inf), "no observation rate: the latency window"
        since = now - waited_at
        if since >= lag:
            return None, ""
        return waited_at, (
            f"; requests waited {since:.0f}s ago and are observed only as each ends, in {lag:.0f}s on average "
            f"({how}): no evidence of capacity to spare yet"
        )

    def _window_peak(
        self, ctx: Context, history: tuple[LoadSample, ...], load: float, kappa: float, slot_unit: float, scale: float,
        kv_unit: float = 1.0,
    ) -> float | None:
        """``breachOverWindow``: the highest of the load now and the loads of the latency quantiles' window (the
        longest ``windowSeconds``), recomputed with the capacity learned now (``LoadSample``); None where no latency
        signal states a window (then the floor holds and the loop judges the load now, as without the option). A
        history shorter than the window gives the highest of what it holds."""
        window = self._latency_window(ctx)
        if window is None:
            return None
        since = ctx.now - window
        return max([load, *(x.load(kappa, slot_unit, scale, kv_unit) for x in history if x.t >= since)])

    def _release_lead(self, ctx: Context, horizon: float) -> float:
        """How long a released replica takes to be back once it is needed again: the cold start (admission to
        serving, as stated), plus the eviction of a training victim when the engine gives one
        (``Context.eviction_s``: the released chips may go to training, and getting them back stops it)."""
        return horizon + (ctx.eviction_s or 0.0)

    def _recurrence_keep(
        self, series: tuple[tuple[float, float], ...], *, base: int, margins: int, current: int, c: float, lead: float,
        now: float,
    ) -> tuple[int, str]:
        """The count the scale-down keeps above ``base`` by demand's recurrence (``sizing.recurrence``), and the text.

        The k-th replica (``base < k ≤ current``, from the top) is needed when the load exceeds what ``k − 1``
        replicas carry at the SLO utilization, ``(k − 1)·c``. Over the demand history, the falls below that which
        lasted longer than the demand has been below it now are the ones a release now would have been made in.
        It is kept (and with it every one below) when releasing it that late in them would have cost more than the
        SLO's budget, ``1 − percentile`` of the requests (those over ``(k − 1)·c`` while a replacement started:
        the SLO's percentile is what may miss), or when the demand came back on average within the lead (the
        ski-rental break-even: keeping it idle until then costs less than a replacement's cold start, and a
        release would be a flap). It may go when neither holds over at least ``MIN_RECURRENCE_FALLS`` such falls.
        With fewer, the measure has not the evidence to release what the margins it replaces keep
        (``margins``: the hold window's peak and the largest rise), and they decide."""
        budget = 1.0 - self.config.objective.percentile
        texts: list[str] = []
        for k in range(current, base, -1):
            rec = recurrence(series, threshold=(k - 1) * c, step=c, lead=lead, now=now)
            costly = rec.falls > 0 and rec.missed > budget
            soon = rec.idle is not None and rec.idle <= lead
            idle = f"{rec.idle:.0f}s" if rec.idle is not None else "none"
            text = (
                f"replica {k}: below its need (load ≤ {rec.threshold:.2f}) for {rec.age:.0f}s; of {rec.falls} past "
                f"falls that lasted longer, {rec.within_lead} came back within the {lead:g}s lead, a release this "
                f"late would have missed {rec.missed:.2%} of requests (budget {budget:.2%}), mean idle to the "
                f"return {idle}"
            )
            if costly or soon:
                why = "over the budget" if costly else "back within the lead on average"
                return k, f"{text} ⇒ kept ({why})"
            if rec.falls < MIN_RECURRENCE_FALLS and k <= margins:
                return k, (
                    f"{text} ⇒ kept: {rec.falls} falls < {MIN_RECURRENCE_FALLS} to judge by, the hold window's peak "
                    f"and the largest rise keep {margins}"
                )
            texts.append(text)
        if not texts:
            return base, "no replica above that to release"
        return base, f"{texts[-1]} ⇒ may go" + (f" (and the {len(texts) - 1} above it)" if len(texts) > 1 else "")

    def _kv_unit(self, onset: float, utilization: float | None) -> float:
        """The KV-cache fill (0-1 of one replica's cache) that counts as one replica-equivalent of the load.

        Without ``kvAtOnset``, 1.0: the cache's fill is sized like throughput, at the utilization at the SLO ``c``
        (``need = ceil(fill·R / c)``). With it, the fill is an occupancy: a request waits for the cache only once
        the fill leaves no room for it (a server admits a sequence when its tokens fit: vLLM's blocks, TGI's
        --max-batch-total-tokens, JetStream's cache), so the KV part plans the fill up to ``onset`` (learned,
        ``SloState.kv_onset``): ``need = ceil(fill·R / onset)``, whatever ``c`` above the target. Below the
        target (the latency loop found a risk) it tightens in proportion, ``need = ceil(fill·R/onset ·
        target/c)``. The load is ``need·c``, so the unit is ``onset / max(c, target)``; ``c`` is the last
        evaluation's (the target at the first): the loop reads the load before it moves ``c``."""
        cfg = self.config
        if not cfg.kv_at_onset:
            return 1.0
        u = cfg.target_utilization
        return onset / max(u, utilization if utilization is not None else u)

    def slot_unit(self, slot_scale: float, peakedness: float = 1.0, wait: _Wait | None = None) -> float:
        """The sequences (running + waiting) that count as one replica-equivalent of the slot part of the load.

        Behind random routing (a ClusterIP Service) each replica receives its own random share of the
        arrivals, and the sequences it holds are Poisson-distributed around their mean (an M/G/∞ occupancy is
        Poisson whatever the sequences' lengths; source: the standard M/G/∞ result), so a replica's slots fill
        up before their mean does. A request that finds its replica's slots all taken waits for a sequence to
        end, and is counted here as at risk of missing the objective (an approximation on the safe side: some
        such waits are short). So the mean a replica may hold is the one at which its usable slots are all taken
        with probability at most ``1 − percentile`` (``occupancy_at_objective``), and one replica-equivalent is
        that mean over ``targetUtilization``: at the target utilization the slot part needs exactly that. Never
        more than the usable slots. Arrivals in bursts (``peakedness`` > 1: one replica's share of the measured
        burstiness, ``_peakedness``) spread the occupancy wider than Poisson: Hayward's approximation
        (``sizing.peaked_occupancy``).

        With ``slotWait`` and its numbers measured (``wait``: the slot release rate and the TTFT slacks) a wait
        is priced, not counted: the mean a replica may hold is the one at which at most ``1 − percentile`` of
        requests wait for a slot longer than the objective leaves them after their own prefill (M/M/n, Erlang C:
        ``sizing.occupancy_at_wait_objective``). At no slack that is the Poisson rule's within a fraction of a
        sequence (Erlang C is the probability that all slots are taken); every second of slack adds
        ``(n − a)·μ`` to the exponent."""
        cfg = self.config
        usable = cfg.replica.slots * slot_scale
        occupancy = occupancy_at_objective if wait is None else wait.occupancy
        allowed = peaked_occupancy(usable, peakedness, cfg.objective.percentile, occupancy)
        # Never below the floor the utilization at the SLO has (a burstiness beyond what the slots can smooth
        # would otherwise ask for unbounded replicas; ``maxReplicas`` bounds it too).
        allowed = max(allowed, MIN_UTILIZATION * usable) if peakedness > 1.0 else allowed
        # Never more than the usable slots, priced or counted: as for the prefill queue's unit (never more than a
        # replica), at ``targetUtilization`` the slot part plans at most that share of them. Without this bound
        # the priced wait planned up to its own occupancy (measured 2026-12-07, docs/slo.md "Session 10"): it
        # saved the most on the TPU conversation rows and lost the TPU slow ramp (100 → 95.39 %), a Poisson
        # ramp that the 0.8 had been covering while a host started.
        return min(usable, allowed / cfg.target_utilization)

    def _slot_wait(
        self, ctx: Context, reading: _Reading, prev: SloState, kappa: float, prefill_rate: float | None, dt: float
    ) -> tuple[float | None, tuple[tuple[float, float], ...], str]:
        """``slotWait``'s numbers: the slot release rate (learned, ``sizing.learn_release_rate``), the TTFT slacks
        of the prompt lengths (the last ones while the lengths are unknown) and the text ("" when not configured).

        The release rate is measured by Little's law: requests arriving per second (served prompt tokens over the
        prompt lengths' mean with ``promptTokens``, else the prompt-length histogram's observation rate) over the
        sequences running, both totals over the target. The slack of a prompt of ``L`` tokens is the objective
        less its prefill at the learned prefill rate (``κ`` × the measured rate, or the prior's: the prior is the
        conservative one, a slower prefill leaves less slack)."""
        cfg = self.config
        s, prior = cfg.signals, cfg.replica.prior
        if not cfg.slot_wait or s.prompt_length is None or prior is None:
            return None, (), ""
        sig = ctx.signals[s.prompt_length]
        lengths = lengths_from_histogram(sig.histogram) if sig.ok and sig.histogram is not None else None
        slacks = prev.slacks
        arrivals: float | None = None
        if lengths is not None:
            rate = kappa * (prefill_rate if prefill_rate is not None else prior.prefill_tokens_per_second)
            slacks = ttft_slacks(lengths, rate, cfg.objective.ttft_seconds)
            prompt = _target_total(ctx, s.prompt_tokens) if s.prompt_tokens is not None else None
            arrivals = prompt / lengths.mean if prompt is not None else lengths.rate
        measured = slot_release_rate(arrivals, reading.running)
        release = learn_release_rate(prev.release_rate, measured, dt=dt)
        if release is None or not slacks:
            return release, slacks, "slot wait: release rate or prompt lengths not measured yet, every wait a miss"
        hold = 1.0 / release
        return release, slacks, (
            f"slot wait priced (M/M/n per replica): a slot frees every {hold:.1f}s per sequence "
            + (f"(measured {1.0 / measured:.1f}s)" if measured is not None else "(not measured now, the last)")
            + f", TTFT slack {min(x for x, _ in slacks):.2f}-{max(x for x, _ in slacks):.2f}s"
        )

    def _arrivals(self, ctx: Context) -> tuple[float | None, float]:
        """``forecast.arrivals``: the arrivals now, total over the target (None: not configured, no arrival signal
        read, or unknown now), and their signal's window. ``signals.arrivals`` when given; else prompt tokens/s
        where the policy reads the token counters; else requests/s, the prompt-length histogram's observation rate."""
        cfg = self.config
        s = cfg.signals
        if not cfg.forecast.arrivals:
            return None, 0.0
        counter = s.arrivals or s.prompt_tokens
        if counter is not None:
            rate = ctx.spec.signal(counter).rate
            return _target_total(ctx, counter), rate.window_seconds if rate is not None else 0.0
        if s.prompt_length is not None:
            sig = ctx.signals[s.prompt_length]
            quantile = ctx.spec.signal(s.prompt_length).quantile
            window = quantile.window_seconds if quantile is not None else 0.0
            if not sig.ok or sig.histogram is None:
                return None, window
            # No observation in the window is no arrival (the histogram was read): zero, not unknown.
            lengths = lengths_from_histogram(sig.histogram)
            return (lengths.rate if lengths is not None else 0.0), window
        return None, 0.0

    def _prefill_rate(self, ctx: Context, last: float | None, dt: float) -> tuple[float | None, float | None]:
        """The prefill rate the queue model uses (None: the prior's, nothing measured yet) and this evaluation's
        measurement (None: unknown). Measured as the prompt tokens served per second over the prefill seconds
        spent per second, both totals over the target's replicas (``sizing.measured_prefill_rate``); learned from
        the prior upward within minutes, never above the last measurement; an unknown one keeps the last
        (``sizing.learn_prefill_rate``)."""
        s, prior = self.config.signals, self.config.replica.prior
        if s.prefill_seconds is None or s.prompt_tokens is None or prior is None:
            return None, None
        # Totals over the target, as ``_read`` takes them, so that the ratio is a replica's.
        measured = measured_prefill_rate(_target_total(ctx, s.prompt_tokens), _target_total(ctx, s.prefill_seconds))
        if measured is None and last is None:
            return None, None
        start = last if last is not None else prior.prefill_tokens_per_second
        return learn_prefill_rate(start, measured, prior=prior.prefill_tokens_per_second, dt=dt), measured

    def _prefill_scale(self, rate: float | None) -> float:
        """The prefill rate over the prior's (1 while not measured)."""
        prior = self.config.replica.prior
        return 1.0 if rate is None or prior is None else rate / prior.prefill_tokens_per_second

    def _burstiness(self, ctx: Context, prev: SloState, dt: float) -> tuple[tuple[WorkSample, ...], float | None, str]:
        """The short windows' prompt work of the last ``BURSTINESS_SPAN_S`` (this evaluation's added when known),
        the learned burstiness (None without ``promptTokensBurst``) and its text."""
        s = self.config.signals
        name = s.prompt_tokens_burst
        if name is None or s.prompt_length is None:
            return (), None, ""
        now = ctx.now
        rate = ctx.spec.signal(name).rate
        window = rate.window_seconds if rate is not None else 0.0
        work = tuple(x for x in prev.work if x.t > now - BURSTINESS_SPAN_S)
        tokens = _target_total(ctx, name)
        if tokens is not None and math.isfinite(tokens) and tokens >= 0 and window > 0:
            work = (*work, WorkSample(now, tokens * window))
        sig = ctx.signals[s.prompt_length]
        lengths = lengths_from_histogram(sig.histogram) if sig.ok and sig.histogram is not None else None
        measured = work_burstiness(work, window, lengths) if lengths is not None else None
        last = prev.burstiness if prev.burstiness is not None else BURSTINESS_PRIOR
        b = learn_burstiness(last, measured, dt=dt)
        return work, b, (
            f"prompt work {b:.2f}× as bursty as Poisson ("
            + (f"measured {measured:.2f}" if measured is not None else "not measured now")
            + f" over {len(work)} windows of {window:g}s"
            + (", the prior's" if prev.burstiness is None else "")
            + ")"
        )

    def _peakedness(self, burstiness: float | None, ready: int) -> float:
        """One replica's share of the measured burstiness (1 without it): the Service splits the stream at
        random (``sizing.split_burstiness``)."""
        return 1.0 if burstiness is None else split_burstiness(burstiness, ready)

    def _prefill_unit(
        self, ctx: Context, kappa: float, last: float, prefill_rate: float | None = None, burstiness: float = 1.0
    ) -> tuple[float, str]:
        """One replica-equivalent of the token part, as a share of a replica's learned prefill capacity, and its text.

        Behind random routing each replica's prefill is its own M/G/1 queue (``sizing.prefill_miss``): the
        utilization at which the objective holds comes from the prompt-length distribution the servers export
        (``signals.promptLength``'s buckets), not from the mean: one long prompt ahead delays every short one.
        As for the slots, one replica-equivalent is that utilization over ``targetUtilization`` (at the target the
        token part then needs exactly that), never more than the replica. Without the role: 1 (the mean, as
        before). With the role but no distribution this evaluation (no buckets, an empty window): the last one."""
        cfg = self.config
        name, prior = cfg.signals.prompt_length, cfg.replica.prior
        if name is None or prior is None or cfg.signals.prompt_tokens is None:
            return 1.0, ""
        sig = ctx.signals[name]
        lengths = lengths_from_histogram(sig.histogram) if sig.ok and sig.histogram is not None else None
        if lengths is None:
            why = "no prompt-length buckets from this source" if sig.ok else "prompt lengths unknown"
            return last, f"prefill queue: {why}, keeping {last:.2f}"
        rate = kappa * (prefill_rate if prefill_rate is not None else prior.prefill_tokens_per_second)
        allowed = prefill_utilization_at_objective(
            lengths, rate, cfg.objective.ttft_seconds, cfg.objective.percentile, burstiness
        )
        unit = min(1.0, allowed / cfg.target_utilization)
        residual = burstiness * lengths.second / (2.0 * lengths.mean * rate)
        model = "M/G/1" if burstiness <= 1.0 else f"G/G/1, Kingman: {burstiness:.2f}× the P-K wait"
        return unit, (
            f"prefill queue ({model} per replica, prompts {lengths.mean:.0f} tok mean, residual {residual:.2f}s at "
            f"{rate:.0f} tok/s): ≤ {allowed:.2f} utilization holds the TTFT p{cfg.objective.percentile * 100:g}"
        )

    def _kv_reserved(self, reserved: float | None, ready: int) -> _KvUse:
        """``signals.kvTokens``: the KV use, 0-1 averaged over the ready replicas, from the tokens their batches
        reserve over the budget each states (``replica.kvCacheTokens``), and the text of its numbers (None: unknown,
        or no replica ready)."""
        budget = self.config.replica.kv_cache_tokens
        if reserved is None or budget is None or ready <= 0:
            return _KvUse(None, "")
        return _KvUse(
            min(1.0, max(0.0, reserved) / (ready * budget)), f": {reserved:.0f} tok reserved of {ready} × {budget}"
        )

    def _proof_at_mix(
        self, ctx: Context, c: float, proven: float, proven_before: float, mix: float | None
    ) -> _Proof:
        """``proveAtMix``: the utilization at the SLO, the proof, the prompt lengths' mean it was made at (after this
        evaluation) and the text. A proof raised now (``proven`` above ``proven_before``) is made at the mean now;
        a mean grown beyond the proof's by more than the hysteresis band withdraws it (``proven`` 0) and brings ``c``
        back to at most ``targetUtilization``. No mean now (no buckets, no request in the window) changes nothing."""
        cfg = self.config
        name = cfg.signals.prompt_length
        if not cfg.prove_at_mix or name is None:
            return _Proof(c, proven, mix, "")
        sig = ctx.signals[name]
        lengths = lengths_from_histogram(sig.histogram) if sig.ok and sig.histogram is not None else None
        if lengths is None or not lengths.mean > 0:
            return _Proof(c, proven, mix, "")
        if mix is not None and lengths.mean * (1.0 - cfg.scale_down.hysteresis) > mix:
            u = cfg.target_utilization
            return _Proof(min(c, u), 0.0, None, (
                f" (the probe's proof withdrawn: prompts {lengths.mean:.0f} tok mean now, proven at {mix:.0f}, longer "
                f"by more than the {cfg.scale_down.hysteresis:g} band; at most {u:.2f} until proven at these prompts)"
            ))
        if proven > proven_before or mix is None:
            mix = lengths.mean
        return _Proof(c, proven, mix, "")

    def _kv_slot_scale(self, ctx: Context) -> tuple[float | None, str]:
        """``kvFromTokens``: the share of the stated slots the KV cache holds at the tokens a sequence reserves now
        (None: not configured, or unknown now), and its text."""
        cfg = self.config
        s, kv_tokens = cfg.signals, cfg.replica.kv_cache_tokens
        if not cfg.kv_from_tokens or kv_tokens is None or s.prompt_length is None:
            return None, ""
        sig = ctx.signals[s.prompt_length]
        lengths = lengths_from_histogram(sig.histogram) if sig.ok and sig.histogram is not None else None
        prompt = _target_total(ctx, s.prompt_tokens) if s.prompt_tokens is not None else None
        gen = _target_total(ctx, s.generation_tokens) if s.generation_tokens is not None else None
        if lengths is None or prompt is None or gen is None or prompt <= 0 or lengths.mean <= 0:
            return None, "KV per sequence unknown (no requests in the windows): slots not bounded by the KV cache"
        per_sequence = lengths.mean * (1.0 + gen / prompt)
        held = kv_tokens / per_sequence
        return min(1.0, max(1.0, held) / cfg.replica.slots), (
            f"KV {kv_tokens} tok holds {held:.0f} sequences of {per_sequence:.0f} tok (prompts {lengths.mean:.0f} "
            f"tok mean × (1 + {gen:.0f}/{prompt:.0f} generated/prompt tok/s))"
        )

    def _handoff_lead(self, ctx: Context, horizon: float) -> float:
        """How far ``Recommendation.ahead`` forecasts: a hand-off's lead, the longest eviction among the victims
        the arbitration may stop now (``Context.eviction_s``: a trainer that saves within its grace period frees
        its chips once saved, any other at its grace period's end) plus this cold start; without a known
        eviction, ``HANDOFF_LEAD_COLD_STARTS`` cold starts."""
        if ctx.eviction_s is not None:
            return horizon + ctx.eviction_s
        return HANDOFF_LEAD_COLD_STARTS * horizon

    def _work_within_objective(self, ctx: Context) -> tuple[float, str]:
        """``workWithinObjective``: the share of a token rate window's work that must be done per second for it to
        be served within the window and the TTFT objective, ``w / (w + ttftSeconds)`` (``w`` the prompt counter's
        rate window), and its text; 1.0 and no text without the option."""
        cfg = self.config
        name = cfg.signals.prompt_tokens
        rate = ctx.spec.signal(name).rate if cfg.work_within_objective and name is not None else None
        if rate is None:
            return 1.0, ""
        w, ttft = rate.window_seconds, cfg.objective.ttft_seconds
        share = w / (w + ttft)
        return share, f"; the {w:g}s window's work within {w:g}s + the {ttft:g}s objective: ×{share:.2f}"

    def _rate_window(self, ctx: Context) -> float:
        """The longest rate window of the token signals (0 without them)."""
        s = self.config.signals
        windows = [
            rate.window_seconds
            for n in (s.prompt_tokens, s.generation_tokens)
            if n is not None and (rate := ctx.spec.signal(n).rate) is not None
        ]
        return max(windows, default=0.0)

    def _generation_counts(self) -> bool:
        """Generated tokens count in the token load (see ``_read``): with no concurrency gauge, with
        ``countDecode``, or with a time-per-output-token objective."""
        s = self.config.signals
        gauges = any(n is not None for n in (s.running, s.slots_used, s.kv_cache_usage, s.kv_tokens))
        return (not gauges or self.config.count_decode
                or self.config.objective.time_per_output_token_seconds is not None)

    def _latency_window(self, ctx: Context) -> float | None:
        """The longest ``windowSeconds`` of the latency signals' quantiles: the span a measured latency is evidence
        of (None where no latency signal states one)."""
        windows = [
            q.window_seconds for n in self._latency_names() if (q := ctx.spec.signal(n).quantile) is not None
        ]
        return max(windows) if windows else None

    def _latency_names(self) -> tuple[str, ...]:
        s = self.config.signals
        return tuple(n for n in (s.ttft, s.queue_time, s.time_per_output_token) if n is not None)


def _target_total(ctx: Context, name: str) -> float | None:
    """Signal ``name`` as a total over the target: a ``perReplica`` value times the ready replicas (unknown with
    none ready); None when the reading is not usable."""
    sig = ctx.signals[name]
    if not sig.ok or sig.value is None:
        return None
    if ctx.spec.signal(name).scope == "perReplica":
        ready = ctx.replicas.ready
        return sig.value * ready if ready > 0 else None
    return sig.value


@fast.memoized(maxsize=512)
def occupancy_at_objective(slots: int, percentile: float) -> float:
    """The largest mean ``A`` of a Poisson occupancy with ``P(occupancy ≥ slots) ≤ 1 − percentile``: how many
    sequences a replica with ``slots`` slots may hold on average behind random routing and still have a free
    slot for a ``percentile`` share of arrivals (Poisson arrivals see time averages). Bisection on ``A``; the
    tail is summed in log space (large means do not underflow)."""
    budget = 1.0 - percentile

    def full(mean: float) -> float:
        if mean <= 0:
            return 0.0
        logs = [-mean + k * math.log(mean) - math.lgamma(k + 1) for k in range(slots)]
        top = max(logs)
        below = math.exp(top) * math.fsum(math.exp(x - top) for x in logs)
        return max(0.0, 1.0 - below)

    low, high = 0.0, float(slots)
    for _ in range(60):
        mid = (low + high) / 2
        if full(mid) <= budget:
            low = mid
        else:
            high = mid
    return low


def build(config: SloPolicyConfig) -> PolicyAlgorithm:
    return SloAlgorithm(config)


__all__ = [
    # Re-exported from ``core.sizing`` for the callers that named them here first (``disaggregated``).
    "BURSTINESS_PRIOR",
    "BURSTINESS_SPAN_S",
    "CAPACITY_SCALE_BOUNDS",
    "RISK_FRACTION",
    "SATURATED_EVALUATIONS",
    "SETTLE_S",
    "LoadSample",
    "ShortCount",
    "SloAlgorithm",
    "SloPolicyConfig",
    "SloState",
    "build",
    "capacity_alpha",
    "learn_capacity_scale",
    "queued_on_every_replica",
]
