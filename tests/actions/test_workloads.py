"""The Kueue training gate against the emulated API server and the explicit Kueue stand-in."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes_asyncio import client

from autoscaler.controller.kube import Forbidden, ServerError
from autoscaler.controller.workloads import (
    CHECKPOINT_REQUESTED,
    DEACTIVATED_AT,
    DEACTIVATED_BY,
    DEACTIVATED_REASON,
    HELD_FOR,
    INTERVAL_SECONDS,
    LAST_CHECKPOINT,
    ON_REQUEST,
    ON_TERMINATION,
    PREEMPTED_AT,
    RESTORE_SECONDS,
    RESUMED_AT,
    SAVE_SECONDS,
    KueueGate,
    UnresolvableWorkload,
)
from autoscaler.core import arbitration
from autoscaler.core.model import QuotaStatus, Reason, TrainingAction, TrainingDecision, TrainingWorkload
from tests.actions.policies import FAST_RETRY, policy
from tests.kube import objects
from tests.kube.emulator import Emulator
from tests.kube.kueue import Kueue

V1BETA2 = "kueue.x-k8s.io/v1beta2"
WL_NAME = "job-finetune-gemma-l4-3316f"
WL_PATH = f"/apis/kueue.x-k8s.io/v1beta2/namespaces/llm/workloads/{WL_NAME}"
NOW = 1796032800.0  # 2026-11-30T10:00:00Z


def gate(api: client.ApiClient) -> KueueGate:
    return KueueGate(api, retry=FAST_RETRY, now=lambda: NOW)


def tutorial(kube: Emulator, kueue: Kueue, *, api_version: str = V1BETA2) -> dict[str, Any]:
    """The tutorial's cluster: a 6-GPU ClusterQueue, TGI at 1 replica (2 GPUs), the fine-tune (4 GPUs)."""
    kube.add(objects.cluster_queue(api_version=api_version))
    kube.add(objects.local_queue())
    kube.add(objects.workload_priority_class("low-priority-preempting", 100, api_version=api_version))
    job = kube.add(objects.job())
    kube.add(objects.workload(WL_NAME, owner=job, priority_class="low-priority-preempting", priority=100,
                                api_version=api_version))
    pod = kube.add(objects.pod("tgi-gemma-deployment-6cb95cc7f5-cbxg2"))
    kube.add(objects.workload("pod-tgi-gemma-deployment-6cb95cc7f5-cbxg2-d9fe7", owner=pod, pods=1, priority=1000))
    assert kueue.admit_pending() == ["pod-tgi-gemma-deployment-6cb95cc7f5-cbxg2-d9fe7", WL_NAME]
    return job


async def test_finds_the_finetune_workload_by_owner_uid(
    kube: Emulator, kube_client: client.ApiClient, kueue: Kueue
) -> None:
    tutorial(kube, kueue)
    found, quota = await gate(kube_client).training(policy())
    assert found == (
        TrainingWorkload(
            namespace="llm", name=WL_NAME, priority=100, chips=4, active=True, admitted=True,
            uid=kube.get(V1BETA2, "Workload", WL_NAME, "llm")["metadata"]["uid"], grace_s=60.0,
        ),
    )
    assert quota == QuotaStatus("cluster-queue", "nvidia.com/gpu", nominal=6.0, reserved=6.0, borrowable=0.0)
    assert quota.free == 0


async def test_owner_uid_not_name_decides(kube: Emulator, kube_client: client.ApiClient) -> None:
    kube.add(objects.cluster_queue())
    mine = kube.add(objects.job("finetune-gemma-l4-with-a-very-long-name-that-kueue-truncates"))
    other = kube.add(objects.job("someone-elses-job", pod_labels={"app": "other"}))
    # Truncated/random names: nothing in the name says whose it is.
    kube.add(objects.workload("job-finetune-gemma-l4-with-a-very-long-n-7f2a1", owner=mine, priority=5))
    kube.add(objects.workload("job-finetune-gemma-l4-3316f", owner=other, priority=5))  # looks like ours; is not
    kube.add(objects.workload("orphan-workload", priority=5))  # no owner, no labels
    found = await gate(kube_client).find(policy().policy.spec, owner="tgi-gemma")
    assert [w.name for w in found] == ["job-finetune-gemma-l4-with-a-very-long-n-7f2a1"]


