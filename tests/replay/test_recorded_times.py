"""Replay judges a recorded pod by its own sample time, as the Prometheus source does (no server needed).

``autoscaler record`` saves, beside each pod's values, the time of the sample behind each step
(``autoscaler_part="time"``). Replay must then count a pod only where the source's answer had it: absent at the
latest step (a real Prometheus marked it stale), or over ``POD_GONE_S`` behind the freshest pod (GMP keeps a deleted
pod's last sample for the 5-minute lookback) is not reporting. A dump without those series (older recordings, hand
made) keeps reading a step's time as its sample's. tests/replay/test_record_path.py checks the same against a real
Prometheus, through ``run`` and ``record``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from autoscaler.core.engine import compile_policy
from autoscaler.core.model import ScaleDecision
from autoscaler.core.signals import POD_GONE_S
from autoscaler.core.spec import ScalingPolicy
from autoscaler.replay import engine as replay_engine
from autoscaler.replay.traces import load

T0 = 1_800_000_000.0
STEPS = 30


def policy() -> ScalingPolicy:
    return ScalingPolicy.model_validate({
        "apiVersion": "autoscaler.dev/v1alpha1",
        "kind": "ScalingPolicy",
        "metadata": {"name": "q"},
        "spec": {
            "target": {"kind": "Deployment", "name": "srv", "namespace": "llm"},
            "minReplicas": 1,
            "maxReplicas": 16,
            "evaluationPeriodSeconds": 1,
            "source": {"type": "prometheus", "url": "http://prometheus:9090"},
            "signals": [{"name": "sig", "preset": "vllm.waiting"}],
            "policy": {
                "type": "hpa",
                "metrics": [{"signal": "sig", "type": "External", "target": {"type": "Value", "value": 5.0}}],
                "behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}},
            },
        },
    })


def series(pod: str, part: str | None, values: dict[float, float]) -> dict[str, Any]:
    metric = {"namespace": "llm", "pod": pod, **({"autoscaler_part": part} if part else {})}
    return {"metric": metric, "values": [[t, repr(v)] for t, v in sorted(values.items())]}


def pod(name: str, value: float, *, lag_s: float = 0.0, until: int = STEPS, times: bool = True) -> list[dict[str, Any]]:
    """One pod's recorded series: ``value`` at every step up to ``until``, each sample ``lag_s`` behind its step."""
    steps = [T0 + k for k in range(until + 1)]
    out = [series(name, "value" if times else None, dict.fromkeys(steps, value))]
    if times:
        out.append(series(name, "time", {t: t - lag_s for t in steps}))
    return out


def last_decision(tmp_path: Path, result: list[dict[str, Any]], replicas: int = 2) -> ScaleDecision:
    body = {"status": "success", "data": {"resultType": "matrix", "result": result}}
    (tmp_path / "sig.json").write_text(json.dumps(body))
    cp = compile_policy(policy())
    replayed = replay_engine.run(cp, load([tmp_path]), replay_engine.Options(initial_replicas=replicas))
    step = replayed.steps[-1]
    assert step.time == T0 + STEPS
    return step.decision


A, B, C = "srv-6b7c8d9f4-aaaaa", "srv-6b7c8d9f4-bbbbb", "srv-6b7c8d9f4-ccccc"


@pytest.mark.parametrize(
    ("third", "desired", "reason"),
    [
        # 3 + 5 over two ready pods against a target of 5: 2 → 4. The third pod must not count.
        pytest.param({"lag_s": POD_GONE_S + 30}, 4, "ScaleUp", id="gone-pod-behind-the-freshest"),
        pytest.param({"until": STEPS - 5}, 4, "ScaleUp", id="pod-absent-at-the-latest-step"),
        # A pod within the gone rule and its age counts: 3 + 5 + 20 = 28, rate-limited 2 → 6.
        pytest.param({"lag_s": POD_GONE_S - 30}, 6, "RateLimited", id="pod-a-little-behind-counts"),
    ],
)
def test_a_recorded_pod_counts_only_where_the_source_answered_it(
    tmp_path: Path, third: dict[str, Any], desired: int, reason: str
) -> None:
    d = last_decision(tmp_path, [*pod(A, 3.0), *pod(B, 5.0), *pod(C, 20.0, **third)])
    assert (d.current, d.desired, d.reason.value) == (2, desired, reason), d.message


def test_a_ready_pod_absent_at_the_latest_step_is_partial_data(tmp_path: Path) -> None:
    d = last_decision(tmp_path, [*pod(A, 3.0), *pod(B, 5.0), *pod(C, 20.0, until=STEPS - 5)], replicas=3)
    assert d.reason.value == "MetricsUnknown", d.message
    assert "2 of 3" in d.message


