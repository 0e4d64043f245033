"""CPU of parsing one pod's exposition for what a signal reads: the pods source's paths side by side.

The body is a vLLM V1 server's whole ``/metrics`` in its real layout (``tests/sources/expositions.py``:
process and Python collectors, every ``vllm:`` family, histograms with vLLM's buckets; ~370 lines, ~38 KiB),
or a TGI-like one-gauge body as ``bench/controller_reaction.py``'s background pods serve. For each set of
wanted names: ``pods.parse`` (what a scrape runs: ``_picked``, the wanted names' own lines), ``_plain`` (the
line scanner that read every line before), and prometheus-client's parser (the reference), in µs per body
(best of ``--repeat`` runs of ``--number`` parses, process CPU time).

Run: ``python -m bench.exposition_parse [--number 200] [--repeat 5]``.
"""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

from autoscaler.sources import pods
from tests.sources.expositions import vllm_v1

TGI = "# TYPE tgi_queue_size gauge\ntgi_queue_size 5\n"

CASES = [
    ("vLLM, waiting", vllm_v1(), frozenset({"vllm:num_requests_waiting"})),
    ("vLLM, kv (two spellings)", vllm_v1(), frozenset({"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"})),
    ("vLLM, TTFT buckets", vllm_v1(), frozenset({"vllm:time_to_first_token_seconds_bucket"})),
    ("vLLM, prompt+generation tokens", vllm_v1(),
     frozenset({"vllm:prompt_tokens_total", "vllm:generation_tokens_total"})),
    ("TGI one gauge (the reaction bench's pods)", TGI, frozenset({"tgi_queue_size"})),
]


def per_call(fn: Callable[[], object], number: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        for _ in range(number):
            fn()
        best = min(best, (time.process_time() - t0) / number)
    return best * 1e6


def reference(text: str, wanted: frozenset[str]) -> int:
    return sum(1 for f in text_string_to_metric_families(text) for s in f.samples if s.name in wanted)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--number", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    print(f"load {load}; µs of process CPU per body (best of {args.repeat} x {args.number})")
    print(f"{'case':44} {'lines':>6} {'KiB':>5} {'parse':>8} {'_plain':>8} {'reference':>10}")
    for name, text, wanted in CASES:
        assert pods._picked(text, wanted) is not None, name  # the path measured is the one taken
        fast = per_call(functools.partial(pods.parse, text, "text/plain; version=0.0.4", wanted), args.number,
                        args.repeat)
        plain = per_call(functools.partial(pods._plain, text, wanted), max(1, args.number // 10), args.repeat)
        ref = per_call(functools.partial(reference, text, wanted), max(1, args.number // 20), args.repeat)
        print(f"{name:44} {text.count(chr(10)):6d} {len(text) / 1024:5.1f} {fast:8.1f} {plain:8.1f} {ref:10.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