@pytest.mark.parametrize(
    ("owner_labels", "pod_labels", "workload_labels", "matched"),
    [
        pytest.param({}, {"app": "finetune-job"}, {}, True, id="by-pod-template-labels-as-the-tutorial"),
        pytest.param({"app": "finetune-job"}, {}, {}, True, id="by-job-labels"),
        pytest.param({}, {}, {"app": "finetune-job"}, True, id="workload-labeled-directly"),
        pytest.param({"app": "other"}, {"app": "other"}, {}, False, id="no-match"),
    ],
)
async def test_selector_matching(
    kube: Emulator,
    kube_client: client.ApiClient,
    owner_labels: dict[str, str],
    pod_labels: dict[str, str],
    workload_labels: dict[str, str],
    matched: bool,
) -> None:
    kube.add(objects.cluster_queue())
    job = kube.add(objects.job(labels=owner_labels, pod_labels=pod_labels))
    kube.add(objects.workload("wl", owner=job, labels=workload_labels, priority=1))
    found = await gate(kube_client).find(policy().policy.spec, owner="tgi-gemma")
    assert bool(found) is matched


@pytest.mark.parametrize(
    ("workload_kwargs", "priority"),
    [
        pytest.param({"priority": 7}, 7, id="spec-priority"),
        # Kueue copies the class's value into spec.priority: a Workload with a priorityClassRef and no priority is
        # refused by its CRD's rule (``!has(self.priorityClassRef) || has(self.priority)``).
        pytest.param({"priority_class": "low", "priority": 100}, 100, id="v1beta2-priorityClassRef"),
        pytest.param({"labels": {"kueue.x-k8s.io/priority-class": "low"}}, 100, id="priority-class-label"),
        pytest.param({"labels": {"kueue.x-k8s.io/priority-class": "missing"}}, 0, id="unknown-class-is-0"),
        pytest.param({}, 0, id="none-is-0"),
    ],
)
async def test_priority(
    kube: Emulator, kube_client: client.ApiClient, workload_kwargs: dict[str, Any], priority: int
) -> None:
    kube.add(objects.cluster_queue())
    kube.add(objects.workload_priority_class("low", 100))
    job = kube.add(objects.job())
    kube.add(objects.workload("wl", owner=job, **workload_kwargs))
    (found,) = await gate(kube_client).find(policy().policy.spec, owner="tgi-gemma")
    assert found.priority == priority


async def test_v1beta1_when_v1beta2_is_not_served(
    kube: Emulator, kube_client: client.ApiClient, kueue: Kueue
) -> None:
    tutorial(kube, kueue, api_version="kueue.x-k8s.io/v1beta1")
    kube.unserve("kueue.x-k8s.io", "v1beta2")
    g = gate(kube_client)
    found, quota = await g.training(policy())
    assert [(w.name, w.priority, w.chips) for w in found] == [(WL_NAME, 100, 4)]
    assert quota is not None
    assert quota.nominal == 6
    await g.apply(policy(), TrainingDecision(found[0], TrainingAction.DEACTIVATE, Reason.DEACTIVATE_TRAINING, "x"))
    (write,) = kube.writes()
    assert write.path == WL_PATH.replace("v1beta2", "v1beta1")
    assert await g.version() == "v1beta1"


