"""Serving replicas and their queues: the request-level model of one serving pool.

Each request is routed on arrival to a ready replica: at random, as a ClusterIP Service spreads connections
(``routing: service``; one seeded uniform draw per request, the same whatever the fleet did before it: common
random numbers, so runs differ by their decisions, not their luck), or to the one with the fewest outstanding
requests, as an inference gateway does (``routing: least-request``). It waits there for a slot, then for
prefill, then decodes token by token. A server bounds what it accepts: a request longer than the profile's
``contextTokens`` is rejected at once, and a replica already holding ``maxConcurrentRequests`` (running +
waiting) rejects the next (TGI's "Model is overloaded"); the client does not retry. A client gives up on a
request still waiting for a slot ``clientTimeoutSeconds`` after sending it. Rejected and abandoned requests
never get a first token: they are SLO misses. (Abandoned requests leave the queue when they reach its head,
which is when the server would notice the closed connection; until then they count in the queue gauges.)

Per replica (continuous batching, prefill first, as TGI and JetStream schedule):

* a request takes a slot when one is free and its prompt plus output fit in the KV cache that the
  requests already in the batch reserve (FIFO: the head of the queue blocks the ones behind it);
* prefills run one at a time, each ``input_tokens / prefillTokensPerSecond`` long, and pause decoding;
  the first token comes out at the end of the prefill (TTFT = arrival to that moment);
* between prefills every decoding sequence gains a token per step of ``decodeStep(batch)`` seconds.
  The simulation is event-driven: a replica tracks ``V``, the tokens each decoding sequence has gained
  since a reference point, and schedules only the next completion, so a request costs a handful of events
  however many tokens it generates.

Queue time, as the real servers define it (the simulated ``queue_time`` histograms): from the request's arrival
until its prefill begins, when it leaves the queue and joins a batch. It includes the wait for a slot and the wait
behind other prompts' prefills, not the request's own prefill. Where each server measures and observes it:

* TGI ``tgi_request_queue_duration`` is ``start - queued`` (router/src/server.rs, ``generate_internal`` and
  ``generate_stream_internal``), recorded with ``tgi_request_success`` as the response ends. ``queued`` is the
  queue entry's time, stamped as ``Infer::generate_stream`` appends the request to the queue (router/src/infer.rs).
  ``start`` is its ``batch_time``, stamped in ``State::next_batch`` (router/src/queue.rs; router/src/infer/v3/queue.rs
  in later releases) when the batching loop (``batching_task``) takes it into a batch. The loop calls ``next_batch``
  only between forward passes, so a request that arrives during a prefill waits for that prefill in the queue.
* vLLM V1 ``vllm:request_queue_time_seconds`` ("time spent in WAITING phase") is the first SCHEDULED event minus
  the QUEUED one (vllm/v1/metrics/stats.py, ``IterationStats.update_from_finished_request``), observed for each
  finished request (vllm/v1/metrics/loggers.py, ``PrometheusStatLogger.record``).
* JetStream ``jetstream_queue_duration`` sums the request's waits in the prefill, transfer and generate backlogs
  (jetstream/core/orchestrator.py, ``Driver._insert_if_possible``). It is observed as the generate thread inserts
  the prefilled request into a decode slot. Here a request takes its slot before its prefill, so those waits are
  the waits for the slot and for the prefill FIFO, and the insertion is its first token.

TGI's two gauges split the requests it holds; none is in both. ``tgi_queue_size`` counts the entries not yet taken
into a batch: it rises as a request is appended and is set to what is left each time ``State::next_batch`` takes
some (router/src/infer/v3/queue.rs, ``queue_task``). ``tgi_batch_current_size`` is the size of the batch the last
forward pass returned, set at the top of each pass of the batching loop, and 0 when the batch empties
(router/src/infer/v3/scheduler.rs, ``batching_task``). A request taken for prefill is in neither until its prefill
ends and its batch joins the running one. Here, where a request takes its slot before its prefill, the queue is
the requests waiting for a slot or for their prefill (the simulated ``backlog``) and the batch is the decoding
ones (``decoding``). The prompt being prefilled is in neither, as on TGI.

TGI's ``tgi_batch_current_max_tokens`` is set beside ``tgi_batch_current_size`` to the same batch's ``max_tokens``:
the KV blocks it holds times the block size (server/text_generation_server/models/flash_causal_lm.py
``FlashCausalLMBatch.to_pb``), each request holding ``ceil((prompt + max_new_tokens - 1) / block size)`` blocks
(``from_pb``; the v3 router allocates them, backends/v3/src/queue.rs ``State::next_batch``), whatever it has
generated so far. The router takes a request into a batch only while its tokens fit in what that leaves of
``--max-batch-total-tokens`` (backends/v3/src/backend.rs ``batching_task``). Here a request reserves its prompt plus
its output in the KV cache as it takes a slot (``_admit``), and the simulated ``batch_tokens`` is that reservation
summed over the decoding requests (the batch ``decoding`` counts): the client's ``max_new_tokens`` is taken to be the
output it got, with no block rounding (both estimates: a client asking for more than it gets, or none at all,
reserves more on a real TGI, so its gauge reads fuller).

Time to first token. vLLM's ``vllm:time_to_first_token_seconds`` counts from the request's arrival (the simulated
``ttft`` histogram: arrival to first token). JetStream's ``jetstream_time_to_first_token`` does not: the detokenize
thread observes ``first_token_return_time - request.metadata.prefill_dequeue_time`` (jetstream/core/orchestrator.py,
``Driver._detokenize_thread``; ``prefill_dequeue_time`` is stamped as the prefill thread takes the request off the
prefill backlog), so it leaves out the wait in the prefill backlog. The simulated ``ttft_from_prefill`` histogram
is that interval here: from the start of the request's own prefill (``Requests.started``) to its first token. The
SLO attainment the simulator scores (what users feel) still counts from arrival.

Two differences remain, both noted as estimates:

* The simulator prefills one prompt at a time (a batch of one). TGI and vLLM prefill the prompts waiting together
  in one batch, where a prompt behind others in the same batch waits inside the forward pass (inference time, not
  queue time). The simulated queue time is therefore an upper estimate, high by at most the prefills ahead of the
  request within its batch.
* Time is counted from the client's arrival. A request that waited at the gateway while no replica was ready, or
  was re-routed from a draining replica, counts those waits too; a real server counts from the request reaching it.

Replicas move through (1) pending (not admitted by Kueue), (2) starting (admitted: scheduling, image
pull, model load), (3) ready, (4) draining (removed from routing, finishing its batch; its queue is
re-routed), (5) gone. Chips are held from admission until gone.
"""

