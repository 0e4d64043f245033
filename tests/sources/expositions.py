"""Whole expositions in the shape real servers write them, for the parser's parity tests and its benchmark.

``vllm_v1``: what a vLLM V1 server's ``/metrics`` holds (prometheus-client's classic text: the process and
Python collectors' series first, then every ``vllm:`` family with its HELP and TYPE lines, counters written
``x_total`` under ``# TYPE x_total counter`` with their ``_created`` series, histograms with vLLM's bucket bounds).
The family names and bucket bounds follow vLLM's ``v1/metrics/loggers.py`` (FACTS.md lists the ones the presets
read); the values are made up (drawn from ``seed``), the layout and the size (~600 lines, ~90 KiB) are the point.
"""

from __future__ import annotations

import math
import random

MODEL = "meta-llama/Llama-3.1-8B-Instruct"

_SECONDS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
            40.0, 80.0, 160.0, 640.0, 2560.0]
_TOKENS: list[float] = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000]
_TPOT = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0]

_GAUGES = [
    ("vllm:num_requests_running", "Number of requests in model execution batches."),
    ("vllm:num_requests_waiting", "Number of requests waiting to be processed."),
    ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."),
]
_COUNTERS = [
    ("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens."),
    ("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens."),
    ("vllm:num_preemptions", "Cumulative number of preemption from the engine."),
    ("vllm:prompt_tokens", "Number of prefill tokens processed."),
    ("vllm:generation_tokens", "Number of generation tokens processed."),
]
_HISTOGRAMS: list[tuple[str, str, list[float]]] = [
    ("vllm:request_prompt_tokens", "Number of prefill tokens processed.", _TOKENS),
    ("vllm:request_generation_tokens", "Number of generation tokens processed.", _TOKENS),
    ("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", _TOKENS),
    ("vllm:request_max_num_generation_tokens", "Histogram of maximum number of requested generation tokens.", _TOKENS),
    ("vllm:request_params_n", "Histogram of the n request parameter.", [1.0, 2.0, 5.0, 10.0, 20.0]),
    ("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", _TOKENS),
    ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", _SECONDS),
    ("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.", _TPOT),
    ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", _SECONDS),
    ("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", _SECONDS),
    ("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", _SECONDS),
    ("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", _SECONDS),
    ("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", _SECONDS),
]


def _num(x: float) -> str:
    """As prometheus-client writes a value (its ``floatToGoString``): ``NaN``, ``+Inf``, ``-Inf``, else repr."""
    x = float(x)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return repr(x)


def vllm_v1(*, waiting: float = 3, running: float = 2, kv: float = 0.5, seed: int = 0, model: str = MODEL) -> str:
    rng = random.Random(seed)
    base = f'engine="0",model_name="{model}"'
    out: list[str] = []
    for gen in range(3):
        out += [f'python_gc_objects_collected_total{{generation="{gen}"}} {_num(rng.randrange(10**6))}']
    out = [
        "# HELP python_gc_objects_collected_total Objects collected during gc",
        "# TYPE python_gc_objects_collected_total counter",
        *out,
        "# HELP python_info Python platform information",
        "# TYPE python_info gauge",
        'python_info{implementation="CPython",major="3",minor="12",patchlevel="9",version="3.12.9"} 1.0',
        "# HELP process_virtual_memory_bytes Virtual memory size in bytes.",
        "# TYPE process_virtual_memory_bytes gauge",
        f"process_virtual_memory_bytes {_num(rng.randrange(10**11))}",
        "# HELP process_resident_memory_bytes Resident memory size in bytes.",
        "# TYPE process_resident_memory_bytes gauge",
        f"process_resident_memory_bytes {_num(rng.randrange(10**10))}",
        "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.",
        "# TYPE process_cpu_seconds_total counter",
        f"process_cpu_seconds_total {_num(rng.uniform(0, 10**5))}",
        "# HELP process_open_fds Number of open file descriptors.",
        "# TYPE process_open_fds gauge",
        f"process_open_fds {_num(rng.randrange(1000))}",
    ]
    for (name, help_), value in zip(_GAUGES, (running, waiting, kv), strict=True):
        out += [f"# HELP {name} {help_}", f"# TYPE {name} gauge", f"{name}{{{base}}} {_num(value)}"]
    for name, help_ in _COUNTERS:
        out += [f"# HELP {name}_total {help_}", f"# TYPE {name}_total counter",
                f"{name}_total{{{base}}} {_num(rng.randrange(10**9))}"]
    out += ["# HELP vllm:request_success_total Count of successfully processed requests.",
            "# TYPE vllm:request_success_total counter"]
    for reason in ("stop", "length", "abort"):
        out.append(f'vllm:request_success_total{{{base},finished_reason="{reason}"}} {_num(rng.randrange(10**6))}')
    for name, help_, bounds in _HISTOGRAMS:
        out += [f"# HELP {name} {help_}", f"# TYPE {name} histogram"]
        count = 0
        for le in bounds:
            count += rng.randrange(1000)
            out.append(f'{name}_bucket{{{base},le="{_num(le)}"}} {_num(count)}')
        out.append(f'{name}_bucket{{{base},le="+Inf"}} {_num(count)}')
        out.append(f"{name}_count{{{base}}} {_num(count)}")
        out.append(f"{name}_sum{{{base}}} {_num(rng.uniform(0, 10**6))}")
        out.append(f"{name}_created{{{base}}} 1.7331e+09")
    out += [
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig",
        "# TYPE vllm:cache_config_info gauge",
        'vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",'
        'gpu_memory_utilization="0.9",num_gpu_blocks="27000",prefix_caching_hash_algo="builtin"} 1.0',
    ]
    return "\n".join(out) + "\n"
