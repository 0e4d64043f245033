"""Scale targets against the emulated API server: the right write on the wire, guarded, retried, refused."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes_asyncio import client

from autoscaler.controller import targets as targets_mod
from autoscaler.controller.kinds import LWS_GROUP_INDEX_LABEL, LWS_NAME_LABEL, LWS_WORKER_INDEX_LABEL
from autoscaler.controller.kube import Forbidden, NotFound, ServerError
from autoscaler.controller.targets import (
    MANAGED_BY_ANNOTATION,
    ORIGINAL_MIN_ANNOTATION,
    KubeTargets,
    OwnershipConflict,
    ScaleTarget,
    build_target,
    label_selector,
    selector_matches,
)
from autoscaler.core.engine import CompiledPolicy, compile_policy
from autoscaler.core.model import Reason, ScaleDecision
from autoscaler.core.spec import ScalingPolicy
from tests.actions.policies import FAST_RETRY, policy
from tests.kube import objects
from tests.kube.emulator import Emulator, label_selector_matches

DEPLOY_SCALE = "/apis/apps/v1/namespaces/llm/deployments/tgi-gemma-deployment/scale"
LWS_SCALE = "/apis/leaderworkerset.x-k8s.io/v1/namespaces/llm/leaderworkersets/jetstream/scale"
HPA_PATH = "/apis/autoscaling/v2/namespaces/llm/horizontalpodautoscalers/tgi-hpa"
NOW = 1767225600.0 + 600  # 2026-01-01T00:10:00Z: ten minutes after the builders' start times


def _target(api: client.ApiClient, cp: CompiledPolicy) -> ScaleTarget:
    return build_target(api, cp.policy.spec, owner=cp.name, retry=FAST_RETRY, now=lambda: NOW)


#: Targets this policy already claimed (its first action did): these tests are about the scale write itself;
#: the claim has its own tests below.
CLAIMED = {MANAGED_BY_ANNOTATION: "tgi-gemma"}


def _deployment_setup(kube: Emulator) -> CompiledPolicy:
    kube.add(objects.deployment(replicas=1, annotations=CLAIMED))
    return policy()


def _lws_setup(kube: Emulator) -> CompiledPolicy:
    kube.add(objects.leader_worker_set(replicas=1, annotations=CLAIMED))
    return policy(kind="LeaderWorkerSet", target="jetstream")


def _hpa_floor_setup(kube: Emulator) -> CompiledPolicy:
    kube.add(objects.deployment(replicas=1))
    kube.add(objects.hpa("tgi-hpa", min_replicas=1, max_replicas=3))
    return policy(mode="hpaFloor", hpa_name="tgi-hpa")


def _stored_count(kube: Emulator, kind: str) -> int:
    if kind == "deployment":
        return int(kube.get("apps/v1", "Deployment", "tgi-gemma-deployment", "llm")["spec"]["replicas"])
    if kind == "lws":
        return int(kube.get("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "jetstream", "llm")["spec"]["replicas"])
    return int(kube.get("autoscaling/v2", "HorizontalPodAutoscaler", "tgi-hpa", "llm")["spec"]["minReplicas"])


SETUPS = {"deployment": _deployment_setup, "lws": _lws_setup, "hpa-floor": _hpa_floor_setup}
WRITES = {
    "deployment": ("PATCH", DEPLOY_SCALE, "application/merge-patch+json"),
    "lws": ("PATCH", LWS_SCALE, "application/merge-patch+json"),
    "hpa-floor": ("PATCH", HPA_PATH, "application/merge-patch+json"),
}
KINDS = [pytest.param(k, id=k) for k in SETUPS]


@pytest.mark.parametrize("kind", KINDS)
async def test_a_scale_is_one_guarded_write_of_the_right_shape(
    kube: Emulator, kube_client: client.ApiClient, kind: str
) -> None:
    cp = SETUPS[kind](kube)
    rv_before = kube.resource_version
    result = await _target(kube_client, cp).scale(2)
    assert (result.previous, result.desired, result.written) == (1, 2, True)
    writes = kube.writes()
    assert [(w.method, w.path, w.content_type) for w in writes] == [WRITES[kind]]
    # Optimistic concurrency: the write carries the resourceVersion it read.
    assert writes[0].body["metadata"]["resourceVersion"] == str(rv_before)
    assert _stored_count(kube, kind) == 2


@pytest.mark.parametrize("kind", KINDS)
async def test_a_dry_run_is_the_same_write_checked_by_the_server_and_stored_nowhere(
    kube: Emulator, kube_client: client.ApiClient, kind: str
) -> None:
    cp = SETUPS[kind](kube)
    result = await _target(kube_client, cp).scale(2, dry_run=True)
    assert (result.previous, result.desired, result.written) == (1, 2, True)
    (write,) = kube.writes()
    assert (write.method, write.path, write.content_type) == WRITES[kind]
    assert write.query.get("dryRun") == "All"
    assert _stored_count(kube, kind) == 1


@pytest.mark.parametrize("kind", KINDS)
async def test_no_write_when_already_at_the_desired_count(
    kube: Emulator, kube_client: client.ApiClient, kind: str
) -> None:
    cp = SETUPS[kind](kube)
    kube.strict = True  # any write fails the test
    result = await _target(kube_client, cp).scale(1)
    assert result.written is False
    assert kube.writes() == []


@pytest.mark.parametrize("kind", KINDS)
async def test_a_conflict_is_retried_after_a_fresh_read(
    kube: Emulator, kube_client: client.ApiClient, kind: str
) -> None:
    cp = SETUPS[kind](kube)
    method, path, _ = WRITES[kind]
    kube.inject(409, path, method=method, times=2)
    result = await _target(kube_client, cp).scale(2)
    assert result.written
    assert [w.status for w in kube.writes()] == [409, 409, 200]
    # Each attempt read the object again before writing: read, write, read, write, read, write.
    sequence = [r.method for r in kube.requests if r.path == path]
    assert sequence == ["GET", method] * 3
    assert _stored_count(kube, kind) == 2


@pytest.mark.parametrize("kind", [pytest.param("deployment", id="deployment"), pytest.param("lws", id="lws")])
async def test_the_first_scale_claims_the_target_and_later_ones_do_not(
    kube: Emulator, kube_client: client.ApiClient, kind: str
) -> None:
    if kind == "deployment":
        kube.add(objects.deployment(replicas=1))
        shape: dict[str, Any] = {}
        path = DEPLOY_SCALE.removesuffix("/scale")
        api_version, kind_name, name = "apps/v1", "Deployment", "tgi-gemma-deployment"
    else:
        kube.add(objects.leader_worker_set(replicas=1))
        shape = {"kind": "LeaderWorkerSet", "target": "jetstream"}
        path = LWS_SCALE.removesuffix("/scale")
        api_version, kind_name, name = "leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "jetstream"
    cp = policy(**shape)
    await _target(kube_client, cp).scale(2)
    await _target(kube_client, cp).scale(3)
    claims = [w for w in kube.writes() if w.path == path]
    assert len(claims) == 1, "written on the first action only"
    assert claims[0].content_type == "application/merge-patch+json"
    assert claims[0].body["metadata"]["resourceVersion"], "conditional: a concurrent claim answers 409"
    annotations = kube.get(api_version, kind_name, name, "llm")["metadata"]["annotations"]
    assert annotations[MANAGED_BY_ANNOTATION] == "tgi-gemma"
    # Another policy (or another controller's) is refused from now on.
    with pytest.raises(OwnershipConflict, match="managed-by=tgi-gemma"):
        await _target(kube_client, policy(name="other", **shape)).scale(1)


async def test_two_controllers_claiming_at_once_one_wins_the_other_is_refused(
    kube: Emulator, kube_client: client.ApiClient
) -> None:
    kube.add(objects.deployment(replicas=1))
    path = DEPLOY_SCALE.removesuffix("/scale")

    def the_other_claims() -> None:  # between our read and our claim, another controller claims it
        kube.modify("apps/v1", "Deployment", "tgi-gemma-deployment", "llm",
                    metadata={"annotations": {MANAGED_BY_ANNOTATION: "other-controller"}})

    kube.after("GET", path, the_other_claims)
    with pytest.raises(OwnershipConflict, match="other-controller"):
        await _target(kube_client, policy()).scale(2)
    assert [w.status for w in kube.writes() if w.path == path] == [409]
    assert _stored_count(kube, "deployment") == 1


async def test_a_real_concurrent_change_is_a_conflict_then_succeeds(
    kube: Emulator, kube_client: client.ApiClient
) -> None:
    cp = _deployment_setup(kube)

    def someone_else_writes() -> None:
        kube.modify("apps/v1", "Deployment", "tgi-gemma-deployment", "llm", metadata={"labels": {"touched": "1"}})

    # Between our read of the Scale and our write, another writer changes the Deployment: the store answers 409.
    kube.after("GET", DEPLOY_SCALE, someone_else_writes, times=1)
    result = await _target(kube_client, cp).scale(3)
    assert result.written
    assert [w.status for w in kube.writes()] == [409, 200]
    assert _stored_count(kube, "deployment") == 3


@pytest.mark.parametrize("kind", KINDS)
async def test_forbidden_is_reported_at_once(kube: Emulator, kube_client: client.ApiClient, kind: str) -> None:
    cp = SETUPS[kind](kube)
    resource = {
        "deployment": "deployments/scale", "lws": "leaderworkersets/scale", "hpa-floor": "horizontalpodautoscalers",
    }
    kube.deny("patch", resource[kind], namespace="llm")
    with pytest.raises(Forbidden, match=r"403 Forbidden: .* is forbidden: User .* cannot"):
        await _target(kube_client, cp).scale(2)
    assert len(kube.writes()) == 1  # never retried


@pytest.mark.parametrize(
    ("failures", "succeeds"),
    [
        pytest.param(3, True, id="three-503s-then-ok"),
        pytest.param(10, False, id="persistent-503-gives-up-after-4-attempts"),
    ],
)
async def test_server_errors_are_retried_within_a_bound(
    kube: Emulator, kube_client: client.ApiClient, failures: int, succeeds: bool
) -> None:
    cp = _deployment_setup(kube)
    kube.inject(503, DEPLOY_SCALE, method="PATCH", times=failures)
    target = _target(kube_client, cp)
    if succeeds:
        assert (await target.scale(2)).written
        assert len(kube.writes()) == failures + 1
    else:
        with pytest.raises(ServerError):
            await target.scale(2)
        assert len(kube.writes()) == FAST_RETRY.attempts
        assert _stored_count(kube, "deployment") == 1


@pytest.mark.parametrize(
    ("extra", "kind", "message"),
    [
        pytest.param(
            objects.hpa("user-hpa"), "deployment", "is scaled by HorizontalPodAutoscaler user-hpa",
            id="hpa-on-deployment",
        ),
        pytest.param(
            objects.hpa("lws-hpa", target_kind="LeaderWorkerSet", target_name="jetstream"), "lws",
            "is scaled by HorizontalPodAutoscaler lws-hpa", id="hpa-on-lws",
        ),
        pytest.param(
            {
                "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
                "metadata": {"name": "tgi-keda", "namespace": "llm"},
                "spec": {"scaleTargetRef": {"name": "tgi-gemma-deployment"}},
            },
            "deployment", "KEDA ScaledObject tgi-keda", id="keda-scaledobject",
        ),
        pytest.param(
            objects.hpa("second-hpa"), "hpa-floor", "is scaled by HorizontalPodAutoscaler second-hpa",
            id="hpa-floor-with-a-second-hpa",
        ),
    ],
)
async def test_ownership_conflicts_refuse_without_writing(
    kube: Emulator, kube_client: client.ApiClient, extra: dict[str, Any], kind: str, message: str
) -> None:
    cp = SETUPS[kind](kube)
    kube.add(extra)
    kube.strict = True
    with pytest.raises(OwnershipConflict, match=message):
        await _target(kube_client, cp).scale(2)
    assert kube.writes() == []


async def test_managed_by_annotation_naming_another_owner_refuses(
    kube: Emulator, kube_client: client.ApiClient
) -> None:
    kube.add(objects.deployment(annotations={MANAGED_BY_ANNOTATION: "someone-else"}))
    kube.strict = True
    with pytest.raises(OwnershipConflict, match="one owner per target"):
        await _target(kube_client, policy()).scale(2)
    # Our own name in the annotation is fine.
    kube.strict = False
    kube.modify("apps/v1", "Deployment", "tgi-gemma-deployment", "llm",
                metadata={"annotations": {MANAGED_BY_ANNOTATION: "tgi-gemma"}})
    assert (await _target(kube_client, policy()).scale(2)).written


async def test_hpa_floor_refuses_an_hpa_of_another_target(kube: Emulator, kube_client: client.ApiClient) -> None:
    kube.add(objects.deployment())
    kube.add(objects.hpa("tgi-hpa", target_name="something-else"))
    kube.strict = True
    with pytest.raises(OwnershipConflict, match="not Deployment/llm/tgi-gemma-deployment"):
        await _target(kube_client, policy(mode="hpaFloor", hpa_name="tgi-hpa")).scale(2)


@pytest.mark.parametrize(
    ("hpa_min", "hpa_max", "steps", "floors"),
    [
        pytest.param(1, 3, [2, 5], [2, 3], id="never-above-maxReplicas"),
        pytest.param(2, 5, [4, 1], [4, 2], id="lowered-back-to-the-users-own-min-not-below"),
        pytest.param(1, 5, [3, 1], [3, 1], id="raised-then-lowered"),
    ],
)
async def test_hpa_floor_moves_min_replicas_within_bounds(
    kube: Emulator, kube_client: client.ApiClient, hpa_min: int, hpa_max: int, steps: list[int], floors: list[int]
) -> None:
    kube.add(objects.deployment())
    kube.add(objects.hpa("tgi-hpa", min_replicas=hpa_min, max_replicas=hpa_max))
    target = _target(kube_client, policy(mode="hpaFloor", hpa_name="tgi-hpa"))
    seen = []
    for desired in steps:
        await target.scale(desired)
        seen.append(_stored_count(kube, "hpa-floor"))
    assert seen == floors
    hpa = kube.get("autoscaling/v2", "HorizontalPodAutoscaler", "tgi-hpa", "llm")
    assert hpa["metadata"]["annotations"][ORIGINAL_MIN_ANNOTATION] == str(hpa_min)
    # The Deployment itself was never written: the HPA scales it.
    assert all("deployments" not in w.path for w in kube.writes())


async def test_deployment_replicas_and_pods(kube: Emulator, kube_client: client.ApiClient) -> None:
    kube.add(objects.deployment(replicas=3, ready=1))
    kube.add(objects.pod("tgi-a", ready=True, start_time="2026-01-01T00:00:00Z"))
    kube.add(objects.pod("tgi-b", ready=False, start_time="2026-01-01T00:09:30Z"))
    kube.add(objects.pod("tgi-c", ready=False, deleting=True))
    kube.add(objects.pod("unrelated", labels={"app": "other"}))
    kube.modify("v1", "Pod", "tgi-a", "llm", metadata={"annotations": {"prometheus.io/port": "8000"}},
                status={"podIP": "10.0.0.7"})
    kube.add(objects.pod("tgi-d", ready=True, ip="10.0.0.8"))
    kube.add(objects.pod("tgi-gated", ready=False, phase="Pending"))
    target = _target(kube_client, policy())
    status = await target.replicas()
    assert (status.spec, status.ready, status.starting) == (3, 1, 2)
    assert status.pods is not None
    assert [(p.name, p.ready, p.age_s, p.deleting) for p in status.pods] == [
        ("tgi-a", True, 600.0, False), ("tgi-b", False, 30.0, False), ("tgi-c", False, 600.0, True),
        ("tgi-d", True, 600.0, False), ("tgi-gated", False, 600.0, False),
    ]
    # Metric sources scrape only pods that serve: ready, with an IP, not terminating.
    refs = await target.pods()
    assert [(r.name, r.ip, r.url) for r in refs] == [
        ("tgi-a", "10.0.0.7", "http://10.0.0.7:8000/metrics"), ("tgi-d", "10.0.0.8", None),
    ]


async def test_lws_replicas_count_whole_groups(kube: Emulator, kube_client: client.ApiClient) -> None:
    kube.add(objects.leader_worker_set(replicas=2, ready=1, size=2))
    for group, ready in (("0", (True, True)), ("1", (True, False))):
        for worker, is_ready in zip(("0", "1"), ready, strict=True):
            labels = {
                "leaderworkerset.sigs.k8s.io/name": "jetstream",
                "leaderworkerset.sigs.k8s.io/group-index": group,
                "leaderworkerset.sigs.k8s.io/worker-index": worker,
            }
            name, ip = f"jetstream-{group}-{worker}", f"10.1.{group}.{worker}"
            kube.add(objects.pod(name, labels=labels, ready=is_ready, ip=ip))
    target = _target(kube_client, policy(kind="LeaderWorkerSet", target="jetstream"))
    status = await target.replicas()
    assert (status.spec, status.ready, status.starting) == (2, 1, 1)
    assert status.pods is not None
    # One entry per group, named by its leader, ready only when every host of the slice is.
    assert [(p.name, p.ready) for p in status.pods] == [("jetstream-0-0", True), ("jetstream-1-0", False)]
    refs = await target.pods()
    assert [(r.name, r.leader) for r in refs] == [
        ("jetstream-0-0", True), ("jetstream-0-1", False), ("jetstream-1-0", True),
    ]


async def test_kube_targets_serves_the_loop(kube: Emulator, kube_client: client.ApiClient) -> None:
    kube.add(objects.deployment(replicas=1))
    cp = policy()
    targets = KubeTargets(kube_client, retry=FAST_RETRY)
    assert (await targets.replicas(cp)).spec == 1
    decision = ScaleDecision(cp.policy.spec.target.ref(), 1, 2, Reason.SCALE_UP, "queue 25 > 10 per replica")
    assert (await targets.scale(cp, decision)).written
    assert _stored_count(kube, "deployment") == 2


# --- reading many targets at once ------------------------------------------------------------------------


LWS_NAME, LWS_GROUP, LWS_WORKER = LWS_NAME_LABEL, LWS_GROUP_INDEX_LABEL, LWS_WORKER_INDEX_LABEL


def _read_policy(name: str, target: str, *, kind: str = "Deployment", namespace: str = "llm") -> CompiledPolicy:
    doc = {
        "apiVersion": "autoscaler.dev/v1alpha1", "kind": "ScalingPolicy", "metadata": {"name": name},
        "spec": {
            "target": {"kind": kind, "name": target, "namespace": namespace},
            "minReplicas": 1, "maxReplicas": 3,
            "signals": [{"name": "queue", "preset": "tgi.queue_size"}],
            "policy": {"type": "queue", "work": ["queue"], "capacityPerReplica": 10},
        },
    }
    return compile_policy(ScalingPolicy.model_validate(doc))


def _deployment(name: str, selector: dict[str, Any], namespace: str = "llm", replicas: int = 2) -> dict[str, Any]:
    obj = objects.deployment(name, namespace, replicas=replicas, ready=1)
    obj["spec"]["selector"] = selector
    return obj


def _many_targets(kube: Emulator) -> list[CompiledPolicy]:
    """Three Deployments sharing a selector key, one selecting by expression only, two LWS, a Deployment
    alone in its namespace, and a policy whose Deployment does not exist."""
    for name, app in (("a", "app-a"), ("b", "app-b"), ("c", "app-c")):
        kube.add(_deployment(name, {"matchLabels": {"app": app, "tier": "serve"}}))
    kube.add(_deployment("e", {"matchExpressions": [{"key": "team", "operator": "In", "values": ["x", "y"]}]}))
    kube.add(_deployment("lone", {"matchLabels": {"app": "lone"}}, namespace="other"))
    for lws in ("js-1", "js-2"):
        kube.add(objects.leader_worker_set(lws, replicas=1, size=2))
    pods = [
        ("a-1", {"app": "app-a", "tier": "serve"}, True), ("a-2", {"app": "app-a", "tier": "canary"}, True),
        ("b-1", {"app": "app-b", "tier": "serve"}, False), ("c-1", {"app": "app-c", "tier": "serve"}, True),
        ("e-1", {"team": "x"}, True), ("e-2", {"team": "z"}, True), ("zz", {"app": "unrelated"}, True),
        ("js-1-0", {LWS_NAME: "js-1", LWS_GROUP: "0", LWS_WORKER: "0"}, True),
        ("js-1-0-1", {LWS_NAME: "js-1", LWS_GROUP: "0", LWS_WORKER: "1"}, True),
        ("js-2-0", {LWS_NAME: "js-2", LWS_GROUP: "0", LWS_WORKER: "0"}, False),
    ]
    for i, (name, labels, ready) in enumerate(pods):
        kube.add(objects.pod(name, labels=labels, ready=ready, ip=f"10.0.0.{i + 1}" if ready else None))
    kube.add(objects.pod("lone-1", "other", labels={"app": "lone"}, ready=True, ip="10.9.0.1"))
    return [
        *(_read_policy(f"p-{n}", n) for n in ("a", "b", "c", "e", "missing")),
        _read_policy("p-js-1", "js-1", kind="LeaderWorkerSet"), _read_policy("p-js-2", "js-2", kind="LeaderWorkerSet"),
        _read_policy("p-lone", "lone", namespace="other"),
    ]


async def test_observe_many_answers_what_reading_each_target_alone_answers(
    kube: Emulator, kube_client: client.ApiClient
) -> None:
    policies = _many_targets(kube)
    targets = KubeTargets(kube_client, retry=FAST_RETRY, now=lambda: NOW)
    alone: dict[str, Any] = {}
    for cp in policies:
        try:
            alone[cp.name] = await targets.observe(cp)
        except NotFound as exc:
            alone[cp.name] = str(exc)
    kube.clear_log()
    batched = await targets.observe_many(policies)
    assert {n: str(v) if isinstance(v, Exception) else v for n, v in batched.items()} == alone
    assert isinstance(batched["p-missing"], NotFound)
    a = batched["p-a"]
    assert not isinstance(a, Exception)
    assert [r.name for r in a[1]] == ["a-1"], "the whole selector applies, not only its key"
    # Per namespace: one list per kind holding several targets, one pod list per shared selector key.
    reads = sorted((r.path, r.query.get("labelSelector", "")) for r in kube.requests)
    assert reads == [
        ("/api/v1/namespaces/llm/pods", "app in (app-a,app-b,app-c)"),
        ("/api/v1/namespaces/llm/pods", f"{LWS_NAME} in (js-1,js-2)"),
        ("/api/v1/namespaces/llm/pods", "team in (x,y)"),
        ("/api/v1/namespaces/other/pods", "app=lone"),
        ("/apis/apps/v1/namespaces/llm/deployments", ""),
        ("/apis/apps/v1/namespaces/other/deployments/lone", ""),
        ("/apis/leaderworkerset.x-k8s.io/v1/namespaces/llm/leaderworkersets", ""),
    ]


async def test_observe_many_fails_only_the_targets_a_failed_read_was_for(
    kube: Emulator, kube_client: client.ApiClient
) -> None:
    policies = _many_targets(kube)
    kube.inject(503, "/api/v1/namespaces/llm/pods", times=1)  # one of the llm pod lists (the first sent)
    kube.inject(500, "/apis/apps/v1/namespaces/other/deployments/lone", times=1)
    batched = await KubeTargets(kube_client, retry=FAST_RETRY, now=lambda: NOW).observe_many(policies)
    failed = {n for n, v in batched.items() if isinstance(v, ServerError)}
    groups = [{"p-a", "p-b", "p-c"}, {"p-js-1", "p-js-2"}, {"p-e"}]
    assert "p-lone" in failed
    assert failed - {"p-lone"} in groups, "a failed list fails exactly the targets it was for"
    assert isinstance(batched["p-missing"], NotFound)


async def test_a_paged_target_list_whose_continue_token_expired_is_read_again_whole(
    kube: Emulator, kube_client: client.ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """etcd compacts a paged list's revision while it is read: the next page answers 410 Expired (as the real
    server). As client-go's pager, the read falls back to one full list and answers what the cluster holds now."""
    monkeypatch.setattr(targets_mod, "LIST_PAGE", 2)
    policies = _many_targets(kube)
    listing = "/apis/apps/v1/namespaces/llm/deployments"

    def compacted() -> None:
        kube.modify("apps/v1", "Deployment", "c", "llm", spec={"replicas": 3})
        kube.compact()

    kube.after("GET", listing, compacted)  # right after the first page
    batched = await KubeTargets(kube_client, retry=FAST_RETRY, now=lambda: NOW).observe_many(policies)
    c = batched["p-c"]
    assert not isinstance(c, Exception), c
    assert c.replicas.spec == 3
    assert isinstance(batched["p-missing"], NotFound)
    pages = [(r.query.get("limit"), r.status) for r in kube.requests if r.path == listing]
    assert pages == [("2", 200), ("2", 410), (None, 200)]


