"""The baselines are real policies: ``hpa`` as an HPA user would write it, ``kueue-only`` our policy without
its arbitration."""

from __future__ import annotations

from pathlib import Path

from autoscaler.policyfile.loader import load_file
from autoscaler.sim import baselines

ROOT = Path(__file__).resolve().parents[2]


def test_kueue_only_is_our_policy_without_the_arbitration() -> None:
    (ours,) = load_file(ROOT / "policies" / "recommended.yaml")
    assert ours.spec.capacity is not None
    copy = baselines.kueue_only_policy(ours)
    assert copy is not None
    assert copy.metadata.name == "kueue-only"
    assert copy.spec.capacity is None
    assert copy.spec.preemptible == []
    # Everything that decides the replica count is the same.
    assert copy.spec.model_dump(exclude={"capacity", "preemptible"}) == ours.spec.model_dump(
        exclude={"capacity", "preemptible"}
    )


def test_a_policy_that_arbitrates_nothing_has_no_kueue_only_twin() -> None:
    (ours,) = load_file(ROOT / "policies" / "recommended.yaml")
    without = ours.model_copy(update={"spec": ours.spec.model_copy(update={"capacity": None})})
    assert baselines.kueue_only_policy(without) is None
