"""The metric pipeline a policy sees: real server metric names, scraped, delayed, aggregated.

Every ready replica exports the gauges its server exports (JetStream, vLLM, TGI), computed from the
replica's state. A policy's raw signals are bound to one of those gauges by their preset name (e.g.
``jetstream.prefill_backlog``), or by the metric name found in their ``metric`` or ``query``. Samples are
taken every ``scrapeIntervalSeconds`` and become visible ``ingestionDelaySeconds`` later, with the scrape
time as their timestamp, so the core judges their age exactly as it would in the cluster. Starting
replicas export nothing (HPA sees them as unready); with no ready replica a signal is missing, never 0.

Counters (prompt and generation tokens, seconds spent prefilling) and histograms (time to first token, queue
time, time per output token) are kept by each simulated server from the requests it serves (``sim.model``); a
``rate`` or ``quantile`` signal reads them as the pods source does: per replica, the deltas between this pipeline's own
scrapes within the window (``core.counters``), and the core takes the target's quantile over the replicas'
summed buckets. The per-token histogram is kept only by pools a policy reads it from (it costs simulation
time; ``ServingPool.count_per_token_latency``).

The router (the inference gateway's endpoint picker) keeps its own counters, one series for the model
(``RouterCounts``): of the requests it *receives*, counted on arrival before any pool serves them, as the
picker records ``inference_objective_request_total`` and ``…_request_sizes``; and of the tokens of the requests
it saw answered, counted as each ends (``…_input_tokens``, ``…_output_tokens``: the response's usage). A policy
reads them like any counter: one series, never a sum of per-pod rates over different spans.
"""

from __future__ import annotations

import math
import re
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from autoscaler.core import catalog, counters
from autoscaler.core.model import SignalReading
from autoscaler.core.signals import aggregate_of, combine
from autoscaler.core.spec import SignalSpec, Spec
from autoscaler.sim.cluster import PipelineSpec
from autoscaler.sim.model import HISTOGRAM_BOUNDS, JETSTREAM_QUEUE_BOUNDS, PROMPT_BOUNDS, TPOT_BOUNDS, ReplicaGauges

Quantity = Callable[[ReplicaGauges], float]

#: What a simulated replica exports for each of the catalog's simulated quantities (``catalog.SIMULATED``).
QUANTITIES: dict[str, Quantity] = {
    "backlog": lambda g: float(g.queued + g.prefill_pending),
    "queued": lambda g: float(g.queued),
    "running": lambda g: float(g.running),
    "decoding": lambda g: float(g.decoding),
    "slots_used": lambda g: g.slots_used,
    "kv_usage": lambda g: g.kv_usage,
    "batch_tokens": lambda g: g.batch_tokens,
}

#: The cumulative series a simulated replica keeps: counters (a number) and histograms (cumulative counts per
#: upper bound, then +Inf: ``HISTOGRAM_BOUNDS`` for TTFT and queue time (``JETSTREAM_QUEUE_BOUNDS`` for JetStream's
#: queue time, its own), ``TPOT_BOUNDS`` per output token,
#: ``PROMPT_BOUNDS`` for the prompt lengths served).
COUNTERS: dict[str, Callable[[ReplicaGauges], float]] = {
    "prompt_tokens": lambda g: g.prompt_tokens,
    "prefill_seconds": lambda g: g.prefill_seconds,
    "generation_tokens": lambda g: g.generation_tokens,
}
HISTOGRAMS: dict[str, Callable[[ReplicaGauges], tuple[int, ...]]] = {
    "ttft": lambda g: g.ttft,
    "ttft_from_prefill": lambda g: g.ttft_from_prefill,
    "queue_time": lambda g: g.queue_time,
    "queue_time_inserted": lambda g: g.queue_time_inserted,
    "tpot": lambda g: g.tpot,
    "prompt_length": lambda g: g.prompt_length,
}
#: The router's counters (``RouterCounts``): one series for the model, not one per replica.
ROUTER_COUNTERS: dict[str, Callable[[RouterCounts], float]] = {
    "arrivals": lambda r: r.requests,
    "arrival_bytes": lambda r: r.body_bytes,
    "answered_prompt_tokens": lambda r: r.answered_prompt_tokens,
    "answered_output_tokens": lambda r: r.answered_output_tokens,
}
#: Request body bytes per prompt token the simulated router counts. ``estimate``: the endpoint picker's own
#: sizing comment ("Each token, in average, has 4 characters", gateway-api-inference-extension
#: pkg/epp/metrics/metrics.go) with the JSON envelope left out. A policy reading bytes should divide by a
#: ratio it measures (router.request_bytes over router.input_tokens), never by this constant.
BYTES_PER_PROMPT_TOKEN = 4.0
_LATENCY_BOUNDS = (*HISTOGRAM_BOUNDS, math.inf)
#: Each histogram's upper bounds, +Inf last.
BOUNDS: dict[str, tuple[float, ...]] = {
    "ttft": _LATENCY_BOUNDS,
    "ttft_from_prefill": _LATENCY_BOUNDS,
    "queue_time": _LATENCY_BOUNDS,
    "queue_time_inserted": (*JETSTREAM_QUEUE_BOUNDS, math.inf),
    "tpot": (*TPOT_BOUNDS, math.inf),
    "prompt_length": (*(float(b) for b in PROMPT_BOUNDS), math.inf),
}

