"""The metric pipeline a policy sees: real server metric names, scraped, delayed, aggregated.

Every ready replica exports the gauges its server exports (JetStream, vLLM, TGI), computed from the
replica's state. A policy's raw signals are bound to one of those gauges by their preset name (e.g.
``jetstream.prefill_backlog``), or by the metric name found in their ``metric`` or ``query``. Samples are
taken every ``scrapeIntervalSeconds`` and become visible ``ingestionDelaySeconds`` later, with the scrape
time as their timestamp, so the core judges their age exactly as it would in the cluster. Starting
replicas export nothing (HPA sees them as unready); with no ready replica a signal is missing, never 0.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from autoscaler.core.model import SignalReading
from autoscaler.core.spec import SignalSpec, Spec
from autoscaler.sim.cluster import PipelineSpec
from autoscaler.sim.model import ReplicaGauges

Quantity = Callable[[ReplicaGauges], float]


def _backlog(g: ReplicaGauges) -> float:
    return float(g.queued + g.prefill_pending)


def _queued(g: ReplicaGauges) -> float:
    return float(g.queued)


def _running(g: ReplicaGauges) -> float:
    return float(g.running)


def _slots(g: ReplicaGauges) -> float:
    return g.slots_used


def _kv(g: ReplicaGauges) -> float:
    return g.kv_usage


#: Real metric name -> (server, what it measures on a simulated replica, default per-target aggregate).
METRICS: dict[str, tuple[str, Quantity, str]] = {
    "jetstream_prefill_backlog_size": ("jetstream", _backlog, "sum"),
    "jetstream_slots_used_percentage": ("jetstream", _slots, "avg"),
    "num_requests_waiting": ("jetstream", _queued, "sum"),
    "kv_cache_utilization_perc": ("jetstream", _kv, "avg"),
    "vllm:num_requests_waiting": ("vllm", _queued, "sum"),
    "vllm:num_requests_running": ("vllm", _running, "sum"),
    "vllm:kv_cache_usage_perc": ("vllm", _kv, "avg"),
    "vllm:gpu_cache_usage_perc": ("vllm", _kv, "avg"),
    "tgi_queue_size": ("tgi", _backlog, "sum"),
    "tgi_batch_current_size": ("tgi", _running, "sum"),
}

#: Preset names (``signals[].preset``) -> metric name.
PRESETS: dict[str, str] = {
    "jetstream.prefill_backlog": "jetstream_prefill_backlog_size",
    "jetstream.slots_used": "jetstream_slots_used_percentage",
    "jetstream.requests_waiting": "num_requests_waiting",
    "jetstream.waiting": "num_requests_waiting",
    "jetstream.kv_cache_usage": "kv_cache_utilization_perc",
    "vllm.waiting": "vllm:num_requests_waiting",
    "vllm.running": "vllm:num_requests_running",
    "vllm.kv_cache_usage": "vllm:kv_cache_usage_perc",
    "vllm.gpu_cache_usage": "vllm:gpu_cache_usage_perc",
    "tgi.queue_size": "tgi_queue_size",
    "tgi.batch_size": "tgi_batch_current_size",
    "tgi.batch_current_size": "tgi_batch_current_size",
}

# Longest first, so ``vllm:num_requests_waiting`` wins over ``num_requests_waiting``.
_BY_LENGTH = sorted(METRICS, key=len, reverse=True)


class BindingError(ValueError):
    """A policy signal the simulator cannot map to a simulated series."""


def metric_for(sig: SignalSpec) -> str:
    """The real metric name a raw signal reads, from its preset, metric or query."""
    if sig.preset is not None:
        if sig.preset in PRESETS:
            return PRESETS[sig.preset]
        raise BindingError(
            f"signal {sig.name!r}: preset {sig.preset!r} has no simulated series; simulated presets: "
            f"{', '.join(sorted(PRESETS))}"
        )
    text = sig.metric if sig.metric is not None else (sig.query or "")
    # A selector on the name itself, e.g. {__name__=~"vllm[:_](kv|gpu)_cache_usage_perc"}: try it on every
    # exported name in both spellings (Prometheus may store vllm:x as vllm_x).
    for pattern in re.findall(r'__name__\s*=~?\s*"([^"]+)"', text):
        for name in METRICS:  # in declaration order: the current spelling before the older one
            try:
                if re.fullmatch(pattern, name) or re.fullmatch(pattern, name.replace(":", "_")):
                    return name
            except re.error:
                break
    # Prometheus stores vllm:x as vllm_x behind some exporters; queries match both with vllm[:_]x.
    norm = re.sub(r"vllm(\[:_\]|_)", "vllm:", text)
    for name in _BY_LENGTH:
        if re.search(rf"(?<![A-Za-z0-9_:]){re.escape(name)}(?![A-Za-z0-9_])", norm):
            return name
    raise BindingError(
        f"signal {sig.name!r}: no simulated metric in {text!r}; the simulator exports {', '.join(sorted(METRICS))}"
    )


@dataclass(frozen=True)
class Binding:
    """One raw signal of a policy bound to a simulated series."""

    signal: str
    metric: str
    server: str
    quantity: Quantity
    aggregate: str  # sum | avg | max | min


def bind(spec: Spec) -> list[Binding]:
    """Bind every raw (non-``expr``) signal of a policy; raise ``BindingError`` if one cannot be."""
    out = []
    for sig in spec.signals:
        if sig.expr is not None:
            continue
        metric = metric_for(sig)
        server, quantity, default_agg = METRICS[metric]
        if sig.scope == "perReplica":
            agg = "avg"
        elif sig.aggregate is not None:
            agg = sig.aggregate
        elif sig.query is not None and (m := re.match(r"\s*(sum|avg|max|min)\b", sig.query)):
            agg = m.group(1)
        else:
            agg = default_agg
        out.append(Binding(sig.name, metric, server, quantity, agg))
    return out


def _aggregate(values: Sequence[float], how: str) -> float:
    if how == "sum":
        return float(sum(values))
    if how == "avg":
        return float(sum(values) / len(values))
    if how == "max":
        return float(max(values))
    return float(min(values))


class MetricPipeline:
    """Scrapes on its interval; ``visible(now)`` returns what a policy can read at ``now``."""

    def __init__(self, spec: PipelineSpec, bindings: list[Binding], source: str = "sim") -> None:
        self.spec = spec
        self.bindings = bindings
        self.source = source
        self._samples: deque[tuple[float, dict[str, SignalReading]]] = deque()

    def scrape(self, now: float, gauges: Mapping[str, ReplicaGauges]) -> None:
        readings: dict[str, SignalReading] = {}
        for b in self.bindings:
            per = {pod: b.quantity(g) for pod, g in gauges.items()}
            value = _aggregate(list(per.values()), b.aggregate) if per else None
            readings[b.signal] = SignalReading(value=value, timestamp=now, source=f"{self.source}:{b.metric}",
                                               per_replica=per)
        self._samples.append((now, readings))

    def visible(self, now: float) -> dict[str, SignalReading]:
        cutoff = now - self.spec.ingestion_delay_seconds + 1e-9
        samples = self._samples
        while len(samples) > 1 and samples[1][0] <= cutoff:
            samples.popleft()
        if samples and samples[0][0] <= cutoff:
            return samples[0][1]
        return {}