@pytest.mark.parametrize(
    ("nominal", "borrowing", "reserved_gpus", "lender", "free"),
    [
        pytest.param("6", None, 6, None, 0.0, id="tutorial-full"),
        pytest.param("6000m", None, 2, None, 4.0, id="milli-quantity"),
        # A borrowingLimit is a cap on what a cohort may lend, not capacity: without a cohort nothing is lent.
        pytest.param("6", "2", 6, None, 0.0, id="borrowing-limit-without-cohort-is-not-capacity"),
        pytest.param("6", "2", 6, "8", 2.0, id="cohort-lends-up-to-the-borrowing-limit"),
        pytest.param("6", "4", 6, "1", 1.0, id="cohort-lends-only-what-it-has"),
        pytest.param("6", None, 6, "3", 3.0, id="no-limit-borrows-all-the-cohort-has"),
    ],
)
async def test_quota(
    kube: Emulator, kube_client: client.ApiClient, kueue: Kueue,
    nominal: str, borrowing: str | None, reserved_gpus: int, lender: str | None, free: float,
) -> None:
    cohort = None if lender is None else "shared"
    if lender is not None:
        kube.add(objects.cluster_queue("lender", nominal=lender, cohort=cohort))
    kube.add(objects.cluster_queue(nominal=nominal, borrowing_limit=borrowing, cohort=cohort))
    kube.add(objects.local_queue())
    kube.add(objects.workload("serving", pods=reserved_gpus // 2, priority=1000))
    kueue.admit("serving")
    spec = policy().policy.spec
    assert spec.capacity is not None
    quota = await gate(kube_client).quota(spec.capacity)
    assert quota.free == free


@pytest.mark.parametrize(
    ("reclaim", "free"),
    [
        # The lender borrows 4 of our 6: Kueue lends us nothing and, reclaiming Never (its default), leaves it there.
        pytest.param(None, 0.0, id="a-borrower-keeps-our-quota"),
        pytest.param("Any", 4.0, id="reclaimed-within-the-cohort"),
    ],
)
async def test_quota_reads_the_cohort_its_members_and_reclaiming(
    kube: Emulator, kube_client: client.ApiClient, kueue: Kueue, reclaim: str | None, free: float
) -> None:
    kube.add(objects.cluster_queue("lender", nominal="4", cohort="shared"))
    ours = objects.cluster_queue(nominal="6", cohort="shared")
    if reclaim is not None:
        ours["spec"]["preemption"]["reclaimWithinCohort"] = reclaim
    kube.add(ours)
    kube.add(objects.local_queue())
    kube.add(objects.local_queue("lq-lender", cluster_queue_name="lender"))
    kube.add(objects.workload("ours", pods=1, priority=1000))
    kueue.admit("ours")
    kube.add(objects.workload("borrower", pods=4, priority=10, queue="lq-lender"))
    kueue.admit("borrower")
    spec = policy().policy.spec
    assert spec.capacity is not None
    quota = await gate(kube_client).quota(spec.capacity)
    assert quota.cohort == "shared"
    assert sorted((m.name, m.nominal, m.reserved) for m in quota.members) == [
        ("cluster-queue", 6, 2), ("lender", 4, 8)
    ]
    assert quota.free == free


async def test_deactivate_then_a_restarted_gate_reactivates(
    kube: Emulator, kube_client: client.ApiClient, kueue: Kueue
) -> None:
    tutorial(kube, kueue)
    target = kube.add(objects.deployment())
    cp = policy()
    first = gate(kube_client)
    (wl,) = (await first.training(cp))[0]
    rv = kube.get(V1BETA2, "Workload", WL_NAME, "llm")["metadata"]["resourceVersion"]
    decision = TrainingDecision(wl, TrainingAction.DEACTIVATE, Reason.DEACTIVATE_TRAINING, "serving needs 2 GPUs")
    assert await first.apply(cp, decision) is True
    (write,) = kube.writes()
    assert (write.method, write.path, write.content_type) == ("PATCH", WL_PATH, "application/merge-patch+json")
    assert write.body == {
        "metadata": {
            "resourceVersion": rv,
            "annotations": {
                DEACTIVATED_BY: "tgi-gemma", DEACTIVATED_REASON: "serving needs 2 GPUs",
                DEACTIVATED_AT: "2026-11-30T10:00:00Z", PREEMPTED_AT: "2026-11-30T10:00:00Z",
                # What it was stopped for, by stable identities: found again whatever happens to the policy.
                HELD_FOR: json.dumps({
                    "clusterQueue": "cluster-queue", "resource": objects.GPU,
                    "target": "Deployment/llm/tgi-gemma-deployment", "targetUID": target["metadata"]["uid"],
                }, sort_keys=True),
            },
        },
        "spec": {"active": False},
    }
    kueue.sync()  # Kueue evicts it (reason Deactivated) and frees its 4 GPUs
    assert kueue.free("cluster-queue", objects.GPU) == 4
    # Never the Job: Kueue would undo a suspend of an admitted Job.
    assert all("/jobs/" not in w.path for w in kube.writes())

    restarted = gate(kube_client)  # a new controller process: nothing in memory
    (again,), _ = await restarted.training(cp)
    assert (again.active, again.admitted, again.deactivated_by_us) == (False, False, True)
    reactivate = TrainingDecision(again, TrainingAction.REACTIVATE, Reason.REACTIVATE_TRAINING, "room again")
    assert await restarted.apply(cp, reactivate) is True
    last = kube.writes()[-1]
    assert (last.method, last.path, last.content_type) == ("PATCH", WL_PATH, "application/merge-patch+json")
    body = last.body
    assert body["spec"] == {"active": True}
    assert body["metadata"]["annotations"] == {
        DEACTIVATED_BY: None, DEACTIVATED_REASON: None, DEACTIVATED_AT: None, RESUMED_AT: "2026-11-30T10:00:00Z"
    }
    kueue.sync()
    stored = kueue.workload(WL_NAME)
    requeued = next(c for c in stored["status"]["conditions"] if c["type"] == "Requeued")
    assert (requeued["status"], requeued["reason"]) == ("True", "Reactivated")
    assert DEACTIVATED_BY not in (stored["metadata"].get("annotations") or {})


async def test_writes_are_idempotent(kube: Emulator, kube_client: client.ApiClient, kueue: Kueue) -> None:
    tutorial(kube, kueue)
    cp = policy()
    g = gate(kube_client)
    (wl,) = (await g.training(cp))[0]
    spec = cp.policy.spec
    assert await g.deactivate(spec, wl, owner=cp.name) is True
    kube.strict = True  # from here on any write fails the test
    assert await g.deactivate(spec, wl, owner=cp.name) is False
    kube.strict = False
    assert await g.reactivate(spec, wl, owner=cp.name) is True
    kube.strict = True
    assert await g.reactivate(spec, wl, owner=cp.name) is False


@pytest.mark.parametrize(
    ("tamper", "message"),
    [
        pytest.param("no-uid", "has no UID", id="no-uid"),
        pytest.param("replaced", "was replaced", id="same-name-new-uid"),
        pytest.param("gone", "no longer exists", id="deleted"),
        pytest.param(
            "owner-relabeled", "not resolvable through a controller ownerReference", id="owner-no-longer-matches"
        ),
    ],
)
async def test_refuses_a_workload_it_could_not_find_again(
    kube: Emulator, kube_client: client.ApiClient, kueue: Kueue, tamper: str, message: str
) -> None:
    job = tutorial(kube, kueue)
    cp = policy()
    g = gate(kube_client)
    (wl,) = (await g.training(cp))[0]
    if tamper == "no-uid":
        wl = TrainingWorkload(wl.namespace, wl.name, wl.priority, wl.chips, wl.active, wl.admitted, uid="")
    elif tamper in ("replaced", "gone"):
        kube.remove(V1BETA2, "Workload", WL_NAME, "llm")
        if tamper == "replaced":
            kube.add(objects.workload(WL_NAME, owner=job, priority=100))
    else:
        kube.modify("batch/v1", "Job", job["metadata"]["name"], "llm",
                    spec={"template": {"metadata": {"labels": {"app": "renamed"}}}})
    kube.strict = True
    with pytest.raises(UnresolvableWorkload, match=message):
        await g.deactivate(cp.policy.spec, wl, owner=cp.name)


async def test_never_resumes_what_someone_else_stopped(
    kube: Emulator, kube_client: client.ApiClient, kueue: Kueue
) -> None:
    tutorial(kube, kueue)
    kube.modify(V1BETA2, "Workload", WL_NAME, "llm", spec={"active": False})  # kubectl kueue stop workload
    cp = policy()
    g = gate(kube_client)
    (wl,) = (await g.training(cp))[0]
    assert wl.deactivated_by_us is False
    kube.strict = True
    with pytest.raises(UnresolvableWorkload, match="was not deactivated by this controller"):
        await g.reactivate(cp.policy.spec, wl, owner=cp.name)
    # Nor does another policy's deactivation count as ours.
    assert await g.deactivate(cp.policy.spec, wl, owner=cp.name) is False


async def test_conflict_on_deactivate_is_retried(kube: Emulator, kube_client: client.ApiClient, kueue: Kueue) -> None:
    tutorial(kube, kueue)
    cp = policy()
    g = gate(kube_client)
    (wl,) = (await g.training(cp))[0]

    def kueue_updates_status() -> None:
        kueue.evict(WL_NAME, reason="Preempted")  # Kueue writes between our read and our patch

    kube.after("GET", WL_PATH, kueue_updates_status, times=1)
    assert await g.deactivate(cp.policy.spec, wl, owner=cp.name) is True
    assert [w.status for w in kube.writes()] == [409, 200]
    assert kube.get(V1BETA2, "Workload", WL_NAME, "llm")["spec"]["active"] is False


async def test_forbidden_patch_is_reported(kube: Emulator, kube_client: client.ApiClient, kueue: Kueue) -> None:
    tutorial(kube, kueue)
    cp = policy()
    g = gate(kube_client)
    (wl,) = (await g.training(cp))[0]
    kube.deny("patch", "workloads", namespace="llm")
    with pytest.raises(Forbidden, match=r'cannot patch resource "workloads" in API group "kueue\.x-k8s\.io"'):
        await g.deactivate(cp.policy.spec, wl, owner=cp.name)
    assert len(kube.writes()) == 1


@pytest.mark.parametrize(
    ("failures", "succeeds"),
    [pytest.param(2, True, id="two-500s-then-ok"), pytest.param(9, False, id="persistent-500-bounded")],
)
async def test_server_errors_on_deactivate_are_retried_within_a_bound(
    kube: Emulator, kube_client: client.ApiClient, kueue: Kueue, failures: int, succeeds: bool
) -> None:
    tutorial(kube, kueue)
    cp = policy()
    g = gate(kube_client)
    (wl,) = (await g.training(cp))[0]
    kube.inject(500, WL_PATH, method="PATCH", times=failures)
    if succeeds:
        assert await g.deactivate(cp.policy.spec, wl, owner=cp.name) is True
        assert [w.status for w in kube.writes()] == [500] * failures + [200]
    else:
        with pytest.raises(ServerError):
            await g.deactivate(cp.policy.spec, wl, owner=cp.name)
        assert len(kube.writes()) == FAST_RETRY.attempts
        assert kube.get(V1BETA2, "Workload", WL_NAME, "llm")["spec"].get("active", True) is True


def jobset(name: str, *, annotations: dict[str, str] | None = None, grace: list[int | None] | None = None,
           ) -> dict[str, Any]:
    """The codelab's training as a JobSet: one replicated Job whose pods carry ``app: finetune-job`` (with
    ``grace``, one replicated Job per entry, each with that ``terminationGracePeriodSeconds``, None: unset)."""
    if grace is not None:
        doc = jobset(name, annotations=annotations)
        (replicated,) = doc["spec"]["replicatedJobs"]
        doc["spec"]["replicatedJobs"] = []
        for i, seconds in enumerate(grace):
            r = json.loads(json.dumps(replicated))
            r["name"] = f"workers-{i}"
            if seconds is not None:
                r["template"]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = seconds
            doc["spec"]["replicatedJobs"].append(r)
        return doc
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": name, "namespace": "llm", "labels": {"kueue.x-k8s.io/queue-name": "lq"},
                     "annotations": annotations or {}},
        "spec": {"suspend": True, "replicatedJobs": [{"name": "workers", "replicas": 1, "template": {"spec": {
            "parallelism": 2, "completions": 2,
            "template": {"metadata": {"labels": {"app": "finetune-job"}},
                         "spec": {"containers": [objects.container({objects.GPU: "2"})]}},
        }}}]},
    }