#: Every exposition name of every preset the simulator serves, current spellings first (the catalog's order).
_SERVED = [
    (name, p)
    for p in catalog.PRESETS.values()
    if p.why_unavailable(catalog.SIMULATOR) is None and p.simulated is not None
    for name in p.metrics
]
# Longest first, so ``vllm:num_requests_waiting`` wins over ``num_requests_waiting``.
_BY_LENGTH = sorted(_SERVED, key=lambda np: len(np[0]), reverse=True)


@dataclass(frozen=True, slots=True)
class RouterCounts:
    """What the router has received so far (requests and their body bytes, counted on arrival) and the tokens of
    the requests it saw answered (counted as each ends, from the response's usage); cumulative."""

    requests: float
    body_bytes: float
    answered_prompt_tokens: float = 0.0
    answered_output_tokens: float = 0.0


class BindingError(ValueError):
    """A policy signal the simulator cannot map to a simulated series."""


def _served_presets() -> str:
    return ", ".join(sorted({p.name for _, p in _SERVED}))


def preset_for(sig: SignalSpec) -> catalog.Preset:
    """The catalog preset a raw signal reads: its ``preset``, or the one whose metric its ``metric``/``query``
    names (either vLLM spelling)."""
    if sig.preset is not None:
        preset = catalog.get(sig.preset)
        why = preset.why_unavailable(catalog.SIMULATOR)
        if why is not None:
            raise BindingError(
                f"signal {sig.name!r}: preset {sig.preset} has no simulated series: {why}; simulated presets: "
                f"{_served_presets()}"
            )
        return preset
    text = sig.metric if sig.metric is not None else (sig.query or "")
    # A selector on the name itself, e.g. {__name__=~"vllm[:_](kv|gpu)_cache_usage_perc"}: try it on every
    # exported name (the catalog lists both vLLM spellings).
    for pattern in re.findall(r'__name__\s*=~?\s*"([^"]+)"', text):
        for name, preset in _SERVED:  # in catalog order: the current spelling before the older one
            try:
                if re.fullmatch(pattern, name):
                    return preset
            except re.error:
                break
    # Prometheus stores vllm:x as vllm_x behind some exporters; queries match both with vllm[:_]x.
    norm = re.sub(r"vllm\[:_\]", "vllm:", text)
    for name, preset in _BY_LENGTH:
        if re.search(rf"(?<![A-Za-z0-9_:]){re.escape(name)}(?![A-Za-z0-9_])", norm):
            return preset
    raise BindingError(
        f"signal {sig.name!r}: no simulated metric in {text!r}; the simulator exports the presets "
        f"{_served_presets()} under their real metric names"
    )


_QUERY_AGGREGATES: dict[str, catalog.Combine] = {"sum": "sum", "avg": "avg", "max": "max", "min": "min"}


@dataclass(frozen=True)
class Binding:
    """One raw signal of a policy bound to a simulated series."""

    signal: str
    preset: catalog.Preset
    quantity: Quantity
    aggregate: catalog.Combine
    #: ``rate``/``quantile`` signals: their window (the simulator keeps each replica's scrapes that long).
    window_s: float | None = None

    @property
    def server(self) -> str:
        return self.preset.server

    @property
    def metric(self) -> str:
        return self.preset.metrics[0]


def bind(spec: Spec) -> list[Binding]:
    """Bind every raw (non-``expr``) signal of a policy; raise ``BindingError`` if one cannot be.

    Pods combine by the core's one rule (``core.signals.aggregate_of``), except that a raw ``query`` starting
    with ``sum``/``avg``/``max``/``min`` combines as the query would in Prometheus.
    """
    out = []
    for sig in spec.signals:
        if sig.expr is not None:
            continue
        preset = preset_for(sig)
        agg: catalog.Combine = aggregate_of(sig)
        if sig.query is not None and sig.aggregate is None and (m := re.match(r"\s*(sum|avg|max|min)\b", sig.query)):
            agg = _QUERY_AGGREGATES[m.group(1)]
        assert preset.simulated is not None
        window = sig.rate.window_seconds if sig.rate else sig.quantile.window_seconds if sig.quantile else None
        if (preset.kind == "gauge") != (window is None):
            form = "rate" if preset.kind == "counter" else "quantile"
            raise BindingError(f"signal {sig.name!r}: {preset.name} is a {preset.kind}; read it with {form}")
        quantity = QUANTITIES.get(preset.simulated, _no_gauge)
        out.append(Binding(sig.name, preset, quantity, agg, window))
    return out


