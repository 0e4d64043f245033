"""The assembled controller (``Runtime``, what ``autoscaler run`` builds): hot reload of a bad policy, leader
handover between two replicas, and the ``run`` command itself (``--once``, exit codes, errors).

Waits are event-driven (a condition polled on the loop with a timeout), never a fixed sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from autoscaler.cli import main
from autoscaler.controller import kube as kube_mod
from autoscaler.controller import logs
from autoscaler.controller import runtime as runtime_mod
from autoscaler.controller.config import ControllerConfig
from autoscaler.controller.loop import LoopClock
from autoscaler.controller.runtime import Runtime
from autoscaler.core import fast
from tests.controller.helpers import ManualClock, TgiMetrics, pool_on, runtime, settle_serving
from tests.controller.policies import tgi_policy
from tests.kube import objects
from tests.kube.emulator import Emulator
from tests.kube.kueue import Kueue

SCALE = "/apis/apps/v1/namespaces/llm/deployments/tgi-gemma-deployment/scale"


async def until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Wait for ``condition`` on the event loop (it changes as other tasks run), failing after ``timeout``."""

    async def poll() -> None:
        while not condition():
            await asyncio.sleep(0.01)

    await asyncio.wait_for(poll(), timeout)


def replicas(kube: Emulator) -> int:
    return int(kube.get("apps/v1", "Deployment", "tgi-gemma-deployment", "llm")["spec"]["replicas"])


async def test_a_bad_policy_change_is_rejected_with_an_event_a_log_and_a_metric(
    kube: Emulator, kube_client: client.ApiClient, tgi: TgiMetrics, tmp_path: Path
) -> None:
    stream = io.StringIO()
    logs.configure("info", stream)
    kube.add(objects.deployment(replicas=1))
    rt = runtime(kube_client, tmp_path, ManualClock(), endpoint=tgi.url, capacity=False)
    await rt.report_reload(rt.store.reload(), leading=True)
    good = rt.store.policies["tgi-gemma"]
    (tmp_path / "tgi.yaml").write_text(tgi_policy(capacity=False).replace("maxReplicas: 3", "maxReplicas: -1"))
    await rt.report_reload(rt.store.reload(), leading=True)
    assert rt.store.policies["tgi-gemma"] is good, "the last good policy stays in force"
    (event,) = [e for e in kube.list("events.k8s.io/v1", "Event", "llm") if e["reason"] == "InvalidPolicy"]
    assert event["type"] == "Warning"
    assert event["regarding"]["name"] == "tgi-gemma-deployment"
    assert "rejected policy file tgi.yaml" in event["note"]
    assert "keeping the last good version" in event["note"]
    assert 'autoscaler_policy_file_invalid{file="tgi.yaml"} 1.0' in rt.telemetry.exposition().decode()
    (line,) = [json.loads(x) for x in stream.getvalue().splitlines() if "policy_file_rejected" in x]
    assert line["level"] == "error"
    assert line["kept"] == ["tgi-gemma"]
    assert "maxReplicas" in line["problems"][0]
    # And the last good policy still acts.
    tgi.queue = 25
    assert await rt.controller.run_once()
    assert replicas(kube) == 3
    await rt.observer.aclose()


def elected(api: client.ApiClient, policies: Path, identity: str) -> Runtime:
    cfg = ControllerConfig.model_validate({
        "leaderElection": {"leaseName": "autoscaler", "leaseDurationSeconds": 3, "renewDeadlineSeconds": 2,
                           "retryPeriodSeconds": 0.1},
        "reloadPollSeconds": 0.1, "fastPollSeconds": 0.1,
    })
    clock = LoopClock()
    return Runtime(api=api, config=cfg, policies_dir=policies, clock=clock, identity=identity,
                   namespace="autoscaler", source=pool_on(clock))  # type: ignore[arg-type]


