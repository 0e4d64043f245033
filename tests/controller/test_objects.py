"""ScalingPolicy objects against the emulated API server: the controller loads them like files, hot-reloads
them through the watch, refuses cross-namespace ones, and writes their status once per pass (merge patch of
the status subresource) with the decision, signals, held Workloads and conditions."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from autoscaler.controller.config import ControllerConfig
from autoscaler.controller.objects import ObjectRef
from autoscaler.controller.reload import Conflict
from autoscaler.controller.runtime import Runtime
from tests.controller.helpers import (
    ManualClock,
    TgiMetrics,
    pool_on,
    settle_serving,
    stop_watching,
    tutorial_cluster,
)
from tests.controller.policies import tgi_policy
from tests.kube.emulator import Emulator
from tests.kube.kueue import Kueue

API = "autoscaler.dev/v1alpha1"


def policy_object(endpoint: str, *, namespace: str = "llm", **spec: Any) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(tgi_policy(source=f"{{type: pods, endpoints: ['{endpoint}']}}"))
    doc["metadata"]["namespace"] = namespace
    del doc["spec"]["target"]["namespace"]  # an object's target defaults to the object's namespace
    doc["spec"].update(spec)
    return doc


def make_runtime(kube_client: client.ApiClient, tmp_path: Path, clock: ManualClock, **config: Any) -> Runtime:
    cfg = ControllerConfig.model_validate({"leaderElection": {"enabled": False}, "watchScalingPolicies": True,
                                           **config})
    (tmp_path / "files").mkdir(exist_ok=True)
    return Runtime(api=kube_client, config=cfg, policies_dir=tmp_path / "files", clock=clock, identity="a",
                   namespace="autoscaler", source=pool_on(clock))


def status(kube: Emulator, name: str = "tgi-gemma", namespace: str = "llm") -> dict[str, Any]:
    st: dict[str, Any] = kube.get(API, "ScalingPolicy", name, namespace).get("status") or {}
    return st


def conditions(st: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in st.get("conditions", [])}


async def test_an_object_scales_and_its_status_says_what_and_why(
    kube: Emulator, kube_client: client.ApiClient, kueue: Kueue, tgi: TgiMetrics, tmp_path: Path
) -> None:
    tutorial_cluster(kube, kueue)
    settle_serving(kube, kueue)
    kube.add(policy_object(tgi.url))
    clock = ManualClock()
    rt = make_runtime(kube_client, tmp_path, clock)
    tgi.queue = 15
    await rt.list_policy_objects()
    assert rt.store.reload().loaded == ("ScalingPolicy llm/tgi-gemma",)
    assert await rt.controller.run_once()
    st = status(kube)
    assert st["observedGeneration"] == 1
    assert (st["currentReplicas"], st["desiredReplicas"], st["reason"]) == (1, 2, "ScaleUp")
    assert "15" in st["message"]
    assert st["lastScaleTime"].endswith("Z")
    assert st["signals"] == [{"name": "queue", "value": 15.0, "ageSeconds": st["signals"][0]["ageSeconds"],
                              "state": "ok"}]
    assert st["heldWorkloads"] == [{"namespace": "llm", "name": "job-finetune-gemma-l4-3316f"}]
    assert conditions(st) == {
        "AbleToScale": ("True", "SucceededRescale"), "ScalingActive": ("True", "ValidMetricFound"),
        "ScalingLimited": ("False", "DesiredWithinRange"), "MetricsKnown": ("True", "AllSignalsKnown"),
        "OwnershipConflict": ("False", "NoConflict"), "TrainingHeldDown": ("True", "DeactivateTraining"),
    }
    metrics = rt.telemetry.exposition().decode()  # what the dashboard's desired-vs-current and signals panels read
    assert 'autoscaler_current_replicas{policy="tgi-gemma"} 1.0' in metrics
    assert 'autoscaler_desired_replicas{policy="tgi-gemma"} 2.0' in metrics
    assert 'autoscaler_signal_value{policy="tgi-gemma",signal="queue"} 15.0' in metrics
    status_writes = [r for r in kube.writes() if r.path.endswith("/status") and "scalingpolicies" in r.path]
    assert len(status_writes) == 1
    assert status_writes[0].content_type == "application/merge-patch+json"
    assert status_writes[0].method == "PATCH"
    # The deployment was scaled by the same pass; the object's spec is untouched by the status write.
    assert kube.get("apps/v1", "Deployment", "tgi-gemma-deployment", "llm")["spec"]["replicas"] == 2
    assert kube.get(API, "ScalingPolicy", "tgi-gemma", "llm")["metadata"]["generation"] == 1


async def test_status_is_written_only_when_it_changes(
    kube: Emulator, kube_client: client.ApiClient, kueue: Kueue, tgi: TgiMetrics, tmp_path: Path
) -> None:
    tutorial_cluster(kube, kueue)
    settle_serving(kube, kueue)
    kube.add(policy_object(tgi.url))
    rt = make_runtime(kube_client, tmp_path, ManualClock())
    tgi.queue = 5  # steady at 1 replica
    await rt.list_policy_objects()
    rt.store.reload()
    await rt.controller.run_once()
    await rt.controller.run_once()
    assert rt.status.patches == 1
    assert status(kube)["reason"] in ("Steady", "WithinTolerance")


async def test_a_write_builds_only_the_statuses_whose_inputs_moved(
    kube: Emulator, kube_client: client.ApiClient, kueue: Kueue, tgi: TgiMetrics, tmp_path: Path
) -> None:
    """The writer runs after every pass and every probe chunk: an object whose inputs did not move (no new
    evaluation of its policy, same generation, same refusal) keeps the status last written and is not built
    again; one whose inputs moved is built and, when it changed, patched."""
    tutorial_cluster(kube, kueue)
    settle_serving(kube, kueue)
    kube.add(policy_object(tgi.url))
    refused = policy_object(tgi.url, minReplicas=5)  # invalid: min above max
    refused["metadata"]["name"] = "refused"
    kube.add(refused)
    rt = make_runtime(kube_client, tmp_path, ManualClock())
    built: list[str] = []
    build = rt.status.status

    def counted(source: str, ref: ObjectRef, policy: str | None, now: float) -> dict[str, Any]:
        built.append(source)
        return build(source, ref, policy, now)

    rt.status.status = counted  # type: ignore[method-assign]
    tgi.queue = 5  # steady at 1 replica
    await rt.list_policy_objects()
    rt.store.reload()
    await rt.controller.run_once()
    assert sorted(built) == ["ScalingPolicy llm/refused", "ScalingPolicy llm/tgi-gemma"]
    assert rt.status.patches == 2
    built.clear()
    await rt.status.write()  # nothing evaluated, nothing changed
    await rt.status.write(["tgi-gemma"])
    assert built == []
    await rt.controller.run_once()  # a new evaluation: a new outcome for tgi-gemma only
    assert built == ["ScalingPolicy llm/tgi-gemma"]
    assert rt.status.patches == 2  # built again, the same status: not patched
    built.clear()
    ref = rt.objects.refs["ScalingPolicy llm/refused"]
    rt.objects.refs["ScalingPolicy llm/refused"] = dataclasses.replace(ref, generation=ref.generation + 1)
    await rt.status.write()
    assert built == ["ScalingPolicy llm/refused"]
    assert status(kube, "refused")["observedGeneration"] == ref.generation + 1
    assert status(kube, "refused")["reason"] == "InvalidPolicy"
    built.clear()
    # An ownership conflict found by a reload, with no new evaluation: tgi-gemma's inputs moved, the other's not.
    held = rt.store.policies["tgi-gemma"]
    rt.store.conflicts["tgi-gemma"] = Conflict(held, "other.yaml", 1, "target already scaled by another policy")
    await rt.status.write()
    assert built == ["ScalingPolicy llm/tgi-gemma"]
    built.clear()
    rt.objects.problems["ScalingPolicy llm/tgi-gemma"] = "a problem of the object itself"
    await rt.status.write()
    assert built == ["ScalingPolicy llm/tgi-gemma"]


async def test_a_status_keeps_nothing_of_an_older_pass_but_the_last_scale(
    kube: Emulator, kube_client: client.ApiClient, kueue: Kueue, tgi: TgiMetrics, tmp_path: Path
) -> None:
    """The status is a merge patch: a key it leaves out keeps its stored value, on a real server as here. A policy
    that scaled and then turned invalid must not show the old decision's counts beside InvalidPolicy; the time of
    the last scale stays (it is a fact about the past)."""
    tutorial_cluster(kube, kueue)
    settle_serving(kube, kueue)
    kube.add(policy_object(tgi.url))
    rt = make_runtime(kube_client, tmp_path, ManualClock())
    tgi.queue = 15
    await rt.list_policy_objects()
    rt.store.reload()
    await rt.controller.run_once()
    before = status(kube)
    assert (before["currentReplicas"], before["desiredReplicas"], before["reason"]) == (1, 2, "ScaleUp")
    kube.modify(API, "ScalingPolicy", "tgi-gemma", "llm", spec={"minReplicas": 5})  # above maxReplicas: refused
    await rt.list_policy_objects()
    rt.store.reload()
    await rt.status.write()
    st = status(kube)
    assert st["reason"] == "InvalidPolicy"
    assert st["observedGeneration"] == 2
    for stale in ("currentReplicas", "desiredReplicas", "lastEvaluationTime"):
        assert stale not in st, f"{stale} of the last good pass is still in the status: {st}"
    assert st["lastScaleTime"] == before["lastScaleTime"]


async def test_unknown_metrics_show_in_the_conditions(
    kube: Emulator, kube_client: client.ApiClient, kueue: Kueue, tmp_path: Path
) -> None:
    tutorial_cluster(kube, kueue)
    settle_serving(kube, kueue)
    kube.add(policy_object("http://127.0.0.1:9/metrics"))  # nothing listens: the signal is unknown
    rt = make_runtime(kube_client, tmp_path, ManualClock())
    await rt.list_policy_objects()
    rt.store.reload()
    await rt.controller.run_once()
    st = status(kube)
    assert conditions(st)["MetricsKnown"] == ("False", "MetricsUnknown")
    assert st["reason"] == "MetricsUnknown"
    assert st["desiredReplicas"] == st["currentReplicas"] == 1
    assert st["signals"][0]["state"] != "ok"
    assert "value" not in st["signals"][0]
    assert "autoscaler_signal_value{" not in rt.telemetry.exposition().decode()  # unknown is no number


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param({"minReplicas": 5}, "minReplicas", id="invalid-spec"),
        pytest.param({"target": {"kind": "Deployment", "name": "tgi-gemma-deployment", "namespace": "other"}},
                     "acts only in its own namespace", id="other-namespace-target"),
    ],
)
async def test_a_refused_object_does_not_act_and_its_status_says_why(
    kube: Emulator, kube_client: client.ApiClient, kueue: Kueue, tgi: TgiMetrics, tmp_path: Path,
    change: dict[str, Any], message: str,
) -> None:
    tutorial_cluster(kube, kueue)
    settle_serving(kube, kueue)
    kube.add(policy_object(tgi.url, **change))
    rt = make_runtime(kube_client, tmp_path, ManualClock())
    tgi.queue = 50
    await rt.list_policy_objects()
    rt.store.reload()
    assert rt.store.policies == {}
    await rt.controller.run_once()
    await rt.status.write()
    st = status(kube)
    assert st["reason"] == "InvalidPolicy"
    assert message in st["message"]
    assert conditions(st)["ScalingActive"] == ("False", "InvalidPolicy")
    assert kube.get("apps/v1", "Deployment", "tgi-gemma-deployment", "llm")["spec"]["replicas"] == 1


@contextlib.asynccontextmanager
async def _watching(
    kube: Emulator, kube_client: client.ApiClient, kueue: Kueue, tgi: TgiMetrics, tmp_path: Path
) -> AsyncIterator[Runtime]:
    """The tutorial's cluster with its ScalingPolicy object, and a runtime watching namespace ``llm`` that has
    loaded it; its watches stopped after (``stop_watching``: a watch task's own failure is re-raised)."""
    tutorial_cluster(kube, kueue)
    kube.add(policy_object(tgi.url))
    rt = make_runtime(kube_client, tmp_path, ManualClock(), namespaces=["llm"])
    rt.sync_watches()
    try:
        await _until(lambda: "tgi-gemma" in rt.store.policies)
        yield rt
    finally:
        await stop_watching(rt)


async def test_hot_reload_is_the_watch(
    kube: Emulator, kube_client: client.ApiClient, kueue: Kueue, tgi: TgiMetrics, tmp_path: Path
) -> None:
    async with _watching(kube, kube_client, kueue, tgi, tmp_path) as rt:
        assert rt.store.policies["tgi-gemma"].policy.spec.max_replicas == 3
        kube.modify(API, "ScalingPolicy", "tgi-gemma", "llm", spec={"maxReplicas": 2})
        await _until(lambda: rt.store.policies["tgi-gemma"].policy.spec.max_replicas == 2)
        reloads = rt.telemetry.reloads.labels("ok")._value.get()
        kube.modify(API, "ScalingPolicy", "tgi-gemma", "llm", status={"reason": "Somebody"})  # status only
        kube.modify(API, "ScalingPolicy", "tgi-gemma", "llm", spec={"maxReplicas": 2})  # same spec
        await asyncio.sleep(0.2)
        assert rt.telemetry.reloads.labels("ok")._value.get() == reloads
        kube.remove(API, "ScalingPolicy", "tgi-gemma", "llm")
        await _until(lambda: rt.store.policies == {})


async def test_an_object_deleted_while_its_watch_was_gone_stops_running(
    kube: Emulator, kube_client: client.ApiClient, kueue: Kueue, tgi: TgiMetrics, tmp_path: Path
) -> None:
    """A ScalingPolicy deleted while the watch was away (an API server restart) and its history compacted: the
    server answers the resumed watch ``410 Expired`` and sends no DELETED; only the relist says it is gone. The
    policy must stop, not scale its target until the controller restarts (``observer.Watcher._replace``)."""
    async with _watching(kube, kube_client, kueue, tgi, tmp_path) as rt:
        await kube.wait_for_watchers(1, plural="scalingpolicies")
        kube.drop_watches()
        kube.remove(API, "ScalingPolicy", "tgi-gemma", "llm")
        kube.compact()
        await _until(lambda: rt.store.policies == {})


async def test_the_runtime_gives_its_watches_their_own_connections(
    kube: Emulator, kube_client: client.ApiClient, kueue: Kueue, tgi: TgiMetrics, tmp_path: Path
) -> None:
    """Every watch the runtime runs holds a connection: the pool grows by them (``kube.reserve_watch_connections``),
    so calls keep the configuration's ``connection_pool_maxsize`` however many namespaces are watched."""
    async with _watching(kube, kube_client, kueue, tgi, tmp_path) as rt:
        rt.sync_watches()  # the policy's target and pod watches join the ScalingPolicy watch
        assert len(rt.watchers) >= 3
        connector: Any = kube_client.rest_client.inner.pool_manager.connector  # type: ignore[attr-defined]
        assert connector.limit == kube_client.configuration.connection_pool_maxsize + len(rt.watchers)


async def _until(predicate: Any, timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.02)