async def test_one_target_is_one_read_and_one_list(kube: Emulator, kube_client: client.ApiClient) -> None:
    kube.add(objects.deployment(replicas=1))
    cp = policy()
    targets = KubeTargets(kube_client, retry=FAST_RETRY)
    for read in (targets.observe(cp), targets.observe_many([cp])):
        kube.clear_log()
        await read
        assert [(r.method, r.path, r.query.get("labelSelector")) for r in kube.requests] == [
            ("GET", "/apis/apps/v1/namespaces/llm/deployments/tgi-gemma-deployment", None),
            ("GET", "/api/v1/namespaces/llm/pods", "app=gemma-server"),
        ]


_KEYS = st.sampled_from(["app", "tier", "team", "leaderworkerset.sigs.k8s.io/name"])
_VALUES = st.sampled_from(["a", "b", "c-1", "x.y"])
_EXPRESSIONS = st.lists(
    st.one_of(
        st.fixed_dictionaries(
            {"key": _KEYS, "operator": st.sampled_from(["In", "NotIn"]),
             "values": st.lists(_VALUES, min_size=1, max_size=3, unique=True)}
        ),
        st.fixed_dictionaries({"key": _KEYS, "operator": st.sampled_from(["Exists", "DoesNotExist"])}),
    ),
    max_size=3,
)
_SELECTORS = st.fixed_dictionaries(
    {}, optional={"matchLabels": st.dictionaries(_KEYS, _VALUES, max_size=3), "matchExpressions": _EXPRESSIONS}
)


