"""The simulated TGI gauges split the requests a replica holds as TGI does: ``tgi_queue_size`` counts the requests
not yet taken into a batch (waiting for a slot or for their prefill), ``tgi_batch_current_size`` the batch the last
forward pass returned (prefilled, decoding); none is in both, and the prompt being prefilled is in neither. Sources:
``autoscaler.sim.model``'s docstring (router/src/infer/v3/queue.rs ``queue_task``, scheduler.rs
``batching_task``)."""

from __future__ import annotations

from autoscaler.core import catalog
from autoscaler.sim import pipeline
from autoscaler.sim.model import ReplicaGauges
from tests.sim.test_queue_time import LONG, PREFILL_TPS, _run


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
