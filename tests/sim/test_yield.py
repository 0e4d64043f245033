"""Yielding at a checkpoint in the simulator (capacity.yieldAtCheckpoint): the same arbitration, on a real trace."""

from __future__ import annotations

from pathlib import Path

import pytest

from autoscaler.policyfile.loader import load_file
from autoscaler.sim import runner
from autoscaler.sim.simulation import RunResult
from bench import handoff


@pytest.fixture(scope="module")
def code_x1(tmp_path_factory: pytest.TempPathFactory) -> dict[str, RunResult]:
    """The bundled code trace ×1 on the TPU cluster with trainers that neither save on SIGTERM nor honour
    requests, 15 minutes (serving's second and third steps, at 205 s and 580 s, fall inside): routing seed 0."""
    name, trace, cluster, policy_file = handoff.SCENARIOS[1]
    assert name == "code"
    cfile = handoff.cluster_file(cluster, trainers="neither", into=Path(tmp_path_factory.mktemp("yield")))
    policy = load_file(policy_file)[0]
    out = runner.run(runner.Options(
        requests=trace, cluster=cfile, rate_scale=1.0, duration_s=900.0, seed=0, baselines=("kueue-only",),
        policies=[("band", handoff.with_capacity(policy, yieldAtCheckpoint="band")),
                  ("off", handoff.with_capacity(policy, yieldAtCheckpoint="off"))],
    ))
    return {r.name: r for r in out.results}


def stops(result: RunResult) -> list[tuple[float, bool, float]]:
    return sorted((s.at, s.deactivated, s.lost_s) for seq in result.stops.values() for s in seq)


def test_with_band_a_just_saved_trainer_yields_before_serving_needs_its_chips(
    code_x1: dict[str, RunResult],
) -> None:
    # Without yields our stops fall where serving's count rises, as Kueue's own preemptions do.
    need = {t for t, _, _ in stops(code_x1["kueue-only"])}
    assert {t for t, _, _ in stops(code_x1["off"])} == need
    # With band, some jobs stop at other moments: right after their own checkpoint, losing at most the two
    # evaluation periods a just-saved job may have run since (2 × 5 s); fewer chip-seconds are lost.
    early = [lost for t, ours, lost in stops(code_x1["band"]) if ours and t not in need]
    assert early
    assert max(early) <= 10.0
    assert code_x1["band"].training_lost_chip_s < code_x1["off"].training_lost_chip_s
