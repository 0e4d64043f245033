"""Where an ``slo`` run's extra accelerator-hours go: its replica-minutes above the oracle's schedule, by the rule
that held them.

Run: ``python -m bench.slo_cost`` (the default run: TGI, the conversation trace, rate 1, the hour; ~15 s idle).
Options: ``--cluster tgi|tpu``, ``--trace conv|code|<synthetic name>``, ``--rate``, ``--window hour|0-15|…``,
``--policy FILE``. It records every evaluation of the policy (not only the changes of count) and splits, at each
one, the replicas held above what the oracle (at the SLO target) holds then:

- up to the scale-up count the policy asks for (``needs N``: the load over the utilization at the SLO), the
  **need**, with the load part that sets it (tokens, slots, KV) and the prefill unit and ``c`` it was sized at;
- above it, each replica level to the release rule(s) whose count reaches it (the hold window's peak at
  ``c·(1 − hysteresis)``, the largest rise within a cold start, a count found short, the hand-off lead's
  forecast, ``priceReacquire``'s priced release; a level two rules reach is split between them), or the reason
  no release was allowed (the SLO at risk, replicas starting, the first hold window, a signal unknown).

The split is read from each decision's message (the numbers every decision carries), so it is exactly what the
policy said, and needs no hook in the core. Replica-minutes, and accelerator-hours at the pool's chips per replica.
"""

from __future__ import annotations

import argparse
import math
import re
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from autoscaler.core.model import Observation, ScaleDecision
from autoscaler.core.spec import ScalingPolicy
from autoscaler.policyfile.loader import load_file
from autoscaler.sim import cluster as cluster_mod
from autoscaler.sim import runner, simulation
from autoscaler.sim.model import ServingPool
from bench import slo_grid, synthetic


@dataclass(frozen=True, slots=True)
class Evaluation:
    """One evaluation of the recorded policy."""

    t: float
    spec: int
    reason: str
    message: str


@contextmanager
def recording(name: str, into: list[Evaluation]) -> Iterator[None]:
    """Record every scale decision the policy ``name`` takes while the block runs (the runner builds its own
    controllers, so the recorder wraps the controllers' one decide-and-apply step for that policy only)."""
    original = simulation.PolicyController._decide_and_apply

    def wrapped(self: simulation.PolicyController, sim: simulation.Simulation, obs: Observation, now: float,
                pool_of: Callable[[str], ServingPool | None]) -> None:
        if self.name == name:
            decisions, _ = self.compiled.decide(obs, self.state, now)  # pure: the same decisions follow
            into.extend(Evaluation(now, obs.replicas.spec, d.reason.value, d.message)
                        for d in decisions if isinstance(d, ScaleDecision))
        original(self, sim, obs, now, pool_of)

    simulation.PolicyController._decide_and_apply = wrapped  # type: ignore[method-assign]
    try:
        yield
    finally:
        simulation.PolicyController._decide_and_apply = original  # type: ignore[method-assign]


def _num(pattern: str, text: str) -> float | None:
    m = re.search(pattern, text)
    return float(m.group(1)) if m else None


def _release_levels(message: str) -> dict[str, int]:
    """The count each release rule keeps, from a scale-down clause ({} when the message has none)."""
    down_u = _num(r"at ≤ ([\d.]+) utilization \(hysteresis", message)
    if down_u is None:
        return {}
    rules: dict[str, int] = {}
    peak, forecast = _num(r"max\(peak ([\d.]+) of the last", message), _num(r"forecast ([\d.]+) over the", message)
    if peak is not None:
        rules["hold window's peak at c(1-h)"] = math.ceil(round(max(peak, forecast or 0.0) / down_u, 9))
    rise = re.search(r"\(([\d.]+) \+ ([\d.]+)\) at ≤ ([\d.]+)", message)
    if rise:
        load, up, c = map(float, rise.groups())
        rules["largest rise within a cold start at c"] = math.ceil(round((load + up) / c, 9))
    for label, pattern in (("count found short", r"not below (\d+): found needed"),
                           ("hand-off lead's forecast", r"not below (\d+): forecast within"),
                           ("priced release (priceReacquire)", r"not below (\d+): releasing")):
        if (v := _num(pattern, message)) is not None:
            rules[label] = int(v)
    return rules


def _no_release(e: Evaluation) -> str:
    m = e.message
    if "the starting replicas cover it" in m:
        return "no release: replicas starting"
    if "(the SLO is at risk)" in m:
        return "no release: the SLO at risk"
    if re.search(r"holding \d+ \(observed [\d.]+s <", m):
        return "no release: the first hold window"
    if "no scale-down while" in m or e.reason == "MetricsUnknown":
        return "no release: a signal unknown"
    if "requests are waiting on every replica" in m:
        return "no release: a queue on every replica"
    return "releasing (this evaluation's scale-down)" if e.reason == "ScaleDown" else f"other ({e.reason})"