@settings(max_examples=300, deadline=None)
@given(selector=_SELECTORS, labels=st.dictionaries(_KEYS, _VALUES, max_size=4))
def test_the_client_side_filter_is_the_servers_selector(selector: dict[str, Any], labels: dict[str, str]) -> None:
    """A batched pod list keeps, per target, exactly the pods a list with the target's own selector returns."""
    assert selector_matches(selector, labels) == label_selector_matches(label_selector(selector), labels)


async def test_a_group_waiting_for_kueue_admission_is_not_starting(
    kube: Emulator, kube_client: client.ApiClient
) -> None:
    """Issue 14: a group whose pods carry Kueue's admission gate is counted as waiting for admission
    (``gated``), not as ``starting``: nothing is on its way for it until Kueue admits it."""
    kube.add(objects.leader_worker_set(replicas=3, ready=1, size=2))
    for group, state in (("0", "ready"), ("1", "loading"), ("2", "gated")):
        for worker in ("0", "1"):
            labels = {
                "leaderworkerset.sigs.k8s.io/name": "jetstream",
                "leaderworkerset.sigs.k8s.io/group-index": group,
                "leaderworkerset.sigs.k8s.io/worker-index": worker,
            }
            pod = objects.pod(f"jetstream-{group}-{worker}", labels=labels, ready=state == "ready",
                              phase="Pending" if state == "gated" else "Running")
            if state == "gated":
                pod["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
            kube.add(pod)
    target = _target(kube_client, policy(kind="LeaderWorkerSet", target="jetstream"))
    status = await target.replicas()
    assert (status.spec, status.ready, status.starting, status.gated) == (3, 1, 1, 1)


async def test_a_group_the_lws_status_counts_before_its_pods_are_seen_is_waiting_not_starting(
    kube: Emulator, kube_client: client.ApiClient
) -> None:
    """The LWS status and the pods are read apart: a group the status already counts (``status.replicas``) whose
    pods this read does not see yet is waiting for admission as far as anyone can tell, not starting. Counted as
    starting, its place could be given back to training while its Workload waits (the codelab scenario under
    load, tests/controller/test_tpu_codelab.py)."""
    lws = objects.leader_worker_set(replicas=2, ready=1, size=2)
    lws["status"]["replicas"] = 2
    kube.add(lws)
    for worker in ("0", "1"):
        labels = {"leaderworkerset.sigs.k8s.io/name": "jetstream", "leaderworkerset.sigs.k8s.io/group-index": "0",
                  "leaderworkerset.sigs.k8s.io/worker-index": worker}
        kube.add(objects.pod(f"jetstream-0-{worker}", labels=labels, ready=True, phase="Running"))
    target = _target(kube_client, policy(kind="LeaderWorkerSet", target="jetstream"))
    status = await target.replicas()
    assert (status.spec, status.ready, status.starting, status.gated) == (2, 1, 0, 1)
