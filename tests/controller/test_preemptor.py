"""Reading who Kueue evicts a Workload for (``controller.workloads.preemptor``), from each release's text.

The texts are Kueue's own (``pkg/scheduler/preemption/preemption.go``, ``preemptionMessage``; see
``workloads.PREEMPTED_FOR`` for the releases). Anything not in that form is "unknown", never a guess: the
arbitration then treats the Workload as it did before the name could be read.
"""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.controller.workloads import Preemptor, preemptor

UID = "9f542104-a9e2-4344-ad2e-9c136204da18"
JOB = "a20d0a6a-64a3-46ce-9b95-8cfb3bf6e675"


def evicted(message: str, *, preempted: str | None = None, status: str = "True", active: bool = True,
            admitted: bool = True) -> dict[str, Any]:
    """A Workload Kueue preempted: ``Evicted`` (reason ``Preempted``) and ``Preempted`` (``InClusterQueue``)."""
    conditions = [
        {"type": "Evicted", "status": status, "reason": "Preempted", "message": message},
        {"type": "Preempted", "status": status, "reason": "InClusterQueue",
         "message": message if preempted is None else preempted},
    ]
    if admitted:
        conditions.append({"type": "Admitted", "status": "True", "reason": "Admitted"})
    return {"metadata": {"name": "wl", "namespace": "llm"}, "spec": {"active": active},
            "status": {"conditions": conditions}}


@pytest.mark.parametrize(("message", "expected"), [
    pytest.param(f"Preempted to accommodate a workload (UID: {UID}, JobUID: {JOB}) due to prioritization in the "
                 "ClusterQueue; preemptor path: /cq; preemptee path: /cq", Preemptor(UID, JOB), id="v0.15"),
    pytest.param(f"Preempted to accommodate a workload (UID: {UID}, JobUID: {JOB}) due to reclamation within the "
                 "cohort", Preemptor(UID, JOB), id="v0.11"),
    pytest.param(f"Preempted to accommodate a workload (UID: {UID}, JobUID: UNKNOWN) due to Fair Sharing within "
                 "the cohort", Preemptor(UID, ""), id="job-uid-unknown"),
    pytest.param(f"Preempted to accommodate a workload (UID: {UID}) due to prioritization in the ClusterQueue",
                 Preemptor(UID, ""), id="uid-only"),
    pytest.param("Preempted to accommodate a higher priority Workload", None, id="no-uid"),
    pytest.param("Preempted to accommodate a workload (UID: UNKNOWN, JobUID: UNKNOWN) due to UNKNOWN", None,
                 id="uid-unknown"),
    pytest.param(f"Previously: Preempted to accommodate a workload (UID: {UID}) due to x", None, id="previously"),
    pytest.param("", None, id="empty"),
    pytest.param(f"Preempted by rule 'x' in PreemptionConfig 'y' (UID: {UID})", None, id="other-text"),
])
def test_each_releases_text(message: str, expected: Preemptor | None) -> None:
    assert preemptor(evicted(message)) == expected


def test_only_a_true_condition_and_only_while_kueue_evicts_it() -> None:
    text = f"Preempted to accommodate a workload (UID: {UID}) due to x"
    assert preemptor(evicted(text, status="False")) is None  # readmitted: the text is history
    assert preemptor(evicted(text, admitted=False)) is None  # gone already: its chips are no longer held
    assert preemptor(evicted(text, active=False)) is None  # set inactive: a deactivation, not a preemption


def test_two_conditions_naming_two_preemptors_mean_unknown() -> None:
    one = f"Preempted to accommodate a workload (UID: {UID}) due to x"
    two = "Preempted to accommodate a workload (UID: 0b2e3c1d) due to x"
    assert preemptor(evicted(one, preempted=two)) is None
    # One condition unreadable, the other naming it: named.
    assert preemptor(evicted(one, preempted="something else")) == Preemptor(UID, "")
