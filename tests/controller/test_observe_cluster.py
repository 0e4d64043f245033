"""``autoscaler observe`` against a cluster: the replica count comes from the (emulated) API server, read
with the controller's own target classes, and nothing is written."""

from __future__ import annotations

import asyncio
import json
import re
import urllib.parse
from pathlib import Path

import pytest
from kubernetes_asyncio import client

from autoscaler.cli import main
from autoscaler.controller import lookups
from autoscaler.controller.config import ControllerConfig
from autoscaler.controller.observer import Prepared
from autoscaler.controller.runtime import Runtime
from autoscaler.controller.targets import KubeTargets
from autoscaler.core.engine import CompiledPolicy, compile_policy
from autoscaler.core.model import Observation, PolicyState, ScaleDecision, TargetKind, TargetRef
from autoscaler.policyfile import loader
from autoscaler.sources.base import pod_pattern
from autoscaler.sources.command import ObserverOptions, observe_once
from autoscaler.sources.pool import plan
from tests.controller.helpers import ManualClock, TgiMetrics, pool_on, tutorial_cluster
from tests.controller.policies import tgi_policy
from tests.controller.test_runtime import kubeconfig
from tests.kube import objects
from tests.kube.emulator import Emulator
from tests.kube.kueue import Kueue
from tests.sources.realprom import TextServer


def write_policy(tmp_path: Path, tgi: TgiMetrics) -> Path:
    f = tmp_path / "tgi.yaml"
    f.write_text(tgi_policy(source=f"{{type: pods, endpoints: ['{tgi.url}']}}", capacity=False))
    return f


