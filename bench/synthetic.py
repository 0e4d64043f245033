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
from dataclasses import dataclass
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

# ---------------------------------------------------------------------------------------------------------
# The held-out group: traces nobody tuned on. Never used to choose a constant of a policy, a rule or this
# generator (docs/slo.md, Session 25). The shapes follow statistics other public production traces report;
# each parameter carries its source or says `estimate`. A held-out trace is a deterministic function of its
# name, the cluster and HELD_OUT_SEED, from its own random stream (adding one changes no other).
# ---------------------------------------------------------------------------------------------------------

#: The bundled shapes again, with seeds nobody has run (the bundled grid uses seed 0).
HELD_OUT_RESEEDS = (1, 2)
#: The seed of the new held-out shapes (distinct from the bundled grid's 0).
HELD_OUT_SEED = 7
#: Requests per second at which a replica of each cluster is near its limit on the `_mixed` sizes, read from
#: the oracle's replica-hours on the bundled synthetic rows (TGI: slow ramp 9.79 h over a mean of 4.6 req/s on
#: 2-chip replicas, ≈ 0.9 req/s per replica; TPU: daily swing 25.19 h over 8.4 req/s on 8-chip replicas,
#: ≈ 2.7 req/s per replica). Used only to place "near the maximum" and "one replica" loads: estimate.
PER_REPLICA_RATE = {"tgi": 0.9, "tpu": 2.7}
#: The pools' maximum replicas (autoscaler/data/sim/cluster.yaml: 8; cluster-tpu.yaml: 6).
MAX_REPLICAS = {"tgi": 8, "tpu": 6}


def _gamma_arrivals(rng: random.Random, rate: RateFn, shape_k: float) -> list[float]:
    """A renewal process with Gamma(k) gaps of mean 1/rate(t): k < 1 clusters arrivals (CV = 1/sqrt(k))."""
    out: list[float] = []
    t = 0.0
    while True:
        r = rate(t)
        t += rng.gammavariate(shape_k, 1.0 / (shape_k * r))
        if t >= DURATION_S:
            return out
        out.append(t)


def _bounded_power_law(rng: random.Random, alpha: float, low: float, high: float) -> int:
    """p(x) ∝ x^-alpha on [low, high] (alpha != 1), by inverse CDF: a continuous stand-in for a Zipf law."""
    a = 1.0 - alpha
    u = rng.random()
    x: float = (low**a + u * (high**a - low**a)) ** (1.0 / a)
    return round(x)


def _burstgpt(rng: random.Random) -> tuple[int, int]:
    # BurstGPT (Wang et al., arXiv 2401.17644) models request tokens with a Zipf law; the exponent 1.2 and the
    # bounds are an estimate. Response tokens: the published sample rows of its conversation log run from
    # ~20 to ~1,700 tokens around a few hundred (median 300, sigma 0.8: estimate).
    out = _lognormal_tokens(rng, 300, 0.8, 2, 2000)
    return min(_bounded_power_law(rng, 1.2, 16, 6000), CONTEXT_TOKENS - out), out


def _mooncake(rng: random.Random) -> tuple[int, int]:
    # Mooncake's open trace (Qin et al., arXiv 2407.00079; kvcache-ai/Mooncake README): long prompts with short
    # outputs, its sample rows 6,955/52 and 6,472/26 input/output tokens. Cut to the 8,192-token context of our
    # models. Median 6,000 / sigma 0.35 input and median 40 / sigma 0.8 output: estimate.
    out = _lognormal_tokens(rng, 40, 0.8, 2, 400)
    return _lognormal_tokens(rng, 6000, 0.35, 512, CONTEXT_TOKENS - out), out


def _coding(rng: random.Random) -> tuple[int, int]:
    # Splitwise (Patel et al., ISCA 2024) characterises Azure's coding service as prompts of ~1.5k tokens and
    # outputs of ~10-20 tokens, conversation as ~1k-token prompts and ~100-150-token outputs (recalled from the
    # paper, not re-checked here: estimate). Spreads (sigma): estimate.
    out = _lognormal_tokens(rng, 15, 0.9, 1, 400)
    return _lognormal_tokens(rng, 1500, 0.8, 16, CONTEXT_TOKENS - out), out


def _conversation(rng: random.Random) -> tuple[int, int]:
    out = _lognormal_tokens(rng, 130, 0.9, 2, 1500)  # Splitwise's conversation service (see _coding): estimate
    return _lognormal_tokens(rng, 1000, 0.7, 16, CONTEXT_TOKENS - out), out


def _decode_heavy(rng: random.Random) -> tuple[int, int]:
    # Long answers to short questions (reasoning, long-form writing): output median 1,000 tokens (estimate).
    out = _lognormal_tokens(rng, 1000, 0.6, 50, 4000)
    return _lognormal_tokens(rng, 300, 0.8, 8, CONTEXT_TOKENS - out), out


Sizes = Callable[[random.Random, float], tuple[int, int]]


@dataclass(frozen=True)
class HeldOutShape:
    """One held-out shape: its rate over time, how arrivals are drawn around it, and the request sizes."""

    rate: RateFn
    peak: float
    sizes: Sizes
    #: Gamma shape of the inter-arrival gaps (None: Poisson).
    gamma_k: float | None = None