async def test_leader_handover_only_the_leader_acts(
    kube: Emulator, kube_client: client.ApiClient, tgi: TgiMetrics, tmp_path: Path
) -> None:
    kube.add(objects.deployment(replicas=1))
    (tmp_path / "tgi.yaml").write_text(
        tgi_policy(source=f"{{type: pods, endpoints: ['{tgi.url}']}}", capacity=False, period=1)
    )
    a, b = elected(kube_client, tmp_path, "a"), elected(kube_client, tmp_path, "b")
    stop_a, stop_b = asyncio.Event(), asyncio.Event()
    task_a = asyncio.create_task(a.serve(stop_a))
    await until(a.controller.leader.holds)
    task_b = asyncio.create_task(b.serve(stop_b))
    tgi.queue = 15
    await until(lambda: replicas(kube) == 2)
    writers = {r.body["metadata"].get("annotations", {}).get("x") for r in kube.writes() if r.path == SCALE}
    assert writers == {None}
    assert not b.controller.leader.holds()
    assert b.controller.states == {}, "the standby has not evaluated anything"
    # a shuts down (releases the Lease); b takes over and acts on the next change.
    stop_a.set()
    await asyncio.wait_for(task_a, 30)  # a clean shutdown is part of the handover: never wait forever
    await until(b.controller.leader.holds)
    tgi.queue = 25
    await until(lambda: replicas(kube) == 3)
    lease = kube.get("coordination.k8s.io/v1", "Lease", "autoscaler", "autoscaler")["spec"]
    assert lease["holderIdentity"] == "b"
    assert lease["leaseTransitions"] == 1
    stop_b.set()
    await asyncio.wait_for(task_b, 30)


async def test_readiness_waits_for_policies_and_watches(
    kube: Emulator, kube_client: client.ApiClient, tgi: TgiMetrics, tmp_path: Path
) -> None:
    kube.add(objects.deployment(replicas=1))
    (tmp_path / "tgi.yaml").write_text(tgi_policy(source=f"{{type: pods, endpoints: ['{tgi.url}']}}", capacity=False))
    rt = elected(kube_client, tmp_path, "a")
    assert not rt.telemetry.ready()
    stop = asyncio.Event()
    task = asyncio.create_task(rt.serve(stop))
    await until(rt.telemetry.ready)
    assert rt.telemetry.healthy()
    stop.set()
    await task


def kubeconfig(tmp_path: Path, url: str) -> Path:
    f = tmp_path / "kubeconfig"
    f.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: emu\n"
        f"clusters: [{{name: emu, cluster: {{server: '{url}'}}}}]\n"
        "users: [{name: emu, user: {token: test}}]\n"
        "contexts: [{name: emu, context: {cluster: emu, user: emu}}]\n"
    )
    return f


@pytest.mark.parametrize(
    ("queue", "dry_run", "code", "replicas_after"),
    [
        pytest.param(25, False, 0, 3, id="once-acts"),
        pytest.param(25, True, 0, 1, id="once-dry-run-changes-nothing"),
    ],
)
async def test_run_once_from_the_command_line(
    kube: Emulator, tgi: TgiMetrics, tmp_path: Path, queue: float, dry_run: bool, code: int, replicas_after: int
) -> None:
    kube.add(objects.deployment(replicas=1))
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "tgi.yaml").write_text(tgi_policy(source=f"{{type: pods, endpoints: ['{tgi.url}']}}", capacity=False))
    tgi.queue = queue
    argv = ["run", "--policies", str(policies), "--kubeconfig", str(kubeconfig(tmp_path, kube.url)), "--once"]
    # The command runs its own event loop (asyncio.run): give it a thread so the emulator keeps serving.
    got = await asyncio.to_thread(main, [*argv, "--dry-run"] if dry_run else argv)
    assert got == code
    assert replicas(kube) == replicas_after


async def test_run_once_fails_on_an_invalid_policy_file(kube: Emulator, tgi: TgiMetrics, tmp_path: Path) -> None:
    kube.add(objects.deployment(replicas=1))
    (tmp_path / "tgi.yaml").write_text(tgi_policy(source=f"{{type: pods, endpoints: ['{tgi.url}']}}", capacity=False))
    (tmp_path / "bad.yaml").write_text("apiVersion: autoscaler.dev/v1alpha1\nkind: ScalingPolicy\n")
    tgi.queue = 25
    got = await asyncio.to_thread(
        main, ["run", "--policies", str(tmp_path), "--kubeconfig", str(kubeconfig(tmp_path, kube.url)), "--once"]
    )
    assert got == 1
    assert replicas(kube) == 3, "the valid policy still ran"