from __future__ import annotations

import enum
import heapq
import math
import random
from bisect import bisect_left
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from itertools import accumulate

from autoscaler.sim.profiles import Profile

#: Upper bounds (seconds) of the simulated servers' latency histograms: vLLM V1's time-to-first-token buckets
#: (``vllm/v1/metrics/loggers.py``), used for every server and for queue time too, JetStream's queue time excepted
#: (``JETSTREAM_QUEUE_BOUNDS``). JetStream's TTFT buckets are these up to 10 s; TGI's differ (an estimate: the
#: buckets bound how finely a quantile is interpolated).
HISTOGRAM_BOUNDS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
    160.0, 640.0, 2560.0,
)
#: Upper bounds (seconds) of JetStream's ``jetstream_queue_duration`` histogram, its own (``buckets=[0.01, ...,
#: 100.0]`` in ``JetstreamMetricsCollector``, jetstream/core/metrics/prometheus.py, AI-Hypercomputer/JetStream,
#: stored commit 006919e): the simulated ``queue_time_inserted``, which only ``jetstream.queue_time`` reads. Its
#: edges differ from the TTFT buckets' (2.0 where those have 2.5), and a quantile read from a histogram is
#: interpolated within a bucket, so the bounds decide what a policy reading it sees near an objective.
JETSTREAM_QUEUE_BOUNDS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0)
#: Upper bounds (seconds) of the per-token latency histogram: vLLM V1's inter-token latency buckets
#: (``vllm/v1/metrics/loggers.py``; the older ``time_per_output_token_seconds`` has the same ones).
TPOT_BOUNDS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)

#: Upper bounds (tokens) of the simulated servers' prompt-length histograms: vLLM's 1-2-5 buckets of
#: ``vllm:request_prompt_tokens`` (``build_1_2_5_buckets``, ``vllm/v1/metrics/loggers.py``) up to 100k tokens, used
#: for every server (an estimate: TGI's ``tgi_request_input_length`` has 100 linear buckets up to
#: ``--max-input-tokens``, JetStream's ``jetstream_request_input_length`` its prefill buckets; the coarsest of
#: the three is the one a policy must cope with).
PROMPT_BOUNDS = (
    1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000,
)

#: Event kinds on the simulator's heap (entries are (time, seq, kind, replica, version)).
PREFILL_DONE = 1
DECODE_DONE = 2
READY = 3
#: Pool i's events carry kind + i × POOL_KIND_STRIDE (one heap for every pool of a run).
POOL_KIND_STRIDE = 4
#: A prompt's KV cache reaching the decode pool (disaggregated serving): (time, seq, HANDOFF, request, 0).
HANDOFF = 1000


