"""A policy with several targets through the real loop, against the API-server emulation: both pools of a
disaggregated deployment are read, decided together and written through the one /scale path; each Event goes
to its own LeaderWorkerSet; a pair is checked before any write and never left half-applied."""

from __future__ import annotations

import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from kubernetes_asyncio import client

from autoscaler.controller.config import ControllerConfig
from autoscaler.controller.runtime import Runtime
from tests.controller.helpers import ManualClock, pool_on
from tests.kube import objects
from tests.kube.emulator import Emulator

NS = "llm"
LWS_PATH = f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{NS}/leaderworkersets"
PREFILL_SCALE = f"{LWS_PATH}/prefill/scale"
DECODE_SCALE = f"{LWS_PATH}/decode/scale"

POLICY = """\
apiVersion: autoscaler.dev/v1alpha1
kind: ScalingPolicy
metadata: {{name: pd}}
spec:
  target: {{kind: LeaderWorkerSet, name: decode, namespace: llm}}
  maxReplicas: 16
  source: {{type: prometheus, url: "{url}"}}
  signals:
    - {{name: prompt, query: prompt, pool: prefill}}
    - {{name: gen, query: gen}}
  policy:
    type: disaggregated
    chipBudget: 64
    prefill:
      ttftSeconds: 2
      signals: {{promptTokens: prompt}}
      variants:
        - {{name: prefill, target: {{kind: LeaderWorkerSet, name: prefill, namespace: llm}},
           sliceTopology: 2x2x2, tokensPerSecond: 8000, minReplicas: 1, maxReplicas: 6}}
    decode:
      timePerOutputTokenSeconds: 0.05
      signals: {{generationTokens: gen}}
      variants:
        - {{name: decode, target: {{kind: LeaderWorkerSet, name: decode, namespace: llm}},
           sliceTopology: 2x2x2, tokensPerSecond: 2000, minReplicas: 1, maxReplicas: 6}}
"""