async def observe(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    # The command runs its own event loop (asyncio.run): give it a thread so the emulator keeps serving.
    code = await asyncio.to_thread(main, ["observe", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("replicas", "queue", "desired", "reason"),
    [
        pytest.param(2, 25, 3, "ScaleUp", id="scale-up-from-the-cluster-count"),
        pytest.param(2, 15, 2, "Steady", id="holds-at-the-cluster-count"),
    ],
)
async def test_observe_reads_the_replica_count_from_the_cluster(
    kube: Emulator, tgi: TgiMetrics, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    replicas: int, queue: float, desired: int, reason: str,
) -> None:
    kube.add(objects.deployment(replicas=replicas))
    tgi.queue = queue
    argv = ["--policy", str(write_policy(tmp_path, tgi)), "--kubeconfig", str(kubeconfig(tmp_path, kube.url))]
    code, out, _ = await observe([*argv, "--once", "--json"], capsys)
    assert code == 0
    (target,) = json.loads(out)["targets"]
    assert target["target"] == "Deployment/llm/tgi-gemma-deployment"
    assert target["signals"]["queue"]["value"] == queue
    decision = target["decision"]
    assert (decision["state"], decision["current"], decision["desired"], decision["reason"]) == (
        "ok", replicas, desired, reason,
    )
    assert not [r for r in kube.requests if r.is_write], "observe never writes"


async def test_a_missing_target_is_an_unknown_decision_with_the_servers_reason(
    kube: Emulator, tgi: TgiMetrics, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--policy", str(write_policy(tmp_path, tgi)), "--kubeconfig", str(kubeconfig(tmp_path, kube.url))]
    code, out, _ = await observe([*argv, "--once", "--json"], capsys)
    assert code == 0
    decision = json.loads(out)["targets"][0]["decision"]
    assert decision["state"] == "unknown"
    assert decision["reason"].startswith(
        "current replica count unknown: cannot read Deployment/llm/tgi-gemma-deployment"
    )
    assert "not found" in decision["reason"]


async def test_replicas_flag_wins_over_the_cluster(
    kube: Emulator, tgi: TgiMetrics, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kube.add(objects.deployment(replicas=2))
    tgi.queue = 25
    argv = ["--policy", str(write_policy(tmp_path, tgi)), "--kubeconfig", str(kubeconfig(tmp_path, kube.url))]
    code, out, _ = await observe([*argv, "--replicas", "1", "--once", "--json"], capsys)
    assert code == 0
    assert json.loads(out)["targets"][0]["decision"]["current"] == 1
    assert kube.requests == [], "with --replicas the cluster is not asked"


async def test_an_unreadable_kubeconfig_is_one_line_and_exit_1(
    tgi: TgiMetrics, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope"
    code, out, err = await observe(["--policy", str(write_policy(tmp_path, tgi)), "--kubeconfig", str(missing),
                                    "--once"], capsys)
    assert code == 1
    assert err.startswith("autoscaler observe: cannot load Kubernetes credentials from ")
    assert "Traceback" not in err + out


@pytest.mark.parametrize(
    ("text", "why"),
    [
        pytest.param("garbage: [\n", "not a kubeconfig (ParserError", id="broken-yaml"),
        pytest.param("- a\n", "not a kubeconfig (TypeError", id="a-list"),
        pytest.param("clusters: 5\ncurrent-context: x\n", "not a kubeconfig (TypeError", id="clusters-a-number"),
    ],
)
async def test_a_kubeconfig_that_is_no_kubeconfig_is_one_line_and_exit_1(
    tgi: TgiMetrics, tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, why: str
) -> None:
    """audit4's sweep (2026-12-08): these ended in "internal error: ParserError ...; please report it"."""
    bad = tmp_path / "kubeconfig"
    bad.write_text(text)
    code, out, err = await observe(["--policy", str(write_policy(tmp_path, tgi)), "--kubeconfig", str(bad),
                                    "--once"], capsys)
    assert code == 1
    assert err.startswith(f"autoscaler observe: cannot load Kubernetes credentials from {bad}: {why}")
    assert "internal error" not in err
    assert "Traceback" not in err + out


async def test_observe_shows_the_training_the_controller_holds_down_and_why(
    kube: Emulator, tgi: TgiMetrics, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kube.add(objects.deployment(replicas=2))
    kube.add(objects.cluster_queue())
    kube.add(objects.local_queue())
    job = kube.add(objects.job())
    held_for = json.dumps({"clusterQueue": "cluster-queue", "resource": objects.GPU,
                           "target": "Deployment/llm/tgi-gemma-deployment", "targetUID": "u-1"})
    kube.add(objects.workload("job-finetune-gemma-l4-3316f", owner=job, priority=20, active=False, annotations={
        "autoscaler.dev/deactivated-by": "tgi-gemma", "autoscaler.dev/held-for": held_for,
        "autoscaler.dev/deactivated-reason": "serving needs 2 replicas",
        "autoscaler.dev/deactivated-at": "2026-11-30T10:00:00Z",
    }))
    kube.add(objects.workload("job-other-1a2b3", priority=20, active=False))  # someone else's: not shown
    f = tmp_path / "tgi.yaml"
    f.write_text(tgi_policy(source=f"{{type: pods, endpoints: ['{tgi.url}']}}"))
    argv = ["--policy", str(f), "--kubeconfig", str(kubeconfig(tmp_path, kube.url)), "--once"]
    code, out, _ = await observe([*argv, "--json"], capsys)
    assert code == 0
    (held,) = json.loads(out)["held"]
    assert (held["workload"], held["chips"], held["target"], held["covered"], held["admitted"]) == (
        "llm/job-finetune-gemma-l4-3316f", 4, "Deployment/llm/tgi-gemma-deployment", True, False,
    )
    assert held["reason"] == "serving needs 2 replicas"
    code, out, _ = await observe(argv, capsys)
    assert "training held down by the controller: 1" in out
    assert "llm/job-finetune-gemma-l4-3316f  4 nvidia.com/gpu in cluster-queue, evicted" in out
    assert not [r for r in kube.requests if r.is_write], "observe never writes"


async def test_observe_builds_the_observation_run_builds_and_decides_alike(
    kube: Emulator, kube_client: client.ApiClient, kueue: Kueue, tgi: TgiMetrics, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The tutorial's policy with its training arbitration (Workloads, ClusterQueue quota): one pass of
    ``autoscaler run`` (dry run) and ``observe`` against the same cluster and the same server build the very
    same ``Observation`` (replicas, signals, training, quota) and take the same decision. Fails if observe
    reads anything its own way (no training picture, another combination of the pods, another source)."""
    tutorial_cluster(kube, kueue)
    tgi.queue = 25
    (tmp_path / "p").mkdir()
    text = tgi_policy(source=f"{{type: pods, endpoints: ['{tgi.url}']}}")
    (tmp_path / "p" / "tgi.yaml").write_text(text)
    clock = ManualClock()
    cfg = ControllerConfig.model_validate({"leaderElection": {"enabled": False}})
    rt = Runtime(api=kube_client, config=cfg, policies_dir=tmp_path / "p", clock=clock, identity="pod-a",
                 namespace="autoscaler-system", source=pool_on(clock), dry_run=True)
    seen: list[Observation] = []
    inner = rt.observer.observe

    async def spy(policy: CompiledPolicy, prepared: Prepared | Exception | None = None) -> Observation:
        seen.append(await inner(policy, prepared))
        return seen[-1]

    monkeypatch.setattr(rt.observer, "observe", spy)
    assert rt.store.reload().loaded
    assert await rt.controller.run_once()
    await rt.observer.aclose()
    (ran,) = seen
    # The arbitration's picture is part of what is compared.
    assert ran.training
    assert ran.quota is not None

    policies = loader.load_file(str(tmp_path / "p" / "tgi.yaml"))
    before = len(kube.requests)
    pool = pool_on(clock)
    try:
        options = ObserverOptions(str(kubeconfig(tmp_path, kube.url)), None, None, 5.0, cluster=True)
        async with lookups.observing(pool, options) as observing:
            (got,) = await observing.observe(policies)
            view = await observe_once(policies, observing, clock=clock.wall)
    finally:
        await pool.aclose()
    assert got.failed is None
    assert got.observation == ran
    (decision,) = [d for d in compile_policy(policies[0]).decide(ran, PolicyState(), clock.wall())[0]
                   if isinstance(d, ScaleDecision)]
    shown = view["targets"][0]["decision"]
    assert (shown["current"], shown["desired"], shown["reason"], shown["message"]) == (
        decision.current, decision.desired, decision.reason.value, decision.message)
    assert not [r for r in kube.requests[before:] if r.is_write], "observe never writes"


async def test_node_level_metrics_get_the_nodes_of_the_targets_serving_pods(
    kube: Emulator, kube_client: client.ApiClient, tmp_path: Path
) -> None:
    """Issue 9, item 5: a node-level Cloud Monitoring metric reads the nodes the target's serving pods run on
    (their ``spec.nodeName``, from the controller's own target read), not every node and not none."""
    kube.add(objects.deployment(replicas=2))
    for i, node in enumerate(("gke-tpu-b", "gke-tpu-a", None)):
        pod = objects.pod(f"tgi-gemma-deployment-6b7c8d9f4-{i}aaaa", ip=f"10.0.0.{i + 1}" if node else None,
                          ready=node is not None)
        if node is not None:
            pod["spec"]["nodeName"] = node
        kube.add(pod)
    text = tgi_policy(source="{type: cloud-monitoring, project: p, cluster: prod-1}", capacity=False).replace(
        "preset: tgi.queue_size", "preset: tpu.node_memory_used_ratio")
    (tmp_path / "tgi.yaml").write_text(text)
    (policy,) = loader.load_file(tmp_path / "tgi.yaml")
    cp = compile_policy(policy)
    view = (await KubeTargets(kube_client).observe_many([cp]))[cp.name]
    assert not isinstance(view, Exception)
    planned = plan(policy, pods=view.pods)
    assert not planned.missing
    (request,) = planned.requests
    assert request.node_names() == ("gke-tpu-a", "gke-tpu-b")  # the pending pod (no node yet) adds none


async def test_observe_reads_a_signal_without_source_from_the_configs_default_source(
    tgi: TgiMetrics, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 9, item 2: ``observe --config`` serves a signal that names no source from the controller
    config's ``defaultSource``, as ``run`` does; without ``--config`` the same policy is refused in one line."""
    tgi.queue = 25
    text = tgi_policy(capacity=False).replace("  source: {type: pods, port: 8000}\n", "")
    assert "source:" not in text
    (tmp_path / "tgi.yaml").write_text(text)
    (tmp_path / "controller.yaml").write_text(f"defaultSource: {{type: pods, endpoints: ['{tgi.url}']}}\n")
    argv = ["--policy", str(tmp_path / "tgi.yaml"), "--replicas", "1", "--once", "--json"]
    code, out, _ = await observe([*argv, "--config", str(tmp_path / "controller.yaml")], capsys)
    assert code == 0
    (target,) = json.loads(out)["targets"]
    assert target["signals"]["queue"]["value"] == 25
    assert (target["decision"]["current"], target["decision"]["desired"]) == (1, 3)
    code, out, err = await observe(argv, capsys)
    assert code == 1
    assert "no source" in err


async def test_record_queries_what_the_controllers_observer_reads_in_the_cluster(
    kube: Emulator, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``record`` opens the controller's observer: in a cluster its range query selects the pods the observer read
    from the API server (beside the target's pod-name pattern, for the pods it had before), its report says the
    replica count the cluster has now, and nothing is written to the cluster."""
    kube.add(objects.deployment(replicas=2))
    for name in ("tgi-gemma-deployment-6b7c8d9f4-aaaaa", "tgi-gemma-deployment-6b7c8d9f4-bbbbb"):
        kube.add(objects.pod(name, ip="10.0.0.1"))
    matrix = {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"namespace": "llm", "pod": "tgi-gemma-deployment-6b7c8d9f4-aaaaa"}, "values": [[1, "3"]]}]}}
    prom = TextServer(content_type="application/json")
    # No kube-state-metrics here: its series (the replica counts record saves) match nothing.
    empty = {"status": "success", "data": {"resultType": "matrix", "result": []}}
    prom.render = lambda request: json.dumps(empty if "kube_deployment" in request else matrix)
    try:
        (tmp_path / "tgi.yaml").write_text(tgi_policy(source=f"{{type: prometheus, url: '{prom.base}'}}",
                                                      capacity=False))
        argv = ["record", "--policy", str(tmp_path / "tgi.yaml"), "--kubeconfig", str(kubeconfig(tmp_path, kube.url)),
                "--start", "-1m", "--step", "15s", "--out", str(tmp_path / "rec")]
        code = await asyncio.to_thread(main, argv)
    finally:
        prom.close()
    out = capsys.readouterr().out
    assert code == 0, out
    assert "queue: 1 series, 1 samples" in out
    assert "replicas: not recorded (no kube-state-metrics series for Deployment/llm/tgi-gemma-deployment" in out
    assert "2 ready now" in out
    query, *replica_queries = [
        urllib.parse.parse_qs(urllib.parse.urlsplit(path).query)["query"][0] for _, path, _, _ in prom.seen
    ]
    assert replica_queries, prom.seen
    assert all("kube_deployment_spec_replicas" in q for q in replica_queries), replica_queries
    # The pod selector as PromQL holds it (a regex in a double-quoted string: each backslash doubled), the same in
    # the values and in their sample times.
    (selected,) = set(re.findall(r'pod=~"((?:[^"\\]|\\.)*)"', query))
    alternatives = selected.replace("\\\\", "\\").split("|")
    assert alternatives == [pod_pattern(TargetRef(TargetKind.DEPLOYMENT, "tgi-gemma-deployment", "llm")),
                            *(re.escape(f"tgi-gemma-deployment-6b7c8d9f4-{x}") for x in ("aaaaa", "bbbbb"))]
    assert kube.requests, "record reads the target and its pods from the cluster"
    assert not [r for r in kube.requests if r.is_write], "record never writes"