def test_without_recorded_times_a_step_stands_for_its_sample(tmp_path: Path) -> None:
    # An older recording: the lagging pod's steps read as fresh samples (what record's times are there to prevent).
    d = last_decision(tmp_path, [*pod(A, 3.0, times=False), *pod(B, 5.0, times=False), *pod(C, 20.0, times=False)])
    assert (d.desired, d.reason.value) == (6, "RateLimited"), d.message


def test_recorded_ready_replicas_are_the_current_ready_count(tmp_path: Path) -> None:
    # A CSV as a user might export it: 3 replicas set, 2 then 3 ready (``replicas_ready``, what record saves from
    # kube-state-metrics). Recorded mode sees the third replica starting until it is ready.
    rows = ["timestamp,sig,replicas,replicas_ready"]
    rows += [f"{T0 + k:.0f},8,3,{2 if k < 10 else 3}" for k in range(STEPS + 1)]
    (tmp_path / "trace.csv").write_text("\n".join(rows) + "\n")
    replayed = replay_engine.run(compile_policy(policy()), load([tmp_path / "trace.csv"]), replay_engine.Options())
    seen = [(s.replicas.spec, s.replicas.ready, s.replicas.starting) for s in replayed.steps]
    assert seen == [(3, 2, 1)] * 10 + [(3, 3, 0)] * (STEPS - 9)
    assert any("recorded ready replicas" in n for n in replayed.notes), replayed.notes
    # whatif mode runs its own count: the recorded ready replicas do not apply.
    whatif = replay_engine.run(compile_policy(policy()), load([tmp_path / "trace.csv"]),
                               replay_engine.Options(mode="whatif"))
    assert whatif.steps[0].replicas.ready == 3


def whatif_readings(tmp_path: Path, result: list[dict[str, Any]]) -> list[float | None]:
    """Every step's reading of the signal in whatif mode (the policy's own count: no pods counted)."""
    body = {"status": "success", "data": {"resultType": "matrix", "result": result}}
    (tmp_path / "sig.json").write_text(json.dumps(body))
    replayed = replay_engine.run(compile_policy(policy()), load([tmp_path]),
                                 replay_engine.Options(mode="whatif", initial_replicas=2))
    return [s.readings["sig"].value for s in replayed.steps if "sig" in s.readings]


@pytest.mark.parametrize(
    ("third", "value"),
    [
        # The pods the source answered, as in recorded mode: a GMP pod gone is not summed in (3 + 5, not 28).
        pytest.param({"lag_s": POD_GONE_S + 30}, 8.0, id="gone-pod-behind-the-freshest"),
        pytest.param({"until": STEPS - 5}, 8.0, id="pod-absent-at-the-latest-step"),
        pytest.param({"lag_s": POD_GONE_S - 30}, 28.0, id="pod-a-little-behind-counts"),
    ],
)
def test_whatif_sums_only_the_pods_the_source_answered(tmp_path: Path, third: dict[str, Any], value: float) -> None:
    readings = whatif_readings(tmp_path, [*pod(A, 3.0), *pod(B, 5.0), *pod(C, 20.0, **third)])
    assert readings[-1] == value


def test_whatif_reading_is_as_old_as_its_oldest_answered_pod(tmp_path: Path) -> None:
    # Both pods lag, 50 s apart (within the gone rule); the one 130 s behind its step is over maxAgeSeconds (120 s
    # by default): the whole reading is stale (unknown, a hold), never the fresher pod alone.
    body = {"status": "success", "data": {"resultType": "matrix",
                                          "result": [*pod(A, 3.0, lag_s=80.0), *pod(B, 5.0, lag_s=130.0)]}}
    (tmp_path / "sig.json").write_text(json.dumps(body))
    replayed = replay_engine.run(compile_policy(policy()), load([tmp_path]),
                                 replay_engine.Options(mode="whatif", initial_replicas=2))
    step = replayed.steps[-1]
    assert step.readings["sig"].value == 8.0
    assert step.readings["sig"].timestamp == T0 + STEPS - 130.0
    assert step.decision.reason.value == "MetricsUnknown", step.decision.message


def test_whatif_without_recorded_times_sums_every_series(tmp_path: Path) -> None:
    # An older recording: combined up front, the lagging pod included (nothing tells it is gone).
    readings = whatif_readings(tmp_path, [*pod(A, 3.0, times=False), *pod(B, 5.0, times=False),
                                          *pod(C, 20.0, times=False)])
    assert readings[-1] == 28.0