class ReplicaState(enum.Enum):
    PENDING = "pending"
    STARTING = "starting"
    READY = "ready"
    DRAINING = "draining"
    GONE = "gone"


_LIVE = (ReplicaState.PENDING, ReplicaState.STARTING, ReplicaState.READY)


class Requests:
    """The trace as the pool sees it, and what happened to each request (parallel lists)."""

    __slots__ = ("arrival", "done", "first_token", "inputs", "outcome", "outputs", "started")

    def __init__(self, arrival: list[float], inputs: list[int], outputs: list[int]) -> None:
        self.arrival = arrival
        self.inputs = inputs
        self.outputs = outputs
        #: When each request's prefill began: it left the queue and joined a batch (the end of every server's
        #: queue time: the module docstring).
        self.started = [float("nan")] * len(arrival)
        self.first_token = [float("nan")] * len(arrival)
        self.done = [float("nan")] * len(arrival)
        #: SERVED (or still in flight), REJECTED (overload or too long) or ABANDONED (client timeout).
        self.outcome = bytearray(len(arrival))


SERVED = 0
REJECTED = 1
ABANDONED = 2


class Replica:
    __slots__ = (
        "V", "V_t", "admitted_at", "chips", "created_at", "dec_heap", "dec_joined", "dec_reserved", "gen_done", "index",
        "itl_V", "itl_hist", "itl_owed", "kv_base", "kv_reserved", "n_dec", "n_out", "name", "paused_at", "paused_n",
        "prefill_fifo", "prefill_s", "prefilling", "prompt_hist", "prompt_tokens", "queue", "queue_hist",
        "queue_inserted_hist", "ready_at", "state", "ttft_from_prefill_hist", "ttft_hist", "version",
    )

    def __init__(self, index: int, name: str, chips: int, now: float) -> None:
        self.index = index
        self.name = name
        self.chips = chips
        self.state = ReplicaState.PENDING
        self.created_at = now
        self.admitted_at = float("nan")
        self.ready_at = float("nan")
        self.queue: deque[int] = deque()  # waiting for a slot
        self.prefill_fifo: deque[int] = deque()  # holding a slot, waiting for (or in) prefill
        self.prefilling = False
        self.dec_heap: list[tuple[float, int]] = []  # (V at which the sequence finishes, request)
        self.n_dec = 0
        self.V = 0.0
        self.V_t = 0.0
        self.kv_reserved = 0
        #: The part of ``kv_reserved`` the decoding sequences hold (prompt + output each: TGI's batch ``max_tokens``).
        self.dec_reserved = 0
        #: Σ over decoding sequences of (input tokens − V when they joined): KV in use = kv_base + n_dec·V.
        self.kv_base = 0.0
        self.version = 0
        #: Requests routed here and not finished (= ``outstanding``, kept as a counter for routing speed).
        self.n_out = 0
        # What the server's counters and histograms have counted (``gauges`` exports them cumulatively):
        #: prompt tokens of the prefills done; tokens generated by finished requests (first tokens included);
        self.prompt_tokens = 0.0
        #: seconds spent prefilling (the running sum of vLLM's ``vllm:request_prefill_time_seconds``, TGI's
        #: ``tgi_batch_forward_duration{method="prefill"}``: prefills run one at a time here, so both are it);
        self.prefill_s = 0.0
        self.gen_done = 0.0
        #: Σ over decoding sequences of V when they joined: their tokens so far are n_dec·V − dec_joined.
        self.dec_joined = 0.0
        #: Observations per bucket of ``HISTOGRAM_BOUNDS`` (the last is +Inf), not cumulative.
        self.ttft_hist = [0] * (len(HISTOGRAM_BOUNDS) + 1)
        #: JetStream's TTFT: from the start of the request's own prefill to its first token (the module docstring).
        self.ttft_from_prefill_hist = [0] * (len(HISTOGRAM_BOUNDS) + 1)
        #: Queue time (arrival to the start of the request's prefill: the module docstring), observed as the request
        #: ends (TGI, vLLM) and as it joins the decode batch (JetStream).
        self.queue_hist = [0] * (len(HISTOGRAM_BOUNDS) + 1)
        self.queue_inserted_hist = [0] * (len(JETSTREAM_QUEUE_BOUNDS) + 1)
        #: Prompts served, per bucket of ``PROMPT_BOUNDS`` (tokens; the last is +Inf), not cumulative.
        self.prompt_hist = [0] * (len(PROMPT_BOUNDS) + 1)
        #: Inter-token intervals per bucket of ``TPOT_BOUNDS`` (the last is +Inf): one observation per token a
        #: decoding sequence gains, of the step it took. Fractional between events (a step is not an event);
        #: exported rounded down, so the cumulative counts never decrease.
        self.itl_hist = [0.0] * (len(TPOT_BOUNDS) + 1)
        #: Ordinary steps already counted as the long interval of a prefill pause (taken off the next ones).
        self.itl_owed = 0.0
        #: ``V`` when the histogram last counted this replica's steps (``ServingPool._count_steps``).
        self.itl_V = 0.0
        #: Since when decoding is paused by prefills, and how many sequences it paused (-1: not paused).
        self.paused_at = 0.0
        self.paused_n = -1

    @property
    def active(self) -> int:
        return len(self.prefill_fifo) + self.n_dec

    @property
    def outstanding(self) -> int:
        return len(self.queue) + len(self.prefill_fifo) + self.n_dec