async def test_jobsets_and_jobs_found_through_owner_references_with_their_last_checkpoint(
    kube: Emulator, kube_client: client.ApiClient
) -> None:
    """Training as the seeds run it: the tutorial's batch/v1 Job and the codelab's JobSet, each found through
    its Workload's controller ownerReference; the time since each one's last checkpoint is read from the
    ``autoscaler.dev/last-checkpoint-time`` annotation its training loop writes (RFC 3339 or unix seconds)."""
    kube.add(objects.cluster_queue())
    fresh = kube.add(jobset("pretrain", annotations={LAST_CHECKPOINT: "2026-11-30T09:59:30Z"}))  # 30 s before now
    stale = kube.add(objects.job())
    kube.modify("batch/v1", "Job", "finetune-gemma-l4", "llm",
                metadata={"annotations": {LAST_CHECKPOINT: str(1796032800 - 540)}})  # unix seconds, 9 min ago
    unknown = kube.add(jobset("no-annotation"))
    kube.add(objects.workload("jobset-pretrain-0a1b2", owner=fresh, priority=5))
    kube.add(objects.workload("job-finetune-gemma-l4-3316f", owner=stale, priority=5))
    kube.add(objects.workload("jobset-no-annotation-9f8e7", owner=unknown, priority=5))
    found = {w.name: w for w in await gate(kube_client).find(policy().policy.spec, owner="tgi-gemma")}
    assert {n: w.since_checkpoint_s for n, w in found.items()} == {
        "jobset-pretrain-0a1b2": 30.0, "job-finetune-gemma-l4-3316f": 540.0, "jobset-no-annotation-9f8e7": None,
    }
    assert {w.chips for w in found.values()} == {4}