async def test_run_once_fails_when_a_write_fails(kube: Emulator, tgi: TgiMetrics, tmp_path: Path) -> None:
    kube.add(objects.deployment(replicas=1))
    kube.deny("patch", "deployments/scale")
    (tmp_path / "tgi.yaml").write_text(tgi_policy(source=f"{{type: pods, endpoints: ['{tgi.url}']}}", capacity=False))
    tgi.queue = 25
    got = await asyncio.to_thread(
        main, ["run", "--policies", str(tmp_path), "--kubeconfig", str(kubeconfig(tmp_path, kube.url)), "--once"]
    )
    assert got == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--policies", "/nonexistent"], "is not a directory", id="missing-policies-dir"),
        pytest.param(["--config", "BADCONFIG"], "invalid config", id="bad-config"),
        pytest.param(["--kubeconfig", "/nonexistent/kubeconfig"], "cannot load Kubernetes credentials",
                     id="bad-kubeconfig"),
    ],
)
def test_run_errors_are_one_line_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("mode: wild\n")
    args = [str(bad) if a == "BADCONFIG" else a for a in args]
    base = [] if "--policies" in args else ["--policies", str(tmp_path)]
    with contextlib.suppress(SystemExit):
        assert main(["run", *base, *args]) == 1
    out, err = capsys.readouterr()
    assert out == "", "errors go to stderr, never stdout"
    assert message in err
    assert err.startswith("autoscaler run: ")
    assert err.count("\n") == 1
    assert "Traceback" not in err


async def test_a_workload_change_wakes_the_policy_at_once(
    kube: Emulator, kube_client: client.ApiClient, kueue: Kueue, tgi: TgiMetrics, tmp_path: Path
) -> None:
    """No period and no probe can fire (the clock stands still, probes are off): only the watch on the
    Workloads can make the controller scale once a job it may not preempt has left the quota."""
    kube.add(objects.cluster_queue())
    kube.add(objects.local_queue())
    kube.add(objects.deployment(replicas=1))
    kube.add(objects.workload("pod-tgi-gemma-deployment-0", pods=1, priority=30))
    kueue.admit("pod-tgi-gemma-deployment-0")
    # Not a preemptible fine-tune (no Job with the policy's labels owns it): it holds 4 of the 6 GPUs.
    kube.add(objects.workload("batch-eval-7f3a2", pods=2, priority=25))
    kueue.admit("batch-eval-7f3a2")
    settle_serving(kube, kueue)
    clock = ManualClock()
    rt = runtime(kube_client, tmp_path, clock, endpoint=tgi.url, fastPollSeconds=0)
    tgi.queue = 15
    stop = asyncio.Event()
    task = asyncio.create_task(rt.serve(stop))
    await until(lambda: any(e["reason"] == "WaitingForCapacity" for e in kube.list("events.k8s.io/v1", "Event", "llm")))
    await until(rt.telemetry.ready)
    assert replicas(kube) == 1, "the quota has no room yet and nothing it may preempt"
    kube.remove(objects.KUEUE_V1BETA2, "Workload", "batch-eval-7f3a2", "llm")  # the job finished
    kueue.recompute("cluster-queue")
    await until(lambda: replicas(kube) == 2)
    assert 'autoscaler_evaluation_triggers_total{trigger="watch"}' in rt.telemetry.exposition().decode()
    stop.set()
    await task


def training_active(kube: Emulator) -> bool:
    wl = kube.get("kueue.x-k8s.io/v1beta2", "Workload", "job-finetune-gemma-l4-3316f", "llm")
    return bool(wl["spec"].get("active", True))