@dataclass(frozen=True, slots=True)
class ReplicaGauges:
    """What one ready replica exports at a scrape (server-neutral quantities): gauges, and the cumulative
    counters and histograms a real server keeps (a policy reads their rate or a quantile over a window)."""

    queued: int  # waiting for a slot
    prefill_pending: int  # holding a slot, prefill not started
    running: int  # holding a slot (prefilling or decoding)
    decoding: int  # prefilled, in the decode batch
    slots_used: float  # 0-1
    kv_usage: float  # 0-1
    prompt_tokens: float = 0.0  # counter
    prefill_seconds: float = 0.0  # counter: seconds spent prefilling
    generation_tokens: float = 0.0  # counter
    #: Cumulative observation counts per upper bound of ``HISTOGRAM_BOUNDS`` then +Inf.
    ttft: tuple[int, ...] = ()
    #: ... from the start of the request's own prefill instead of its arrival (JetStream's: the module docstring).
    ttft_from_prefill: tuple[int, ...] = ()
    #: Queue time (the module docstring) of the requests that ended here (TGI, vLLM) ...
    queue_time: tuple[int, ...] = ()
    #: ... and of those that joined the decode batch here (JetStream; per bound of ``JETSTREAM_QUEUE_BOUNDS``, +Inf).
    queue_time_inserted: tuple[int, ...] = ()
    #: Time per output token (vLLM's inter-token latency): cumulative counts per bound of ``TPOT_BOUNDS``, +Inf.
    tpot: tuple[int, ...] = ()
    #: Prompt lengths of the prefills done (tokens): cumulative counts per bound of ``PROMPT_BOUNDS``, +Inf.
    prompt_length: tuple[int, ...] = ()
    #: KV-cache tokens the decoding requests reserve, prompt + output each (TGI's batch ``max_tokens``: the module
    #: docstring).
    batch_tokens: float = 0.0


