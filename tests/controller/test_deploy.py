"""deploy/: every kustomization renders as `kubectl apply -k` renders it (no flags), every manifest is valid
offline, and the RBAC is exactly what the controller needs.

``kubectl kustomize`` renders (skipped with a reason when kubectl is absent); ``kubernetes_validate`` checks
every built-in kind against the Kubernetes 1.31 schemas in strict mode; PodMonitoring (a GMP CRD) is checked
structurally. The RBAC test enforces the rendered Roles and bindings in the emulated API server (by namespace,
verb, resource and resourceNames), runs leader election and the controller with the shipped policies against
the tutorial's cluster, and fails on any 403 and on any rule no request used.
"""

from __future__ import annotations

import asyncio
import functools
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes_asyncio import client

from autoscaler.controller.config import ControllerConfig
from autoscaler.controller.leader import LeaderElector
from autoscaler.controller.reload import PolicyStore
from autoscaler.controller.runtime import Runtime
from tests.controller.helpers import T0, ManualClock, TgiMetrics, pool_on, settle_serving, tutorial_cluster
from tests.controller.policies import REPO
from tests.kube import objects
from tests.kube.emulator import Emulator, Request
from tests.kube.kueue import Kueue

DEPLOY = REPO / "deploy"
KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl not installed: cannot render kustomizations")
OVERLAYS = sorted(p.parent.relative_to(DEPLOY).as_posix() for p in DEPLOY.glob("overlays/*/kustomization.yaml"))
COMPONENTS = sorted(p.parent.relative_to(DEPLOY).as_posix() for p in DEPLOY.glob("components/*/kustomization.yaml"))
LAYOUTS = [pytest.param(x, id=x) for x in ["base", *OVERLAYS]]
SERVICE_ACCOUNT = "system:serviceaccount:autoscaler-system:accel-autoscaler"

#: Rules of the gmp overlay that the scenario below does not exercise, and why they exist.
UNEXERCISED = {
    ("kueue.x-k8s.io", "workloadpriorityclasses", "get"): "Workloads whose priority is a class, not a number",
    ("events.k8s.io", "events", "patch"): "a repeated Event's series count (tested in test_events)",
    ("apps", "deployments", "get"): "a target read alone (the batched path lists its namespace)",
    ("kueue.x-k8s.io", "topologies", "get"): "a flavor carved into TPU slices (tests/controller/test_tpu_codelab.py)",
    ("", "nodes", "list"): "a flavor carved into TPU slices: its blocks (tests/controller/test_tpu_codelab.py)",
    ("kueue.x-k8s.io", "resourceflavors", "get"): "a flavor's topology (the tutorial's ClusterQueue has none)",
}