@dataclass(frozen=True, slots=True)
class Account:
    """Replica-seconds above the oracle's schedule."""

    #: By what held them: the need, a release rule, or why nothing was released.
    held: dict[str, float]
    #: The need's share of them, by the load part that set the need.
    need_parts: dict[str, float]


def account(evaluations: list[Evaluation], oracle_at: Callable[[float], int]) -> Account:
    """Split each evaluation's replicas above the oracle's count (``oracle_at``) until the next evaluation."""
    held: dict[str, float] = {}
    parts: dict[str, float] = {}
    for i, e in enumerate(evaluations):
        dt = evaluations[i + 1].t - e.t if i + 1 < len(evaluations) else 0.0
        floor = oracle_at(e.t)
        if e.spec <= floor or dt <= 0:
            continue
        need = _num(r"⇒ needs (\d+)", e.message) or 0.0
        sized = min(e.spec, max(need, floor))
        if sized > floor:
            held["need (the scale-up count)"] = held.get("need (the scale-up count)", 0.0) + (sized - floor) * dt
            tok, slots, kv = (_num(p, e.message) or 0.0 for p in (r"tokens ([\d.]+) \(", r"slots ([\d.]+) \(",
                                                                   r"KV ([\d.]+) \("))
            part = max((tok, "tokens (prefill)"), (slots, "slots"), (kv, "KV"))[1]
            parts[part] = parts.get(part, 0.0) + (sized - floor) * dt
        rules = _release_levels(e.message) if "holding" in e.message else {}
        for level in range(int(sized) + 1, e.spec + 1):
            if rules:
                who = [k for k, v in rules.items() if v >= level] or ["unattributed"]
                for k in who:
                    held[k] = held.get(k, 0.0) + dt / len(who)
            else:
                key = _no_release(e)
                held[key] = held.get(key, 0.0) + dt
    return Account(held, parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cluster", default="tgi", choices=sorted(slo_grid.CLUSTERS))
    ap.add_argument("--trace", default="conv",
                    help="conv, code, a synthetic shape or a held-out trace's name (bench.synthetic)")
    ap.add_argument("--rate", type=float, default=1.0)
    ap.add_argument("--window", default="hour", help="hour, 0-15, 15-30, 30-45 or 45-60")
    ap.add_argument("--policy", type=Path, default=None, help="default: the cluster's recommended policy")
    a = ap.parse_args(argv)
    cluster_file, default_policy = slo_grid.CLUSTERS[a.cluster]
    policy_file = a.policy or default_policy
    pols: list[tuple[str, ScalingPolicy]] = [(p.metadata.name, p) for p in load_file(policy_file)]
    start, duration = (0.0, None) if a.window == "hour" else (60.0 * float(a.window.split("-")[0]), 900.0)
    tmp = tempfile.TemporaryDirectory()
    if a.trace in ("conv", "code"):
        trace = slo_grid._bundled_trace(a.trace)
    elif a.trace in synthetic.SHAPES:
        trace = synthetic.write_all(Path(tmp.name), a.cluster)[a.trace]
    else:  # a held-out trace (e.g. slow-ramp@seed2, decode-heavy)
        trace = synthetic.write_held_out(Path(tmp.name), a.cluster, (a.trace,))[a.trace]
    opts = runner.Options(
        requests=trace, cluster=cluster_mod.bundled(cluster_file) if cluster_file else None, policies=pols,
        baselines=("oracle",), rate_scale=a.rate, start_s=start, duration_s=duration if duration else 3600.0,
    )
    name = pols[0][0]
    evaluations: list[Evaluation] = []
    with recording(name, evaluations):
        out = runner.run(opts)
    tmp.cleanup()
    res = {r.name: r for r in out.results}
    schedule = [(p.t, p.replicas) for p in res["oracle"].timeline]

    def oracle_at(t: float) -> int:
        count = schedule[0][1] if schedule else 0
        for at, n in schedule:
            if at > t:
                break
            count = n
        return count

    split = account(evaluations, oracle_at)
    held, parts = split.held, split.need_parts
    ours, orc = out.summary["policies"][name], out.summary["oracle"]
    chips = out.cluster.chips_per_replica(out.cluster.spec.pools[0])
    total = sum(held.values())
    print(f"{name}: {ours['slo_attainment']:.2%} at {ours['serving_accelerator_hours']:.2f} h; oracle "
          f"{orc['slo_attainment']:.2%} at {orc['serving_accelerator_hours']:.2f} h; {len(evaluations)} evaluations")
    print(f"replica-minutes above the oracle's schedule: {total / 60:.1f} ({total * chips / 3600:.2f} accelerator-h)")
    for k, v in sorted(held.items(), key=lambda kv: -kv[1]):
        print(f"  {k:42s} {v / 60:6.1f} replica-min  {v * chips / 3600:5.2f} h")
    print("the need above the oracle, by the load part that set it:")
    for k, v in sorted(parts.items(), key=lambda kv: -kv[1]):
        print(f"  {k:42s} {v / 60:6.1f} replica-min")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
