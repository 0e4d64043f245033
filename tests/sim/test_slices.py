"""Slice admission in the simulator (TPU7x codelab cluster): placement is the core's pure fit, a slice that
does not fit is never admitted, a super-slice is one unit over two blocks, and the audit catches a bad fit."""

from __future__ import annotations

import pytest

from autoscaler.core import topology
from autoscaler.sim import cluster as cluster_mod
from autoscaler.sim import kueue, slices, traces
from autoscaler.sim.simulation import FixedController, RunResult, Simulation
from autoscaler.sim.yamldoc import SimFileError

CODELAB = cluster_mod.bundled("cluster-tpu7x-codelab.yaml")


def _trace(duration: float = 300.0, rate: float = 10.0) -> traces.Trace:
    raw = traces.load(cluster_mod.bundled("AzureLLMInferenceTrace_conv.csv"))
    return traces.reshape(raw, time_scale=1.0, rate_scale=rate, duration_s=duration, start_s=0.0, seed=0)


def _run(replicas: int, *, duration: float = 300.0) -> tuple[Simulation, RunResult]:
    cl = cluster_mod.load(CODELAB)
    # The fixed count drives the prefill pool (the first); decode holds its two groups.
    sim = Simulation(cluster=cl, trace=_trace(duration), controller=FixedController("fixed", replicas),
                     initial_by_pool={"prefill": 2, "decode": 2}, keep_placement_log=True)
    return sim, sim.run()


def test_the_codelab_cluster_loads_with_its_blocks_and_placeholder_quota() -> None:
    cl = cluster_mod.load(CODELAB)
    assert cl.spec.quota.nominal == 999999
    assert cl.capacity_chips == 128  # two 4x4x4 blocks, not the ClusterQueue's placeholder
    assert [cl.chips_per_replica(p) for p in cl.spec.pools] == [8, 8]


def test_every_placement_equals_the_pure_fit_and_passes_the_audit() -> None:
    sim, res = _run(6)
    assert sim.slices is not None
    assert sim.slices.log, "nothing was placed"
    for adm in sim.slices.log:
        assert adm.regions == topology.find_place(adm.before, adm.shape), adm.key
    assert res.slice_violations == []
    # 4 serving groups + 12 sub-slice jobs fill the 16 slices: growing prefill from 2 to 6 groups preempts
    # exactly four sub-slices (the 4x4x8 super-slice never fits while serving runs).
    serving = [a for a in sim.slices.log if a.key.startswith("prefill-")]
    assert len(serving) == 6
    assert res.preemptions == 4


def test_a_slice_that_does_not_fit_is_never_admitted() -> None:
    # Make every training job non-preemptible (priority above serving): only the slices left free fit.
    cl = cluster_mod.load(CODELAB)
    spec = cl.spec.model_copy(update={
        "training": [t.model_copy(update={"priority": 5000}) for t in cl.spec.training],
    })
    cl = cluster_mod.Cluster(cl.doc.model_copy(update={"spec": spec}), cl.profiles, cl.source)
    sim = Simulation(cluster=cl, trace=_trace(), controller=FixedController("fixed", 8),
                     initial_by_pool={"prefill": 2, "decode": 0}, keep_placement_log=True)
    res = sim.run()
    # 16 slices: 2 serving + 12 sub-slice jobs (the super-slice cannot fit) leave 2 free slices.
    ready_or_starting = [r for r in sim.pool.replicas if r.state.value in ("starting", "ready")]
    assert len(ready_or_starting) == 4
    assert res.preemptions == 0
    assert res.unplaced_replica_s > 0  # four groups waited all run long for a place
    assert res.slice_violations == []
    held = sum(h.shape.chips for h in sim.slices.holders.values()) if sim.slices else 0
    assert held <= 128


