"""The one catalog of signal presets: what each known server metric is, and who can serve it.

A preset (``vllm.waiting``) names a metric a real server exports. For each the catalog says, as plain data:

- ``metrics``: the exposition names in every spelling a server or a pipeline produces (vLLM registers
  ``vllm:x``; prometheus-client >= 0.23 serving OpenMetrics to Prometheus 2.42 stores it as ``vllm_x``;
  older vLLM exports ``gpu_cache_usage_perc`` where V1 exports ``kv_cache_usage_perc``);
- ``kind``: ``gauge``, ``counter`` or ``histogram`` (histograms by their base name, without ``_bucket``); a
  signal reads a counter as ``rate: {windowSeconds: W}`` and a histogram as ``quantile: {q, windowSeconds: W}``;
- ``combine``: how the values of a target's pods combine into the target's value (queues ``sum``, ratios
  ``avg``), unless the signal says ``aggregate:``; a histogram's buckets are summed over the pods before
  its quantile is taken (the target's quantile, not a mean of per-pod quantiles);
- ``labels``: which labels of a stored series hold the workload's namespace and pod (a server's own series
  carry ``namespace``/``pod``; the TPU device plugin is scraped in ``kube-system``, so Prometheus renames
  the workload's labels to ``exported_namespace``/``exported_pod``);
- ``cloud_monitoring``: the Cloud Monitoring metric types serving it when they are not the series Managed
  Prometheus stored (``prometheus.googleapis.com/<name>/<kind>``);
- ``simulated``: the quantity a simulated server exports for it (``autoscaler.sim``);
- ``unavailable``: where it cannot be served, with the reason ``autoscaler validate`` and ``simulate`` print.

Pure data: ``autoscaler.sources`` turns it into queries, ``autoscaler.sim`` into simulated series, and the
policy language (``core.spec``) into validation and the JSON Schema's list of presets.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

Kind = Literal["gauge", "counter", "histogram"]
Combine = Literal["sum", "avg", "max", "min"]

#: Every place a preset may be read: the source types, and the simulator.
SOURCES = ("prometheus", "gmp", "cloud-monitoring", "pods")
SIMULATOR = "simulator"
PLACES = (*SOURCES, SIMULATOR)

#: Quantities a simulated replica exports (``autoscaler.sim.pipeline`` computes each).
SIMULATED = (
    "backlog",  # waiting for a slot + holding a slot with the prefill not started
    "queued",  # waiting for a slot
    "running",  # holding a slot
    # In the batch as of the last forward pass: prefilled and decoding. A request waiting for its prefill, or in
    # it, is not yet there (TGI's ``tgi_batch_current_size``: ``autoscaler.sim.model``'s docstring, with the source).
    "decoding",
    "slots_used",  # running / slots, 0-1
    "kv_usage",  # KV cache in use / capacity, 0-1
    # KV-cache tokens the decode batch reserves: each prefilled request's prompt + output, the tokens TGI's router
    # allocated for it (``tgi_batch_current_max_tokens``: ``autoscaler.sim.model``'s docstring, with the source).
    "batch_tokens",
    "prompt_tokens",  # counter: prompt tokens of the requests whose prefill finished
    "prefill_seconds",  # counter: seconds spent prefilling (the running sum of a prefill-time histogram)
    "generation_tokens",  # counter: tokens generated
    "ttft",  # histogram: arrival to first token, seconds (vLLM's)
    # JetStream's TTFT, seconds: from the start of the request's own prefill (the prefill thread's dequeue) to its
    # first token, leaving out the wait in the prefill backlog (``autoscaler.sim.model``'s docstring, with the source).
    "ttft_from_prefill",  # histogram
    # Queue time, seconds: arrival to the start of the request's prefill (it joins a batch), so it includes the
    # wait for a slot and behind other prompts' prefills (``autoscaler.sim.model``'s docstring, with each
    # server's source). Observed as the request ends (TGI, vLLM) or as it joins the decode batch (JetStream).
    "queue_time",  # histogram: observed as the request ends
    "queue_time_inserted",  # histogram: observed as the request joins the decode batch
    "tpot",  # histogram: time between a sequence's generated tokens (vLLM's inter-token latency), seconds
    "prompt_length",  # histogram: prompt tokens of each request whose prefill finished
    # The router's (the endpoint picker's), one series for the model: ``autoscaler.sim.pipeline.RouterCounts``.
    # The first two are counted as each request is received (before it is served), the last two as it ends.
    "arrivals",  # counter: requests the router received
    "arrival_bytes",  # counter: body bytes of the requests the router received
    "answered_prompt_tokens",  # counter: prompt tokens of the requests the router saw answered
    "answered_output_tokens",  # counter: generated tokens of the requests the router saw answered
)


@dataclass(frozen=True)
class LabelLayout:
    """The labels of a stored series that hold the workload's namespace and pod (``pod`` empty: a pool- or
    model-wide series, one value for the target, selected by the signal's labels)."""

    namespace: str = "namespace"
    pod: str = "pod"

    @property
    def pool_wide(self) -> bool:
        return not self.pod


