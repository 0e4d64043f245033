"""Generate ``autoscaler/data/replay/azure_conv_jetstream.csv``: the replay example trace.

Derived from the Azure LLM inference trace 2023 (conversation), Patel et al., Splitwise, ISCA 2024 (CC BY 4.0;
see ``autoscaler/data/replay/ATTRIBUTION.md``) by a simple, deterministic queueing approximation of a static
fleet of JetStream servers: each request takes one decode slot for ``prefill + decode`` seconds, first come
first served; a request waiting for a slot counts in the prefill backlog. Every 15 s the "exporter" samples
two gauges as Prometheus would scrape them:

  - ``backlog``: ``sum(jetstream_prefill_backlog_size)`` over the fleet (a total),
  - ``slots_used``: ``avg(jetstream_slots_used_percentage)`` (per replica, a 0–1 fraction),

plus ``replicas``, the recorded count. A four-minute scrape outage is cut out of both signals on purpose, so
the example shows the core holding on stale metrics (reason ``MetricsUnknown``).

Run: ``python scripts/make_replay_example.py [TRACE_CSV] [OUT_CSV]``. The numbers are illustrative, not
measured on real hardware.
"""

from __future__ import annotations

import csv
import heapq
import sys
from datetime import UTC, datetime
from pathlib import Path

_DATA = Path(__file__).resolve().parent.parent / "autoscaler" / "data"
#: The bundled copy of the trace (autoscaler/data/sim/ATTRIBUTION.md), so the script runs from a plain clone.
TRACE = _DATA / "sim" / "AzureLLMInferenceTrace_conv.csv"
OUT = _DATA / "replay" / "azure_conv_jetstream.csv"

REPLICAS = 5  # the static fleet the trace was "recorded" on
SLOTS_PER_REPLICA = 8  # concurrent decode slots per JetStream server
PREFILL_TOKENS_PER_S = 8000.0
DECODE_S_PER_TOKEN = 0.03  # per slot
SAMPLE_EVERY_S = 15.0
#: Seconds after the first request when the scrape outage starts, and its length.
OUTAGE_AT_S, OUTAGE_S = 2100.0, 240.0


def _arrivals(path: Path) -> list[tuple[float, float]]:
    """(arrival unix seconds, service seconds) per request; the trace's times are UTC without a zone."""
    out = []
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            when = datetime.strptime(row["TIMESTAMP"][:26], "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=UTC)
            service = (
                int(row["ContextTokens"]) / PREFILL_TOKENS_PER_S + int(row["GeneratedTokens"]) * DECODE_S_PER_TOKEN
            )
            out.append((when.timestamp(), service))
    return out


def simulate(requests: list[tuple[float, float]]) -> list[tuple[float, int, float]]:
    """FCFS over ``REPLICAS × SLOTS_PER_REPLICA`` slots; (sample time, waiting, busy fraction) every 15 s."""
    slots = REPLICAS * SLOTS_PER_REPLICA
    start = float(int(requests[0][0] // SAMPLE_EVERY_S + 1) * SAMPLE_EVERY_S)
    end = requests[-1][0]
    busy: list[float] = []  # finish times of requests holding a slot (a heap)
    waiting: list[tuple[float, float]] = []  # FIFO of (arrival, service)
    head = 0  # first waiting request not yet started
    samples = []
    i = 0
    t = start
    while t <= end:
        # Advance the queue to time t: admit arrivals, finish and start requests in time order.
        while True:
            next_arrival = requests[i][0] if i < len(requests) else float("inf")
            next_finish = busy[0] if busy else float("inf")
            nxt = min(next_arrival, next_finish)
            if nxt > t:
                break
            if next_finish <= next_arrival:
                now = heapq.heappop(busy)
            else:
                now = next_arrival
                waiting.append(requests[i])
                i += 1
            while head < len(waiting) and len(busy) < slots:
                heapq.heappush(busy, now + waiting[head][1])
                head += 1
        samples.append((t, len(waiting) - head, len(busy) / slots))
        t += SAMPLE_EVERY_S
    return samples


def main(argv: list[str]) -> int:
    trace = Path(argv[1]) if len(argv) > 1 else TRACE
    out = Path(argv[2]) if len(argv) > 2 else OUT
    samples = simulate(_arrivals(trace))
    t0 = samples[0][0]
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["timestamp", "backlog", "slots_used", "replicas"])
        for t, backlog, used in samples:
            outage = OUTAGE_AT_S <= t - t0 < OUTAGE_AT_S + OUTAGE_S
            stamp = datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            w.writerow([stamp, "" if outage else backlog, "" if outage else f"{used:.4f}", REPLICAS])
    print(f"{out}: {len(samples)} samples every {SAMPLE_EVERY_S:g} s; max backlog {max(s[1] for s in samples)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