class FakePrometheus:
    """Answers each raw query with the scalar the test set for it (stamped on the test's clock)."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.values: dict[str, float] = {}
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/api/v1/query", self._query)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _query(self, request: web.Request) -> web.Response:
        form = urllib.parse.parse_qs(await request.text())
        value = self.values[form["query"][0]]
        stamp = self.clock.wall() - 1
        return web.json_response(
            {"status": "success", "data": {"resultType": "scalar", "result": [stamp, str(value)]}}
        )


@pytest.fixture
async def prom() -> AsyncIterator[FakePrometheus]:
    p = FakePrometheus(ManualClock())
    await p.start()
    yield p
    await p.stop()


def runtime(api: client.ApiClient, policies: Path, clock: ManualClock, url: str) -> Runtime:
    (policies / "pd.yaml").write_text(POLICY.format(url=url))
    cfg = ControllerConfig.model_validate({"leaderElection": {"enabled": False}})
    rt = Runtime(api=api, config=cfg, policies_dir=policies, clock=clock, identity="controller-a",
                 namespace="autoscaler", source=pool_on(clock))
    rt.store.reload()
    assert list(rt.store.policies) == ["pd"], rt.store.rejections
    return rt


def groups(kube: Emulator, name: str) -> int:
    return int(kube.get("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", name, NS)["spec"]["replicas"])


def events_about(kube: Emulator, name: str) -> list[dict[str, Any]]:
    out = []
    for e in kube.list("events.k8s.io/v1", "Event", NS):
        if (e.get("regarding") or {}).get("name") == name:
            out.append(e)
    return out


@pytest.fixture
def cluster(kube: Emulator) -> Emulator:
    kube.add(objects.leader_worker_set("prefill", NS, replicas=1, size=2))
    kube.add(objects.leader_worker_set("decode", NS, replicas=1, size=2))
    return kube


async def test_both_pools_are_decided_together_and_written_through_scale(
    cluster: Emulator, kube_client: client.ApiClient, prom: FakePrometheus, tmp_path: Path,
) -> None:
    rt = runtime(kube_client, tmp_path, prom.clock, prom.url)
    prom.values = {"prompt": 20000.0, "gen": 2500.0}  # prefill needs 4 groups, decode 2
    assert await rt.controller.run_once()
    assert (groups(cluster, "prefill"), groups(cluster, "decode")) == (4, 2)
    scale_writes = [w.path for w in cluster.writes() if w.path.endswith("/scale") and w.method == "PATCH"]
    assert PREFILL_SCALE in scale_writes
    assert DECODE_SCALE in scale_writes
    (pre,) = [e for e in events_about(cluster, "prefill") if e["reason"] == "ScaleUp"]
    (dec,) = [e for e in events_about(cluster, "decode") if e["reason"] == "ScaleUp"]
    assert "prefill needs 28571 tokens/s" in pre["note"]
    assert "decode needs 3571 tokens/s" in dec["note"]
    assert "together prefill 4×2x2x2 + decode 2×2x2x2 = 48 chips" in dec["note"]
    await rt.observer.aclose()


async def test_a_failed_second_write_sets_the_first_back(
    cluster: Emulator, kube_client: client.ApiClient, prom: FakePrometheus, tmp_path: Path,
) -> None:
    rt = runtime(kube_client, tmp_path, prom.clock, prom.url)
    prom.values = {"prompt": 20000.0, "gen": 2500.0}
    # The dry run of the decode scale passes; the real write then fails (and its retries too).

    def fail_decode() -> None:
        cluster.inject(422, DECODE_SCALE, method="PATCH", times=10)

    cluster.after("PATCH", DECODE_SCALE, fail_decode, times=1)
    assert not await rt.controller.run_once()
    assert (groups(cluster, "prefill"), groups(cluster, "decode")) == (1, 1)
    prefill_scales = [w.body["spec"]["replicas"] for w in cluster.writes()
                      if w.path == PREFILL_SCALE and w.method == "PATCH" and "dryRun" not in w.query]
    assert prefill_scales == [4, 1]  # written, then set back in the same pass
    (reverted,) = [e for e in events_about(cluster, "prefill") if e["reason"] == "Reverted"]
    assert "its pair was not applied" in reverted["note"]
    assert "pd" not in rt.controller.states  # not committed: the next pass decides again
    cluster.clear_faults()
    assert await rt.controller.run_once()
    assert (groups(cluster, "prefill"), groups(cluster, "decode")) == (4, 2)
    await rt.observer.aclose()


async def test_a_pool_owned_by_someone_else_stops_the_pair_before_any_write(
    kube: Emulator, kube_client: client.ApiClient, prom: FakePrometheus, tmp_path: Path,
) -> None:
    kube.add(objects.leader_worker_set("prefill", NS, replicas=1, size=2))
    kube.add(objects.leader_worker_set("decode", NS, replicas=1, size=2,
                                       annotations={"autoscaler.dev/managed-by": "someone-else"}))
    rt = runtime(kube_client, tmp_path, prom.clock, prom.url)
    prom.values = {"prompt": 20000.0, "gen": 2500.0}
    assert not await rt.controller.run_once()
    assert (groups(kube, "prefill"), groups(kube, "decode")) == (1, 1)
    assert not [w for w in kube.writes() if w.path.endswith("/scale") and "dryRun" not in w.query]
    await rt.observer.aclose()


async def test_an_unreadable_pool_holds_both(
    cluster: Emulator, kube_client: client.ApiClient, prom: FakePrometheus, tmp_path: Path,
) -> None:
    rt = runtime(kube_client, tmp_path, prom.clock, prom.url)
    prom.values = {"prompt": 20000.0, "gen": 2500.0}
    cluster.inject(500, f"{LWS_PATH}/prefill", method="GET", times=50)
    await rt.controller.run_once()
    assert (groups(cluster, "prefill"), groups(cluster, "decode")) == (1, 1)
    assert not [w for w in cluster.writes() if w.path.endswith("/scale")]
    await rt.observer.aclose()


API = "autoscaler.dev/v1alpha1"


def policy_object(url: str, *, prefill_namespace: str | None = None) -> dict[str, Any]:
    import yaml  # noqa: PLC0415

    doc: dict[str, Any] = yaml.safe_load(POLICY.format(url=url))
    doc["metadata"]["namespace"] = NS
    for role in ("prefill", "decode"):
        for v in doc["spec"]["policy"][role]["variants"]:
            del v["target"]["namespace"]  # an object's targets default to its own namespace
    del doc["spec"]["target"]["namespace"]
    if prefill_namespace is not None:
        doc["spec"]["policy"]["prefill"]["variants"][0]["target"]["namespace"] = prefill_namespace
    return doc


def object_runtime(api: client.ApiClient, tmp_path: Path, clock: ManualClock) -> Runtime:
    cfg = ControllerConfig.model_validate({"leaderElection": {"enabled": False}, "watchScalingPolicies": True})
    (tmp_path / "files").mkdir(exist_ok=True)
    return Runtime(api=api, config=cfg, policies_dir=tmp_path / "files", clock=clock, identity="a",
                   namespace="autoscaler", source=pool_on(clock))


async def test_an_object_status_lists_every_target(
    cluster: Emulator, kube_client: client.ApiClient, prom: FakePrometheus, tmp_path: Path,
) -> None:
    cluster.add(policy_object(prom.url))
    rt = object_runtime(kube_client, tmp_path, prom.clock)
    prom.values = {"prompt": 20000.0, "gen": 2500.0}
    await rt.list_policy_objects()
    assert rt.store.reload().loaded == ("ScalingPolicy llm/pd",)
    assert await rt.controller.run_once()
    st = cluster.get(API, "ScalingPolicy", "pd", NS)["status"]
    assert (st["currentReplicas"], st["desiredReplicas"]) == (1, 2)  # spec.target: decode
    by_target = {t["target"]: (t["currentReplicas"], t["desiredReplicas"], t["reason"]) for t in st["targets"]}
    assert by_target == {
        "LeaderWorkerSet/llm/prefill": (1, 4, "ScaleUp"), "LeaderWorkerSet/llm/decode": (1, 2, "ScaleUp"),
    }
    await rt.observer.aclose()


async def test_an_object_may_not_name_a_pool_in_another_namespace(
    cluster: Emulator, kube_client: client.ApiClient, prom: FakePrometheus, tmp_path: Path,
) -> None:
    cluster.add(objects.leader_worker_set("prefill", "other", replicas=1, size=2))
    cluster.add(policy_object(prom.url, prefill_namespace="other"))
    rt = object_runtime(kube_client, tmp_path, prom.clock)
    prom.values = {"prompt": 20000.0, "gen": 2500.0}
    await rt.list_policy_objects()
    rt.store.reload()
    assert "pd" not in rt.store.policies
    await rt.controller.run_once()
    assert groups(cluster, "decode") == 1
    other = cluster.get("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "prefill", "other")
    assert int(other["spec"]["replicas"]) == 1
    await rt.status.write()
    st = cluster.get(API, "ScalingPolicy", "pd", NS)["status"]
    assert st["reason"] == "InvalidPolicy"
    assert "spec.policy.prefill.variants[0].target.namespace 'other'" in st["message"]
    await rt.observer.aclose()
