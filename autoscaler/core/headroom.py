"""Serving's latency headroom: how long a scale-up may wait before the SLO is at risk (pure).

A policy that states a latency objective exposes it to the capacity arbitration (``Ahead.headroom_s``), which
waits for a training victim's checkpoint only within it (``capacity.waitWithinHeadroom``, issue 11 item 1b).
It is computed from the objective and what is measured, never from a constant:

- the **slack**: how much more queueing delay a first token can take before the measured quantile reaches the
  at-risk fraction of its objective (``(RISK_FRACTION − worst measured ratio) × TTFT objective``); none when
  a quantile is unknown (unknown is never slack) or already at risk;
- the **queue's growth**: a fluid queue over the ``ready`` replicas. The load (replica-equivalents, the
  measured queue included) grows linearly from ``load`` now to ``forecast`` one cold start ahead (the policy's
  own trend); once it exceeds what the ready replicas carry, the backlog grows by the excess, and the delay a
  new request sees by the excess ÷ ``ready`` per second. ``risk_s`` is when that delay has used the slack;
- a replica asked for later starts later: it is up one cold start after it is asked for, so serving may wait
  ``risk_s − cold start``. The trend is extrapolated no further than one more cold start (the policy's
  forecast reaches one): the headroom is at most one cold start, even when nothing grows.

Starting replicas are not counted (they may not be ready in time): on the safe side.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autoscaler.core.sizing import RISK_FRACTION

#: How many cold starts past the one a replica takes the load's trend is extrapolated (the headroom's cap).
REACH_COLD_STARTS = 1.0


@dataclass(frozen=True, slots=True)
class Headroom:
    """Seconds serving may wait, and one clause with the numbers behind it."""

    seconds: float
    text: str


def time_to_risk(*, slack_s: float, load: float, forecast: float, horizon_s: float, ready: int) -> float:
    """Seconds until the fluid queue's added delay reaches ``slack_s`` (``math.inf``: never, by the trend)."""
    if slack_s <= 0 or ready <= 0:
        return 0.0
    over = load - ready  # replica-equivalents beyond what the ready replicas carry now
    rise = max(0.0, forecast - load) / horizon_s if horizon_s > 0 else 0.0  # per second
    budget = slack_s * ready  # replica-seconds of backlog the slack absorbs
    if over >= 0:
        if rise > 0:
            return (-over + math.sqrt(over * over + 2.0 * rise * budget)) / rise
        return budget / over if over > 0 else math.inf
    if rise <= 0:
        return math.inf
    return -over / rise + math.sqrt(2.0 * budget / rise)


def latency_headroom(
    *,
    ratio: float | None,
    latency_unknown: bool,
    ttft_s: float,
    load: float,
    forecast: float,
    horizon_s: float,
    ready: int,
) -> Headroom:
    """The headroom (see the module docstring). ``ratio``: the worst measured latency quantile over its
    objective; ``load``/``forecast``: replica-equivalents now and one cold start (``horizon_s``) ahead."""
    if latency_unknown or ratio is None:
        return Headroom(0.0, "latency headroom 0s (a latency quantile is unknown)")
    slack = (RISK_FRACTION - ratio) * ttft_s
    if slack <= 0:
        return Headroom(0.0, f"latency headroom 0s (the SLO is at risk: {ratio:.2f} of its objective)")
    risk = time_to_risk(slack_s=slack, load=load, forecast=forecast, horizon_s=horizon_s, ready=ready)
    seconds = max(0.0, min(REACH_COLD_STARTS * horizon_s, risk - horizon_s))
    when = "not within the trend's reach" if math.isinf(risk) else f"in {risk:.0f}s"
    return Headroom(seconds, (
        f"latency headroom {seconds:.0f}s (slack {slack:.2f}s of TTFT before {RISK_FRACTION:g} of the objective; "
        f"load {load:.2f} → {forecast:.2f} over {ready} ready: at risk {when}, less a {horizon_s:g}s cold start)"
    ))