def _random_bursts(seed: str, base: float) -> RateFn:
    """Bursts of random size (2-10× the base, estimate) and duration (20 s - 5 min, estimate), ~one per 6 min."""
    rng = random.Random(seed)
    bursts: list[tuple[float, float, float]] = []
    t = rng.expovariate(1 / 360.0)
    while t < DURATION_S:
        length = math.exp(rng.uniform(math.log(20.0), math.log(300.0)))
        bursts.append((t, t + length, rng.uniform(2.0, 10.0)))
        t += length + rng.expovariate(1 / 360.0)

    def rate(t: float) -> float:
        return base * max([f for s, e, f in bursts if s <= t < e], default=1.0)

    return rate


def held_out_shapes(cluster: str) -> dict[str, HeldOutShape]:
    """Held-out shape name -> its definition for ``cluster`` (rates from the cluster's replica, see above)."""
    base = BASE_RATE[cluster]
    one = PER_REPLICA_RATE[cluster]
    top = one * MAX_REPLICAS[cluster]
    mixed: Sizes = lambda rng, t: _mixed(rng)  # noqa: E731
    bursts = _random_bursts(f"bursts/{cluster}/{HELD_OUT_SEED}", base / 2)

    def drift(rng: random.Random, t: float) -> tuple[int, int]:
        # The prompt median drifts from 200 to 4,000 tokens over the hour (e.g. a RAG feature rolled out); the
        # request rate stays: the work per request grows 20×. Range: estimate.
        median = 200.0 * (20.0 ** (t / DURATION_S))
        out = _lognormal_tokens(rng, 180, 0.9, 2, 1500)
        return _lognormal_tokens(rng, median, 0.6, 16, CONTEXT_TOKENS - out), out

    def code_conv(rng: random.Random, t: float) -> tuple[int, int]:
        # Alternate 10-minute periods of a coding and a conversation service behind one endpoint: estimate.
        return _coding(rng) if int(t // 600) % 2 == 0 else _conversation(rng)

    return {
        # BurstGPT's bursty arrivals: Gamma gaps with shape < 1 (k = 0.25, CV 2: estimate) around the base rate.
        "burstgpt-gamma": HeldOutShape(lambda t: base / 2, base / 2, lambda rng, t: _burstgpt(rng), gamma_k=0.25),
        "random-bursts": HeldOutShape(bursts, 10.0 * base / 2, mixed),
        # Steady load at 85 % of what the pool's maximum serves (estimate of the per-replica rate, above).
        "near-max": HeldOutShape(lambda t: 0.85 * top, 0.85 * top, mixed),
        # One replica's worth: half of what one replica serves.
        "very-low": HeldOutShape(lambda t: 0.5 * one, 0.5 * one, mixed),
        # Long outputs: a request holds a decode slot ~5× longer than `_mixed` (outputs 1,000 vs ~200 tokens).
        "decode-heavy": HeldOutShape(lambda t: base / 4, base / 4, lambda rng, t: _decode_heavy(rng)),
        "prompt-drift": HeldOutShape(lambda t: base / 3, base / 3, drift),
        # Mooncake-like long contexts: ~6× the prompt tokens of `_mixed`, a sixth of its rate.
        "mooncake-long": HeldOutShape(lambda t: base / 6, base / 6, lambda rng, t: _mooncake(rng)),
        "code-conv-switch": HeldOutShape(lambda t: base, base, code_conv),
    }


HELD_OUT = tuple(held_out_shapes("tgi")) + tuple(f"{s}@seed{n}" for s in SHAPES for n in HELD_OUT_RESEEDS)


def generate_held_out(name: str, cluster: str) -> list[Request]:
    """A held-out trace by name: a new shape, or ``SHAPE@seedN`` (a bundled shape with another seed)."""
    if "@seed" in name:
        shape, seed = name.split("@seed")
        return generate(shape, cluster, int(seed))
    spec = held_out_shapes(cluster)[name]
    rng = random.Random(f"held-out/{name}/{cluster}/{HELD_OUT_SEED}")
    times = (_gamma_arrivals(rng, spec.rate, spec.gamma_k) if spec.gamma_k is not None
             else _arrivals(rng, spec.rate, spec.peak))
    return [(t, *spec.sizes(rng, t)) for t in times]


def write_held_out(out: Path, cluster: str, names: tuple[str, ...] = HELD_OUT) -> dict[str, Path]:
    """Write the held-out traces for ``cluster`` under ``out``; name -> file."""
    out.mkdir(parents=True, exist_ok=True)
    files = {}
    for name in names:
        path = out / f"held-out-{name.replace('@', '-')}-{cluster}.csv"
        write(path, generate_held_out(name, cluster))
        files[name] = path
    return files


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
    ap.add_argument("--held-out", action="store_true", help="write the held-out group instead (never tuned on)")
    args = ap.parse_args(argv)
    files = write_held_out(args.out, args.cluster) if args.held_out else write_all(args.out, args.cluster, args.seed)
    for shape, path in files.items():
        n = sum(1 for _ in path.open()) - 1
        print(f"{shape}: {n} requests -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
