"""The simulated TGI gauges split the requests a replica holds as TGI does: ``tgi_queue_size`` counts the requests
not yet taken into a batch (waiting for a slot or for their prefill), ``tgi_batch_current_size`` the batch the last
forward pass returned (prefilled, decoding); none is in both, and the prompt being prefilled is in neither. Sources:
``autoscaler.sim.model``'s docstring (router/src/infer/v3/queue.rs ``queue_task``, scheduler.rs
``batching_task``)."""

from __future__ import annotations

import random

from autoscaler.core import catalog
from autoscaler.sim import pipeline
from autoscaler.sim.model import ReplicaGauges
from autoscaler.sim.simulation import Simulation
from autoscaler.sim.traces import Trace
from tests.sim.test_model import PROFILES, make_cluster
from tests.sim.test_queue_time import LONG, PREFILL_TPS, SHORT, _run


def _tgi(gauges: ReplicaGauges) -> tuple[float, float]:
    """(tgi_queue_size, tgi_batch_current_size) as the simulated replica exports them."""
    queue = pipeline.QUANTITIES[catalog.get("tgi.queue_size").simulated or ""](gauges)
    batch = pipeline.QUANTITIES[catalog.get("tgi.batch_size").simulated or ""](gauges)
    return queue, batch


def test_a_request_waiting_for_its_prefill_is_in_the_queue_and_not_in_the_batch() -> None:
    """At 1 s the long prompt (0 s) is being prefilled and the short one (0.2 s) holds a slot waiting behind it:
    TGI shows the short one queued and no batch yet (the long one joins the batch when its prefill ends)."""
    _, gauges = _run(1.0)
    assert LONG / PREFILL_TPS > 1.0, "the long prefill still runs at 1 s"
    assert gauges.running == 2, "both hold a slot"
    assert gauges.prefill_pending == 1, "one waits for its prefill"
    assert _tgi(gauges) == (1.0, 0.0)


def test_a_decoding_request_is_in_the_batch_and_not_in_the_queue() -> None:
    """At 5 s the long request has ended and the short one decodes."""
    sim, gauges = _run(5.0)
    req = sim.requests
    assert req.first_token[1] < 5.0 < req.done[1]
    assert _tgi(gauges) == (0.0, 1.0)


def _batch_tokens(gauges: ReplicaGauges) -> float:
    """tgi_batch_current_max_tokens as the simulated replica exports it."""
    return pipeline.QUANTITIES[catalog.get("tgi.batch_max_tokens").simulated or ""](gauges)


def test_the_batch_tokens_are_what_the_decoding_requests_reserve() -> None:
    """``tgi_batch_current_max_tokens`` is the batch's reservation, prompt + output of each request in it, whatever
    it has generated so far: at 1 s nothing is in the batch (the long prompt is being prefilled, the short one waits
    for its prefill); at 5 s only the short request decodes, 100 + 300 tokens."""
    _, gauges = _run(1.0)
    assert _batch_tokens(gauges) == 0.0
    sim, gauges = _run(5.0)
    assert sim.requests.first_token[1] < 5.0 < sim.requests.done[1]
    assert _batch_tokens(gauges) == float(SHORT + 300)


class _Scrapes:
    """One replica at once; its gauges at each of ``times``."""

    kind = "baseline"
    name = "scrapes"

    def __init__(self, times: list[float]) -> None:
        self.times = times
        self.seen: list[tuple[float, ReplicaGauges]] = []

    def start(self, sim: Simulation) -> None:
        def one(now: float) -> None:
            sim.set_desired(1, now)

        def look(now: float) -> None:
            self.seen.append((now, sim.pool.gauges(sim.pool.ready()[0], now)))

        sim.every(0.0, one)
        for t in self.times:
            sim.every(t, look)


#: Decode-heavy requests (prompt 200, outputs 2,000-4,000 tokens) arriving faster than one replica serves them: the
#: 64k-token cache holds about 20 of them, far fewer than the 48 slots, so requests wait with slots free.
_RNG = random.Random(7)
_N = 60
HEAVY = Trace("decode-heavy", [i * 0.5 for i in range(_N)], [200] * _N, [_RNG.randint(2000, 4000) for _ in range(_N)])


def test_the_batch_tokens_fill_the_cache_when_requests_wait_with_slots_free() -> None:
    """Every scrape's gauge is the sum over the requests decoding then (first token out, not done, more than one
    token), from the requests' own times; and while requests wait with slots free, the batch plus the next
    request would not fit the KV cache (what the router checks against --max-batch-total-tokens)."""
    times = [float(t) + 0.37 for t in range(5, 600, 5)]
    probe = _Scrapes(times)
    sim = Simulation(cluster=make_cluster(initial=1), trace=HEAVY, controller=probe, horizon_s=600.0)
    sim.run()
    req, cap = sim.requests, PROFILES["tgi-gemma2-9b-2xl4"].kv_cache_tokens
    slots = PROFILES["tgi-gemma2-9b-2xl4"].slots
    waited = 0
    for t, g in probe.seen:
        decoding = [i for i in range(_N) if req.first_token[i] <= t < req.done[i] and req.outputs[i] > 1]
        assert _batch_tokens(g) == float(sum(req.inputs[i] + req.outputs[i] for i in decoding)), t
        assert _batch_tokens(g) <= cap
        if g.queued and g.running == g.decoding < slots:  # waiting with slots free, no prefill under way
            waited += 1
            head = min((i for i in range(_N) if req.arrival[i] <= t and not req.started[i] <= t), default=None)
            assert head is not None
            assert _batch_tokens(g) + req.inputs[head] + req.outputs[head] > cap, t
    assert waited >= 3, "the cache, not the slots, held requests back at several scrapes"
    assert sum(1 for d in req.done if d < times[-1]) >= 10, "requests ended (and left the batch) meanwhile"