def render(layout: str, components: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """What `kubectl apply -k deploy/<layout>` applies: no --load-restrictor flag. With ``components``, a
    throw-away kustomization over ``layout`` adds them (components cannot be built alone)."""
    return [d for d in yaml.safe_load_all(_rendered(layout, components)) if d]


@functools.cache
def _rendered(layout: str, components: tuple[str, ...]) -> str:
    # Cached: kubectl takes about a second per render on the shared machine; callers get fresh objects.
    assert KUBECTL is not None
    with tempfile.TemporaryDirectory() as tmp:
        where = DEPLOY / layout
        if components:
            rel = os.path.relpath(DEPLOY, tmp)
            (Path(tmp) / "kustomization.yaml").write_text(yaml.safe_dump({
                "resources": [f"{rel}/{layout}"], "components": [f"{rel}/{c}" for c in components]}))
            where = Path(tmp)
        return subprocess.run([KUBECTL, "kustomize", str(where)], check=True, capture_output=True, text=True,
                              timeout=60).stdout


def _one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    return doc


def test_every_kustomization_is_covered() -> None:
    found = {p.parent.relative_to(DEPLOY).as_posix() for p in DEPLOY.rglob("kustomization.yaml")}
    assert found == {"base", *OVERLAYS, *COMPONENTS}
    assert {"overlays/gmp", "overlays/self-hosted", "overlays/cluster-wide"} <= set(OVERLAYS)


@needs_kubectl
@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_builtin_manifest_validates_against_the_1_31_schemas(layout: str) -> None:
    docs = render(layout)
    checked = 0
    for doc in docs:
        if doc["apiVersion"].startswith("monitoring.googleapis.com/"):
            continue  # a CRD: see test_podmonitoring_is_structurally_sound
        kubernetes_validate.validate(doc, "1.31.0", strict=True)
        checked += 1
    assert checked >= 13


@needs_kubectl
@pytest.mark.parametrize("component", COMPONENTS)
def test_every_component_renders_over_the_base_and_validates(component: str) -> None:
    plain = render("base")
    docs = render("base", (component,))
    assert docs != plain, f"{component} changes nothing"
    for doc in docs:
        if not doc["apiVersion"].startswith("monitoring.googleapis.com/"):
            kubernetes_validate.validate(doc, "1.31.0", strict=True)


@needs_kubectl
def test_validation_catches_a_bad_field() -> None:
    """The validator is not a no-op: an unknown field in a Deployment fails."""
    dep = _one(render("base"), "Deployment")
    dep["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(dep, "1.31.0", strict=True)


@needs_kubectl
def test_podmonitoring_is_structurally_sound() -> None:
    docs = render("overlays/gmp")
    pm, dep = _one(docs, "PodMonitoring"), _one(docs, "Deployment")
    assert pm["apiVersion"] == "monitoring.googleapis.com/v1"
    assert pm["metadata"]["namespace"] == dep["metadata"]["namespace"]
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert pm["spec"]["selector"]["matchLabels"].items() <= labels.items()
    ports = {p["name"]: p["containerPort"] for p in dep["spec"]["template"]["spec"]["containers"][0]["ports"]}
    (endpoint,) = pm["spec"]["endpoints"]
    assert endpoint["port"] in ports
    assert endpoint["path"] == "/metrics"
    assert set(pm["spec"]) <= {"selector", "endpoints", "targetLabels", "limits", "filterRunning"}


@needs_kubectl
@pytest.mark.parametrize("layout", LAYOUTS)
def test_pod_is_hardened_probed_spread_and_protected(layout: str) -> None:
    docs = render(layout)
    dep = _one(docs, "Deployment")
    pod = dep["spec"]["template"]["spec"]
    labels = dep["spec"]["template"]["metadata"]["labels"]
    (c,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert c["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                    "capabilities": {"drop": ["ALL"]}}
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert {"cpu", "memory"} <= c["resources"]["requests"].keys()
    assert {"cpu", "memory"} <= c["resources"]["limits"].keys()
    assert dep["spec"]["replicas"] >= 2, "two replicas: leader election has a standby"
    mounts = {v["name"]: v for v in pod["volumes"]}
    assert mounts["policies"]["configMap"]["name"] == "accel-autoscaler-policies"  # stable: hot reload
    (term,) = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"].items() <= labels.items()
    pdb = _one(docs, "PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert pdb["spec"]["minAvailable"] == 1 < dep["spec"]["replicas"]


@needs_kubectl
@pytest.mark.parametrize("layout", LAYOUTS)
def test_network_policy_allows_only_the_api_server_dns_metrics_source_and_pods(layout: str) -> None:
    docs = render(layout)
    pol, dep = _one(docs, "NetworkPolicy"), _one(docs, "Deployment")
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert pol["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    assert set(pol["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    egress = pol["spec"]["egress"]
    ports = sorted(p["port"] for rule in egress for p in rule["ports"])
    assert all(rule.get("ports") for rule in egress), "an egress rule without ports opens every port"
    assert {53, 443, 8000} <= set(ports)
    # The metric source: GMP's frontend or the self-hosted Prometheus, each in its own namespace.
    source = {"overlays/gmp": "gmp-public", "overlays/cluster-wide": "gmp-public", "overlays/self-hosted": "monitoring"}
    if layout in source:
        assert any(p["port"] == 9090 and any(
            t.get("namespaceSelector", {}).get("matchLabels", {}).get("kubernetes.io/metadata.name") == source[layout]
            for t in rule.get("to", [])) for rule in egress for p in rule["ports"])
    ingress_ports = {p["port"] for rule in pol["spec"]["ingress"] for p in rule["ports"]}
    assert ingress_ports <= {"metrics", "health"}


def _policy_namespaces(docs: list[dict[str, Any]], tmp_path: Path) -> set[str]:
    cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "accel-autoscaler-policies")
    for name, text in cm["data"].items():
        (tmp_path / name).write_text(text)
    store = PolicyStore(tmp_path)
    result = store.reload()
    assert result.loaded
    assert not result.rejected
    out = set()
    for cp in store.policies.values():
        out.add(cp.policy.spec.target.namespace)
        out |= {p.namespace for p in cp.policy.spec.preemptible or []}
    return out


@needs_kubectl
@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_config_and_policies_in_the_manifests_load(layout: str, tmp_path: Path) -> None:
    docs = render(layout)
    config = next(d for d in docs if d["kind"] == "ConfigMap" and "config" in d["metadata"]["name"])
    cfg = ControllerConfig.model_validate(yaml.safe_load(config["data"]["controller.yaml"]))
    assert cfg.leader_election.enabled
    assert _policy_namespaces(docs, tmp_path) == {"llm"}


def test_the_shipped_policies_are_generated_from_policies_dir() -> None:
    """kustomize reads nothing outside deploy/: the copies are generated, and CI fails when one drifts."""
    run = subprocess.run([sys.executable, str(REPO / "scripts" / "sync_deploy.py"), "--check"],
                         capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr


@needs_kubectl
@pytest.mark.parametrize("layout", LAYOUTS)
def test_namespaced_rights_only_where_the_policies_act(layout: str, tmp_path: Path) -> None:
    docs = render(layout)
    workload_bindings = [d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")
                         and d["roleRef"]["name"] == "accel-autoscaler-workloads"]
    cluster_wide = [d for d in workload_bindings if d["kind"] == "ClusterRoleBinding"]
    namespaced = {d["metadata"]["namespace"] for d in workload_bindings if d["kind"] == "RoleBinding"}
    if layout == "base":
        assert workload_bindings == []  # the base binds nothing: an overlay chooses
    elif layout == "overlays/cluster-wide":
        assert len(cluster_wide) == 1
        assert namespaced == set()
    else:
        assert cluster_wide == []
        assert namespaced == _policy_namespaces(docs, tmp_path)
        config = next(d for d in docs if d["kind"] == "ConfigMap" and "config" in d["metadata"]["name"])
        cfg = ControllerConfig.model_validate(yaml.safe_load(config["data"]["controller.yaml"]))
        assert set(cfg.namespaces) == namespaced, "the controller must watch exactly where it may act"
    others = [d["roleRef"]["name"] for d in docs if d["kind"] == "ClusterRoleBinding"
              and d["roleRef"]["name"] != "accel-autoscaler-workloads"]
    assert others == ["accel-autoscaler-quota"]
    quota = _one(docs, "ClusterRole", "accel-autoscaler-quota")
    # Read-only, cluster-scoped: quota, priorities, and the TPU slice inventory (flavors, topologies, nodes).
    assert {r for rule in quota["rules"] for r in rule["resources"]} == {
        "clusterqueues", "workloadpriorityclasses", "resourceflavors", "topologies", "nodes"}
    assert {v for rule in quota["rules"] for v in rule["verbs"]} <= {"get", "list"}
    assert not any("*" in v for d in docs if d["kind"] in ("Role", "ClusterRole") for r in d["rules"]
                   for v in (*r["verbs"], *r["resources"], *r["apiGroups"]))


@needs_kubectl
def test_hpa_patch_only_with_the_hpa_floor_component() -> None:
    def hpa_verbs(docs: list[dict[str, Any]]) -> set[str]:
        role = _one(docs, "ClusterRole", "accel-autoscaler-workloads")
        return {v for r in role["rules"] if "horizontalpodautoscalers" in r["resources"] for v in r["verbs"]}

    assert hpa_verbs(render("overlays/gmp")) == {"list"}
    assert hpa_verbs(render("overlays/gmp", ("components/hpa-floor",))) == {"list", "get", "patch"}


def _rules(docs: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {(g, res, v) for d in docs if d["kind"] in ("Role", "ClusterRole") for r in d["rules"]
            for g in r["apiGroups"] for res in r["resources"] for v in r["verbs"]}


def _used(requests: list[Request]) -> set[tuple[str, str, str]]:
    return {(r.group, r.resource, r.verb) for r in requests if r.verb and r.status != 404}


@needs_kubectl
@pytest.mark.parametrize("layout", [pytest.param("overlays/gmp", id="namespaced"),
                                    pytest.param("overlays/cluster-wide", id="cluster-wide")])
async def test_the_controller_runs_the_shipped_policies_under_the_shipped_rbac(
    layout: str, kube: Emulator, kube_client: client.ApiClient, kueue: Kueue, tmp_path: Path
) -> None:
    docs = render(layout)
    tutorial_cluster(kube, kueue)  # the tutorial's objects, in namespace llm
    settle_serving(kube, kueue)
    kube.enforce_rbac(docs, user=SERVICE_ACCOUNT)

    config = next(d for d in docs if d["kind"] == "ConfigMap" and "config" in d["metadata"]["name"])
    cfg = ControllerConfig.model_validate(yaml.safe_load(config["data"]["controller.yaml"]))
    # Leader election in the controller's namespace, as the Deployment runs it: create, renew, a standby's read.
    a = LeaderElector(kube_client, config=cfg.leader_election, identity="pod-a", namespace="autoscaler-system",
                      wall=time.time)
    b = LeaderElector(kube_client, config=cfg.leader_election, identity="pod-b", namespace="autoscaler-system",
                      wall=time.time)
    assert await a.try_acquire_or_renew()
    assert await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()

    tgi = TgiMetrics()
    await tgi.start()
    cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "accel-autoscaler-policies")
    for text in cm["data"].values():
        # The shipped policy as a ScalingPolicy object (the same YAML) in its namespace, so that the watch and
        # the status writes run too. The one change: the pods source scrapes the test's exporter, not port
        # 8000 of pod IPs.
        assert "    port: 8000" in text
        obj = yaml.safe_load(text.replace("    port: 8000", f"    endpoints: ['{tgi.url}']"))
        obj["metadata"]["namespace"] = obj["spec"]["target"]["namespace"]
        kube.add(obj)
    clock = ManualClock()
    assert cfg.watch_scaling_policies
    cfg = cfg.model_copy(update={"leader_election": cfg.leader_election.model_copy(update={"enabled": False}),
                                 "default_source": None})
    (tmp_path / "empty").mkdir()
    rt = Runtime(api=kube_client, config=cfg, policies_dir=tmp_path / "empty", clock=clock, identity="pod-a",
                 namespace="autoscaler-system", source=pool_on(clock))
    rt.sync_watches()  # the long-running controller's watches: list, then watch
    async with asyncio.timeout(10):
        while not rt.store.policies:  # loaded from the watched object
            await asyncio.sleep(0.02)
    await kube.wait_for_watchers(3)
    for queue, n in ((15, 3), (3, 25)):  # scale up (deactivating the fine-tune), then back down (reactivating)
        tgi.queue = queue
        for _ in range(n):
            await rt.controller.run_once()
            settle_serving(kube, kueue)
            clock.advance(15)
    for _, task in rt.watchers.values():
        task.cancel()
    await asyncio.gather(*(task for _, task in rt.watchers.values()), return_exceptions=True)
    await rt.observer.aclose()
    await tgi.stop()

    assert kube.rbac_denied == [], "requests the shipped RBAC denies"
    writes = {(r.resource, r.verb) for r in kube.writes() if r.status < 300}
    assert ("deployments/scale", "patch") in writes
    assert ("workloads", "patch") in writes
    assert ("scalingpolicies/status", "patch") in writes
    unused = _rules(docs) - _used(kube.requests) - set(UNEXERCISED)
    assert unused == set(), "rules no request needed: remove them or say why in UNEXERCISED"


def _queue_policy(name: str, kind: str, target: str, url: str) -> dict[str, Any]:
    """An hpa policy scaling ``kind``/``target`` in ``llm`` on TGI's queue (AverageValue 5, 1-4 replicas),
    scraped from ``url``: what the per-kind RBAC tests run."""
    return {
        "apiVersion": "autoscaler.dev/v1alpha1", "kind": "ScalingPolicy", "metadata": {"name": name},
        "spec": {
            "target": {"kind": kind, "name": target, "namespace": "llm"},
            "minReplicas": 1, "maxReplicas": 4,
            "source": {"type": "pods", "endpoints": [url]},
            "signals": [{"name": "queue", "preset": "tgi.queue_size"}],
            "policy": {"type": "hpa", "metrics": [
                {"signal": "queue", "type": "External", "target": {"type": "AverageValue", "averageValue": 5}}]},
        },
    }


async def _three_passes(kube_client: client.ApiClient, tmp_path: Path, policy: dict[str, Any], tgi: TgiMetrics,
                        queue: int) -> None:
    """Run one policy file (no leader election, the controller's defaults) for three passes at ``queue``,
    then stop the runtime's sources and the exporter."""
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / f"{policy['metadata']['name']}.yaml").write_text(yaml.safe_dump(policy))
    clock = ManualClock()
    cfg = ControllerConfig.model_validate({"leaderElection": {"enabled": False}})
    rt = Runtime(api=kube_client, config=cfg, policies_dir=tmp_path / "p", clock=clock, identity="pod-a",
                 namespace="autoscaler-system", source=pool_on(clock))
    assert rt.store.reload().loaded
    tgi.queue = queue
    for _ in range(3):
        await rt.controller.run_once()
        clock.advance(15)
    await rt.observer.aclose()
    await tgi.stop()


@needs_kubectl
@pytest.mark.parametrize("with_component", [pytest.param(True, id="hpa-floor"), pytest.param(False, id="base-only")])
async def test_hpa_floor_needs_and_gets_exactly_its_component(
    with_component: bool, kube: Emulator, kube_client: client.ApiClient, kueue: Kueue, tmp_path: Path
) -> None:
    """An hpaFloor policy (advising the tutorial's HPA) runs without a 403 under gmp + components/hpa-floor,
    and is denied its HPA writes under the gmp overlay alone: the base grants no HPA patch."""
    docs = render("overlays/gmp", ("components/hpa-floor",) if with_component else ())
    tutorial_cluster(kube, kueue)
    settle_serving(kube, kueue)
    kube.add(objects.hpa("tgi-hpa"))
    kube.enforce_rbac(docs, user=SERVICE_ACCOUNT)
    tgi = TgiMetrics()
    await tgi.start()
    cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "accel-autoscaler-policies")
    (text,) = cm["data"].values()
    obj = yaml.safe_load(text.replace("    port: 8000", f"    endpoints: ['{tgi.url}']"))
    obj["spec"]["actuation"] = {"mode": "hpaFloor", "hpaName": "tgi-hpa"}
    obj["spec"].pop("capacity")  # advising an HPA: no training arbitration here
    obj["spec"].pop("preemptible")
    await _three_passes(kube_client, tmp_path, obj, tgi, queue=25)
    hpa_writes = [r for r in kube.writes() if r.resource == "horizontalpodautoscalers" and r.verb == "patch"]
    if with_component:
        assert hpa_writes
        assert kube.rbac_denied == []
        assert all(r.status < 300 for r in hpa_writes)
        assert kube.get("autoscaling/v2", "HorizontalPodAutoscaler", "tgi-hpa", "llm")["spec"]["minReplicas"] > 1
    else:
        assert kube.rbac_denied  # the HPA's read before its patch is refused already
        assert all("horizontalpodautoscalers" in d for d in kube.rbac_denied), kube.rbac_denied
        assert kube.get("autoscaling/v2", "HorizontalPodAutoscaler", "tgi-hpa", "llm")["spec"]["minReplicas"] == 1


@needs_kubectl
@pytest.mark.parametrize("with_component",
                         [pytest.param(True, id="leaderworkerset"), pytest.param(False, id="base-only")])
async def test_a_leaderworkerset_policy_needs_and_gets_exactly_its_component(
    with_component: bool, kube: Emulator, kube_client: client.ApiClient, tmp_path: Path
) -> None:
    """A policy scaling a LeaderWorkerSet (whole slice groups, as the shipped prefill/decode example does) runs
    without a 403 under gmp + components/leaderworkerset and writes ``leaderworkersets/scale``; under the gmp
    overlay alone its reads are refused: the base grants nothing on LeaderWorkerSets."""
    docs = render("overlays/gmp", ("components/leaderworkerset",) if with_component else ())
    kube.add(objects.leader_worker_set("jetstream", "llm", replicas=1, size=2))
    for worker in (0, 1):
        kube.add(objects.pod(f"jetstream-0-{worker}" if worker else "jetstream-0", labels={
            "leaderworkerset.sigs.k8s.io/name": "jetstream", "leaderworkerset.sigs.k8s.io/group-index": "0",
            "leaderworkerset.sigs.k8s.io/worker-index": str(worker)}))
    kube.enforce_rbac(docs, user=SERVICE_ACCOUNT)
    tgi = TgiMetrics()
    await tgi.start()
    await _three_passes(kube_client, tmp_path, _queue_policy("slices", "LeaderWorkerSet", "jetstream", tgi.url),
                        tgi, queue=15)
    lws_requests = [r for r in kube.requests if r.resource.startswith("leaderworkersets")]
    assert lws_requests
    if with_component:
        assert kube.rbac_denied == []
        assert any(r.resource == "leaderworkersets/scale" and r.verb == "patch" and r.status < 300
                   for r in kube.writes())
        assert kube.get("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "jetstream", "llm")["spec"]["replicas"] > 1
    else:
        assert kube.rbac_denied
        assert all("leaderworkersets" in d for d in kube.rbac_denied), kube.rbac_denied
        assert kube.get("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "jetstream", "llm")["spec"]["replicas"] == 1


@needs_kubectl
@pytest.mark.parametrize("with_component",
                         [pytest.param(True, id="statefulset"), pytest.param(False, id="base-only")])
async def test_a_statefulset_policy_needs_and_gets_exactly_its_component(
    with_component: bool, kube: Emulator, kube_client: client.ApiClient, tmp_path: Path
) -> None:
    """A policy scaling a StatefulSet goes through the one ``/scale`` path: under gmp + components/statefulset
    it runs without a 403 and writes ``statefulsets/scale``; under the gmp overlay alone its reads are refused
    (the base grants nothing on StatefulSets) and nothing is written."""
    docs = render("overlays/gmp", ("components/statefulset",) if with_component else ())
    kube.add(objects.stateful_set("tgi-gemma", "llm", replicas=1))
    kube.add(objects.pod("tgi-gemma-0", ip="10.0.0.9"))
    kube.enforce_rbac(docs, user=SERVICE_ACCOUNT)
    tgi = TgiMetrics()
    await tgi.start()
    await _three_passes(kube_client, tmp_path, _queue_policy("sts", "StatefulSet", "tgi-gemma", tgi.url),
                        tgi, queue=15)
    assert [r for r in kube.requests if r.resource.startswith("statefulsets")]
    stored = kube.get("apps/v1", "StatefulSet", "tgi-gemma", "llm")
    if with_component:
        assert kube.rbac_denied == []
        (write, *_) = [r for r in kube.writes() if r.resource == "statefulsets/scale" and r.verb == "patch"]
        assert (write.status, write.content_type) == (200, "application/merge-patch+json")
        assert stored["spec"]["replicas"] == 3  # ceil(15 / 5)
        assert stored["metadata"]["annotations"]["autoscaler.dev/managed-by"]
    else:
        assert kube.rbac_denied
        assert all("statefulsets" in d for d in kube.rbac_denied), kube.rbac_denied
        assert stored["spec"]["replicas"] == 1


@needs_kubectl
@pytest.mark.parametrize("with_component",
                         [pytest.param(True, id="checkpoint-request"), pytest.param(False, id="base-only")])
async def test_a_policy_asking_for_checkpoints_needs_and_gets_exactly_its_component(
    with_component: bool, kube: Emulator, kube_client: client.ApiClient, kueue: Kueue, tmp_path: Path
) -> None:
    """The shipped policy with ``capacity.checkpointRequestSeconds`` asks the fine-tune Job (which declares it
    honours requests) to checkpoint before stopping it (a merge patch of its annotation): under gmp +
    components/checkpoint-request that patch passes with no 403; under the gmp overlay alone it is refused (the
    base only lists jobs), and nothing is stopped."""
    docs = render("overlays/gmp", ("components/checkpoint-request",) if with_component else ())
    cluster = tutorial_cluster(kube, kueue)
    settle_serving(kube, kueue)
    job = cluster["job"]["metadata"]["name"]
    stale = str(int(T0) - 900)  # its last checkpoint, 15 minutes before the controller's clock starts
    kube.modify("batch/v1", "Job", job, "llm", metadata={"annotations": {
        "autoscaler.dev/last-checkpoint-time": stale, "autoscaler.dev/checkpoint-on-request": "true"}})
    kube.enforce_rbac(docs, user=SERVICE_ACCOUNT)
    tgi = TgiMetrics()
    await tgi.start()
    cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "accel-autoscaler-policies")
    (text,) = cm["data"].values()
    obj = yaml.safe_load(text.replace("    port: 8000", f"    endpoints: ['{tgi.url}']"))
    obj["spec"]["capacity"]["checkpointRequestSeconds"] = 60
    await _three_passes(kube_client, tmp_path, obj, tgi, queue=25)
    job_patches = [r for r in kube.requests if r.resource == "jobs" and r.verb == "patch"]
    assert job_patches, "the policy never asked for a checkpoint"
    annotations = kube.get("batch/v1", "Job", job, "llm")["metadata"].get("annotations") or {}
    if with_component:
        assert kube.rbac_denied == []
        assert all(r.status < 300 for r in job_patches)
        assert "autoscaler.dev/checkpoint-requested-at" in annotations
    else:
        assert kube.rbac_denied
        assert all("jobs" in d for d in kube.rbac_denied), kube.rbac_denied
        assert "autoscaler.dev/checkpoint-requested-at" not in annotations
    wl = kube.get(objects.KUEUE_V1BETA2, "Workload", "job-finetune-gemma-l4-3316f", "llm")
    assert wl["spec"].get("active", True), "asked to save, not stopped: the request comes first"
