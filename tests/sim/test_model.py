"""Sanity of the serving and training model: conservation, Little's law, load → latency, checkpoint losses."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoscaler.core.engine import compile_policy
from autoscaler.core.spec import ScalingPolicy
from autoscaler.sim import cluster as cluster_mod
from autoscaler.sim import kueue, profiles
from autoscaler.sim.simulation import FixedController, PolicyController, RunResult, ScheduleController, Simulation
from autoscaler.sim.traces import Trace

PROFILES = profiles.load(cluster_mod.bundled("profiles.yaml"))


def make_cluster(
    *, quota: int = 16, initial: int = 2, training: list[dict[str, Any]] | None = None,
    pool: dict[str, Any] | None = None, kueue_s: float = 2.0,
) -> cluster_mod.Cluster:
    doc = cluster_mod.SimulatedCluster.model_validate({
        "apiVersion": "autoscaler.dev/v1alpha1",
        "kind": "SimulatedCluster",
        "metadata": {"name": "test"},
        "spec": {
            "quota": {"clusterQueue": "q", "resource": "nvidia.com/gpu", "nominal": quota},
            "pools": [{"name": "p", "target": {"name": "d"}, "profile": "tgi-gemma2-9b-2xl4",
                       "maxReplicas": 8, "initialReplicas": initial, **(pool or {})}],
            "training": training or [],
            "kueue": {"admissionSeconds": kueue_s},
            "metricPipelines": {"default": {"scrapeIntervalSeconds": 5}},
        },
    })
    return cluster_mod.Cluster(doc, PROFILES, "test")


def poisson_trace(rate: float, duration: float, *, seed: int = 1, inp: int = 800, out: int = 120) -> Trace:
    rng = random.Random(seed)
    t, arrivals = 0.0, []
    while True:
        t += rng.expovariate(rate)
        if t >= duration:
            break
        arrivals.append(t)
    n = len(arrivals)
    return Trace("poisson", arrivals, [rng.randint(inp // 2, inp * 3 // 2) for _ in range(n)],
                 [rng.randint(out // 2, out * 3 // 2) for _ in range(n)])


def run_fixed(trace: Trace, replicas: int, **kw: Any) -> RunResult:
    c = make_cluster(initial=replicas, **kw)
    return Simulation(cluster=c, trace=trace, controller=FixedController("fixed", replicas)).run()


def test_throughput_equals_arrival_rate_under_capacity() -> None:
    tr = poisson_trace(3.0, 1200)
    res = run_fixed(tr, 4)
    req = res.requests
    assert not any(math.isnan(d) for d in req.done), "every request completes"
    # In a window away from the edges, completions per second match arrivals per second.
    done_in = sum(1 for d in req.done if 200 <= d < 1000)
    arrived_in = sum(1 for a in req.arrival if 200 <= a < 1000)
    assert done_in == pytest.approx(arrived_in, rel=0.03)
    assert done_in / 800 == pytest.approx(3.0, rel=0.1)


def test_littles_law() -> None:
    tr = poisson_trace(4.0, 1500, seed=7)
    c = make_cluster(initial=3)
    sim = Simulation(cluster=c, trace=tr, controller=FixedController("fixed", 3))
    samples: list[int] = []

    def sample(now: float) -> float:
        if 300 <= now < 1200:
            samples.append(sum(r.outstanding for r in sim.pool.replicas))
        return now + 0.5

    sim.every(0.0, sample)
    res = sim.run()
    req = res.requests
    # L (time-average requests in the system, sampled) = λ × W (mean time in system), in the window.
    idx = [i for i, a in enumerate(req.arrival) if 300 <= a < 1200]
    lam = len(idx) / 900
    w = sum(req.done[i] - req.arrival[i] for i in idx) / len(idx)
    mean_l = sum(samples) / len(samples)
    assert mean_l == pytest.approx(lam * w, rel=0.08)


def test_ttft_grows_with_load() -> None:
    means = []
    for rate in (1.0, 3.0, 5.0, 6.5):
        res = run_fixed(poisson_trace(rate, 900, seed=3), 2)
        req = res.requests
        # Over served requests: under overload the server rejects some (they are counted apart).
        served = [f - a for f, a in zip(req.first_token, req.arrival, strict=True) if not math.isnan(f)]
        means.append(sum(served) / len(served))
    assert means == sorted(means)
    assert means[-1] > 2 * means[0]


def test_runs_are_deterministic() -> None:
    tr = poisson_trace(5.0, 600, seed=11)
    a = run_fixed(tr, 3)
    b = run_fixed(tr, 3)
    assert a.requests.first_token == b.requests.first_token
    assert a.serving_chip_s == b.serving_chip_s


@pytest.mark.parametrize(
    ("elapsed", "restore", "computed", "checkpointed", "since"),
    [
        pytest.param(50, 0, 50, 0, 50, id="before-first-checkpoint"),
        pytest.param(105, 0, 100, 0, 105, id="during-first-save"),
        pytest.param(110, 0, 100, 100, 0, id="checkpoint-just-saved"),
        pytest.param(250, 0, 230, 200, 30, id="two-checkpoints-then-30s"),
        pytest.param(15, 20, 0, 0, 0, id="still-restoring"),
        pytest.param(150, 20, 120, 100, 20, id="after-restore"),
    ],
)
def test_segment_work(elapsed: float, restore: float, computed: float, checkpointed: float, since: float) -> None:
    w = kueue.segment_work(elapsed, restore_s=restore, interval_s=100, save_s=10)
    assert (w.computed_s, w.checkpointed_s, w.since_checkpoint_s) == pytest.approx((computed, checkpointed, since))


def test_preemption_loses_exactly_the_work_since_the_checkpoint() -> None:
    # One 2-chip job beside one 2-chip replica in a 4-chip quota; serving grows to 2 replicas at 250 s
    # (Kueue preempts the job) and shrinks back at 400 s (the job resumes, restores for 20 s).
    # A trainer that does not save on SIGTERM, no grace period, no Kueue latency: the textbook case.
    job = {"name": "ft", "chips": 2, "checkpointIntervalSeconds": 100, "checkpointSaveSeconds": 10,
           "restoreSeconds": 20, "saveOnPreemption": False, "terminationGracePeriodSeconds": 0}
    c = make_cluster(quota=4, initial=1, training=[job], kueue_s=0.0)
    arrivals = [10.0 + 50 * k for k in range(12)]  # short requests; none in flight at 250 or 400
    tr = Trace("sparse", arrivals, [200] * 12, [5] * 12)
    ctl = ScheduleController("schedule", [(250.0, 2), (400.0, 1)])
    res = Simulation(cluster=c, trace=tr, controller=ctl, horizon_s=600.0).run()
    assert res.preemptions == 1
    # Evicted at 250 s: 2 checkpoints (200 s of work) kept, the 30 s since lost, on 2 chips.
    assert res.training_lost_chip_s == pytest.approx(30 * 2)
    # Resumed at 400 s: 20 s restore, then 100 s + save (checkpoint at 530 s) + 70 s by 600 s. Goodput
    # counts checkpointed work only: 200 + 100 s kept, the last 70 s unsaved.
    assert res.training_useful_chip_s == pytest.approx((200 + 100) * 2)
    assert res.training_unsaved_chip_s == pytest.approx(70 * 2)


def test_a_preempted_trainer_saves_in_its_grace_period_and_holds_its_chips() -> None:
    """Kueue reconciles (2 s), the victim saves on SIGTERM (10 s, within its 60 s grace) and keeps all its
    work; the serving replica gets the chips only then, and becomes ready a cold start later."""
    job = {"name": "ft", "chips": 2, "checkpointIntervalSeconds": 100, "checkpointSaveSeconds": 10,
           "restoreSeconds": 20, "saveOnPreemption": True, "terminationGracePeriodSeconds": 60}
    c = make_cluster(quota=4, initial=1, training=[job], kueue_s=2.0)
    tr = Trace("sparse", [10.0 + 50 * k for k in range(12)], [200] * 12, [5] * 12)
    sim = Simulation(cluster=c, trace=tr, controller=ScheduleController("s", [(250.0, 2)]), horizon_s=600.0)
    res = sim.run()
    assert res.preemptions == 1
    assert res.training_lost_chip_s == 0
    new = sim.pool.replicas[1]
    assert new.admitted_at == pytest.approx(250 + 2 + 10)
    assert new.ready_at == pytest.approx(250 + 2 + 10 + PROFILES["tgi-gemma2-9b-2xl4"].cold_start.total + 2)
    # Kept: the 200 s checkpointed before 250 s and the 30 s since, saved on SIGTERM.
    assert res.training_useful_chip_s == pytest.approx(230 * 2)


def test_a_trainer_whose_save_exceeds_the_grace_period_loses_its_work_and_holds_the_grace() -> None:
    job = {"name": "ft", "chips": 2, "checkpointIntervalSeconds": 100, "checkpointSaveSeconds": 90,
           "restoreSeconds": 20, "saveOnPreemption": True, "terminationGracePeriodSeconds": 60}
    c = make_cluster(quota=4, initial=1, training=[job], kueue_s=2.0)
    tr = Trace("sparse", [10.0 + 50 * k for k in range(12)], [200] * 12, [5] * 12)
    sim = Simulation(cluster=c, trace=tr, controller=ScheduleController("s", [(250.0, 2)]), horizon_s=600.0)
    res = sim.run()
    # 250 s into a 190 s cycle: one checkpoint (100 s) kept, 60 s since it lost; chips held 2 + 60 s.
    assert res.training_lost_chip_s == pytest.approx(60 * 2)
    assert sim.pool.replicas[1].admitted_at == pytest.approx(250 + 2 + 60)


def test_staggered_jobs_are_at_different_checkpoint_phases() -> None:
    job = {"name": "ft", "chips": 2, "count": 4, "checkpointIntervalSeconds": 100, "checkpointSaveSeconds": 0}
    c = make_cluster(quota=12, initial=1, training=[job])
    sim = Simulation(cluster=c, trace=Trace("one", [1.0], [10], [2]), controller=FixedController("f", 1))
    since = sorted(j.work(10.0).since_checkpoint_s for j in sim.jobs)
    assert since == pytest.approx([10.0, 35.0, 60.0, 85.0])


def test_kueue_picks_lowest_priority_then_newest() -> None:
    def job(name: str, prio: int, admitted: float) -> kueue.TrainingJob:
        j = kueue.TrainingJob(name=name, namespace="t", priority=prio, chips=2, interval_s=60, save_s=0,
                              restore_s=0)
        j.admit(admitted)
        return j

    old_low, new_low, high = job("old-low", 10, 0.0), job("new-low", 10, 50.0), job("high", 50, 10.0)
    arb = kueue.KueueArbiter()
    running = [old_low, new_low, high]
    assert arb.victims(needed=2, free=0, running=running, serving_priority=100, now=60) == [new_low]
    assert arb.victims(needed=4, free=0, running=running, serving_priority=100, now=60) == [new_low, old_low]
    assert arb.victims(needed=2, free=1, running=running, serving_priority=100, now=60) == [new_low]
    assert arb.victims(needed=8, free=0, running=running, serving_priority=100, now=60) is None
    # Nothing of equal or higher priority than serving is ever a victim.
    assert arb.victims(needed=2, free=0, running=[high], serving_priority=50, now=60) is None


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    gaps=st.lists(st.floats(min_value=0.0, max_value=3.0), min_size=1, max_size=60),
    inputs=st.lists(st.integers(min_value=1, max_value=70_000), min_size=60, max_size=60),
    outputs=st.lists(st.integers(min_value=1, max_value=400), min_size=60, max_size=60),
    replicas=st.integers(min_value=1, max_value=3),
)
def test_every_request_is_served_in_order_of_its_phases(
    gaps: list[float], inputs: list[int], outputs: list[int], replicas: int
) -> None:
    arrivals = [sum(gaps[: i + 1]) for i in range(len(gaps))]
    n = len(arrivals)
    tr = Trace("h", arrivals, inputs[:n], outputs[:n])
    cluster = make_cluster(initial=replicas, pool={"clientTimeoutSeconds": None})
    sim = Simulation(cluster=cluster, trace=tr, controller=FixedController("f", replicas))
    res = sim.run()
    prof = PROFILES["tgi-gemma2-9b-2xl4"]
    assert prof.context_tokens is not None
    req = res.requests
    for i in range(n):
        too_long = req.inputs[i] + req.outputs[i] > prof.context_tokens
        # Longer than the context: rejected at once; else served (even one larger than the KV cache, alone).
        assert math.isnan(req.first_token[i]) == too_long
        if too_long:
            continue
        assert req.first_token[i] - req.arrival[i] >= req.inputs[i] / prof.prefill_tokens_per_second - 1e-9
        # The queue time (arrival to the start of its prefill) and its own prefill make up its TTFT.
        assert req.started[i] >= req.arrival[i]
        assert req.first_token[i] - req.started[i] == pytest.approx(req.inputs[i] / prof.prefill_tokens_per_second)
        assert req.done[i] >= req.first_token[i]
    assert res.rejected_requests == sum(1 for i in range(n) if req.inputs[i] + req.outputs[i] > prof.context_tokens)
    # The routing counter agrees with the queues: everything finished, nothing left behind.
    assert all(r.n_out == 0 and r.outstanding == 0 and r.kv_reserved == 0 for r in sim.pool.replicas)
    # Fixed replicas, no training: chips are held exactly all the time.
    assert res.serving_chip_s == pytest.approx(replicas * 2 * tr.duration_s)


def _training_run(preemptible_namespace: str) -> tuple[Simulation, RunResult]:
    """A policy with ``capacity`` on one replica of quota sharing chips with a 2-chip job, a burst that needs
    a second replica, then a quiet tail."""
    job = {"name": "ft", "chips": 2, "checkpointIntervalSeconds": 100, "restoreSeconds": 10}
    c = make_cluster(quota=4, initial=1, training=[job])
    policy = ScalingPolicy.model_validate({
        "apiVersion": "autoscaler.dev/v1alpha1", "kind": "ScalingPolicy", "metadata": {"name": "p"},
        "spec": {
            "target": {"kind": "Deployment", "name": "d"}, "minReplicas": 1, "maxReplicas": 2,
            "evaluationPeriodSeconds": 5,
            "signals": [{"name": "q", "preset": "tgi.queue_size"},
                        {"name": "b", "metric": "tgi_batch_current_size"}],
            "policy": {"type": "queue", "work": ["q", "b"], "capacityPerReplica": 20,
                       "behavior": {"scaleDown": {"stabilizationWindowSeconds": 60}}},
            "capacity": {"clusterQueue": "q", "resource": "nvidia.com/gpu", "perReplica": 2},
            "preemptible": [{"namespace": preemptible_namespace}],
        },
    })
    busy = poisson_trace(4.0, 400, seed=5)
    quiet = [1200.0 + 20 * k for k in range(30)]
    tr = Trace("burst", [*busy.arrivals, *quiet], [*busy.inputs, *([300] * 30)], [*busy.outputs, *([20] * 30)])
    ctl = PolicyController(compile_policy(policy), c.pipeline_for("p"), "default")
    sim = Simulation(cluster=c, trace=tr, controller=ctl)
    return sim, sim.run()


def test_policy_training_decisions_are_applied() -> None:
    """A policy with ``capacity`` deactivates training itself to scale up and reactivates it afterwards."""
    sim, res = _training_run("training")
    assert max(p.replicas for p in res.timeline) == 2
    # The policy stopped the job (not Kueue), and resumed it once serving shrank.
    assert (sim.deactivations, sim.reactivations) == (1, 1)
    assert res.preemptions == 1
    # Serving went back to one replica and the job it stopped runs again by the end.
    assert res.timeline[-1].replicas == 1
    assert res.timeline[-1].training_chips == 2


def test_preemptible_selectors_are_honoured() -> None:
    """As the controller does, the policy sees (and may stop) only the Workloads its ``preemptible``
    selectors match: with another namespace the job is none of its business, so it stops nothing, the
    scale-up that needs the job's chips does not fit, and the job runs throughout."""
    sim, res = _training_run("someone-elses")
    assert (sim.deactivations, sim.reactivations, res.preemptions) == (0, 0, 0)
    assert max(p.replicas for p in res.timeline) == 1
    assert min(p.training_chips for p in res.timeline) == 2