def test_the_super_slice_is_one_unit_that_frees_both_blocks() -> None:
    cl = cluster_mod.load(CODELAB)
    # Nothing serves at time 0: the 4x4x8 super-slice (priority 2000) takes both blocks, the sub-slices queue.
    sim = Simulation(cluster=cl, trace=_trace(120.0), controller=FixedController("fixed", 1),
                     initial_by_pool={"prefill": 0, "decode": 0}, keep_placement_log=True)
    assert sim.slices is not None
    super_job = next(j for j in sim.jobs if j.chips == 128)
    assert super_job.state is kueue.JobState.RUNNING
    held = sim.slices.holders[super_job.name]
    assert sorted(r.block for r in held.regions) == ["tpu7-pool-1", "tpu7-pool-2"]
    assert all(j.state is kueue.JobState.QUEUED for j in sim.jobs if j is not super_job)
    res = sim.run()
    # One serving group preempts the one Workload; both blocks free at once, serving takes one 2x2x2 and the
    # twelve sub-slice Workloads fill twelve of the fifteen slices left.
    assert len(res.evictions[super_job.name]) == 1
    assert super_job.name not in sim.slices.holders
    running = [j for j in sim.jobs if j.state is kueue.JobState.RUNNING]
    assert len(running) == 12
    assert all(j.chips == 8 for j in running)
    assert res.slice_violations == []


def test_kueue_preempts_only_what_frees_a_place() -> None:
    block = topology.Shape.parse("4x4x4")
    place = slices.SlicePlacement(block, ["a"])
    small = topology.Shape.parse("2x2x2")
    for i in range(8):
        assert place.place(f"t{i}", small, preemptible=True, now=0.0) is not None
    assert place.fits(small) is False
    assert place.kueue_victims(small, ["t7", "t6", "t5"]) == ["t7"]
    # A 2x4x4 needs four aligned sub-slices: the victims are the four that share one half of the block.
    half = topology.Shape.parse("2x4x4")
    victims = place.kueue_victims(half, [f"t{i}" for i in range(8)])
    assert victims is not None
    assert len(victims) == 4
    assert place.fits(half, without=victims)