async def test_a_checkpoint_request_annotates_the_job_and_stops_nothing(
    kube: Emulator, kube_client: client.ApiClient, kueue: Kueue
) -> None:
    tutorial(kube, kueue)
    cp = policy()
    g = gate(kube_client)
    (wl,) = (await g.training(cp))[0]
    ask = TrainingDecision(wl, TrainingAction.REQUEST_CHECKPOINT, Reason.REQUEST_CHECKPOINT, "save first")
    assert await g.apply(cp, ask) is True
    (write,) = kube.writes()
    assert (write.method, write.path, write.content_type) == (
        "PATCH", "/apis/batch/v1/namespaces/llm/jobs/finetune-gemma-l4", "application/merge-patch+json"
    )
    assert write.body == {"metadata": {"annotations": {CHECKPOINT_REQUESTED: "2026-11-30T10:00:00Z"}}}
    (again,) = (await g.training(cp))[0]
    assert (again.active, again.checkpoint_requested_at) == (True, NOW)


async def test_a_job_restarted_after_its_checkpoint_risks_only_what_it_did_since_its_admission(
    kube: Emulator, kube_client: client.ApiClient
) -> None:
    """A job resumed (or requeued by Kueue) after its last checkpoint restored from it: stopping it loses what it
    did since it was admitted again (its ``Admitted`` condition's time, or ``PodsReady``'s when later), not
    everything since the checkpoint; less the restore it declares (``autoscaler.dev/checkpoint-restore-seconds``)."""
    kube.add(objects.cluster_queue())
    job = kube.add(objects.job())
    kube.modify("batch/v1", "Job", "finetune-gemma-l4", "llm",
                metadata={"annotations": {LAST_CHECKPOINT: str(NOW - 900)}})  # saved 15 min ago, then stopped
    kube.add(objects.workload(WL_NAME, owner=job, priority=5))
    admitted = {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "",
                "lastTransitionTime": "2026-11-30T09:59:00Z"}  # admitted again 60 s ago
    kube.modify(V1BETA2, "Workload", WL_NAME, "llm", status={"conditions": [admitted]})
    (w,) = await gate(kube_client).find(policy().policy.spec, owner="tgi-gemma")
    assert w.since_checkpoint_s == 60.0
    # It declares a 45 s restore: reloading computed nothing a stop could lose (15 s at risk); one still
    # restoring risks nothing new (a stop then wastes less than its restore would still take).
    for restore, at_risk in (("45", 15.0), ("120", 0.0), ("oops", 60.0)):
        kube.modify("batch/v1", "Job", "finetune-gemma-l4", "llm",
                    metadata={"annotations": {RESTORE_SECONDS: restore}})
        (w,) = await gate(kube_client).find(policy().policy.spec, owner="tgi-gemma")
        assert w.since_checkpoint_s == at_risk, restore
    # Its pods became ready 40 s ago (Kueue's PodsReady, after a slice was provisioned): 40 s, less the
    # declared 20 s restore. A PodsReady older than the admission is an earlier run's: the admission counts.
    kube.modify("batch/v1", "Job", "finetune-gemma-l4", "llm", metadata={"annotations": {RESTORE_SECONDS: "20"}})
    for ready_at, at_risk in (("2026-11-30T09:59:20Z", 20.0), ("2026-11-30T09:30:00Z", 40.0)):
        ready = {**admitted, "type": "PodsReady", "reason": "PodsReady", "lastTransitionTime": ready_at}
        kube.modify(V1BETA2, "Workload", WL_NAME, "llm", status={"conditions": [admitted, ready]})
        (w,) = await gate(kube_client).find(policy().policy.spec, owner="tgi-gemma")
        assert w.since_checkpoint_s == at_risk, ready_at
    kube.modify("batch/v1", "Job", "finetune-gemma-l4", "llm", metadata={"annotations": {RESTORE_SECONDS: None}})
    # Admitted before the checkpoint: the checkpoint is what counts (a restore long over).
    kube.modify(V1BETA2, "Workload", WL_NAME, "llm",
                status={"conditions": [{**admitted, "lastTransitionTime": "2026-11-30T09:00:00Z"}]})
    (w,) = await gate(kube_client).find(policy().policy.spec, owner="tgi-gemma")
    assert w.since_checkpoint_s == 900.0