#: A server's own series, scraped in the workload's namespace.
SERVER_LABELS = LabelLayout()
#: The inference gateway's endpoint picker (EPP, llm-d's router) names the serving pod it measured in
#: ``model_server_pod``; the series is scraped from the EPP pod, so ``namespace`` is the EPP's (the codelab
#: deploys the router in the serving namespace; elsewhere, read it with ``query:``).
ROUTER_POD_LABELS = LabelLayout("namespace", "model_server_pod")
#: A pool-wide or per-model series of the EPP: no pod label. Selected by the signal's ``labels`` (the
#: InferencePool's ``name``, or ``model_name``) in the target's namespace; one value for the target.
ROUTER_POOL_LABELS = LabelLayout("namespace", "")
#: The TPU device plugin (port 2112 in ``kube-system``): it labels each series with the workload's
#: ``namespace``, ``pod`` and ``container``; the scrape's own ``namespace``/``pod`` target labels win, so
#: Prometheus (and Managed Prometheus) keep the workload's as ``exported_namespace``/``exported_pod``.
DEVICE_PLUGIN_LABELS = LabelLayout("exported_namespace", "exported_pod")

_NOT_SIMULATED_MEMORY = (
    "the simulator does not model accelerator memory (JetStream and vLLM allocate it at start-up, so it "
    "would be a constant); use a serving preset"
)
_DEVICE_PLUGIN = (
    "served by the TPU device plugin (kube-system, port 2112), not by the serving pods; read it through "
    "Prometheus/GMP or Cloud Monitoring"
)
_NODE_ONLY = "a node-level Cloud Monitoring system metric: read it with a cloud-monitoring source"
_ROUTER = (
    "exported by the inference gateway's endpoint picker (its own /metrics, port 9090), not by the serving "
    "pods; read it through Prometheus or GMP (or the server's own preset, e.g. vllm.waiting, from the pods)"
)
_ROUTER_POD_CM = (
    "the endpoint picker names the serving pod in label model_server_pod, which the Cloud Monitoring reader "
    "does not attribute to targets; read it through gmp (the same series, through Managed Prometheus's PromQL)"
)
_ROUTER_POOL_CM = (
    "a pool- or model-wide series without a pod label, which the Cloud Monitoring reader does not attribute "
    "to a target; read it through gmp"
)
_NO_SIM_READY = (
    "the simulated router exports no ready-pod gauge; the policy reads the target's ready replicas from the "
    "cluster (the simulator's replica status)"
)
_DISTRIBUTION_SUM = (
    "Managed Prometheus stores this histogram as one distribution in Cloud Monitoring, whose running sum "
    "ALIGN_RATE cannot read; use a prometheus or gmp source"
)