class ServingPool:
    """All replicas of one pool and the requests routed to them."""

    def __init__(
        self,
        *,
        name: str,
        profile: Profile,
        chips_per_replica: int,
        requests: Requests,
        events: list[tuple[float, int, int, int, int]],
        on_chips_released: Callable[[float, Replica], None],
        routing: str = "least-request",
        client_timeout_s: float | None = None,
        seed: int = 0,
        kind_offset: int = 0,
    ) -> None:
        self.name = name
        self.kind_offset = kind_offset
        #: Called with (request, time) when a request gets its first token here (the prefill pool hands its
        #: KV cache to the decode pool).
        self.on_first_token: Callable[[int, float], None] | None = None
        self.profile = profile
        self.chips = chips_per_replica
        self.req = requests
        self.events = events
        self.on_chips_released = on_chips_released
        self.replicas: list[Replica] = []
        self.gateway: deque[int] = deque()  # arrived while no replica was ready
        self.seq = 0
        self.completed = 0
        #: Prompt and generated tokens of the requests completed here (the router's answered-token counters).
        self.answered_prompt_tokens = 0.0
        self.answered_output_tokens = 0.0
        #: Requests known to have missed the TTFT SLO so far (first token late); a run may stop early on it.
        self.late = 0
        self.slo_s = float("inf")
        self._slots = profile.slots
        self._kv_cap = profile.kv_cache_tokens
        self._prefill_tps = profile.prefill_tokens_per_second
        self._base_s = profile.decode_step.base_ms / 1000.0
        self._per_seq_s = profile.decode_step.per_sequence_ms / 1000.0
        self.cold_start_s = profile.cold_start.total
        #: The ``TPOT_BOUNDS`` bucket of one decode step, by batch size (filled as batch sizes occur).
        self._step_bucket: dict[int, int] = {}
        #: Whether the per-token histogram is kept (``count_per_token_latency``): only when a policy reads it,
        #: since it costs a fifth of a simulation's time and the oracle's many runs read no metric at all.
        self._per_token = False
        #: Whether the server's counters and histograms are kept at all (``keep_no_metrics``): a run whose
        #: controller reads no metric (the oracle's schedules, a constant fleet) skips their bookkeeping.
        self._metrics = True
        self._ready_cache: list[Replica] | None = None
        self.routing = routing
        #: Seeded: a run is a deterministic function of its inputs (the Service's random endpoint choice).
        self._rng = random.Random(seed)
        #: Common random numbers: one uniform draw per request, fixed by the seed; a Service sends the request
        #: to the endpoint at that fraction of the ready list (kube-proxy's choice is independent per
        #: connection, so the distribution is the same as drawing at routing time). Drawing at routing time
        #: from one stream instead made every later choice depend on how many replicas were ready for every
        #: earlier request: two schedules differing by one start re-dealt a burst an hour later, and a run
        #: could beat another by the draws it happened to get (docs/simulate.md, "Routing").
        self._draw = [self._rng.random() for _ in range(len(requests.arrival))]
        self._max_out = profile.max_concurrent_requests
        self._context = profile.context_tokens
        self._timeout = client_timeout_s if client_timeout_s is not None else float("inf")
        self.rejected = 0
        self.abandoned = 0
        #: The pools serving the same role (``join``): None when this pool serves alone.
        self._peers: list[ServingPool] | None = None

    # ----- events -------------------------------------------------------------------------------------
    def _push(self, t: float, kind: int, rep: Replica, version: int = 0) -> None:
        # The sequence number breaks time ties in creation order: deterministic, and never compares replicas.
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, kind + self.kind_offset, rep.index, version))

    def join(self, peers: list[ServingPool]) -> None:
        """Serve one role with other pools (LeaderWorkerSet variants of other slice shapes, one request stream):
        requests routed to this pool go to the ready group of any of them, and wait for one in a gateway they
        share. ``peers`` holds this pool too; they share one ``Requests``."""
        if len(peers) > 1:
            self._peers = peers
            self.gateway = peers[0].gateway

    def count_per_token_latency(self) -> None:
        """Keep the time-per-output-token histogram from now on (call before the run: a server counts from its
        start)."""
        self._per_token = True

    def keep_no_metrics(self) -> None:
        """Keep none of the server's counters and histograms (call before the run, for a controller that reads
        no metric: ``gauges`` then refuses). What is scored (first tokens, misses, chips) is kept as ever."""
        self._metrics = False

    def set_prefill_only(self) -> None:
        """A prefill pool of a disaggregated deployment: prompts are computed one at a time, so one request
        holds the engine and the rest wait (vLLM schedules a prefill-only instance by its token budget: the
        prompts beyond it are ``num_requests_waiting``, not running)."""
        self._slots = 1

    def set_prefill_free(self) -> None:
        """A decode pool of a disaggregated deployment: the prompt's KV cache arrives computed, so taking a
        request into the batch costs no prefill time (the transfer is modelled between the pools)."""
        self._prefill_tps = float("inf")

    # ----- replica lifecycle --------------------------------------------------------------------------
    def live(self) -> list[Replica]:
        """Replicas that count toward the desired number (pending, starting, ready)."""
        return [r for r in self.replicas if r.state in _LIVE]

    def ready(self) -> list[Replica]:
        if self._ready_cache is None:
            self._ready_cache = [r for r in self.replicas if r.state is ReplicaState.READY]
        return self._ready_cache

    def add_replica(self, now: float, *, ready: bool = False) -> Replica:
        rep = Replica(len(self.replicas), f"{self.name}-{len(self.replicas)}", self.chips, now)
        self.replicas.append(rep)
        if ready:
            rep.state = ReplicaState.READY
            rep.admitted_at = rep.ready_at = now
            rep.V_t = now
            self._ready_cache = None
        return rep

    def admitted(self, rep: Replica, now: float) -> None:
        """Kueue admitted a pending replica: the cold start begins."""
        rep.state = ReplicaState.STARTING
        rep.admitted_at = now
        self._push(now + self.cold_start_s, READY, rep)

    def on_ready(self, rep: Replica, now: float) -> None:
        if rep.state is not ReplicaState.STARTING:
            return  # removed while starting
        rep.state = ReplicaState.READY
        rep.ready_at = now
        rep.V_t = now
        self._ready_cache = None
        while self.gateway:
            self.route(self.gateway.popleft(), now)

    def remove(self, rep: Replica, now: float) -> None:
        """Scale-down of one replica: pending/starting ones vanish, ready ones drain."""
        if rep.state is ReplicaState.PENDING:
            rep.state = ReplicaState.GONE
            return
        if rep.state is ReplicaState.STARTING:
            rep.state = ReplicaState.GONE
            self.on_chips_released(now, rep)
            return
        rep.state = ReplicaState.DRAINING
        self._ready_cache = None
        waiting = list(rep.queue)
        rep.queue.clear()
        rep.n_out -= len(waiting)
        for rid in waiting:
            self.route(rid, now)
        self._maybe_gone(rep, now)

    def _maybe_gone(self, rep: Replica, now: float) -> None:
        if rep.state is ReplicaState.DRAINING and rep.n_out == 0:
            rep.state = ReplicaState.GONE
            self.on_chips_released(now, rep)

    def removal_order(self) -> list[Replica]:
        """Which replicas go first on scale-down: pending, then starting (newest first), then the ready
        ones with the least outstanding work (the least to drain)."""
        pending = [r for r in self.replicas if r.state is ReplicaState.PENDING]
        starting = sorted((r for r in self.replicas if r.state is ReplicaState.STARTING),
                          key=lambda r: -r.admitted_at)
        ready = sorted(self.ready(), key=lambda r: (r.n_out, -r.index))
        return [*reversed(pending), *starting, *ready]

    # ----- requests -----------------------------------------------------------------------------------
    def _reject(self, rid: int, outcome: int) -> None:
        self.req.outcome[rid] = outcome
        self.late += 1
        if outcome == REJECTED:
            self.rejected += 1
        else:
            self.abandoned += 1

    def route(self, rid: int, now: float) -> None:
        req = self.req
        if self._context is not None and req.inputs[rid] + req.outputs[rid] > self._context:
            self._reject(rid, REJECTED)
            return
        if self._peers is not None:
            self._route_among(rid, now)
            return
        ready = self.ready()
        if not ready:
            self.gateway.append(rid)
            return
        if now - req.arrival[rid] > self._timeout:
            self._reject(rid, ABANDONED)  # waited at the gateway longer than the client would
            return
        if self.routing == "service":
            best = ready[int(self._draw[rid] * len(ready))]
        else:
            best = ready[0]
            best_n = best.n_out
            for rep in ready:
                if rep.n_out < best_n:
                    best, best_n = rep, rep.n_out
        self._take(best, rid, now)

    def _take(self, best: Replica, rid: int, now: float) -> None:
        """``rid`` joins ``best``'s queue (one of this pool's replicas), refused when the server's cap on
        outstanding requests is reached; admitted at once when a slot is free."""
        if self._max_out is not None and best.n_out >= self._max_out:
            self._reject(rid, REJECTED)
            return
        best.queue.append(rid)
        best.n_out += 1
        if len(best.prefill_fifo) + best.n_dec < self._slots:
            self._admit(best, now)

    def _route_among(self, rid: int, now: float) -> None:
        """``route`` over every pool of the role. A Service draws among all their ready groups; the gateway
        (llm-d's endpoint picker scores queue depth and KV use) takes the group with the fewest outstanding
        requests per slot, so a group of a larger slice with more slots takes more."""
        peers = self._peers
        assert peers is not None
        pool: ServingPool | None = None
        best: Replica | None = None
        if self.routing == "service":
            ready = [(p, r) for p in peers for r in p.ready()]
            if ready:
                pool, best = ready[int(self._draw[rid] * len(ready))]
        else:
            best_load = math.inf
            for p in peers:
                slots = p._slots
                for r in p.ready():
                    load = r.n_out / slots
                    if load < best_load:
                        pool, best, best_load = p, r, load
        if pool is None or best is None:
            self.gateway.append(rid)
            return
        if now - self.req.arrival[rid] > self._timeout:
            self._reject(rid, ABANDONED)
            return
        pool._take(best, rid, now)

    def _drop_abandoned(self, rep: Replica, now: float) -> None:
        """Requests at the head of the queue whose client has given up leave it."""
        queue, arrival, timeout = rep.queue, self.req.arrival, self._timeout
        while queue and now - arrival[queue[0]] > timeout:
            self._reject(queue.popleft(), ABANDONED)
            rep.n_out -= 1
        if rep.state is ReplicaState.DRAINING:
            self._maybe_gone(rep, now)

    def _admit(self, rep: Replica, now: float) -> None:
        req = self.req
        arrival = req.arrival
        queue, fifo = rep.queue, rep.prefill_fifo
        added = False
        if queue and now - arrival[queue[0]] > self._timeout:
            self._drop_abandoned(rep, now)
        slots, kv_cap, inputs, outputs = self._slots, self._kv_cap, req.inputs, req.outputs
        while queue:
            active = len(fifo) + rep.n_dec
            if active >= slots:
                break
            rid = queue[0]
            need = inputs[rid] + outputs[rid]
            # A request larger than the whole cache still runs alone (the server would truncate it).
            if rep.kv_reserved + need > kv_cap and active > 0:
                break
            queue.popleft()
            rep.kv_reserved += need
            fifo.append(rid)
            added = True
        if added and not rep.prefilling:
            self._start_prefill(rep, now)

    def _advance(self, rep: Replica, now: float) -> None:
        if rep.n_dec and not rep.prefilling:
            rep.V += (now - rep.V_t) / (self._base_s + self._per_seq_s * rep.n_dec)
        rep.V_t = now

    def _count_steps(self, rep: Replica) -> None:
        """Every decoding sequence gained ``V − itl_V`` tokens since the batch last changed size, each one step
        of this batch after the last: that many observations of the step time each (less those already counted
        as a pause's long interval). Called before the batch changes size and at a scrape (after ``_advance``),
        so the routing hot path pays nothing for the histogram."""
        n = rep.n_dec
        if n:
            tokens = n * (rep.V - rep.itl_V)
            if rep.itl_owed:
                taken = min(tokens, rep.itl_owed)
                rep.itl_owed -= taken
                tokens -= taken
            b = self._step_bucket.get(n)
            if b is None:
                b = self._step_bucket[n] = bisect_left(TPOT_BOUNDS, self._base_s + self._per_seq_s * n)
            rep.itl_hist[b] += tokens
        rep.itl_V = rep.V

    def _resume_decoding(self, rep: Replica, now: float) -> None:
        """Decoding resumes after prefills paused it: each paused sequence's next token came one step plus
        the pause after its last (one long interval instead of an ordinary one)."""
        n = rep.paused_n
        rep.paused_n = -1
        if n <= 0:
            return
        interval = now - rep.paused_at + self._base_s + self._per_seq_s * n
        rep.itl_hist[bisect_left(TPOT_BOUNDS, interval)] += n
        rep.itl_owed += n

    def _schedule_decode(self, rep: Replica, now: float) -> None:
        rep.version += 1
        if rep.n_dec and not rep.prefilling:
            step = self._base_s + self._per_seq_s * rep.n_dec
            t = now + max(0.0, rep.dec_heap[0][0] - rep.V) * step
            self._push(t, DECODE_DONE, rep, rep.version)

    def _start_prefill(self, rep: Replica, now: float) -> None:
        self._advance(rep, now)
        if self._per_token and rep.paused_n < 0:
            rep.paused_at, rep.paused_n = now, rep.n_dec
        rep.prefilling = True
        rep.version += 1  # decoding pauses: any scheduled completion is void
        rid = rep.prefill_fifo[0]
        self.req.started[rid] = now  # it joins a batch: its queue time ends (the module docstring)
        self._push(now + self.req.inputs[rid] / self._prefill_tps, PREFILL_DONE, rep)

    def on_prefill_done(self, rep: Replica, now: float) -> None:
        req = self.req
        rid = rep.prefill_fifo.popleft()
        req.first_token[rid] = now
        if self._metrics:
            rep.prompt_tokens += req.inputs[rid]
            rep.prefill_s += req.inputs[rid] / self._prefill_tps
            rep.prompt_hist[bisect_left(PROMPT_BOUNDS, req.inputs[rid])] += 1
            rep.gen_done += 1  # the first token
            rep.ttft_hist[bisect_left(HISTOGRAM_BOUNDS, now - req.arrival[rid])] += 1
            # JetStream's TTFT starts as the prefill thread dequeues the request: its own prefill (the module
            # docstring).
            rep.ttft_from_prefill_hist[bisect_left(HISTOGRAM_BOUNDS, now - req.started[rid])] += 1
            # JetStream observes the queue time as the prefilled request is inserted into a decode slot (here: now).
            rep.queue_inserted_hist[bisect_left(JETSTREAM_QUEUE_BOUNDS, req.started[rid] - req.arrival[rid])] += 1
        if now - req.arrival[rid] > self.slo_s:
            self.late += 1
        if self.on_first_token is not None:
            self.on_first_token(rid, now)
        rep.prefilling = False
        rep.V_t = now
        remaining = req.outputs[rid] - 1  # the prefill produced the first token
        if remaining <= 0:
            self._complete(rep, rid, now)
        else:
            if self._per_token:
                self._count_steps(rep)
            rep.n_dec += 1
            rep.dec_reserved += req.inputs[rid] + req.outputs[rid]
            if self._metrics:
                rep.dec_joined += rep.V
            rep.kv_base += req.inputs[rid] - rep.V
            heapq.heappush(rep.dec_heap, (rep.V + remaining, rid))
        if rep.prefill_fifo:
            self._start_prefill(rep, now)
        else:
            if rep.queue:
                self._admit(rep, now)
            if not rep.prefilling:
                if self._per_token:
                    self._resume_decoding(rep, now)
                self._schedule_decode(rep, now)
        if rep.state is ReplicaState.DRAINING:
            self._maybe_gone(rep, now)

    def on_decode_done(self, rep: Replica, version: int, now: float) -> None:
        if version != rep.version:
            return
        self._advance(rep, now)
        if self._per_token:
            self._count_steps(rep)
        heap = rep.dec_heap
        outputs, inputs = self.req.outputs, self.req.inputs
        # Tolerance: floating error must not leave a finished sequence waiting for another event.
        limit = rep.V + 1e-7
        metrics = self._metrics
        while heap and heap[0][0] <= limit:
            finish_v, rid = heapq.heappop(heap)
            generated = outputs[rid] - 1
            rep.n_dec -= 1
            rep.dec_reserved -= inputs[rid] + outputs[rid]
            if metrics:
                rep.dec_joined -= finish_v - generated
                rep.gen_done += generated
            rep.kv_base -= inputs[rid] - (finish_v - generated)
            self._complete(rep, rid, now)
        if rep.n_dec == 0:
            rep.kv_base = 0.0  # drop accumulated rounding
            rep.dec_joined = 0.0
        if rep.queue:
            self._admit(rep, now)
        if not rep.prefilling:
            self._schedule_decode(rep, now)
        if rep.state is ReplicaState.DRAINING:
            self._maybe_gone(rep, now)

    def _complete(self, rep: Replica, rid: int, now: float) -> None:
        req = self.req
        req.done[rid] = now
        if self._metrics:
            # TGI and vLLM observe the queue time as the request ends (the module docstring).
            rep.queue_hist[bisect_left(HISTOGRAM_BOUNDS, req.started[rid] - req.arrival[rid])] += 1
        rep.n_out -= 1
        rep.kv_reserved -= req.inputs[rid] + req.outputs[rid]
        self.completed += 1
        # What the router counts once a response ends (its usage): ``router.input_tokens``/``output_tokens``.
        self.answered_prompt_tokens += req.inputs[rid]
        self.answered_output_tokens += req.outputs[rid]

    # ----- gauges -------------------------------------------------------------------------------------
    def gauges(self, rep: Replica, now: float) -> ReplicaGauges:
        if not self._metrics:
            raise RuntimeError(f"pool {self.name} keeps no metrics (keep_no_metrics): nothing can scrape it")
        self._advance(rep, now)
        if self._per_token:
            self._count_steps(rep)
        self._drop_abandoned(rep, now)
        running = rep.active
        pending = len(rep.prefill_fifo) - (1 if rep.prefilling else 0)
        kv = (rep.kv_base + rep.n_dec * rep.V) if rep.n_dec else 0.0
        if rep.prefilling:
            kv += self.req.inputs[rep.prefill_fifo[0]]
        return ReplicaGauges(
            queued=len(rep.queue),
            prefill_pending=pending,
            running=running,
            decoding=rep.n_dec,
            slots_used=running / self._slots,
            kv_usage=min(1.0, max(0.0, kv / self._kv_cap)),
            prompt_tokens=rep.prompt_tokens,
            prefill_seconds=rep.prefill_s,
            generation_tokens=rep.gen_done + max(0.0, rep.n_dec * rep.V - rep.dec_joined),
            ttft=tuple(accumulate(rep.ttft_hist)),
            ttft_from_prefill=tuple(accumulate(rep.ttft_from_prefill_hist)),
            queue_time=tuple(accumulate(rep.queue_hist)),
            queue_time_inserted=tuple(accumulate(rep.queue_inserted_hist)),
            # Rounded down (a count is whole), with a tolerance for the float sums of whole steps.
            tpot=tuple(accumulate(int(c + 1e-6) for c in rep.itl_hist)),
            prompt_length=tuple(accumulate(rep.prompt_hist)),
            batch_tokens=float(rep.dec_reserved),
        )