async def test_the_victims_grace_period_and_declared_checkpoint_facts_are_read_from_its_job(
    kube: Emulator, kube_client: client.ApiClient
) -> None:
    """``terminationGracePeriodSeconds`` from the pod template(s) of the Job (the tutorial's sets 60) or JobSet
    (the longest over its replicated Jobs; Kubernetes' 30 where one leaves it out), the copy in the Workload's
    podSets when the job is not found; the save time, save-on-SIGTERM and interval as the job declares them."""
    kube.add(objects.cluster_queue())
    job = objects.job()  # the tutorial's: terminationGracePeriodSeconds 60
    job["metadata"]["annotations"] = {SAVE_SECONDS: "20", ON_TERMINATION: "true", INTERVAL_SECONDS: "620",
                                      ON_REQUEST: "true"}
    job = kube.add(job)
    js = kube.add(jobset("pretrain", grace=[None, 120]))
    unset = kube.add(jobset("defaults", annotations={SAVE_SECONDS: "oops", ON_TERMINATION: "yes", ON_REQUEST: "1"}))
    kube.add(objects.workload("job-finetune-gemma-l4-3316f", owner=job, priority=5))
    kube.add(objects.workload("jobset-pretrain-0a1b2", owner=js, priority=5))
    kube.add(objects.workload("jobset-defaults-9f8e7", owner=unset, priority=5))
    labeled = objects.workload("labeled-only", labels={"app": "finetune-job"}, priority=5)
    labeled["spec"]["podSets"][0]["template"]["spec"]["terminationGracePeriodSeconds"] = 45
    kube.add(labeled)
    found = {w.name: w for w in await gate(kube_client).find(policy().policy.spec, owner="tgi-gemma")}
    facts = {n: (w.grace_s, w.save_s, w.saves_on_termination, w.checkpoint_interval_s, w.honours_requests)
             for n, w in found.items()}
    assert facts == {
        "job-finetune-gemma-l4-3316f": (60.0, 20.0, True, 620.0, True),
        "jobset-pretrain-0a1b2": (120.0, None, False, None, False),
        "jobset-defaults-9f8e7": (30.0, None, False, None, False),  # bad declarations are not taken
        "labeled-only": (45.0, None, False, None, False),
    }