@dataclass(frozen=True)
class Preset:
    """One known server metric (or a ratio of two)."""

    name: str
    description: str
    #: The server (or platform part) exporting it: jetstream, vllm, tgi, tpu, router.
    server: str
    kind: Kind
    metrics: tuple[str, ...]
    combine: Combine
    #: Ratio presets computed from two metrics (used / total): the denominator's spellings.
    denominator: tuple[str, ...] = ()
    #: LeaderWorkerSet: read every host of a group, not only its leader (per-host metrics).
    workers: bool = False
    labels: LabelLayout = SERVER_LABELS
    #: Cloud Monitoring types (numerator, optional denominator); empty: what Managed Prometheus stored.
    cloud_monitoring: tuple[str, ...] = ()
    #: The quantity a simulated server exports for it (one of ``SIMULATED``), or None.
    simulated: str | None = None
    #: Place (a source type or ``simulator``) -> why it cannot serve this preset.
    unavailable: Mapping[str, str] = field(default_factory=dict)

    def why_unavailable(self, place: str) -> str | None:
        """None when ``place`` serves this preset, else the reason it does not."""
        return self.unavailable.get(place)

    def cloud_monitoring_types(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(numerator types, denominator types) in Cloud Monitoring."""
        if self.cloud_monitoring:
            return self.cloud_monitoring[:1], self.cloud_monitoring[1:]
        suffix = {"gauge": "gauge", "counter": "counter", "histogram": "histogram"}[self.kind]
        num = tuple(f"prometheus.googleapis.com/{m}/{suffix}" for m in self.metrics)
        den = tuple(f"prometheus.googleapis.com/{m}/{suffix}" for m in self.denominator)
        return num, den


def _vllm(*suffixes: str) -> tuple[str, ...]:
    # vLLM registers `vllm:<x>`; OpenMetrics negotiation with Prometheus 2.42 stores it as `vllm_<x>`.
    return tuple(name for s in suffixes for name in (f"vllm:{s}", f"vllm_{s}"))


_PRESETS = (
    # ---------------------------------------------------------------- JetStream (jetstream/core/metrics)
    Preset(
        "jetstream.prefill_backlog", "JetStream prefill queue length (Google's latency signal on TPU).",
        "jetstream", "gauge", ("jetstream_prefill_backlog_size",), "sum", simulated="backlog",
    ),
    Preset(
        "jetstream.slots_used",
        "JetStream share of decode slots in use, a 0-1 fraction despite the name (throughput signal).",
        "jetstream", "gauge", ("jetstream_slots_used_percentage",), "avg", simulated="slots_used",
    ),
    Preset(
        "jetstream.waiting", "JetStream requests waiting (num_requests_waiting, no prefix).",
        "jetstream", "gauge", ("num_requests_waiting",), "sum", simulated="queued",
    ),
    Preset(
        "jetstream.kv_cache_usage", "JetStream KV-cache utilization, 0-1 (kv_cache_utilization_perc, no prefix).",
        "jetstream", "gauge", ("kv_cache_utilization_perc",), "avg", simulated="kv_usage",
    ),
    # ---------------------------------------------------------------- vLLM V1 (vllm/v1/metrics/loggers.py)
    # A renamed metric is exported under both names for a release (0.9: both KV-cache gauges; 0.11: both
    # inter-token histograms); the sources read one series per label set, the first spelling first.
    Preset(
        "vllm.waiting", "vLLM requests waiting to be scheduled.",
        "vllm", "gauge", _vllm("num_requests_waiting"), "sum", simulated="queued",
    ),
    Preset(
        "vllm.running", "vLLM requests being processed.",
        "vllm", "gauge", _vllm("num_requests_running"), "sum", simulated="running",
    ),
    Preset(
        "vllm.kv_cache_usage", "vLLM KV-cache usage, 0-1 (V1 kv_cache_usage_perc, older gpu_cache_usage_perc).",
        "vllm", "gauge", _vllm("kv_cache_usage_perc", "gpu_cache_usage_perc"), "avg", simulated="kv_usage",
    ),
    # ---------------------------------------------------------------- Text Generation Inference
    # (huggingface/text-generation-inference docs/source/reference/metrics.md; rendered by the Rust
    # metrics-exporter-prometheus crate: no HELP unless described, counters without _total)
    Preset(
        "tgi.queue_size", "Text Generation Inference requests waiting in the queue.",
        "tgi", "gauge", ("tgi_queue_size",), "sum", simulated="backlog",
    ),
    Preset(
        "tgi.batch_size", "Text Generation Inference requests in the current batch.",
        "tgi", "gauge", ("tgi_batch_current_size",), "sum", simulated="decoding",
    ),
    # The running batch's ``max_tokens`` (backends/v3/src/backend.rs ``batching_task``: set beside
    # tgi_batch_current_size at the top of each pass, 0 when the batch empties): the KV blocks the batch holds times
    # the block size (server/text_generation_server/models/flash_causal_lm.py ``FlashCausalLMBatch.to_pb``), each
    # request holding ceil((prompt + max_new_tokens - 1) / block size) blocks (``from_pb``; the v3 router allocates
    # them as it takes the request into a batch, backends/v3/src/queue.rs ``State::next_batch``). A request without
    # max_new_tokens gets max_total_tokens - prompt (router/src/validation.rs). The router takes a request only while
    # the batch's tokens + its own fit in --max-batch-total-tokens (``token_budget = max_batch_total_tokens -
    # batch_max_tokens``): over that budget it is the KV cache's fill as the router admits against it. TGI exports
    # no gauge of the budget (the launcher's --max-batch-total-tokens, or measured at warm-up and logged by the
    # router): the policy states it (``replica.kvCacheTokens``).
    Preset(
        "tgi.batch_max_tokens",
        "TGI KV-cache tokens the current batch reserves (tgi_batch_current_max_tokens: each request's prompt + "
        "max_new_tokens, in whole blocks); over --max-batch-total-tokens, the share of the token budget in use.",
        "tgi", "gauge", ("tgi_batch_current_max_tokens",), "sum", simulated="batch_tokens",
    ),
    # ---------------------------------------------------------------- counters and histograms
    Preset(
        "jetstream.prompt_tokens", "JetStream prompt tokens (the running sum of its input-length histogram).",
        "jetstream", "counter", ("jetstream_request_input_length_sum",), "sum", simulated="prompt_tokens",
        unavailable={"cloud-monitoring": _DISTRIBUTION_SUM},
    ),
    Preset(
        "jetstream.generation_tokens",
        "JetStream generated tokens (the running sum of its output-length histogram).",
        "jetstream", "counter", ("jetstream_request_output_length_sum",), "sum", simulated="generation_tokens",
        unavailable={"cloud-monitoring": _DISTRIBUTION_SUM},
    ),
    Preset(
        "jetstream.ttft", "JetStream time to first token, seconds (histogram).",
        "jetstream", "histogram", ("jetstream_time_to_first_token",), "sum",
        simulated="ttft_from_prefill",
    ),
    Preset(
        "jetstream.queue_time", "JetStream time a request waits in the queue, seconds (histogram).",
        "jetstream", "histogram", ("jetstream_queue_duration",), "sum", simulated="queue_time_inserted",
    ),
    Preset(
        "jetstream.prompt_length", "JetStream input tokens per request (histogram): the prompt-length distribution.",
        "jetstream", "histogram", ("jetstream_request_input_length",), "sum", simulated="prompt_length",
    ),
    Preset(
        "jetstream.time_per_prefill_token",
        "JetStream prefill seconds per prompt token of each request (histogram): its quantile; the slo type's "
        "prefillSeconds role needs seconds, which JetStream does not export (a mean of per-request ratios).",
        "jetstream", "histogram", ("jetstream_time_per_prefill_token",), "sum",
        unavailable={SIMULATOR: "the simulated servers do not keep a per-token prefill-time histogram; read "
                     "vllm.prefill_seconds or tgi.prefill_seconds"},
    ),
    Preset(
        "vllm.prompt_tokens", "vLLM prompt tokens processed (counter).",
        "vllm", "counter", _vllm("prompt_tokens_total"), "sum", simulated="prompt_tokens",
    ),
    Preset(
        "vllm.generation_tokens", "vLLM tokens generated (counter).",
        "vllm", "counter", _vllm("generation_tokens_total"), "sum", simulated="generation_tokens",
    ),
    Preset(
        "vllm.prefill_seconds",
        "vLLM seconds spent prefilling (the running sum of its request_prefill_time_seconds histogram): with "
        "vllm.prompt_tokens, each replica's prefill rate.",
        "vllm", "counter", _vllm("request_prefill_time_seconds_sum"), "sum", simulated="prefill_seconds",
        unavailable={"cloud-monitoring": _DISTRIBUTION_SUM},
    ),
    Preset(
        "vllm.prompt_length", "vLLM prompt tokens per request (histogram): the prompt-length distribution.",
        "vllm", "histogram", _vllm("request_prompt_tokens"), "sum", simulated="prompt_length",
    ),
    Preset(
        "vllm.ttft", "vLLM time to first token, seconds (histogram).",
        "vllm", "histogram", _vllm("time_to_first_token_seconds"), "sum", simulated="ttft",
    ),
    Preset(
        "vllm.time_per_output_token",
        "vLLM time between generated tokens, seconds (histogram; V1 inter_token_latency_seconds, older "
        "time_per_output_token_seconds): the decode pool's latency.",
        "vllm", "histogram", _vllm("inter_token_latency_seconds", "time_per_output_token_seconds"), "sum",
        simulated="tpot",
    ),
    Preset(
        "vllm.queue_time", "vLLM time a request waits in the queue, seconds (histogram).",
        "vllm", "histogram", _vllm("request_queue_time_seconds"), "sum", simulated="queue_time",
    ),
    Preset(
        "tgi.prompt_tokens", "TGI prompt tokens (the running sum of its input-length histogram).",
        "tgi", "counter", ("tgi_request_input_length_sum",), "sum", simulated="prompt_tokens",
        unavailable={"cloud-monitoring": _DISTRIBUTION_SUM},
    ),
    Preset(
        "tgi.generation_tokens", "TGI generated tokens (the running sum of its generated-tokens histogram).",
        "tgi", "counter", ("tgi_request_generated_tokens_sum",), "sum", simulated="generation_tokens",
        unavailable={"cloud-monitoring": _DISTRIBUTION_SUM},
    ),
    Preset(
        "tgi.prefill_seconds",
        "TGI seconds of prefill forward passes (the running sum of tgi_batch_forward_duration; pin it with "
        "labels: {method: prefill}, or the decode passes count too): with tgi.prompt_tokens, each replica's "
        "prefill rate.",
        "tgi", "counter", ("tgi_batch_forward_duration_sum",), "sum", simulated="prefill_seconds",
        unavailable={"cloud-monitoring": _DISTRIBUTION_SUM},
    ),
    Preset(
        "tgi.prompt_length", "TGI input tokens per request (histogram): the prompt-length distribution.",
        "tgi", "histogram", ("tgi_request_input_length",), "sum", simulated="prompt_length",
    ),
    Preset(
        "tgi.queue_time", "TGI time a request waits in the queue, seconds (histogram). TGI exports no TTFT.",
        "tgi", "histogram", ("tgi_request_queue_duration",), "sum", simulated="queue_time",
    ),
    # ---------------------------------------------------------------- inference gateway endpoint picker
    # The Gateway API inference extension's endpoint picker (llm-d's router). Names and labels:
    # kubernetes-sigs/gateway-api-inference-extension, site-src/guides/metrics-and-observability.md
    # (inference_objective_* since InferenceModel became InferenceObjective; releases before it export the
    # same series as inference_model_*, site-src/guides/metrics.md; llm-d's router, llm-d/llm-d-router
    # pkg/epp/metrics, also exports them as llm_d_epp_*). Every spelling is listed. What is counted when:
    # pkg/epp/handlers/server.go records request_total and request_sizes once the request's body is read
    # (arrival), input_tokens and output_tokens from the response's usage (completion).
    Preset(
        "router.queue_size",
        "Requests queued on each serving pod as the endpoint picker sees it (inference_pool_per_pod_queue_size, "
        "label model_server_pod); summed over the target's pods.",
        "router", "gauge", ("inference_pool_per_pod_queue_size",), "sum", labels=ROUTER_POD_LABELS,
        simulated="queued", unavailable={"pods": _ROUTER, "cloud-monitoring": _ROUTER_POD_CM},
    ),
    Preset(
        "router.pool_queue_size",
        "The InferencePool's average queue per pod (inference_pool_average_queue_size, label name = the "
        "pool): pin it with labels: {name: POOL}.",
        "router", "gauge", ("inference_pool_average_queue_size",), "avg", labels=ROUTER_POOL_LABELS,
        simulated="queued", unavailable={"pods": _ROUTER, "cloud-monitoring": _ROUTER_POOL_CM},
    ),
    Preset(
        "router.pool_kv_cache_usage",
        "The InferencePool's average KV-cache utilization, 0-1 (inference_pool_average_kv_cache_utilization, "
        "label name = the pool): pin it with labels: {name: POOL}.",
        "router", "gauge", ("inference_pool_average_kv_cache_utilization",), "avg", labels=ROUTER_POOL_LABELS,
        simulated="kv_usage", unavailable={"pods": _ROUTER, "cloud-monitoring": _ROUTER_POOL_CM},
    ),
    Preset(
        "router.ready_pods",
        "Ready pods of the InferencePool (inference_pool_ready_pods, label name = the pool).",
        "router", "gauge", ("inference_pool_ready_pods",), "max", labels=ROUTER_POOL_LABELS,
        unavailable={"pods": _ROUTER, "cloud-monitoring": _ROUTER_POOL_CM, SIMULATOR: _NO_SIM_READY},
    ),
    Preset(
        "router.requests",
        "Requests the endpoint picker received, per model, counted when it has read the request's body, before "
        "the request is served (inference_objective_request_total, labels model_name, target_model_name; older "
        "inference_model_request_total; llm-d's router llm_d_epp_request_total): the arrival rate, read as rate.",
        "router", "counter",
        ("inference_objective_request_total", "inference_model_request_total", "llm_d_epp_request_total"), "sum",
        labels=ROUTER_POOL_LABELS, simulated="arrivals",
        unavailable={"pods": _ROUTER, "cloud-monitoring": _ROUTER_POOL_CM},
    ),
    Preset(
        "router.request_bytes",
        "Body bytes of the requests the endpoint picker received, per model, counted on arrival like "
        "router.requests (the running sum of inference_objective_request_sizes; older "
        "inference_model_request_sizes; llm-d's router llm_d_epp_request_size_bytes), read as rate: the "
        "arrival-side prompt demand (the picker counts prompt tokens only once a request is answered, "
        "router.input_tokens). Bytes, not tokens: divide by a bytes-per-token ratio measured as "
        "router.request_bytes over router.input_tokens on a long window.",
        "router", "counter",
        ("inference_objective_request_sizes_sum", "inference_model_request_sizes_sum",
         "llm_d_epp_request_size_bytes_sum"), "sum",
        labels=ROUTER_POOL_LABELS, simulated="arrival_bytes",
        unavailable={"pods": _ROUTER, "cloud-monitoring": _ROUTER_POOL_CM},
    ),
    Preset(
        "router.input_tokens",
        "Prompt tokens of the requests the endpoint picker saw answered, per model (the running sum of "
        "inference_objective_input_tokens; older inference_model_input_tokens), read as rate.",
        "router", "counter",
        ("inference_objective_input_tokens_sum", "inference_model_input_tokens_sum",
         "llm_d_epp_request_input_tokens_sum"), "sum",
        labels=ROUTER_POOL_LABELS, simulated="answered_prompt_tokens",
        unavailable={"pods": _ROUTER, "cloud-monitoring": _ROUTER_POOL_CM},
    ),
    Preset(
        "router.output_tokens",
        "Generated tokens of the requests the endpoint picker saw answered, per model (the running sum of "
        "inference_objective_output_tokens; older inference_model_output_tokens), read as rate.",
        "router", "counter",
        ("inference_objective_output_tokens_sum", "inference_model_output_tokens_sum",
         "llm_d_epp_request_output_tokens_sum"), "sum", labels=ROUTER_POOL_LABELS,
        simulated="answered_output_tokens",
        unavailable={"pods": _ROUTER, "cloud-monitoring": _ROUTER_POOL_CM},
    ),
    # ---------------------------------------------------------------- TPU (device plugin, GKE system metrics)
    Preset(
        "tpu.memory_used_ratio",
        "TPU high-bandwidth memory used / total per host, from the TPU device plugin (the JetStream guide's "
        "memory_used); every host of a slice. Cloud Monitoring: the container accelerator metrics.",
        "tpu", "gauge", ("memory_used",), "avg",
        denominator=("memory_total",), workers=True, labels=DEVICE_PLUGIN_LABELS,
        cloud_monitoring=(
            "kubernetes.io/container/accelerator/memory_used",
            "kubernetes.io/container/accelerator/memory_total",
        ),
        unavailable={"pods": _DEVICE_PLUGIN, SIMULATOR: _NOT_SIMULATED_MEMORY},
    ),
    Preset(
        "tpu.node_memory_used_ratio",
        "Accelerator memory used / total on the target's nodes (kubernetes.io/node/accelerator/memory_*, the "
        "guide's recommended TPU metric for Cloud Monitoring); node names from the target's pods.",
        "tpu", "gauge", ("kubernetes_io:node_accelerator_memory_used",), "avg",
        denominator=("kubernetes_io:node_accelerator_memory_total",), workers=True,
        cloud_monitoring=(
            "kubernetes.io/node/accelerator/memory_used",
            "kubernetes.io/node/accelerator/memory_total",
        ),
        unavailable={
            "prometheus": _NODE_ONLY, "gmp": _NODE_ONLY, "pods": _NODE_ONLY, SIMULATOR: _NOT_SIMULATED_MEMORY,
        },
    ),
)

#: Every preset, by name.
PRESETS: Mapping[str, Preset] = MappingProxyType({p.name: p for p in _PRESETS})
#: Preset names, sorted (the policy language's list).
NAMES: tuple[str, ...] = tuple(sorted(PRESETS))


class PresetError(ValueError):
    """An unknown preset, or a preset asked of a place that cannot serve it."""


def get(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise PresetError(f"unknown preset {name!r}; known: {', '.join(NAMES)}") from None


def by_metric(name: str) -> Preset | None:
    """The preset one of whose spellings is ``name`` (an exposition name), if any."""
    return _BY_METRIC.get(name)


_BY_METRIC: dict[str, Preset] = {}
for _p in _PRESETS:
    for _m in _p.metrics:
        _BY_METRIC.setdefault(_m, _p)
