"""Synthetic request traces with the shapes real traffic has, for benchmarks the bundled traces do not cover.

Run: ``python -m bench.synthetic OUT_DIR [--cluster tgi|tpu]`` writes one CSV per shape
(``arrival_s,input_tokens,output_tokens``, the simulator's generic format). Every trace is a deterministic
function of its shape, the cluster and the seed (``random.Random``), one hour long:

- ``long-prompts``: steady Poisson arrivals whose prompts follow a heavy-tailed (log-normal) length up to the
  model's context limit (8,192 tokens for Gemma 2 and Gemma 7B): a third of the prompts are 4-8k tokens;
- ``flash-crowd``: a steady base with three 8x flash crowds of one minute each;
- ``daily-swing``: a day's swing (trough at 20 % of the peak) compressed into 20 minutes, three "days";
- ``slow-ramp``: the rate grows linearly from 30 % to 200 % of the base over the hour;
- ``chat-docs``: 80 % short chat (prompts ~300 tokens) and 20 % long documents (3-7k-token prompts), with
  the mix drifting over the hour.

Rates are set per cluster so that the mean load is a few replicas of that cluster's profile (the TGI/L4 pool
holds at most 8 replicas, the JetStream/TPU pool 6): none is derived from the bundled traces.
"""

from __future__ import annotations

import argparse
import csv
import math
import random
import sys
from collections.abc import Callable
from pathlib import Path

DURATION_S = 3600.0
#: Gemma 2 9B and Gemma 7B: 8,192 tokens of context (prompt + output).
CONTEXT_TOKENS = 8192
#: Mean requests per second at "base" rate for each bundled cluster (a few replicas' worth of work).
BASE_RATE = {"tgi": 4.0, "tpu": 14.0}

Request = tuple[float, int, int]
RateFn = Callable[[float], float]


def _arrivals(rng: random.Random, rate: RateFn, peak: float) -> list[float]:
    """A non-homogeneous Poisson process by thinning (Lewis & Shedler): exact for any rate ≤ ``peak``."""
    out: list[float] = []
    t = 0.0
    while True:
        t += rng.expovariate(peak)
        if t >= DURATION_S:
            return out
        if rng.random() * peak <= rate(t):
            out.append(t)


def _lognormal_tokens(rng: random.Random, median: float, sigma: float, low: int, high: int) -> int:
    return int(min(high, max(low, round(rng.lognormvariate(math.log(median), sigma)))))


def _chat(rng: random.Random) -> tuple[int, int]:
    return _lognormal_tokens(rng, 300, 0.8, 8, 4000), _lognormal_tokens(rng, 150, 0.8, 2, 1000)


def _document(rng: random.Random) -> tuple[int, int]:
    out = _lognormal_tokens(rng, 400, 0.5, 50, 1200)
    return int(rng.uniform(3000, min(7000, CONTEXT_TOKENS - out))), out


def _mixed(rng: random.Random) -> tuple[int, int]:
    # The bulk of a conversation service: median prompt ~1k tokens, outputs ~200.
    out = _lognormal_tokens(rng, 180, 0.9, 2, 1500)
    return _lognormal_tokens(rng, 1000, 0.7, 16, CONTEXT_TOKENS - out), out


def _long(rng: random.Random) -> tuple[int, int]:
    out = _lognormal_tokens(rng, 250, 0.7, 8, 1500)
    return _lognormal_tokens(rng, 2500, 0.9, 64, CONTEXT_TOKENS - out), out


def shapes(base: float) -> dict[str, tuple[RateFn, float, Callable[[random.Random, float], tuple[int, int]]]]:
    """Shape name -> (rate(t), its maximum, request sizes at time t)."""

    def crowd(t: float) -> float:
        return base * (8.0 if any(s <= t < s + 60.0 for s in (700.0, 1900.0, 3000.0)) else 1.0)

    day = 1200.0

    def swing(t: float) -> float:
        # 0.2..1.0 of the peak (1.6 × base), the trough at the start of each compressed day.
        return 1.6 * base * (0.6 - 0.4 * math.cos(2 * math.pi * t / day))

    def ramp(t: float) -> float:
        return base * (0.3 + 1.7 * t / DURATION_S)

    def docs_share(t: float) -> float:
        return 0.1 + 0.2 * t / DURATION_S  # 10 % → 30 % documents over the hour

    def chat_docs(rng: random.Random, t: float) -> tuple[int, int]:
        return _document(rng) if rng.random() < docs_share(t) else _chat(rng)

    return {
        # Long prompts are ~3× the work of a conversation request: a third of the rate.
        "long-prompts": (lambda t: base / 3, base / 3, lambda rng, t: _long(rng)),
        "flash-crowd": (crowd, 8.0 * base, lambda rng, t: _mixed(rng)),
        "daily-swing": (swing, 1.6 * base, lambda rng, t: _mixed(rng)),
        "slow-ramp": (ramp, 2.0 * base, lambda rng, t: _mixed(rng)),
        "chat-docs": (lambda t: base, base, chat_docs),
    }


SHAPES = tuple(shapes(1.0))


def generate(shape: str, cluster: str, seed: int = 0) -> list[Request]:
    rate, peak, sizes = shapes(BASE_RATE[cluster])[shape]
    # One stream per (shape, cluster, seed): adding a shape never changes the others.
    rng = random.Random(f"{shape}/{cluster}/{seed}")
    return [(t, *sizes(rng, t)) for t in _arrivals(rng, rate, peak)]


def write(path: Path, requests: list[Request]) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(("arrival_s", "input_tokens", "output_tokens"))
        for t, i, o in requests:
            w.writerow((f"{t:.3f}", i, o))


def write_all(out: Path, cluster: str, seed: int = 0) -> dict[str, Path]:
    """Write every shape for ``cluster`` under ``out``; shape -> file."""
    out.mkdir(parents=True, exist_ok=True)
    files = {}
    for shape in SHAPES:
        path = out / f"{shape}-{cluster}.csv"
        write(path, generate(shape, cluster, seed))
        files[shape] = path
    return files


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--cluster", choices=sorted(BASE_RATE), default="tgi")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    for shape, path in write_all(args.out, args.cluster, args.seed).items():
        n = sum(1 for _ in path.open()) - 1
        print(f"{shape}: {n} requests -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