async def test_the_checkpoint_interval_is_learned_from_successive_annotation_updates(
    kube: Emulator, kube_client: client.ApiClient
) -> None:
    """A job that declares no interval: the controller learns it from two successive values of its
    last-checkpoint annotation (one gate, as the controller keeps it between passes)."""
    kube.add(objects.cluster_queue())
    job = kube.add(objects.job())
    kube.add(objects.workload(WL_NAME, owner=job, priority=5))
    clock = [NOW]
    g = KueueGate(kube_client, retry=FAST_RETRY, now=lambda: clock[0])

    async def read(checkpoint: float) -> TrainingWorkload:
        kube.modify("batch/v1", "Job", "finetune-gemma-l4", "llm",
                    metadata={"annotations": {LAST_CHECKPOINT: str(checkpoint)}})
        (w,) = await g.find(policy().policy.spec, owner="tgi-gemma")
        return w

    assert (await read(NOW - 100)).checkpoint_interval_s is None  # one value: no interval yet
    clock[0] = NOW + 530
    w = await read(NOW + 500)  # saved again 600 s after the first
    assert (w.checkpoint_interval_s, w.since_checkpoint_s) == (600.0, 30.0)
    assert arbitration.next_checkpoint_s(w) == 570.0
    clock[0] = NOW + 560
    assert (await read(NOW + 500)).checkpoint_interval_s == 600.0  # unchanged annotation: kept
