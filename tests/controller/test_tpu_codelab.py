"""Issue 14 item 7: the dynamic-slicing codelab under the real loop, with a Kueue that admits by topology.

The codelab's objects (``tests.kube.codelab``: ClusterQueue ``cq`` with its 999999 quota, Topology
``slice-topology``, ResourceFlavor ``slice-rf``, AdmissionCheck ``ac``, the WorkloadPriorityClasses, the two
vLLM LeaderWorkerSets, the llm-d router, the training JobSets, 32 TPU7x nodes in two 4x4x4 blocks) are applied to
the API-server emulation; ``tests.kube.tas.LiveTas`` plays Kueue with topology-aware admission, the JobSet and
LWS controllers, the slice controller's provisioning delay and the eviction grace, on short real time. The
controller is ``Runtime.serve`` (watches, periods, probes) with the two shipped LWS policies
(``policies/lws-prefill-decode.yaml``), only their metric source pointed at stand-in vLLM servers and their
periods shortened. Nothing settles the world between steps: outcomes are waited for, invariants are checked at
every write and every Kueue tick.

Training: the codelab's sub-slicing JobSet (one Workload of six 2x2x2 slices, last checkpoint 15 min ago) and
eight single-slice JobSets of the same template (one Workload each), checkpointed 1 to 8 minutes ago. With one
prefill and one decode group, the two blocks are full (48 + 64 + 16 = 128 chips).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from autoscaler.controller.config import ControllerConfig
from autoscaler.controller.loop import LoopClock
from autoscaler.controller.runtime import Runtime
from autoscaler.controller.workloads import DEACTIVATED_BY, LAST_CHECKPOINT
from autoscaler.core.model import Reason
from tests.controller.helpers import pool_on
from tests.controller.test_disaggregated_loop import FakePrometheus
from tests.kube import codelab
from tests.kube.emulator import Emulator
from tests.kube.kueue import V1BETA2
from tests.kube.tas import LWS, LiveTas, assigned_hosts
from tests.sources.realprom import TextServer

NS = codelab.NAMESPACE
EXAMPLE = Path(__file__).parents[2] / "policies" / "lws-prefill-decode.yaml"
PREFILL, DECODE = "kueue-vllm-prefill-model-streamer", "kueue-vllm-decode-model-streamer"
SUB = "jobset-kueue-jobset-simple-subslicing"
#: Single-slice fine-tunes, seconds since their last checkpoint: ft-8 (1 min) loses least, ft-1 (8 min) most.
#: Kueue places them in name order, so the cheapest are *not* the first places a placement scan meets.
FINETUNES = {f"ft-{i}": 60.0 * (9 - i) for i in range(1, 9)}


@dataclass
class VllmMetrics:
    """A stand-in for a pool's vLLM servers: ``/metrics`` with the V1 gauges, counters and histograms the presets
    read. The prompt-token counter grows at ``prompt_rate`` tokens/s (the generated-token one at a thousandth of it:
    a prefill pool's first tokens); while requests run, wait or arrive, each scrape observes one more request at
    ``ttft`` / ``tpot`` seconds in the latency histograms, so the quantiles are known (an idle server observes
    nothing, and an empty window has no quantile).

    Served from a thread of its own (``TextServer``), as a real server is another process: it takes its values
    when the request reaches it, whatever the controller's event loop is doing. Served from that loop, as it was
    until 2026-12-07, it took them only once the loop got round to its handler, a wait no product stamp can see
    (at load 7, 21:28 UTC: up to 73 ms after the request was sent). On its thread, at load 12-14 (four runs,
    21:31-21:38 UTC), the values were taken at most 65 ms after the request was sent and the answer read up to
    105 ms after that; the prompt rate over the 2 s window, stamped at the request (as the pods source does), was
    within -2.7 % and +5.1 % of the true rate, and would have been within -20 % and +8 % stamped when read. The
    counter's clock is ``time.monotonic``, the loop's."""

    running: float = 0.0
    waiting: float = 0.0
    kv: float = 0.2
    prompt_rate: float = 0.0
    ttft: float = 0.1
    tpot: float = 0.005
    observed: int = 0
    prompt_total: float = 0.0
    last: float | None = None
    url: str = ""
    _server: TextServer | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    async def start(self) -> str:
        self._server = TextServer(content_type="text/plain")
        self._server.render = self._metrics
        self.url = self._server.url
        return self.url

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()

    def _metrics(self, _: str) -> str:
        with self._lock:  # one answer at a time (the server answers each request in a thread)
            return self._exposition()

    def _exposition(self) -> str:
        labels = 'model_name="Qwen/Qwen3.5-397B-A17B-FP8",engine="0"'
        now = time.monotonic()
        self.prompt_total += self.prompt_rate * (now - (self.last if self.last is not None else now))
        self.last = now
        if self.running or self.waiting or self.prompt_rate:
            self.observed += 1
        text = "".join(
            f"# TYPE vllm:{name} {kind}\nvllm:{name}{suffix}{{{labels}}} {value}\n"
            for name, kind, suffix, value in (
                ("num_requests_running", "gauge", "", self.running),
                ("num_requests_waiting", "gauge", "", self.waiting),
                ("kv_cache_usage_perc", "gauge", "", self.kv),
                ("prompt_tokens", "counter", "_total", self.prompt_total),
                ("generation_tokens", "counter", "_total", self.prompt_total / 1000),
            )
        )
        for name, value in (("time_to_first_token_seconds", self.ttft), ("inter_token_latency_seconds", self.tpot)):
            text += f"# TYPE vllm:{name} histogram\n"
            for le in (0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0):
                text += f'vllm:{name}_bucket{{{labels},le="{le}"}} {self.observed if value <= le else 0}\n'
            text += f'vllm:{name}_bucket{{{labels},le="+Inf"}} {self.observed}\n'
            text += f"vllm:{name}_sum{{{labels}}} {self.observed * value}\n"
            text += f"vllm:{name}_count{{{labels}}} {self.observed}\n"
        return text


def shipped_policies(prefill_url: str, decode_url: str) -> list[dict[str, Any]]:
    """The shipped example, as a user would adapt it to a test cluster: metrics from the stand-in servers,
    1 s periods and 2 s rate and quantile windows, no minimum run time after a resume, the groups' cold start as
    this world's (TAS_TIMING: 2 s, not 432 s) and a hold of as long."""
    docs = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    for doc, url in zip(docs, (prefill_url, decode_url), strict=True):
        spec = doc["spec"]
        spec["source"] = {"type": "pods", "endpoints": [url]}
        spec["evaluationPeriodSeconds"] = 1
        spec["capacity"]["minRunSeconds"] = 0
        for sig in spec["signals"]:
            for key in ("rate", "quantile"):
                if key in sig:
                    sig[key]["windowSeconds"] = 2
        spec["policy"]["replica"]["coldStartSeconds"] = 2
        spec["policy"]["scaleDown"] = {"holdSeconds": 2}
    return docs


def _stamp(age_s: float) -> str:
    return datetime.datetime.fromtimestamp(time.time() - age_s, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def until(condition: Callable[[], bool], timeout: float = 90.0) -> None:
    async def poll() -> None:
        while not condition():
            await asyncio.sleep(0.05)

    await asyncio.wait_for(poll(), timeout)


@dataclass
class Codelab:
    kube: Emulator
    api: client.ApiClient
    tas: LiveTas
    policies: Path
    prefill: VllmMetrics
    decode: VllmMetrics
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def start(self) -> None:
        cfg = ControllerConfig.model_validate(
            {"leaderElection": {"enabled": False}, "reloadPollSeconds": 0.1, "fastPollSeconds": 0.2,
             "heldSweepSeconds": 0.5})
        clock = LoopClock()
        rt = Runtime(api=self.api, config=cfg, policies_dir=self.policies, clock=clock, identity="controller-a",
                     namespace="autoscaler", source=pool_on(clock))  # type: ignore[arg-type]
        self.tasks.append(asyncio.create_task(self.tas.run()))
        self.tasks.append(asyncio.create_task(rt.serve(asyncio.Event())))

    async def stop(self) -> None:
        """The controller and Kueue tasks cancelled, the metric servers stopped."""
        for task in self.tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.prefill.stop()
        await self.decode.stop()

    def groups(self, lws: str) -> int:
        return int(self.kube.get(LWS, "LeaderWorkerSet", lws, NS)["spec"]["replicas"])

    def training(self) -> dict[str, tuple[bool, bool]]:
        """Every training Workload: (active, admitted)."""
        return {
            wl["metadata"]["name"]: (wl["spec"].get("active", True), self.tas.admitted(wl["metadata"]["name"]))
            for wl in self.kube.list(V1BETA2, "Workload", NS) if wl["metadata"]["name"].startswith("jobset-")
        }

    def stopped(self) -> list[str]:
        return sorted(n for n, (active, _) in self.training().items() if not active)

    def events(self, reason: str) -> list[str]:
        return [str(e.get("note") or e.get("message")) for e in self.kube.list("events.k8s.io/v1", "Event", NS)
                if e.get("reason") == reason]


def seed(kube: Emulator) -> LiveTas:
    """The codelab's objects, the sub-slicing JobSet and the eight fine-tunes, admitted and running, with one
    prefill and one decode group ready: the two blocks are full."""
    for obj in [*codelab.kueue_resources(), *codelab.nodes()]:
        kube.add(obj)
    kube.add(codelab.router())
    kube.add(codelab.vllm_lws("prefill"))
    kube.add(codelab.vllm_lws("decode"))
    sub = codelab.subslicing_jobset()
    sub["metadata"]["annotations"] = {LAST_CHECKPOINT: _stamp(900.0)}
    kube.add(sub)
    for name, age in FINETUNES.items():
        ft = codelab.subslicing_jobset()
        ft["metadata"]["name"] = name
        ft["metadata"]["annotations"] = {LAST_CHECKPOINT: _stamp(age)}
        ft["spec"]["replicatedJobs"][0]["replicas"] = 1
        kube.add(ft)
    tas = LiveTas(kube)
    t0 = asyncio.get_running_loop().time() - 100
    for t in (t0, t0 + 1, t0 + 2, t0 + 5, t0 + 10):  # created, reserved, provisioned, ready: before the test
        tas.step(t)
    return tas


@pytest.fixture
async def world(kube: Emulator, kube_client: client.ApiClient, tmp_path: Path) -> AsyncIterator[Codelab]:
    tas = seed(kube)
    prefill, decode = VllmMetrics(), VllmMetrics()
    policies = tmp_path / "policies"
    policies.mkdir()
    w = Codelab(kube, kube_client, tas, policies, prefill, decode)
    w.policies.joinpath("lws-prefill-decode.yaml").write_text(
        yaml.safe_dump_all(shipped_policies(await prefill.start(), await decode.start())))
    yield w
    await w.stop()


def _full(w: Codelab) -> None:
    assert all(admitted for _, admitted in w.training().values())
    assert len(w.tas.used_nodes()) == 32  # 128 chips held: nothing is free
    assert (w.tas.ready_groups(PREFILL), w.tas.ready_groups(DECODE)) == (1, 1)


@pytest.mark.timeout(300)  # real-time waits: ~22 s idle, 4x that on a loaded 2-core machine
async def test_serving_grows_in_whole_slices_from_the_cheapest_training_then_gives_it_back(world: Codelab) -> None:
    w = world
    _full(w)
    reactivated_while_waiting: list[str] = []

    def check() -> None:
        last = w.kube.writes()[-1]
        body = last.body or {}
        gated = any(pod["spec"].get("schedulingGates") for pod in w.kube.list("v1", "Pod", NS))
        if last.status < 300 and body.get("spec", {}).get("active") is True and gated:
            reactivated_while_waiting.append(last.path)

    w.kube.after("PATCH", f"/apis/kueue.x-k8s.io/*/namespaces/{NS}/workloads/*", check, times=10_000)
    w.start()
    # Load rises: prefill serves 100,000 prompt tokens/s (60,000 per group at utilization 0.7: 3 groups), decode
    # runs 400 sequences (256 slots per group at 0.7: 3 groups), nothing waiting (a queue on every group held for a
    # while would teach the slo type fewer usable slots: the stand-in's numbers do not follow the group count).
    w.prefill.prompt_rate = 100_000
    w.decode.running, w.decode.kv = 400, 0.6
    await until(lambda: w.groups(PREFILL) > 1 and w.groups(DECODE) > 1
                and w.tas.ready_groups(PREFILL) == w.groups(PREFILL)
                and w.tas.ready_groups(DECODE) == w.groups(DECODE))
    await asyncio.sleep(1.5)  # a few more passes at the same load: nothing more may be stopped
    added = w.groups(PREFILL) - 1 + w.groups(DECODE) - 1
    # Exactly one single-slice Workload per group added, the ones that lose least (the most recent checkpoints),
    # and never the six-slice JobSet (48 chips × 15 min).
    cheapest = sorted(FINETUNES, key=FINETUNES.__getitem__)[:added]
    assert w.stopped() == sorted(f"jobset-{name}" for name in cheapest)
    assert w.training()[SUB] == (True, True)
    for name in w.stopped():
        annotations = w.kube.get(V1BETA2, "Workload", name, NS)["metadata"]["annotations"]
        assert annotations[DEACTIVATED_BY] in ("qwen-prefill", "qwen-decode")
    notes = w.events(Reason.DEACTIVATE_TRAINING.value)
    assert notes
    assert all("a 2x2x2 slice fits at cube-" in n and "slice(s) free in flavor slice-rf" in n for n in notes)
    # Every serving group is one whole 2x2x2 slice; no node was ever held twice.
    for wl in w.kube.list(V1BETA2, "Workload", NS):
        if wl["metadata"]["name"].startswith("leaderworkerset-"):
            assert len(assigned_hosts(wl)) == 2
    assert w.tas.violations == []

    # Load falls: both pools go back to one group, and every stopped fine-tune resumes and is readmitted.
    w.prefill.prompt_rate = 0
    w.decode.running, w.decode.waiting, w.decode.kv = 5, 0, 0.05
    await until(lambda: w.groups(PREFILL) == 1 and w.groups(DECODE) == 1
                and all(active and admitted for active, admitted in w.training().values()), timeout=150.0)
    assert w.tas.violations == []
    assert reactivated_while_waiting == []
    assert len(w.tas.used_nodes()) == 32


#: Every 2x2x2 place of the two blocks, and the slices each training Workload holds while active.
PLACES = 16
SLICES = {SUB: 6} | {f"jobset-{name}": 1 for name in FINETUNES}


@pytest.mark.timeout(300)  # real-time waits: ~15 s idle, 4x that on a loaded 2-core machine
async def test_two_policies_growing_while_kueue_evicts_never_ask_for_more_groups_than_their_victims_free(
    world: Codelab,
) -> None:
    """The two policies both grow on full blocks while Kueue still holds the first one's victims: the victims'
    grace period here is 10 s (30 s unscaled 3×, where the other tests scale 100×), so every pass of both 1 s
    policies falls inside it: prefill grows once its rate is known (two scrapes), decode from the first pass on
    its gauges; prefill's first write came 0.65 s after decode's stops at load 14 (21:37 UTC) and 4 s after them
    at load 17 (21:45 UTC), past the 3 s grace it had until 2026-12-07 (its premise failed there). The second
    must count neither the places the first one's victims are freeing nor its groups waiting for them (the pass
    ledger, ``arbitration.in_pass``): checked at every scale write, the groups asked for plus the slices active
    training holds never exceed the blocks' 16 places. (This stand-in Kueue never preempts by itself: a policy that
    overspends has its groups wait and stops their victims a pass later, so only the check at the write sees it;
    the simulator's Kueue preempts one more Workload there.)"""
    w = world
    _full(w)
    w.tas.timing = dataclasses.replace(w.tas.timing, evict_s=10.0)
    over: list[str] = []
    seen: list[tuple[str, list[str]]] = []

    def check() -> None:
        asked = w.groups(PREFILL) + w.groups(DECODE)
        training = w.training()
        held = sum(SLICES[name] for name, (active, _) in training.items() if active)
        if asked + held > PLACES:
            over.append(f"{asked} groups asked + {held} training slices > {PLACES} places")
        freeing = [name for name, (active, admitted) in training.items() if not active and admitted]
        seen.append((w.kube.writes()[-1].path, freeing))  # which LWS was written, what was still being evicted

    w.kube.after("PATCH", f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{NS}/leaderworkersets/*", check,
                 times=10_000)
    # Both loads are there from the first pass: 3 groups each (as in the test above). Prefill's 100,000 tokens/s
    # need 2.39 groups (with its first tokens, at 60,000 a group and utilization 0.7): 3 groups for a measured rate
    # from 83,600 to 125,700 tokens/s, -16 % to +26 % (the rate's error under load: the stand-in's docstring).
    w.prefill.prompt_rate = 100_000
    w.decode.running, w.decode.kv = 400, 0.6
    w.start()
    await until(lambda: w.groups(PREFILL) == 3 and w.groups(DECODE) == 3
                and w.tas.ready_groups(PREFILL) == 3 and w.tas.ready_groups(DECODE) == 3)
    await asyncio.sleep(1.5)
    assert over == []
    # The premise: one pool's scale was written while Workloads stopped for the other were still held.
    stopper = {name: w.kube.get(V1BETA2, "Workload", name, NS)["metadata"]["annotations"][DEACTIVATED_BY]
               for name in w.stopped()}
    policy_of = {PREFILL: "qwen-prefill", DECODE: "qwen-decode"}
    crossed = [(path, name) for path, freeing in seen for name in freeing
               for lws, policy in policy_of.items() if f"/leaderworkersets/{lws}" in path
               and stopper.get(name) not in (None, policy)]
    assert crossed, seen
    cheapest = sorted(FINETUNES, key=FINETUNES.__getitem__)[:4]
    assert w.stopped() == sorted(f"jobset-{name}" for name in cheapest)
    assert w.tas.violations == []


@pytest.mark.timeout(300)  # real-time waits: ~22 s idle, 4x that on a loaded 2-core machine
async def test_a_super_slice_yields_as_one_unit_freeing_both_blocks(
    kube: Emulator, kube_client: client.ApiClient, tmp_path: Path
) -> None:
    """The codelab's super-slicing JobSet (one 4x4x8 over both blocks) runs; the serving groups applied after it
    wait for admission: no 2x2x2 slice is free anywhere. The super-slice is stopped once, as one unit, and both
    pools' groups are admitted in the blocks it frees. It does not resume while serving holds slices in them:
    its 4x4x8 needs both blocks whole."""
    for obj in [*codelab.kueue_resources(), *codelab.nodes()]:
        kube.add(obj)
    sup = codelab.superslicing_jobset()
    sup["metadata"]["annotations"] = {LAST_CHECKPOINT: _stamp(120.0)}
    kube.add(sup)
    tas = LiveTas(kube)
    t0 = asyncio.get_running_loop().time() - 100
    for t in (t0, t0 + 1, t0 + 2):
        tas.step(t)
    kube.add(codelab.vllm_lws("prefill"))
    kube.add(codelab.vllm_lws("decode"))
    for t in (t0 + 3, t0 + 4, t0 + 10):
        tas.step(t)
    super_wl = "jobset-kueue-jobset-simple-superslicing"
    assert tas.admitted(super_wl)
    assert len(tas.used_nodes()) == 32
    assert tas.ready_groups(PREFILL) == tas.ready_groups(DECODE) == 0  # both wait for admission
    prefill, decode = VllmMetrics(waiting=4), VllmMetrics(running=10)
    policies = tmp_path / "policies"
    policies.mkdir()
    w = Codelab(kube, kube_client, tas, policies, prefill, decode)
    policies.joinpath("p.yaml").write_text(yaml.safe_dump_all(shipped_policies(await prefill.start(),
                                                                                await decode.start())))
    try:
        w.start()
        await until(lambda: tas.ready_groups(PREFILL) == 1 and tas.ready_groups(DECODE) == 1)
        await asyncio.sleep(1.5)  # more passes: it must stay stopped (its slice does not fit) and stopped once
        assert w.training() == {super_wl: (False, False)}
        stops = [r for r in kube.writes() if r.method == "PATCH" and r.path.endswith(f"/workloads/{super_wl}")
                 and r.status < 300 and (r.body or {}).get("spec", {}).get("active") is False]
        assert len(stops) == 1
        notes = w.events(Reason.DEACTIVATE_TRAINING.value)
        assert len(notes) == 1
        assert "on blocks cube-a, cube-b (one unit)" in notes[0]
        assert "admit its 1 group(s) waiting for admission" in notes[0]
        assert tas.violations == []
    finally:
        await w.stop()


JOINT_EXAMPLE = Path(__file__).parents[2] / "policies" / "tpu7x-disaggregated.yaml"


def joint_policy(url: str) -> dict[str, Any]:
    """The shipped one-policy example (type ``disaggregated``) in the codelab's namespace, as a user would adapt
    it to this test cluster: its two demand signals from a stand-in Prometheus (the other signals dropped: the
    stand-in serves raw numbers), 1 s periods, a 2 s scale-down delay, no minimum run time after a resume."""
    doc: dict[str, Any] = yaml.safe_load(JOINT_EXAMPLE.read_text())
    spec = doc["spec"]
    spec["target"]["namespace"] = NS
    spec["source"] = {"type": "prometheus", "url": url}
    spec["evaluationPeriodSeconds"] = 1
    spec["signals"] = [{"name": "prompt_tokens", "query": "prompt", "pool": "prefill"},
                       {"name": "generation_tokens", "query": "gen"}]
    policy = spec["policy"]
    policy["scaleDownDelaySeconds"] = 2
    policy["prefill"]["signals"] = {"promptTokens": "prompt_tokens"}
    policy["decode"]["signals"] = {"generationTokens": "generation_tokens"}
    # Rule 0c reads decode's running sequences, a signal dropped here: off, as a user without that signal sets it.
    policy["decode"]["slotOccupancy"] = False
    for role in ("prefill", "decode"):
        for variant in policy[role]["variants"]:
            variant["target"]["namespace"] = NS
    spec["capacity"]["minRunSeconds"] = 0
    spec["preemptible"] = [{"namespace": NS, "selector": {"matchLabels": {"kueue.x-k8s.io/queue-name": "lq"}}}]
    return doc


@pytest.mark.timeout(300)  # real-time waits: ~22 s idle, 4x that on a loaded 2-core machine
async def test_one_policy_grows_both_pools_from_the_cheapest_regions_then_gives_them_back(
    kube: Emulator, kube_client: client.ApiClient, tmp_path: Path
) -> None:
    """The joint policy (one ``disaggregated`` policy driving both LWS) on the full codelab blocks: both pools
    grow in the same passes, one request for both; the victims are the training whose stop frees one 2x2x2
    region per group added, the cheapest (most recent checkpoints), each stopped once, never the six-slice
    JobSet; on the fall both pools go back to one group and every fine-tune resumes."""
    tas = seed(kube)
    prom = FakePrometheus(LoopClock())  # type: ignore[arg-type]
    await prom.start()
    policies = tmp_path / "policies"
    policies.mkdir()
    policies.joinpath("pd.yaml").write_text(yaml.safe_dump(joint_policy(prom.url)))
    w = Codelab(kube, kube_client, tas, policies, VllmMetrics(), VllmMetrics())
    _full(w)
    try:
        # Load rises: prefill needs 110,000 prompt tokens/s / (0.7 × 60,000 per group) → 3 groups; decode
        # 30,000 generated tokens/s / (0.7 × 12,000) → 4 groups: 5 groups more, 40 chips, and nothing is free.
        prom.values = {"prompt": 110_000.0, "gen": 30_000.0}
        w.start()
        await until(lambda: (w.groups(PREFILL), w.groups(DECODE)) == (3, 4)
                    and (w.tas.ready_groups(PREFILL), w.tas.ready_groups(DECODE)) == (3, 4))
        await asyncio.sleep(1.5)  # more passes at the same load: nothing more may be stopped
        cheapest = sorted(FINETUNES, key=FINETUNES.__getitem__)[:5]
        assert w.stopped() == sorted(f"jobset-{name}" for name in cheapest)
        assert w.training()[SUB] == (True, True)
        for name in w.stopped():
            annotations = w.kube.get(V1BETA2, "Workload", name, NS)["metadata"]["annotations"]
            assert annotations[DEACTIVATED_BY] == "qwen-pd"
        stops = [r.path for r in kube.writes() if r.method == "PATCH" and "/workloads/" in r.path
                 and r.status < 300 and (r.body or {}).get("spec", {}).get("active") is False]
        assert len(stops) == len(set(stops)) == 5  # each victim stopped once, by one request for both pools
        notes = w.events(Reason.DEACTIVATE_TRAINING.value)
        assert len(notes) == 5
        assert all("a 2x2x2 slice fits at cube-" in n and "slice(s) free in flavor slice-rf" in n for n in notes)
        assert any("so prefill can grow" in n for n in notes)
        assert any("so decode can grow" in n for n in notes)
        for wl in w.kube.list(V1BETA2, "Workload", NS):
            if wl["metadata"]["name"].startswith("leaderworkerset-"):
                assert len(assigned_hosts(wl)) == 2
        assert w.tas.violations == []

        # Load falls: both back to one group; every fine-tune resumes and is readmitted.
        prom.values = {"prompt": 1_000.0, "gen": 1_000.0}
        await until(lambda: w.groups(PREFILL) == 1 and w.groups(DECODE) == 1
                    and all(active and admitted for active, admitted in w.training().values()), timeout=150.0)
        assert w.tas.violations == []
        assert len(w.tas.used_nodes()) == 32
    finally:
        await w.stop()
        await prom.stop()


BIG = "kueue-vllm-decode-big"


def _hosts(block: str, x: int, y: int, z: int) -> list[str]:
    """The two VMs of the 2x2x2 partition ``<block>-x<x>y<y>z<z>`` (``codelab.nodes``)."""
    return [f"gke-tpu7-{block}-{x}{y}{z}{w}" for w in (0, 1)]


def fragmented_world(kube: Emulator, *, index_annotation: bool = True) -> LiveTas:
    """The codelab's blocks, decode served by five 2x2x2 groups and fragmented so that no 2x4x4 half-block is
    free of serving, whatever training yields:

    - cube-a x0 half: decode group 4 (the one an LWS scale-down removes first) and fine-tunes ft-a..ft-c;
    - cube-a x1 half: decode groups 0-3;
    - cube-b: the prefill group and another tenant's seven-slice JobSet the policy may not stop.

    Placed by hand (Kueue's own packing would not leave it so), then provisioned and made ready by the stand-in.
    """
    for obj in [*codelab.kueue_resources(), *codelab.nodes()]:
        kube.add(obj)
    kube.add(codelab.vllm_lws("prefill"))
    kube.add(codelab.vllm_lws("decode", replicas=5))
    kube.add(codelab.vllm_lws("decode", replicas=0, topology="2x4x4", name=BIG))
    for name, age in (("ft-a", 60.0), ("ft-b", 120.0), ("ft-c", 180.0)):
        ft = codelab.subslicing_jobset()
        ft["metadata"]["name"] = name
        ft["metadata"]["labels"]["team"] = "finetune"
        ft["metadata"]["annotations"] = {LAST_CHECKPOINT: _stamp(age)}
        ft["spec"]["replicatedJobs"][0]["replicas"] = 1
        kube.add(ft)
    other = codelab.subslicing_jobset()
    other["metadata"]["name"] = "other-tenant"
    other["spec"]["replicatedJobs"][0]["replicas"] = 7
    kube.add(other)
    tas = LiveTas(kube, index_annotation=index_annotation)
    tas.create_workloads()
    t0 = asyncio.get_running_loop().time() - 100
    for index, place in enumerate([(1, 0, 0), (1, 0, 1), (1, 1, 0), (1, 1, 1), (0, 0, 0)]):
        tas.reserve(tas.group_workload(DECODE, index), [_hosts("cube-a", *place)], t0)
    for name, place in (("ft-a", (0, 0, 1)), ("ft-b", (0, 1, 0)), ("ft-c", (0, 1, 1))):
        tas.reserve(f"jobset-{name}", [_hosts("cube-a", *place)], t0)
    tas.reserve(tas.group_workload(PREFILL, 0), [_hosts("cube-b", 0, 0, 0)], t0)
    rest = [(x, y, z) for x in (0, 1) for y in (0, 1) for z in (0, 1)][1:]
    tas.reserve("jobset-other-tenant", [[h for p in rest for h in _hosts("cube-b", *p)]], t0)
    for t in (t0 + 1, t0 + 2, t0 + 5):
        tas.step(t)
    assert len(tas.used_nodes()) == 32
    assert tas.violations == []
    assert (tas.ready_groups(PREFILL), tas.ready_groups(DECODE), tas.ready_groups(BIG)) == (1, 5, 0)
    return tas


def shift_policy(url: str) -> dict[str, Any]:
    """One ``disaggregated`` policy for prefill and two decode variants: 2x2x2 groups (2,000 generated tokens/s
    each) and 2x4x4 groups (10,000 on 32 chips: more per chip, an estimate for the test, as in
    tests/core/test_disaggregated); only the fine-tunes (label ``team: finetune``) may be stopped.

    ``scaleDownDelaySeconds`` 6: rule 4b adds the larger group only within that delay of the smaller one's removal,
    once its place is free (the stand-in Kueue has deleted the removed group's Workload). At 2 s (until 2026-12-07)
    a loaded machine missed it: at load 8-12 (21:30 UTC, main 186d6be) decode went 5 -> 4 and then held 4 small
    groups for 45 s, the shift given up. A cluster's delay (minutes) is many times a group's removal; 6 s is three
    times the 2 s within which an idle run adds it."""
    def variant(name: str, lws_name: str, topology: str, tps: float, low: int, high: int) -> dict[str, Any]:
        return {"name": name, "target": {"kind": "LeaderWorkerSet", "name": lws_name, "namespace": NS},
                "sliceTopology": topology, "tokensPerSecond": tps, "minReplicas": low, "maxReplicas": high}

    return {"apiVersion": "autoscaler.dev/v1alpha1", "kind": "ScalingPolicy", "metadata": {"name": "qwen-pd"},
            "spec": {
                "target": {"kind": "LeaderWorkerSet", "name": DECODE, "namespace": NS},
                "maxReplicas": 16, "evaluationPeriodSeconds": 1,
                "source": {"type": "prometheus", "url": url},
                "signals": [{"name": "prompt_tokens", "query": "prompt", "pool": "prefill"},
                            {"name": "generation_tokens", "query": "gen"}],
                "policy": {
                    "type": "disaggregated", "scaleDownDelaySeconds": 6,
                    "prefill": {"ttftSeconds": 2, "signals": {"promptTokens": "prompt_tokens"},
                                "variants": [variant("prefill", PREFILL, "2x2x2", 8000, 1, 4)]},
                    "decode": {"timePerOutputTokenSeconds": 0.05,
                               "signals": {"generationTokens": "generation_tokens"},
                               "variants": [variant("decode", DECODE, "2x2x2", 2000, 0, 8),
                                            variant("decode-big", BIG, "2x4x4", 10000, 0, 2)]},
                },
                "capacity": {"clusterQueue": "cq", "resource": "google.com/tpu", "perReplica": 8,
                             "minRunSeconds": 0},
                "preemptible": [{"namespace": NS, "selector": {"matchLabels": {"team": "finetune"}}}],
            }}


def scale_writes(kube: Emulator) -> list[tuple[str, int]]:
    """Every successful replica write to a LeaderWorkerSet, in order: (LWS name, replicas)."""
    out = []
    for r in kube.writes():
        if r.status < 300 and "/leaderworkersets/" in r.path and r.method == "PATCH":
            replicas = (r.body or {}).get("spec", {}).get("replicas")
            if replicas is not None:
                out.append((r.path.split("/leaderworkersets/")[1].split("/")[0], int(replicas)))
    return out


@pytest.mark.timeout(300)  # real-time waits: ~10 s idle, 4x that on a loaded 2-core machine
@pytest.mark.parametrize("index_annotation", [True, False], ids=["kueue-index-annotation", "index-from-pods"])
async def test_a_make_room_shift_frees_the_place_a_larger_group_needs_then_moves_decode_onto_it(
    kube: Emulator, kube_client: client.ApiClient, tmp_path: Path, index_annotation: bool
) -> None:
    """Rule 4b live: decode carries 4,900 tokens/s on five 2x2x2 groups; one 2x4x4 group carries it on 8 fewer
    chips, but no 2x4x4 half-block is free of serving. The controller reads from the cluster which group an
    LWS scale-down removes (the highest index: group 4, in the half that only fine-tunes share), removes it
    first, then adds the 2x4x4 group there, stopping exactly the three fine-tunes of that half (never the other
    tenant), then removes the small groups once it serves; the fine-tunes resume in the half they free.
    The group index is read from Kueue's annotation on the Workload, or (an older Kueue) from the group's pods.
    With the removal order left empty, or read lowest index first, the 2x4x4 group is never added (watched)."""
    tas = fragmented_world(kube, index_annotation=index_annotation)
    prom = FakePrometheus(LoopClock())  # type: ignore[arg-type]
    await prom.start()
    policies = tmp_path / "policies"
    policies.mkdir()
    policies.joinpath("pd.yaml").write_text(yaml.safe_dump(shift_policy(prom.url)))
    w = Codelab(kube, kube_client, tas, policies, VllmMetrics(), VllmMetrics())
    group4 = tas.group_workload(DECODE, 4)
    resumed_while_waiting: list[str] = []

    def check() -> None:
        last = kube.writes()[-1]
        gated = any(pod["spec"].get("schedulingGates") for pod in kube.list("v1", "Pod", NS))
        if last.status < 300 and (last.body or {}).get("spec", {}).get("active") is True and gated:
            resumed_while_waiting.append(last.path)

    kube.after("PATCH", f"/apis/kueue.x-k8s.io/*/namespaces/{NS}/workloads/*", check, times=10_000)
    try:
        prom.values = {"prompt": 1_000.0, "gen": 4_900.0}
        w.start()
        await until(lambda: w.groups(BIG) == 1 and tas.ready_groups(BIG) == 1, timeout=120.0)
        writes = scale_writes(kube)
        # The small group went first, before any 2x4x4 group was asked for: the shift, not a growth.
        assert writes[0] == (DECODE, 4), writes
        assert writes.index((BIG, 1)) > 0
        assert not kube.exists(V1BETA2, "Workload", group4, NS)
        # The 2x4x4 group sits in the half-block group 4 left, where the three fine-tunes were stopped.
        big = kube.get(V1BETA2, "Workload", tas.group_workload(BIG, 0), NS)
        assert sorted(assigned_hosts(big)) == sorted(
            h for y in (0, 1) for z in (0, 1) for h in _hosts("cube-a", 0, y, z))
        # Exactly the three fine-tunes of that half were stopped, each once (never the other tenant), and none
        # was resumed while a group waited for admission (the fine-tunes may resume later, legitimately).
        stops = [r.path.rsplit("/", 1)[1] for r in kube.writes() if r.method == "PATCH" and "/workloads/" in r.path
                 and r.status < 300 and (r.body or {}).get("spec", {}).get("active") is False]
        assert sorted(stops) == ["jobset-ft-a", "jobset-ft-b", "jobset-ft-c"]
        assert resumed_while_waiting == []
        assert w.training()["jobset-other-tenant"] == (True, True)
        # Then the small groups go, once the larger one serves, and the fine-tunes resume in the half they free.
        await until(lambda: w.groups(DECODE) == 0 and all(a and ad for a, ad in w.training().values()),
                    timeout=150.0)
        assert (w.groups(PREFILL), w.groups(BIG)) == (1, 1)
        assert resumed_while_waiting == []
        assert tas.violations == []
    finally:
        await w.stop()
        await prom.stop()