def test_a_full_replica_rejects_and_clients_give_up() -> None:
    """TGI's --max-concurrent-requests (128): a burst of 200 on one replica rejects 72 at once; of the 128
    accepted, those still without a slot when their client times out are abandoned. Both are misses."""
    tr = Trace("burst", [0.0] * 200, [1000] * 200, [400] * 200)
    cluster = make_cluster(initial=1, pool={"routing": "least-request", "clientTimeoutSeconds": 30.0})
    sim = Simulation(cluster=cluster, trace=tr, controller=FixedController("f", 1))
    res = sim.run()
    assert res.rejected_requests == 200 - 128
    assert res.abandoned_requests > 0
    served = sum(1 for f in res.requests.first_token if not math.isnan(f))
    assert served + res.rejected_requests + res.abandoned_requests == 200
    assert all(r.n_out == 0 for r in sim.pool.replicas)


@pytest.mark.parametrize("routing", ["service", "least-request"])
def test_routing_spreads_requests_and_is_deterministic(routing: str) -> None:
    tr = poisson_trace(4.0, 600, seed=5)
    cluster = make_cluster(initial=3, pool={"routing": routing})

    def per_replica() -> list[float]:
        sim = Simulation(cluster=cluster, trace=tr, controller=FixedController("f", 3), seed=1)
        res = sim.run()
        return [*res.requests.first_token]

    assert per_replica() == per_replica()