async def test_hot_reload_in_the_running_controller(
    kube: Emulator, kube_client: client.ApiClient, tgi: TgiMetrics, tmp_path: Path
) -> None:
    """The running controller polls the directory: a bad file is reported and ignored, a good change is
    evaluated at once (the clock stands still and probes are off: only the reload can trigger it)."""
    kube.add(objects.deployment(replicas=1))
    rt = runtime(kube_client, tmp_path, ManualClock(), endpoint=tgi.url, capacity=False, fastPollSeconds=0,
                 reloadPollSeconds=0.05)
    policy = tgi_policy(source=f"{{type: pods, endpoints: ['{tgi.url}']}}", capacity=False)
    tgi.queue = 5
    stop = asyncio.Event()
    task = asyncio.create_task(rt.serve(stop))
    await until(rt.telemetry.ready)
    (tmp_path / "tgi.yaml").write_text(policy.replace("type: queue", "type: queueue"))
    await until(lambda: any(e["reason"] == "InvalidPolicy" for e in kube.list("events.k8s.io/v1", "Event", "llm")))
    assert replicas(kube) == 1
    tgi.queue = 25  # would need 3; the new policy allows 2
    (tmp_path / "tgi.yaml").write_text(policy.replace("maxReplicas: 3", "maxReplicas: 2"))
    await until(lambda: replicas(kube) == 2)
    assert 'autoscaler_policy_file_invalid{file="tgi.yaml"} 0.0' in rt.telemetry.exposition().decode()
    stop.set()
    await task


async def test_a_reload_evaluates_in_full_only_the_policies_it_added_or_changed(
    kube: Emulator, kube_client: client.ApiClient, tgi: TgiMetrics, tmp_path: Path
) -> None:
    """One policy edited in a file of many, one added in a new file, one removed: the running controller
    evaluates the edited and the added at once, and no other (``autoscaler_full_evaluations{why="reload"}``);
    before, any change of any file evaluated every policy in full (5,000 at once in the reaction bench's
    set-up). The clock stands still and probes are off: a reload is all that can evaluate them."""
    n = 12
    for i in range(n + 1):
        kube.add(objects.deployment(f"t{i}", "llm", replicas=1))

    def doc(i: int, max_replicas: int = 3) -> str:
        return tgi_policy(name=f"p{i}", target=f"t{i}", capacity=False, max_replicas=max_replicas,
                          source=f"{{type: pods, endpoints: ['{tgi.url}']}}")

    rt = runtime(kube_client, tmp_path, ManualClock(), endpoint=tgi.url, capacity=False, fastPollSeconds=0,
                 reloadPollSeconds=3600)
    (tmp_path / "tgi.yaml").unlink()
    (tmp_path / "many.yaml").write_text("---\n".join(doc(i) for i in range(n)))
    tgi.queue = 5
    full = rt.telemetry.full_evaluations

    def count(why: str) -> float:
        return sum(s.value for m in full.collect() for s in m.samples
                   if s.name.endswith("_total") and s.labels["why"] == why)

    stop = asyncio.Event()
    task = asyncio.create_task(rt.serve(stop))
    await until(lambda: len(rt.controller._runs) == n)  # each evaluated once ("first")
    (tmp_path / "many.yaml").write_text("---\n".join(doc(i, 5 if i == 3 else 3) for i in range(n - 1)))  # p11 gone
    (tmp_path / "more.yaml").write_text(doc(n))
    runs, first = dict(rt.controller._runs), count("first")
    assert (await rt.reload()).changed
    # A pass counts its batch at once: once the count moved, it is the whole of what the reload triggered (the
    # added policy's first evaluation counts as ``first``).
    await until(lambda: count("reload") > 0 and f"p{n}" in rt.controller._runs)
    assert (count("reload"), count("first") - first) == (1, 1)
    assert sorted(n for n, k in rt.controller._runs.items() if k != runs.get(n)) == ["p12", "p3"]
    stop.set()
    await task


