"""What each speed trick of ``autoscaler.core.fast`` buys, against the plain code it stands for.

1. ``quick_init``: building 200,000 ``SignalReading`` (a frozen, slotted dataclass) with it and with the
   ``__init__`` ``dataclass`` generates (the same class declared again without the decorator);
2. ``collector_paused``: the replay's shape, 200,000 readings kept in dicts in a list, with the cyclic collector
   on and paused.

CPU seconds (``time.process_time``), min / median / max of ``--repeat`` runs. If a trick stops paying (a newer
Python makes frozen dataclasses cheap, say), this is where it shows, and it should go.

Run: ``python -m bench.fastpaths [--repeat N]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from autoscaler.core.fast import collector_paused
from autoscaler.core.model import SignalReading

N = 200_000


@dataclass(frozen=True, slots=True)
class PlainReading:
    """``SignalReading``'s fields, with dataclass's own ``__init__``."""

    value: float | None
    timestamp: float | None
    source: str = ""
    error: str | None = None
    per_replica: dict[str, float] | None = None
    pod_times: dict[str, float] | None = None


def build(cls: Any) -> None:
    for i in range(N):
        cls(float(i), float(i), "trace")


def keep(paused: bool) -> None:
    rows: list[dict[str, SignalReading]] = []

    def fill() -> None:
        for i in range(N):
            rows.append({"a": SignalReading(float(i), float(i), "trace")})

    if paused:
        with collector_paused():
            fill()
    else:
        fill()


def timed(fn: Callable[[], None], repeat: int) -> str:
    runs = []
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        runs.append(time.process_time() - t0)
    return f"{min(runs):.3f} / {statistics.median(runs):.3f} / {max(runs):.3f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    if set(PlainReading.__dataclass_fields__) != set(SignalReading.__dataclass_fields__):
        raise SystemExit("PlainReading no longer mirrors SignalReading: update this benchmark")
    print(f"{'CPU s, min / median / max':45} {args.repeat} runs of {N:,} objects")
    print(f"{'dataclass __init__ (plain)':45} {timed(lambda: build(PlainReading), args.repeat)}")
    print(f"{'quick_init':45} {timed(lambda: build(SignalReading), args.repeat)}")
    print(f"{'kept in rows, collector on':45} {timed(lambda: keep(False), args.repeat)}")
    print(f"{'kept in rows, collector_paused':45} {timed(lambda: keep(True), args.repeat)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