def test_random_routing_queues_more_than_least_request() -> None:
    """A Service is blind to load: at the same fleet, TTFT p99 is worse than behind a least-request gateway."""
    tr = poisson_trace(6.0, 900, seed=9)
    p99 = {}
    for routing in ("service", "least-request"):
        res = Simulation(cluster=make_cluster(initial=3, pool={"routing": routing}), trace=tr,
                         controller=FixedController("f", 3)).run()
        ttft = sorted(f - a for f, a in zip(res.requests.first_token, res.requests.arrival, strict=True)
                      if not math.isnan(f))
        p99[routing] = ttft[int(0.99 * len(ttft))]
    assert p99["service"] > p99["least-request"]


def test_a_service_routes_each_request_by_its_own_draw() -> None:
    """Common random numbers: the Service's endpoint for a request is one uniform draw of that request (its
    fraction of the ready list), not the next draw of a stream the earlier requests consumed. Two schedules
    that differ only in when three replicas were asked for (2 or 5 ready for the requests of that minute)
    then route a later burst alike, so they differ by their decisions, not by which draws the burst got
    (docs/simulate.md "Routing"; the oracle was beaten by such a re-deal on the code trace)."""
    calm = poisson_trace(1.0, 600, seed=3)
    burst = poisson_trace(25.0, 20, seed=4)
    tr = Trace("calm-then-burst", [*calm.arrivals, *(1200 + a for a in burst.arrivals)],
               [*calm.inputs, *burst.inputs], [*calm.outputs, *burst.outputs])
    cluster = make_cluster(initial=2, pool={"routing": "service"})

    def burst_ttfts(asked_at: float) -> list[float]:
        res = Simulation(cluster=cluster, trace=tr, initial_replicas=2,
                         controller=ScheduleController("s", [(0.0, 2), (asked_at, 5)])).run()
        req = res.requests
        # Unserved (NaN) compared as such: NaN != NaN.
        return [-1.0 if math.isnan(f) else f - a for f, a in zip(req.first_token, req.arrival, strict=True)
                if a >= 1200]

    early, late = burst_ttfts(100.0), burst_ttfts(160.0)
    assert len(early) > 100
    # Equal up to the float residue of each replica's decode clock (it advanced through different histories).
    assert early == pytest.approx(late, abs=1e-6)
