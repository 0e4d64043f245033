"""deploy/: the kustomization renders, every manifest is valid offline, RBAC is least privilege.

``kubectl kustomize`` renders (skipped with a reason when kubectl is absent); ``kubernetes_validate``
checks every built-in kind against the Kubernetes 1.31 schemas in strict mode. PodMonitoring is a CRD
(Google Managed Prometheus) with no schema there: it is checked structurally. The RBAC test runs the
tutorial scenario against the emulator and checks that every request the controller made is allowed by
the rendered rules, and that every rule was used by some request (or is listed with the reason it exists).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes_asyncio import client

from autoscaler.controller.config import ControllerConfig
from autoscaler.controller.reload import PolicyStore
from tests.controller.helpers import ManualClock, TgiMetrics, runtime, settle_serving, tutorial_cluster
from tests.controller.policies import REPO
from tests.kube.emulator import Emulator, Request
from tests.kube.kueue import Kueue

DEPLOY = REPO / "deploy"
KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl not installed: cannot render kustomizations")
LAYOUTS = [pytest.param("base", id="base"), pytest.param("overlays/gmp", id="gmp"),
           pytest.param("overlays/self-hosted", id="self-hosted")]

#: Rules no scenario exercises, and why they exist.
UNEXERCISED = {
    ("leaderworkerset.x-k8s.io", "leaderworkersets", "get"): "LeaderWorkerSet targets",
    ("leaderworkerset.x-k8s.io", "leaderworkersets", "list"): "LeaderWorkerSet targets (watch, batched reads)",
    ("leaderworkerset.x-k8s.io", "leaderworkersets", "watch"): "LeaderWorkerSet targets (watch)",
    ("leaderworkerset.x-k8s.io", "leaderworkersets/scale", "get"): "LeaderWorkerSet targets",
    ("leaderworkerset.x-k8s.io", "leaderworkersets/scale", "patch"): "LeaderWorkerSet targets",
    ("autoscaling", "horizontalpodautoscalers", "get"): "actuation mode hpaFloor",
    ("autoscaling", "horizontalpodautoscalers", "patch"): "actuation mode hpaFloor",
    ("", "events", "create"): "events.api: v1 on old clusters",
    ("", "events", "patch"): "events.api: v1 on old clusters",
    ("kueue.x-k8s.io", "workloadpriorityclasses", "get"): "Workloads whose priority is a class, not a number",
    ("coordination.k8s.io", "leases", "create"): "leader election (tested in test_leader)",
    ("coordination.k8s.io", "leases", "get"): "leader election (tested in test_leader)",
    ("coordination.k8s.io", "leases", "update"): "leader election (tested in test_leader)",
    ("apps", "deployments", "list"): "watch (long-running mode); one read of several targets in a namespace",
    ("apps", "deployments", "watch"): "watch (long-running mode)",
    ("kueue.x-k8s.io", "workloads", "watch"): "watch (long-running mode)",
    ("events.k8s.io", "events", "patch"): "a repeated Event's series count (tested in test_events)",
}


def render(layout: str) -> list[dict[str, Any]]:
    assert KUBECTL is not None
    out = subprocess.run(
        [KUBECTL, "kustomize", "--load-restrictor", "LoadRestrictionsNone", str(DEPLOY / layout)],
        check=True, capture_output=True, text=True, timeout=60,
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


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
    assert checked >= 12


@needs_kubectl
def test_validation_catches_a_bad_field() -> None:
    """The validator is not a no-op: an unknown field in a Deployment fails."""
    (dep,) = [d for d in render("base") if d["kind"] == "Deployment"]
    dep["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(dep, "1.31.0", strict=True)


@needs_kubectl
def test_podmonitoring_is_structurally_sound() -> None:
    docs = render("overlays/gmp")
    (pm,) = [d for d in docs if d["kind"] == "PodMonitoring"]
    (dep,) = [d for d in docs if d["kind"] == "Deployment"]
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
def test_pod_is_hardened_and_probed(layout: str) -> None:
    (dep,) = [d for d in render(layout) if d["kind"] == "Deployment"]
    pod = dep["spec"]["template"]["spec"]
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


@needs_kubectl
@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_config_and_policies_in_the_manifests_load(layout: str, tmp_path: Path) -> None:
    docs = render(layout)
    cms = {d["metadata"]["name"].rsplit("-", 1)[0] if "config-" in d["metadata"]["name"] else d["metadata"]["name"]: d
           for d in docs if d["kind"] == "ConfigMap"}
    cfg = ControllerConfig.model_validate(yaml.safe_load(cms["accel-autoscaler-config"]["data"]["controller.yaml"]))
    assert cfg.leader_election.enabled
    for name, text in cms["accel-autoscaler-policies"]["data"].items():
        (tmp_path / name).write_text(text)
    result = PolicyStore(tmp_path).reload()
    assert result.loaded
    assert not result.rejected


@needs_kubectl
def test_nothing_cluster_wide_but_the_quota_reads() -> None:
    docs = render("base")
    bindings = [d for d in docs if d["kind"] == "ClusterRoleBinding"]
    assert [b["roleRef"]["name"] for b in bindings] == ["accel-autoscaler-quota"]
    (quota,) = [d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "accel-autoscaler-quota"]
    assert {r for rule in quota["rules"] for r in rule["resources"]} == {"clusterqueues", "workloadpriorityclasses"}
    assert not any("*" in v for d in docs if d["kind"] in ("Role", "ClusterRole") for r in d["rules"]
                   for v in (*r["verbs"], *r["resources"], *r["apiGroups"]))


def _rules(docs: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    out = set()
    for d in docs:
        if d["kind"] in ("Role", "ClusterRole"):
            for r in d["rules"]:
                for g in r["apiGroups"]:
                    for res in r["resources"]:
                        for v in r["verbs"]:
                            out.add((g, res, v))
    return out


def _verb(r: Request) -> str:
    if r.method == "GET":
        if r.query.get("watch") in ("true", "1", "True"):
            return "watch"
        return "get" if r.name else "list"
    return {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}[r.method]


@needs_kubectl
async def test_every_request_of_the_tutorial_is_allowed_and_every_rule_is_used(
    kube: Emulator, kube_client: client.ApiClient, kueue: Kueue, tmp_path: Path
) -> None:
    allowed = _rules(render("base"))
    tutorial_cluster(kube, kueue)
    settle_serving(kube, kueue)
    tgi = TgiMetrics()
    await tgi.start()
    clock = ManualClock()
    rt = runtime(kube_client, tmp_path, clock, endpoint=tgi.url)
    rt.store.reload()
    kube.clear_log()
    for queue, n in ((15, 3), (3, 25)):
        tgi.queue = queue
        for _ in range(n):
            await rt.controller.run_once()
            settle_serving(kube, kueue)
            clock.advance(15)
    await rt.observer.aclose()
    await tgi.stop()
    used = {(r.group, r.resource, _verb(r)) for r in kube.requests}
    assert used - allowed == set(), "requests the RBAC would deny"
    unused = allowed - used - set(UNEXERCISED)
    assert unused == set(), "rules no request needed: remove them or say why in UNEXERCISED"