def test_the_audit_catches_an_overlapping_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The audit shares no code with the fit check: a fit check that ignores occupants is caught."""
    first = topology.Region("a", (0, 0, 0), topology.Shape(2, 2, 2))
    monkeypatch.setattr(topology, "find_place", lambda inv, shape: (first,))
    place = slices.SlicePlacement(topology.Shape.parse("4x4x4"), ["a"])
    place.place("x", topology.Shape(2, 2, 2), preemptible=False, now=0.0)
    place.place("y", topology.Shape(2, 2, 2), preemptible=False, now=0.0)
    assert any("overlaps" in v for v in place.violations)


def test_the_audit_catches_a_misaligned_or_partial_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    bad = topology.Region("a", (1, 0, 0), topology.Shape(2, 2, 2))
    monkeypatch.setattr(topology, "find_place", lambda inv, shape: (bad,))
    place = slices.SlicePlacement(topology.Shape.parse("4x4x4"), ["a"])
    place.place("x", topology.Shape(2, 2, 2), preemptible=False, now=0.0)
    assert any("not aligned" in v for v in place.violations)
    monkeypatch.setattr(topology, "find_place",
                        lambda inv, shape: (topology.Region("a", (0, 0, 0), topology.Shape(4, 4, 4)),))
    place2 = slices.SlicePlacement(topology.Shape.parse("4x4x4"), ["a", "b"])
    place2.place("s", topology.Shape(4, 4, 8), preemptible=True, now=0.0)
    assert place2.violations  # one block for a two-block super-slice


@pytest.mark.parametrize(("text", "message"), [
    ("3x2x2", "does not tile"),
    ("4x4x12", "not a whole number"),
])
def test_a_slice_shape_the_blocks_cannot_hold_is_a_clear_error(tmp_path: object, text: str, message: str) -> None:
    import pathlib  # noqa: PLC0415

    src = CODELAB.read_text().replace("sliceTopology: 4x4x8", f"sliceTopology: {text}")
    src = src.replace("chips: 128", f"chips: {topology.Shape.parse(text).chips}")
    path = pathlib.Path(str(tmp_path)) / "c.yaml"
    path.write_text(src)
    with pytest.raises(SimFileError) as err:
        cluster_mod.load(path)
    assert message in str(err.value)


def test_the_policy_sees_the_blocks_and_stops_exactly_the_slices_it_needs() -> None:
    """The simulator hands the arbitration the slice inventory (``QuotaStatus.slices``, the groups' and the
    Workloads' shapes), as the controller reads it: growing decode on full blocks stops one 2x2x2
    Workload per group added, by our arbitration, and Kueue has nothing left to preempt. The example's decode
    policy alone (prefill held at its two groups), on the conversation trace ×20: the decode pool sized on its own
    slots (256 per group) outgrows two groups only at about twice the bench's rate."""
    from pathlib import Path  # noqa: PLC0415

    from autoscaler.core.engine import compile_policy  # noqa: PLC0415
    from autoscaler.policyfile.loader import load_file  # noqa: PLC0415
    from autoscaler.sim import disagg  # noqa: PLC0415
    from autoscaler.sim.simulation import PolicyController  # noqa: PLC0415

    cl = cluster_mod.load(CODELAB)
    pols = list(load_file(Path(__file__).resolve().parents[2] / "policies" / "lws-prefill-decode.yaml"))
    decode = [p for p in pols if p.metadata.name == "qwen-decode"]
    parts = [PolicyController(compile_policy(p), cl.pipeline_for(p.metadata.name), "default") for p in decode]
    sim = Simulation(cluster=cl, trace=_trace(120.0, rate=20.0),
                     controller=disagg.CombinedController("ex", "policy", parts),
                     initial_by_pool={"prefill": 2, "decode": 2}, slo_ttft_s=2.0)
    quota = sim.quota_status()
    assert quota.slices is not None
    assert len(quota.slices.inventory.occupants) == 16  # 4 groups + 12 sub-slice Workloads: the blocks are full
    assert sim.replica_status(0.0, sim.pools[1]).slice == topology.Shape(2, 2, 2)
    res = sim.run()
    # How far decode grows is the policy's business (its learning moves it); what this test guards is that every
    # group added on full blocks stopped exactly one 2x2x2 Workload, by our arbitration, none by Kueue's.
    added = len(sim.pools[1].live()) - 2
    assert added >= 4
    assert sim.deactivations == added
    assert res.preemptions == added  # every stop was ours: none left for Kueue's reactive preemption
    assert res.slice_violations == []


def test_two_policies_growing_in_one_pass_stop_one_workload_per_group_and_leave_kueue_nothing() -> None:
    """The example's two policies (prefill and decode, one each) grow at once on full blocks (conversation trace
    ×20, 120 s, warm 2 + 2): at 60 s prefill stops one 2x2x2 Workload and asks for a group for its place; decode
    decides next, in the same instant, before Kueue has evicted anything. Each policy sees the other's groups
    asked for and not admitted yet (``Simulation.quota_status``: the pass ledger through ``arbitration.in_pass``,
    as the controller's policies see it), so decode does not count the place prefill's victim is freeing as its
    own: every group added stopped exactly one Workload, by our arbitration, and Kueue has nothing to preempt.
    Without the ledger: 5 groups, 4 deactivations, 5 preemptions (one by Kueue's own order)."""
    from pathlib import Path  # noqa: PLC0415

    from autoscaler.core.engine import compile_policy  # noqa: PLC0415
    from autoscaler.policyfile.loader import load_file  # noqa: PLC0415
    from autoscaler.sim import disagg  # noqa: PLC0415
    from autoscaler.sim.simulation import PolicyController  # noqa: PLC0415

    cl = cluster_mod.load(CODELAB)
    pols = list(load_file(Path(__file__).resolve().parents[2] / "policies" / "lws-prefill-decode.yaml"))
    parts = [PolicyController(compile_policy(p), cl.pipeline_for(p.metadata.name), "default") for p in pols]
    sim = Simulation(cluster=cl, trace=_trace(120.0, rate=20.0),
                     controller=disagg.CombinedController("ex", "policy", parts),
                     initial_by_pool={"prefill": 2, "decode": 2}, slo_ttft_s=2.0)
    res = sim.run()
    added = {p.name: len(p.live()) - 2 for p in sim.pools}
    # The premise: both pools grew (how far is the policies' business).
    assert min(added.values()) >= 1
    first_up = {e.message.split(":")[0]: e.time for e in reversed(sim.scale_events) if e.after > e.before}
    assert first_up["prefill"] == first_up["decode"]  # in one pass
    assert sim.deactivations == sum(added.values())
    assert res.preemptions == sum(added.values())  # every stop was ours
    assert res.slice_violations == []