def _no_gauge(g: ReplicaGauges) -> float:
    raise AssertionError("counters and histograms are read through MetricPipeline's history")


class MetricPipeline:
    """Scrapes on its interval; ``visible(now)`` returns what a policy can read at ``now``."""

    def __init__(self, spec: PipelineSpec, bindings: list[Binding], source: str = "sim") -> None:
        self.spec = spec
        self.bindings = bindings
        self.source = source
        self._samples: deque[tuple[float, dict[str, SignalReading]]] = deque()
        #: (signal, replica) -> this pipeline's scrapes of that series: (time, a counter's value or a
        #: histogram's cumulative counts).
        self._history: dict[tuple[str, str], deque[tuple[float, float | tuple[int, ...]]]] = {}

    def _router(self, b: Binding, now: float, router: RouterCounts | None) -> SignalReading:
        """A router counter's rate: one series for the model (no pod), from this pipeline's scrapes of it; no
        router in the run: missing, never zero."""
        assert b.window_s is not None
        assert b.preset.simulated is not None
        label = f"{self.source}:{b.metric}"
        if router is None:
            return SignalReading(None, None, label, "no router in this simulation")
        points = self._history.get((b.signal, ""))
        if points is None:
            points = self._history[(b.signal, "")] = deque()
        points.append((now, ROUTER_COUNTERS[b.preset.simulated](router)))
        while len(points) > 2 and points[1][0] < now - b.window_s:
            points.popleft()
        r = counters.rate(points, b.window_s)  # type: ignore[arg-type]
        return SignalReading(r, now if r is not None else None, label)

    def _cumulative(self, b: Binding, now: float, gauges: Mapping[str, ReplicaGauges]) -> SignalReading:
        """A counter's rate or a histogram's bucket rates per replica, from this pipeline's scrapes."""
        assert b.window_s is not None
        assert b.preset.simulated is not None
        window = b.window_s
        per: dict[str, float] = {}
        buckets: dict[str, dict[float, float]] = {}
        counter = b.preset.kind == "counter"
        history = self._history
        for pod, g in gauges.items():
            value: float | tuple[int, ...] = (COUNTERS[b.preset.simulated](g) if counter
                                              else HISTOGRAMS[b.preset.simulated](g))
            points = history.get((b.signal, pod))
            if points is None:
                points = history[(b.signal, pod)] = deque()
            points.append((now, value))
            # Older scrapes than the window are not needed (the oldest inside it is kept).
            while len(points) > 2 and points[1][0] < now - window:
                points.popleft()
            if counter:
                r = counters.rate(points, window)  # type: ignore[arg-type]
                if r is not None:  # a replica's first scrape gives no rate yet: it does not report
                    per[pod] = r
                continue
            rated = counters.rates(points, window)  # type: ignore[arg-type]
            if rated:
                mine = dict(zip(BOUNDS[b.preset.simulated], rated, strict=True))
                buckets[pod] = mine
                per[pod] = mine[math.inf]
        for key in [k for k, p in history.items() if k[0] == b.signal and k[1] and p[-1][0] < now]:
            del history[key]  # replicas gone
        value_ = combine(list(per.values()), b.aggregate) if per and counter else None
        return SignalReading(value_, now, f"{self.source}:{b.metric}", None, per, dict.fromkeys(per, now),
                             None if counter else buckets)

    def scrape(self, now: float, gauges: Mapping[str, ReplicaGauges], router: RouterCounts | None = None) -> None:
        readings: dict[str, SignalReading] = {}
        for b in self.bindings:
            if b.preset.simulated in ROUTER_COUNTERS:
                readings[b.signal] = self._router(b, now, router)
                continue
            if b.window_s is not None:
                readings[b.signal] = self._cumulative(b, now, gauges)
                continue
            per = {pod: b.quantity(g) for pod, g in gauges.items()}
            value = combine(list(per.values()), b.aggregate) if per else None
            # Per pod, with the scrape time: the core combines them by the one rule (``combine_pods``), so a
            # replica that became ready after this scrape makes the reading partial, as in a cluster.
            readings[b.signal] = SignalReading(value, now, f"{self.source}:{b.metric}", None, per,
                                               dict.fromkeys(per, now))
        self._samples.append((now, readings))

    def visible(self, now: float) -> dict[str, SignalReading]:
        cutoff = now - self.spec.ingestion_delay_seconds + 1e-9
        samples = self._samples
        while len(samples) > 1 and samples[1][0] <= cutoff:
            samples.popleft()
        if samples and samples[0][0] <= cutoff:
            return samples[0][1]
        return {}