async def test_a_removed_policy_leaves_nothing_kept_for_it(
    kube: Emulator, kube_client: client.ApiClient, tgi: TgiMetrics, tmp_path: Path
) -> None:
    """Deleting a policy's file drops everything the controller kept for it (its target view and the records
    beside it, its state): before, each of them kept one entry per policy ever loaded."""
    kube.add(objects.deployment(replicas=1))
    rt = runtime(kube_client, tmp_path, ManualClock(), endpoint=tgi.url, capacity=False, fastPollSeconds=0,
                 reloadPollSeconds=0.05)
    (tmp_path / "tgi.yaml").write_text(tgi_policy(source=f"{{type: pods, endpoints: ['{tgi.url}']}}", capacity=False))
    stop = asyncio.Event()
    task = asyncio.create_task(rt.serve(stop))
    await until(lambda: "tgi-gemma" in rt.observer.views and "tgi-gemma" in rt.controller.states)
    (tmp_path / "tgi.yaml").unlink()

    def kept() -> dict[str, bool]:
        o = rt.observer
        records: dict[str, Collection[str]] = {
            "views": o.views, "ages": o._ages, "plans": o._plans, "simple": o._simple, "changed": o._changed,
            "dropped": o._dropped, "pod index": o._pod_index._entries, "states": rt.controller.states,
        }
        return {what: "tgi-gemma" in record for what, record in records.items()}

    with contextlib.suppress(TimeoutError):
        await until(lambda: not any(kept().values()))
    assert not any(kept().values()), kept()
    stop.set()
    await task


async def test_the_policies_are_settled_after_each_load_that_changed_them_and_their_first_pass(
    kube: Emulator, kube_client: client.ApiClient, tgi: TgiMetrics, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``settle_loaded`` (what ``autoscaler run`` sets): the policies are taken out of the collector's traversals
    when they are loaded, after each reload that changed them and after a pass that evaluated one for the first
    time; not after a reload that found nothing new nor a pass over policies evaluated before (each settle is
    one full collection). The settle itself is ``core.fast``'s (tests/core/test_fastpaths.py);
    here it is counted, not done, so the test process's objects are not frozen."""
    settles: list[int] = []
    kube.add(objects.deployment(replicas=1))
    rt = runtime(kube_client, tmp_path, ManualClock(), endpoint=tgi.url, capacity=False, fastPollSeconds=0,
                 reloadPollSeconds=3600)
    monkeypatch.setattr(fast, "settle_long_lived", lambda: settles.append(len(rt.store.policies)))
    rt.settle_loaded = True
    stop = asyncio.Event()
    task = asyncio.create_task(rt.serve(stop))
    await until(rt.telemetry.ready)
    await until(lambda: len(settles) == 2)
    assert settles == [1, 1], "settled once the policies were loaded, and after their first evaluation"
    assert not (await rt.reload()).changed
    assert settles == [1, 1], "nothing new: no collection"
    passes: list[list[str]] = []

    async def passed(names: list[str]) -> None:  # no await: the loop goes on to ``after_first`` in this step
        passes.append(names)

    rt.controller.after_pass = passed
    rt.controller.trigger(["tgi-gemma"], "watch")
    # At least this pass: the Deployment's own watch may trigger more (the emulator's watch events arrive in their
    # own time), and none of them may collect.
    await until(lambda: ["tgi-gemma"] in passes)
    assert settles == [1, 1], "a policy evaluated before: no collection after its pass"
    kube.add(objects.deployment("other", replicas=1))
    (tmp_path / "more.yaml").write_text(tgi_policy(name="other", target="other", capacity=False))
    assert (await rt.reload()).changed
    await until(lambda: len(settles) == 4)
    assert settles == [1, 1, 2, 2], "after the reload, and after the new policy's first evaluation"
    stop.set()
    await task
    rt.settle_loaded = False
    (tmp_path / "more.yaml").unlink()
    assert (await rt.reload()).changed
    assert settles == [1, 1, 2, 2], "a runtime that does not settle never does"


def test_the_run_command_settles_what_it_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    """``autoscaler run`` builds its runtime with ``settle_loaded`` (the bench measures that controller)."""
    built: list[object] = []

    class Stop(Exception):
        pass

    def record(*args: Any, **kwargs: Any) -> Runtime:
        built.append(kwargs.get("settle_loaded"))
        raise Stop

    monkeypatch.setattr(runtime_mod, "Runtime", record)
    monkeypatch.setattr(kube_mod, "connect", _no_api)
    with pytest.raises(Stop):
        asyncio.run(runtime_mod._main(ControllerConfig.model_validate({}), Path("."), kubeconfig=None, once=False,
                                      dry_run=False))
    assert built == [True]


class _Closing:
    async def close(self) -> None:
        pass


async def _no_api(*args: Any, **kwargs: Any) -> _Closing:
    return _Closing()
