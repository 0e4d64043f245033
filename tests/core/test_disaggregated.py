"""The ``disaggregated`` policy type: prefill and decode pools sized together, in whole slices, one budget.

Table cases go through ``compile_policy`` + ``decide`` (the engine's joint path: one ScaleDecision per target,
one capacity request); pure cases drive ``choose_mix`` / ``fit_budget`` / ``plan``. Properties (hypothesis):
no pool gets more than its signals justify (the ratio follows the signals); the pools never hold more chips
than the budget or than the arbitration granted; every count is whole groups; unknown data never shrinks a
pool.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from autoscaler.core import topology
from autoscaler.core.engine import compile_policy, decide
from autoscaler.core.model import (
    Observation,
    PolicyState,
    QuotaStatus,
    Reason,
    ReplicaStatus,
    ScaleDecision,
    SignalReading,
    SignalState,
    SignalValue,
    SliceCapacity,
    TargetKind,
    TargetRef,
    TrainingDecision,
    TrainingWorkload,
)
from autoscaler.core.policies import disaggregated as dg
from autoscaler.core.policies import slo
from autoscaler.core.spec import ScalingPolicy

NS = "llm"
T0 = 10_000.0
PRE = TargetRef(TargetKind.LEADER_WORKER_SET, "prefill", NS)
DEC = TargetRef(TargetKind.LEADER_WORKER_SET, "decode", NS)
BIG = TargetRef(TargetKind.LEADER_WORKER_SET, "decode-big", NS)


def lws(name: str) -> dict[str, str]:
    return {"kind": "LeaderWorkerSet", "name": name, "namespace": NS}


def policy_doc(*, budget: int | None = 64, big: bool = False, capacity: bool = False,
               max_replicas: int = 32) -> dict[str, Any]:
    decode_variants: list[dict[str, Any]] = [
        {"name": "decode", "target": lws("decode"), "sliceTopology": "2x2x2", "tokensPerSecond": 2000,
         "minReplicas": 1 if not big else 0, "maxReplicas": 8},
    ]
    if big:
        # A 2x4x4 group: 4× the chips, 5× the tokens/s (an estimate for the test: bigger batches per chip).
        decode_variants.append({"name": "decode-big", "target": lws("decode-big"), "sliceTopology": "2x4x4",
                                "tokensPerSecond": 10000, "maxReplicas": 2})
    policy: dict[str, Any] = {
        "type": "disaggregated",
        "scaleDownDelaySeconds": 60,
        "prefill": {
            "ttftSeconds": 2.0,
            "signals": {"promptTokens": "prompt", "waiting": "pwait", "ttft": "ttft"},
            "variants": [{"name": "prefill", "target": lws("prefill"), "sliceTopology": "2x2x2",
                          "tokensPerSecond": 8000, "minReplicas": 1, "maxReplicas": 8}],
        },
        "decode": {
            "timePerOutputTokenSeconds": 0.05,
            "signals": {"generationTokens": "gen", "kvCacheUsage": "kv", "timePerOutputToken": "tpot"},
            "variants": decode_variants,
        },
    }
    if budget is not None:
        policy["chipBudget"] = budget
    spec: dict[str, Any] = {
        "target": lws("decode"),
        "maxReplicas": max_replicas,
        "signals": [
            {"name": "prompt", "query": "p", "pool": "prefill"},
            {"name": "pwait", "query": "w", "pool": "prefill"},
            {"name": "ttft", "query": "t", "pool": "prefill"},
            {"name": "gen", "query": "g"},
            {"name": "kv", "query": "k", "aggregate": "avg"},
            {"name": "tpot", "query": "o"},
        ],
        "policy": policy,
    }
    if capacity:
        spec["capacity"] = {"clusterQueue": "cq", "resource": "google.com/tpu", "perReplica": 8}
        spec["preemptible"] = [{"namespace": "train"}]
    return {"apiVersion": "autoscaler.dev/v1alpha1", "kind": "ScalingPolicy", "metadata": {"name": "pd"},
            "spec": spec}


def compiled(**kw: Any) -> Any:
    return compile_policy(ScalingPolicy.model_validate(policy_doc(**kw)))


#: The policy has run for an hour (its first evaluation is older than any delay window here).
SETTLED = PolicyState(algorithm=dg.DisaggState(since=T0 - 3600))

#: Quiet traffic: every signal known and comfortable.
QUIET = {"prompt": 4000.0, "pwait": 0.0, "ttft": 0.5, "gen": 1000.0, "kv": 0.3, "tpot": 0.02}


def observation(values: Mapping[str, float | None], counts: Mapping[str, tuple[int, int]],
                **kw: Any) -> Observation:
    """``counts``: target name -> (spec, ready)."""
    readings = {
        n: SignalReading(v, T0 - 5) if v is not None else SignalReading(None, None, error="scrape failed")
        for n, v in values.items()
    }
    refs = {"prefill": PRE, "decode": DEC, "decode-big": BIG}
    members = {refs[n].key: ReplicaStatus(s, r, starting=s - r) for n, (s, r) in counts.items()}
    return Observation(DEC, members[DEC.key], readings, members=members, **kw)


def scales(decisions: list[Any]) -> dict[str, ScaleDecision]:
    return {d.target.name: d for d in decisions if isinstance(d, ScaleDecision)}


# ------------------------------------------------------------------------------------------------ table cases

CASES = [
    pytest.param(
        QUIET, {"prefill": (1, 1), "decode": (1, 1)}, {"prefill": 1, "decode": 1},
        {"prefill": Reason.STEADY, "decode": Reason.STEADY}, id="quiet-stays",
    ),
    pytest.param(
        {**QUIET, "prompt": 20000.0}, {"prefill": (1, 1), "decode": (1, 1)}, {"prefill": 4, "decode": 1},
        {"prefill": Reason.SCALE_UP, "decode": Reason.STEADY}, id="prompt-demand-grows-prefill-only",
    ),
    pytest.param(
        {**QUIET, "gen": 5000.0}, {"prefill": (1, 1), "decode": (1, 1)}, {"prefill": 1, "decode": 4},
        {"prefill": Reason.STEADY, "decode": Reason.SCALE_UP}, id="generation-demand-grows-decode-only",
    ),
    pytest.param(
        {**QUIET, "kv": 0.95}, {"prefill": (1, 1), "decode": (2, 2)}, {"prefill": 1, "decode": 3},
        {"prefill": Reason.STEADY, "decode": Reason.SCALE_UP}, id="kv-pressure-grows-decode",
    ),
    pytest.param(
        {**QUIET, "ttft": 2.5}, {"prefill": (2, 2), "decode": (1, 1)}, {"prefill": 3, "decode": 1},
        {"prefill": Reason.SCALE_UP, "decode": Reason.STEADY}, id="ttft-over-objective-adds-a-prefill-group",
    ),
    pytest.param(
        {**QUIET, "ttft": 2.5}, {"prefill": (3, 2), "decode": (1, 1)}, {"prefill": 3, "decode": 1},
        {"prefill": Reason.STEADY, "decode": Reason.STEADY}, id="ttft-over-waits-for-the-starting-group",
    ),
    pytest.param(
        {**QUIET, "tpot": 0.06}, {"prefill": (1, 1), "decode": (2, 2)}, {"prefill": 1, "decode": 3},
        {"prefill": Reason.STEADY, "decode": Reason.SCALE_UP}, id="tpot-over-objective-adds-a-decode-group",
    ),
    pytest.param(
        {**QUIET, "prompt": None, "pwait": None}, {"prefill": (3, 3), "decode": (3, 3)},
        {"prefill": 3, "decode": 2},
        {"prefill": Reason.METRICS_UNKNOWN, "decode": Reason.SCALE_DOWN},
        id="prefill-demand-unknown-holds-prefill-decode-still-decided",
    ),
    pytest.param(
        {**QUIET, "tpot": None}, {"prefill": (1, 1), "decode": (4, 4)}, {"prefill": 1, "decode": 4},
        {"prefill": Reason.STEADY, "decode": Reason.STEADY}, id="latency-unknown-never-shrinks",
    ),
    pytest.param(
        {**QUIET, "prompt": 200000.0, "gen": 100000.0}, {"prefill": (1, 1), "decode": (1, 1)},
        # Needs 285,714 and 142,857 tokens/s; 64 chips = 8 groups, granted to the least covered role each
        # time: prefill 3×8000 = 8.4 %, decode 5×2000 = 7.0 % (a sixth decode group would not fit).
        {"prefill": 3, "decode": 5}, {"prefill": Reason.SCALE_UP, "decode": Reason.SCALE_UP},
        id="both-want-more-than-the-budget-split-by-need-coverage",
    ),
]


@pytest.mark.parametrize(("values", "counts", "want", "reasons"), CASES)
def test_one_evaluation(
    values: dict[str, float | None], counts: dict[str, tuple[int, int]], want: dict[str, int],
    reasons: dict[str, Reason],
) -> None:
    # A state whose first evaluation is a window old, so a shrink is decided on this evaluation's need alone.
    decisions, _ = decide(compiled(), observation(values, counts), SETTLED, T0)
    got = scales(decisions)
    assert {n: d.desired for n, d in got.items()} == want
    assert {n: d.reason for n, d in got.items()} == reasons
    for d in got.values():
        assert "tokens/s" in d.message or "holding" in d.message  # the numbers behind it


def test_every_message_says_both_pools_and_the_chips() -> None:
    decisions, _ = decide(compiled(), observation({**QUIET, "prompt": 20000.0},
                                                  {"prefill": (1, 1), "decode": (1, 1)}), PolicyState(), T0)
    d = scales(decisions)["prefill"]
    assert "20000 tokens/s at utilization 0.7 needs 28571" in d.message
    assert "4×2x2x2 (prefill) = 32000 tokens/s on 32 chips" in d.message
    assert "together prefill 4×2x2x2 + decode 1×2x2x2 = 40 chips" in d.message


def test_requests_waiting_with_no_group_start_one() -> None:
    values = {**QUIET, "prompt": None, "gen": None, "kv": None, "tpot": None}
    # Decode has no demand known (holds); prefill has no group at all and requests wait for it.
    doc = policy_doc(budget=None)
    doc["spec"]["policy"]["prefill"]["variants"][0]["minReplicas"] = 0
    doc["spec"]["policy"]["prefill"]["minGroups"] = 0
    pol = compile_policy(ScalingPolicy.model_validate(doc))
    decisions, _ = decide(pol, observation({**values, "pwait": 3.0}, {"prefill": (0, 0), "decode": (1, 1)}),
                          PolicyState(), T0)
    got = scales(decisions)
    assert (got["prefill"].desired, got["prefill"].reason) == (1, Reason.SCALE_UP), got["prefill"].message
    assert got["decode"].reason == Reason.METRICS_UNKNOWN


def test_a_missing_pool_status_holds_every_pool() -> None:
    obs = observation(QUIET, {"decode": (2, 2)})
    decisions, _ = decide(compiled(), obs, PolicyState(), T0)
    (only,) = decisions
    assert isinstance(only, ScaleDecision)
    assert only.target == DEC
    assert (only.desired, only.reason) == (2, Reason.METRICS_UNKNOWN)
    assert PRE.key in only.message


def test_the_first_window_never_shrinks() -> None:
    pol = compiled()
    counts = {"prefill": (2, 2), "decode": (4, 4)}
    state = PolicyState()
    for t in (0, 15, 30, 59):
        decisions, state = decide(pol, observation(QUIET, counts), state, T0 + t)
        assert {d.desired for d in scales(decisions).values()} == {2, 4}, t
    assert "no shrink before a whole 60s window is observed (59s so far)" in scales(decisions)["decode"].message
    decisions, _ = decide(pol, observation(QUIET, counts), state, T0 + 60)
    assert scales(decisions)["decode"].desired < 4


def test_scale_down_waits_for_the_delay_window() -> None:
    pol = compiled()
    busy = {**QUIET, "gen": 5000.0}
    counts = {"prefill": (1, 1), "decode": (4, 4)}
    _, state = decide(pol, observation(busy, counts), SETTLED, T0)
    decisions, state = decide(pol, observation(QUIET, counts), state, T0 + 30)
    assert scales(decisions)["decode"].desired == 4  # the busy need is 30 s old: inside the 60 s window
    decisions, _ = decide(pol, observation(QUIET, counts), state, T0 + 61)
    # KV use 0.3 of 4 groups is 1.2 groups of cache, 1.5 at the 0.8 target, 1.875 with the 20 % headroom: 2.
    assert scales(decisions)["decode"].desired == 2


def test_a_steady_load_is_a_fixed_point() -> None:
    pol = compiled()
    values = {**QUIET, "gen": 3000.0}
    counts = {"prefill": (1, 1), "decode": (1, 1)}
    state = PolicyState()
    seen = []
    for i in range(12):
        decisions, state = decide(pol, observation(values, counts), state, T0 + 15 * i)
        got = scales(decisions)
        counts = {n: (d.desired, d.desired) for n, d in got.items()}
        seen.append(counts["decode"][0])
    assert seen[1:] == [seen[1]] * (len(seen) - 1), seen


# ------------------------------------------------------------------------------------ one request for the pair


def training(n: int, chips: int = 16) -> tuple[TrainingWorkload, ...]:
    return tuple(
        TrainingWorkload("train", f"job-{i}", 100, chips, active=True, admitted=True, uid=f"u{i}",
                         since_checkpoint_s=60.0 * (i + 1))
        for i in range(n)
    )


def test_both_pools_make_one_capacity_request_and_never_share_a_victim() -> None:
    pol = compiled(capacity=True, budget=None)
    values = {**QUIET, "prompt": 20000.0, "gen": 5000.0}  # prefill 1→4 (+24 chips), decode 1→4 (+24 chips)
    quota = QuotaStatus("cq", "google.com/tpu", nominal=64, reserved=64)  # 16 serving + 48 training
    obs = observation(values, {"prefill": (1, 1), "decode": (1, 1)}, training=training(3), quota=quota)
    decisions, _ = decide(pol, obs, PolicyState(), T0)
    victims = [d.workload.key for d in decisions if isinstance(d, TrainingDecision)]
    assert len(victims) == len(set(victims)) == 3  # 48 chips: all three, each once
    got = scales(decisions)
    assert (got["prefill"].desired, got["decode"].desired) == (4, 4)


def test_a_partial_grant_is_split_in_whole_slices_within_the_chips_granted() -> None:
    pol = compiled(capacity=True, budget=None)
    values = {**QUIET, "prompt": 20000.0, "gen": 5000.0}
    # 8 chips free, nothing preemptible: the pair may grow by one slice, not one each.
    quota = QuotaStatus("cq", "google.com/tpu", nominal=24, reserved=16)
    obs = observation(values, {"prefill": (1, 1), "decode": (1, 1)}, quota=quota)
    decisions, _ = decide(pol, obs, PolicyState(), T0)
    got = scales(decisions)
    chips = 8 * (got["prefill"].desired + got["decode"].desired)
    assert chips == 24
    assert {got["prefill"].reason, got["decode"].reason} <= {Reason.WAITING_FOR_CAPACITY}
    assert "limited by capacity" in got["prefill"].message


# ------------------------------------------------------------------------------------------------- variants


def test_the_budget_split_never_gives_a_pool_more_than_it_wants_with_mixed_slice_sizes() -> None:
    config = compiled(big=True, budget=64).policy.spec.policy
    needs: dict[dg.Role, dg.RoleNeed] = {
        "prefill": dg.RoleNeed("prefill", 8000.0, True, ""),
        "decode": dg.RoleNeed("decode", 20000.0, True, ""),
    }
    desired = {"prefill": 1, "decode": 0, "decode-big": 2}  # 8 + 64 chips > 64
    current = {"prefill": 1, "decode": 0, "decode-big": 0}
    got = dg.fit_budget(config, desired, current, needs, chip_budget=64, group_budget=None)
    # One 2x4x4 group (32 chips) fits beside prefill's slice; the second does not; the 24 chips left are
    # never handed to prefill, which wants no more.
    assert got == {"prefill": 1, "decode": 0, "decode-big": 1}


def test_variants_carry_the_load_at_the_fewest_chips() -> None:
    v = compiled(big=True, budget=None).policy.spec.policy.decode.variants
    # 9000 tokens/s: 5×2x2x2 = 40 chips, or 1×2x4x4 = 32 chips.
    assert dg.choose_mix(v, {"decode": 1, "decode-big": 0}, 9000.0, min_groups=1) == {"decode": 0, "decode-big": 1}
    # 3000 tokens/s: 2×2x2x2 = 16 chips beats a 32-chip group.
    assert dg.choose_mix(v, {"decode": 0, "decode-big": 1}, 3000.0, min_groups=1) == {"decode": 2, "decode-big": 0}


def test_a_shift_between_variants_adds_before_it_removes() -> None:
    pol = compiled(big=True, budget=None)
    values = {**QUIET, "gen": 6300.0}  # needs 9000 tokens/s
    counts = {"prefill": (1, 1), "decode": (4, 4), "decode-big": (0, 0)}
    decisions, state = decide(pol, observation(values, counts), PolicyState(), T0)
    got = scales(decisions)
    # 4 small groups carry 8000 < 9000: grow. The cheapest mix is one 2x4x4 group; the small ones stay
    # until it serves.
    assert (got["decode"].desired, got["decode-big"].desired) == (4, 1)
    counts = {"prefill": (1, 1), "decode": (4, 4), "decode-big": (1, 0)}
    decisions, state = decide(pol, observation(values, counts), state, T0 + 15)
    got = scales(decisions)
    assert (got["decode"].desired, got["decode-big"].desired) == (4, 1)  # the big group is still starting
    counts = {"prefill": (1, 1), "decode": (4, 4), "decode-big": (1, 1)}
    decisions, _ = decide(pol, observation(values, counts), state, T0 + 100)
    got = scales(decisions)
    # Once it serves, the small groups go, but one: 9000 tokens/s with the 20 % headroom is 11250, more than
    # the big group's 10000.
    assert (got["decode"].desired, got["decode-big"].desired) == (1, 1)


def test_variants_only_where_they_fit_in_the_blocks() -> None:
    v = compiled(big=True, budget=None).policy.spec.policy
    block = topology.Shape.parse("4x4x4")
    # One block, one serving 2x2x2 group at the origin of each 2x4x4 half: no 2x4x4 region is free, and the
    # serving groups never yield.
    occupants = (
        topology.Occupant("s0", (topology.Region("b0", (0, 0, 0), topology.Shape(2, 2, 2)),)),
        topology.Occupant("s1", (topology.Region("b0", (2, 0, 0), topology.Shape(2, 2, 2)),)),
        topology.Occupant("s2", (topology.Region("b0", (0, 0, 2), topology.Shape(2, 2, 2)),)),
        topology.Occupant("s3", (topology.Region("b0", (0, 2, 0), topology.Shape(2, 2, 2)),)),
    )
    inv = topology.Inventory(block, ("b0",), occupants)
    fits = dg.inventory_fit(v, inv, {})
    assert not fits({"decode-big": 1})
    assert fits({"decode": 4})
    mix = dg.choose_mix(v.decode.variants, {"decode": 1, "decode-big": 0}, 9000.0, min_groups=1, fits=fits)
    assert mix == {"decode": 5, "decode-big": 0}  # the 32-chip group does not fit: five small ones do


def full_block(jobs: tuple[TrainingWorkload, ...]) -> QuotaStatus:
    """One 4x4x4 block held whole: a prefill and a decode group, then one 2x2x2 region per training Workload,
    as the controller reads it (``SliceCapacity``: occupants keyed ``namespace/name``, none marked
    preemptible: which training may yield is the arbitration's word, not the inventory's)."""
    places = [(x, y, z) for z in (0, 2) for y in (0, 2) for x in (0, 2)]
    two = topology.Shape(2, 2, 2)
    occupants = [topology.Occupant("llm/prefill-0", (topology.Region("b0", places[0], two),)),
                 topology.Occupant("llm/decode-0", (topology.Region("b0", places[1], two),))]
    occupants += [topology.Occupant(w.key, (topology.Region("b0", places[2 + i], two),)) for i, w in enumerate(jobs)]
    inv = topology.Inventory(topology.Shape(4, 4, 4), ("b0",), tuple(occupants))
    owners = {"llm/prefill-0": PRE.key, "llm/decode-0": DEC.key}
    slices = SliceCapacity("slice-rf", inv, "nodes", owners=owners)
    return QuotaStatus("cq", "google.com/tpu", nominal=64, reserved=64, slices=slices)


def test_in_full_blocks_a_pool_grows_by_stopping_training_slices() -> None:
    # The codelab's shape of the defect (the simulator feeds the slice inventory): every region is held, so a
    # new group fits only once training yields. The mix must count eligible training as able to yield.
    pol = compiled(capacity=True, budget=None)
    jobs = training(6, chips=8)
    values = {**QUIET, "prompt": 20000.0}  # prefill needs 28,571 tokens/s: 1 -> 4 groups
    obs = observation(values, {"prefill": (1, 1), "decode": (1, 1)}, training=jobs, quota=full_block(jobs))
    decisions, _ = decide(pol, obs, PolicyState(), T0)
    got = scales(decisions)
    assert (got["prefill"].desired, got["decode"].desired) == (4, 1), got["prefill"].message
    stopped = [d.workload.key for d in decisions if isinstance(d, TrainingDecision)]
    # Three slices, the least work lost first (job-0..2 saved most recently).
    assert sorted(stopped) == ["train/job-0", "train/job-1", "train/job-2"]


def test_without_capacity_kueue_preempts_so_training_is_no_bound() -> None:
    # No spec.capacity: the policy stops nothing, Kueue admits or preempts for the serving groups it asks for
    # by its own priorities (as with a single-target policy without capacity): the blocks do not bound it.
    pol = compiled(budget=None)
    jobs = training(6, chips=8)
    values = {**QUIET, "prompt": 20000.0}
    obs = observation(values, {"prefill": (1, 1), "decode": (1, 1)}, training=jobs, quota=full_block(jobs))
    decisions, _ = decide(pol, obs, PolicyState(), T0)
    assert scales(decisions)["prefill"].desired == 4
    assert not [d for d in decisions if isinstance(d, TrainingDecision)]


def test_in_full_blocks_training_that_may_not_yield_is_no_room() -> None:
    # Every Workload resumed a moment ago under minRunSeconds: none may stop, so no new group fits anywhere.
    doc = policy_doc(capacity=True, budget=None)
    doc["spec"]["capacity"]["minRunSeconds"] = 600
    pol = compile_policy(ScalingPolicy.model_validate(doc))
    jobs = tuple(dataclasses.replace(w, resumed_at=T0 - 10) for w in training(6, chips=8))
    values = {**QUIET, "prompt": 20000.0}
    obs = observation(values, {"prefill": (1, 1), "decode": (1, 1)}, training=jobs, quota=full_block(jobs))
    decisions, _ = decide(pol, obs, PolicyState(), T0)
    assert scales(decisions)["prefill"].desired == 1
    assert "does not fit as whole slices in the blocks" in scales(decisions)["prefill"].message
    assert not [d for d in decisions if isinstance(d, TrainingDecision)]


def test_in_full_blocks_a_variant_fits_only_where_training_may_yield() -> None:
    # Decode needs 9,000 tokens/s: one 2x4x4 group (with the 2x2x2 one kept until it serves) or five 2x2x2
    # groups, both 40 chips. Every 2x4x4 region holds a serving group or job-4, which resumed a moment ago
    # (minRunSeconds): no 2x4x4 can be had, so the mix must be the small groups, placed on the other jobs.
    doc = policy_doc(capacity=True, budget=None, big=True)
    doc["spec"]["capacity"]["minRunSeconds"] = 600
    pol = compile_policy(ScalingPolicy.model_validate(doc))
    jobs = tuple(dataclasses.replace(w, resumed_at=T0 - 10 if w.name == "job-4" else None)
                 for w in training(6, chips=8))
    values = {**QUIET, "gen": 6300.0}
    counts = {"prefill": (1, 1), "decode": (1, 1), "decode-big": (0, 0)}
    obs = observation(values, counts, training=jobs, quota=full_block(jobs))
    decisions, _ = decide(pol, obs, PolicyState(), T0)
    got = scales(decisions)
    assert (got["decode"].desired, got["decode-big"].desired) == (5, 0), got["decode"].message
    stopped = sorted(d.workload.key for d in decisions if isinstance(d, TrainingDecision))
    assert len(stopped) == 4
    assert "train/job-4" not in stopped


def test_at_equal_chips_the_mix_keeps_the_larger_capacity_rather_than_the_fewest_changes() -> None:
    # 4 small groups (8,000 on 32 chips) or the one 2x4x4 group (10,000 on 32 chips) both carry 7,500, and
    # neither adds a group: once the larger group serves, the same chips with more headroom win (the fewest
    # changes would drop it for the small ones). Adding one is a cold start: at equal chips the mix that adds
    # the fewest groups wins first.
    v = compiled(big=True, budget=None).policy.spec.policy.decode.variants
    assert dg.choose_mix(v, {"decode": 4, "decode-big": 1}, 7500.0, min_groups=1) == {"decode": 0, "decode-big": 1}
    assert dg.choose_mix(v, {"decode": 4, "decode-big": 0}, 7500.0, min_groups=1) == {"decode": 4, "decode-big": 0}


def fragmented(jobs: tuple[TrainingWorkload, ...], order: tuple[str, ...]) -> QuotaStatus:
    """Two 4x4x4 blocks. ``b0``: the x = 0 half holds decode group d0 and training job-0..2, the x = 2 half
    decode groups d1..d4, so every 2x4x4 region holds a serving group (no larger group fits, whatever training
    yields) until d0 goes. ``b1``: the prefill group and slices of another tenant that never yield.
    ``order``: the decode groups in the order a scale-down removes them."""
    two = topology.Shape(2, 2, 2)
    x0 = [(0, y, z) for z in (0, 2) for y in (0, 2)]
    x2 = [(2, y, z) for z in (0, 2) for y in (0, 2)]
    occ = [topology.Occupant("llm/d0", (topology.Region("b0", x0[0], two),))]
    occ += [topology.Occupant(w.key, (topology.Region("b0", x0[1 + i], two),)) for i, w in enumerate(jobs)]
    occ += [topology.Occupant(f"llm/d{1 + i}", (topology.Region("b0", p, two),)) for i, p in enumerate(x2)]
    places = [(x, y, z) for z in (0, 2) for y in (0, 2) for x in (0, 2)]
    occ.append(topology.Occupant("llm/p0", (topology.Region("b1", places[0], two),)))
    occ += [topology.Occupant(f"other/s{i}", (topology.Region("b1", p, two),)) for i, p in enumerate(places[1:])]
    inv = topology.Inventory(topology.Shape(4, 4, 4), ("b0", "b1"), tuple(occ))
    owners = {"llm/p0": PRE.key, **{f"llm/d{i}": DEC.key for i in range(5)}}
    slices = SliceCapacity("slice-rf", inv, "nodes", owners=owners, removal_order={DEC.key: order})
    # The codelab's ClusterQueue: a placeholder quota, the blocks are the limit.
    return QuotaStatus("cq", "google.com/tpu", nominal=999999, reserved=inv.used_chips, slices=slices)


def test_a_make_room_shift_removes_the_group_whose_place_completes_a_larger_region_then_adds_the_larger() -> None:
    # Decode serves 4,900 tokens/s on five 2x2x2 groups (2,000 each): needs 7,000 at 0.7, a shrink keeps
    # 8,750 (20 % headroom), which one 2x4x4 group (10,000 on 32 chips) carries for 8 fewer chips than the
    # five small groups. No 2x4x4 place is free of serving: the policy cannot add before it removes. d0 is
    # the group a scale-down removes first and its place completes the x = 0 half: one small group goes
    # (the four left carry 8,000 >= 7,000 needed), then the 2x4x4 group is added in its place, stopping the
    # training there; the small groups stay until it serves.
    pol = compiled(capacity=True, budget=None, big=True)
    jobs = training(3, chips=8)
    values = {**QUIET, "gen": 4900.0}
    counts = {"prefill": (1, 1), "decode": (5, 5), "decode-big": (0, 0)}
    order = ("llm/d0", "llm/d1", "llm/d2", "llm/d3", "llm/d4")
    obs = observation(values, counts, training=jobs, quota=fragmented(jobs, order))
    decisions, state = decide(pol, obs, SETTLED, T0)
    got = scales(decisions)
    assert (got["decode"].desired, got["decode-big"].desired) == (4, 0), got["decode"].message
    assert "make room: 1 2x2x2 group(s) (decode) go first" in got["decode"].message
    assert not [d for d in decisions if isinstance(d, TrainingDecision)]
    # The next evaluation: d0 is gone; the 2x4x4 group fits where it was, stopping the three jobs there.
    quota = fragmented(jobs, order[1:])
    assert quota.slices is not None
    inv = quota.slices.inventory.without(["llm/d0"])
    quota = dataclasses.replace(quota, reserved=inv.used_chips,
                                slices=dataclasses.replace(quota.slices, inventory=inv))
    counts = {"prefill": (1, 1), "decode": (4, 4), "decode-big": (0, 0)}
    decisions, state = decide(pol, observation(values, counts, training=jobs, quota=quota), state, T0 + 15)
    got = scales(decisions)
    assert (got["decode"].desired, got["decode-big"].desired) == (4, 1), got["decode-big"].message
    assert "make-room shift" in got["decode-big"].message
    assert sorted(d.workload.key for d in decisions if isinstance(d, TrainingDecision)) == [
        "train/job-0", "train/job-1", "train/job-2"]


def _at(obs: Observation, now: float) -> Observation:
    """``obs`` with every reading taken 5 s before ``now``."""
    fresh = {k: dataclasses.replace(r, timestamp=now - 5) if r.timestamp is not None else r
             for k, r in obs.signals.items()}
    return dataclasses.replace(obs, signals=fresh)


def _d0_replaced(quota: QuotaStatus, by: str | None) -> QuotaStatus:
    """``quota`` with decode group d0's place released (``by`` None) or taken by another occupant ``by``."""
    assert quota.slices is not None
    inv = quota.slices.inventory
    d0 = next(o for o in inv.occupants if o.key == "llm/d0")
    inv = inv.without(["llm/d0"])
    if by is not None:
        inv = inv.with_occupant(topology.Occupant(by, d0.regions))
    return dataclasses.replace(quota, reserved=inv.used_chips, slices=dataclasses.replace(quota.slices, inventory=inv))


def _shift_started() -> tuple[Any, tuple[TrainingWorkload, ...], dict[str, float], tuple[str, ...], PolicyState]:
    pol = compiled(capacity=True, budget=None, big=True)
    jobs = training(3, chips=8)
    values = {**QUIET, "gen": 4900.0}
    order = ("llm/d0", "llm/d1", "llm/d2", "llm/d3", "llm/d4")
    counts = {"prefill": (1, 1), "decode": (5, 5), "decode-big": (0, 0)}
    decisions, state = decide(pol, observation(values, counts, training=jobs, quota=fragmented(jobs, order)),
                              SETTLED, T0)
    assert (scales(decisions)["decode"].desired, scales(decisions)["decode-big"].desired) == (4, 0)
    return pol, jobs, values, order, state


def test_a_make_room_shift_waits_for_the_removed_groups_place_however_long_kueue_takes() -> None:
    # As above, but Kueue releases d0's place only after the policy's scaleDownDelaySeconds (60 s here): pods
    # terminating, a slow API server. While d0 still holds it the shift waits (and says for what); once it is
    # free, the 2x4x4 group is added there. A fixed window would have dropped the shift at 60 s and left the
    # four small groups for good (the mix at equal chips adds no group).
    pol, jobs, values, order, state = _shift_started()
    counts = {"prefill": (1, 1), "decode": (4, 4), "decode-big": (0, 0)}
    held = fragmented(jobs, order[1:])  # d0 is no longer the LWS's, but its Workload still holds the place
    for now in (T0 + 15, T0 + 75, T0 + 300):
        decisions, state = decide(pol, _at(observation(values, counts, training=jobs, quota=held), now), state, now)
        got = scales(decisions)
        assert (got["decode"].desired, got["decode-big"].desired) == (4, 0), got["decode"].message
        assert "make-room shift: waiting for llm/d0 to release its place" in got["decode"].message
        assert not [d for d in decisions if isinstance(d, TrainingDecision)]
    now = T0 + 315
    free = _d0_replaced(held, None)
    decisions, state = decide(pol, _at(observation(values, counts, training=jobs, quota=free), now), state, now)
    got = scales(decisions)
    assert (got["decode"].desired, got["decode-big"].desired) == (4, 1), got["decode-big"].message
    assert "make-room shift: the decode-big group now fits" in got["decode-big"].message
    assert sorted(d.workload.key for d in decisions if isinstance(d, TrainingDecision)) == [
        "train/job-0", "train/job-1", "train/job-2"]


def test_a_make_room_shift_ends_once_the_place_is_free_and_the_larger_group_cannot_go_there() -> None:
    # d0's place is released, but another tenant's slice (never preemptible) took it before the larger group
    # was placed: the shift ends at once and says so, rather than holding for a fixed window.
    pol, jobs, values, order, state = _shift_started()
    counts = {"prefill": (1, 1), "decode": (4, 4), "decode-big": (0, 0)}
    taken = _d0_replaced(fragmented(jobs, order[1:]), "other/late")
    decisions, state = decide(pol, _at(observation(values, counts, training=jobs, quota=taken), T0 + 15), state,
                              T0 + 15)
    got = scales(decisions)
    assert (got["decode"].desired, got["decode-big"].desired) == (4, 0), got["decode"].message
    assert "make-room shift ended: the removed group's place is free" in got["decode"].message
    assert isinstance(state.algorithm, dg.DisaggState)
    assert state.algorithm.shifts == ()


@pytest.mark.parametrize(
    ("order", "gen"),
    [
        pytest.param(("llm/d1", "llm/d2", "llm/d3", "llm/d4", "llm/d0"), 4900.0,
                     id="the-group-that-goes-frees-nothing"),
        pytest.param(("llm/d0", "llm/d1", "llm/d2", "llm/d3", "llm/d4"), 5900.0,
                     id="the-rest-would-not-carry-the-need"),
        pytest.param((), 4900.0, id="which-group-goes-is-unknown"),
    ],
)
def test_no_make_room_shift_where_it_frees_no_place_or_would_leave_the_load_short(
    order: tuple[str, ...], gen: float
) -> None:
    # As above, but a scale-down would remove a group of the x = 2 half first (the fewest whose removal
    # frees a 2x4x4 place would leave 3 groups: 6,000 < 7,000); or the load needs 8,429 tokens/s, more than
    # the four groups left; or the cluster does not say which group goes: the five small groups stay.
    pol = compiled(capacity=True, budget=None, big=True)
    jobs = training(3, chips=8)
    quota = fragmented(jobs, order)
    if not order:
        assert quota.slices is not None
        quota = dataclasses.replace(quota, slices=dataclasses.replace(quota.slices, removal_order={}))
    counts = {"prefill": (1, 1), "decode": (5, 5), "decode-big": (0, 0)}
    obs = observation({**QUIET, "gen": gen}, counts, training=jobs, quota=quota)
    decisions, _ = decide(pol, obs, SETTLED, T0)
    got = scales(decisions)
    assert (got["decode"].desired, got["decode-big"].desired) == (5, 0), got["decode"].message
    assert "make room" not in got["decode"].message


# ------------------------------------------------------------------------------------ learned capacity (rule 0)


def run_evaluations(
    values: Mapping[str, float | None], counts: Mapping[str, tuple[int, int]], n: int,
    state: PolicyState = SETTLED, start: float = T0, policy: Any = None,
) -> tuple[list[Any], PolicyState]:
    """``n`` evaluations 15 s apart on the same signals and counts (the counts do not follow the decisions)."""
    decisions: list[Any] = []
    pol = policy if policy is not None else compiled(budget=None)
    for i in range(n):
        now = start + 15 * i
        obs = observation(values, counts)
        fresh = {k: dataclasses.replace(r, timestamp=now - 5) if r.timestamp is not None else r
                 for k, r in obs.signals.items()}
        decisions, state = decide(pol, dataclasses.replace(obs, signals=fresh), state, now)
    return decisions, state


def learned(state: PolicyState, role: dg.Role) -> dg.Learned:
    assert isinstance(state.algorithm, dg.DisaggState)
    return state.algorithm.learned(role)


def test_a_moments_queue_adds_no_group_a_queue_held_for_three_evaluations_does_without_a_latency_signal() -> None:
    # 2 prefill groups serve 9,000 prompt tokens/s (needs 12,857 at 0.7 of 8,000: 2 groups); 3 prompts wait
    # on 2 groups, and the role has no TTFT signal. Once: no group added (a burst queues on one-prompt-at-a-time
    # prefill groups). Held for slo.SATURATED_EVALUATIONS evaluations: one more group.
    values = {**QUIET, "prompt": 9000.0, "pwait": 3.0}
    counts = {"prefill": (2, 2), "decode": (1, 1)}
    doc = policy_doc(budget=None)
    del doc["spec"]["policy"]["prefill"]["signals"]["ttft"]
    pol = compile_policy(ScalingPolicy.model_validate(doc))
    for n in range(1, slo.SATURATED_EVALUATIONS + 1):
        decisions, _ = run_evaluations(values, counts, n, policy=pol)
        got = scales(decisions)["prefill"]
        assert got.desired == (2 if n < slo.SATURATED_EVALUATIONS else 3), (n, got.message)
    assert got.reason is Reason.SCALE_UP
    assert "requests waited on every ready group for 3 evaluations" in got.message


def test_with_a_latency_signal_the_latency_at_risk_adds_a_group_not_a_queue() -> None:
    # The same queue held for many evaluations with TTFT comfortably met (0.5 s of 2 s) adds no group (the
    # codelab simulation's 4th prefill group at TTFT 1.33 s, held 12 minutes); TTFT at risk (1.7 s: ≥ 0.8 of
    # the objective, not yet over it) adds one at once, with or without a queue, since a group serves minutes
    # after it is asked for.
    counts = {"prefill": (2, 2), "decode": (1, 1)}
    decisions, _ = run_evaluations({**QUIET, "prompt": 9000.0, "pwait": 3.0}, counts, 6)
    assert scales(decisions)["prefill"].desired == 2, scales(decisions)["prefill"].message
    decisions, _ = run_evaluations({**QUIET, "prompt": 9000.0, "ttft": 1.7}, counts, 1)
    got = scales(decisions)["prefill"]
    assert (got.desired, got.reason) == (3, Reason.SCALE_UP), got.message
    assert "TTFT at risk (0.8 of its objective)" in got.message


def test_capacity_is_learned_from_saturation_with_the_latency_at_risk() -> None:
    # Two settled prefill groups serve 8,000 prompt tokens/s with a queue on each and TTFT at risk (1.8 s of
    # 2 s): each group serves 4,000, half its declared 8,000. Once the count has held slo.SETTLE_S, κ moves
    # toward 0.5 with slo's time constant (60 s), so within a few minutes the token need doubles
    # (8,000 / 0.7 / 0.5 = 22,857 of declared capacity: 3 groups).
    values = {**QUIET, "prompt": 8000.0, "pwait": 4.0, "ttft": 1.8}
    counts = {"prefill": (2, 2), "decode": (1, 1)}
    decisions, state = run_evaluations(values, counts, 4)
    assert learned(state, "prefill").scale == 1.0  # the count has not held a minute yet: rates still settle
    decisions, state = run_evaluations(values, counts, 30, state, T0 + 60)
    assert learned(state, "prefill").scale == pytest.approx(0.5, rel=0.01)
    assert learned(state, "prefill").samples >= 1
    # The same demand without a queue: the need counts with the learned capacity (κ is remembered), at the
    # utilization the latency headroom taught meanwhile (the risk lowered it below 0.7: rule 0b).
    c = learned(state, "prefill").utilization
    assert c is not None
    assert c < 0.7
    decisions, state = run_evaluations({**values, "pwait": 0.0, "ttft": 0.5}, counts, 1, state, T0 + 500)
    got = scales(decisions)["prefill"]
    now = learned(state, "prefill")
    assert now.utilization is not None
    assert f"learned capacity 0.50× the declared needs {8000 / now.utilization / now.scale:.0f}" in got.message
    assert got.desired == math.ceil(8000 / now.utilization / now.scale / 8000 - 1e-9) > 2


def plan_learned(values: Sequence[Mapping[str, float]], *, rate_window_s: float) -> dg.Learned:
    """Prefill's learned state after one plan per ``values``, 15 s apart, on settled groups (2 prefill, 1
    decode), the token signals read over a rate window of ``rate_window_s``."""
    config = ScalingPolicy.model_validate(policy_doc(budget=None)).spec.policy
    assert isinstance(config, dg.DisaggregatedPolicyConfig)
    status = {"prefill": dg.VariantStatus(2, 2), "decode": dg.VariantStatus(1, 1)}
    state = dg.DisaggState(since=T0 - 3600, prefill_learned=dg.Learned(ready=2, ready_since=T0 - 3600))
    for i, vals in enumerate(values):
        signals = {k: SignalValue(k, SignalState.OK, v) for k, v in vals.items()}
        _, state = dg.plan(config, signals, status, state, T0 + 15 * i, rate_window_s=rate_window_s)
    return state.learned("prefill")


def test_a_burst_queue_younger_than_the_rate_window_teaches_no_lower_capacity() -> None:
    # A queue on every group with TTFT at risk, each group serving half its prior: held 45 s (4 plans 15 s
    # apart, past slo.SATURATED_EVALUATIONS) it is younger than the 60 s rate window, whose average still
    # holds the quieter seconds before the burst: κ stays. Held 60 s (5 plans) it covers the window: κ learns.
    # Without a rate window (a gauge of tokens/s) the same 45 s teach, as before.
    burst = {**QUIET, "prompt": 8000.0, "pwait": 4.0, "ttft": 1.8}
    young = plan_learned([burst] * 4, rate_window_s=60)
    assert (young.scale, young.saturated_run, young.queued_since) == (1.0, 4, T0)
    assert plan_learned([burst] * 5, rate_window_s=60).scale < 1.0
    assert plan_learned([burst] * 4, rate_window_s=0).scale < 1.0
    # One evaluation without a queue starts the run over: queued 45 s since, κ stays.
    broken = plan_learned([burst, burst, {**burst, "pwait": 0.0}, burst, burst, burst, burst], rate_window_s=60)
    assert (broken.scale, broken.queued_since) == (1.0, T0 + 45)


def test_a_queue_that_does_not_hurt_the_latency_teaches_no_lower_capacity() -> None:
    values = {**QUIET, "prompt": 8000.0, "pwait": 4.0, "ttft": 0.6}
    _, state = run_evaluations(values, {"prefill": (2, 2), "decode": (1, 1)}, 8)
    assert learned(state, "prefill").scale == 1.0


def test_what_a_group_serves_beyond_its_prior_raises_the_capacity_at_once() -> None:
    # Decode serves 3,000 generated tokens/s on one settled group declared at 2,000: κ = 1.5, no queue needed.
    values = {**QUIET, "gen": 3000.0}
    _, state = run_evaluations(values, {"prefill": (1, 1), "decode": (1, 1)}, 6)
    assert learned(state, "decode").scale == pytest.approx(1.5)
    assert learned(state, "prefill").scale == 1.0  # 4,000 of 8,000: a lower bound below the prior teaches nothing


# ------------------------------------------------------------------- utilization at the SLO (rule 0b)


def test_a_comfortable_latency_on_busy_groups_raises_the_utilization_so_a_shrink_goes_further() -> None:
    # Three settled prefill groups (8,000 declared each) serve 16,800 prompt tokens/s, TTFT 0.5 s of 2 s
    # (comfortably met: ≤ 0.5 of it). At targetUtilization 0.7 that needs 24,000 (3 groups); each group runs
    # at 0.7 of its capacity with the objective met, so the upward probe lets c rise toward 0.7 / (1 − 0.2)
    # = 0.875 (slo's rule, sizing.learn_utilization), and the need drops below what 3 groups carry.
    values = {**QUIET, "prompt": 16800.0}
    counts = {"prefill": (3, 3), "decode": (1, 1)}
    decisions, state = run_evaluations(values, counts, 5)
    assert scales(decisions)["prefill"].desired == 3
    decisions, state = run_evaluations(values, counts, 120, state, T0 + 75)
    c = learned(state, "prefill").utilization
    assert c is not None
    assert 0.8 < c <= 0.875 + 1e-9
    got = scales(decisions)["prefill"]
    assert "learned from the latency headroom" in got.message
    assert f"16800 tokens/s at utilization {c:.2f}" in got.message
    assert got.desired == 3  # the shrink waits for the peak held over the delay window (rule 3)


def test_a_latency_at_risk_on_a_count_the_model_thought_enough_lowers_the_utilization() -> None:
    # Two settled groups serve 8,000 prompt tokens/s (needs 11,429 at 0.7: 2 groups) with TTFT at 1.8 s of 2 s
    # and no queue: the model thought 2 enough and the objective says otherwise, so c drops (time constant
    # slo's 30 s at full excess) and the token need grows with it, beyond the +1 group of the latency rule.
    values = {**QUIET, "prompt": 8000.0, "ttft": 1.8}
    counts = {"prefill": (2, 2), "decode": (1, 1)}
    decisions, state = run_evaluations(values, counts, 8)
    c = learned(state, "prefill").utilization
    assert c is not None
    assert c < 0.6
    assert learned(state, "prefill").scale == 1.0  # no queue: κ learned nothing
    got = scales(decisions)["prefill"]
    assert f"8000 tokens/s at utilization {c:.2f}" in got.message
    assert got.desired >= 3


# --------------------------------------------------- forecast and burst headroom (coldStartSeconds, opt-in)


def with_cold_start(seconds: float) -> Any:
    doc = policy_doc(budget=None)
    doc["spec"]["policy"]["coldStartSeconds"] = seconds
    doc["spec"]["policy"]["scaleDownDelaySeconds"] = 60
    doc["spec"]["signals"][0] = {"name": "prompt", "preset": "vllm.prompt_tokens", "rate": {"windowSeconds": 60},
                                 "pool": "prefill"}  # the prompt counter, read as a 60 s rate
    return compile_policy(ScalingPolicy.model_validate(doc))


def test_with_a_cold_start_a_shrink_keeps_room_for_the_largest_rise_seen_within_it() -> None:
    # Prefill served 4,000 prompt tokens/s, then 20,000 for two minutes (a rise of 16,000 within the 300 s
    # cold start), then 4,000 again on 4 groups. Without coldStartSeconds the shrink goes to what the peak of
    # the 60 s delay window needs (1 group); with it, not below (4,000 + 16,000) / 0.7 = 28,571: 4 groups.
    counts = {"prefill": (4, 4), "decode": (1, 1)}
    plain = compiled(budget=None)
    for policy, want in ((plain, 1), (with_cold_start(300.0), 4)):
        _, state = run_evaluations({**QUIET, "prompt": 4000.0}, counts, 8, policy=policy)
        _, state = run_evaluations({**QUIET, "prompt": 20000.0}, counts, 8, state, T0 + 120, policy=policy)
        decisions, state = run_evaluations({**QUIET, "prompt": 4000.0}, counts, 8, state, T0 + 240, policy=policy)
        got = scales(decisions)["prefill"]
        assert got.desired == want, got.message
    assert "the largest rise within 300s lately, 16000 tokens/s" in got.message


def test_with_a_cold_start_a_steady_rise_is_forecast_over_it() -> None:
    # Past the rate window, the prompt rate climbs 1,000 tokens/s every 15 s: sizing.trend_and_burst's trend
    # (its lower confidence bound, at most twice the load) raises the need above what the rate now needs.
    counts = {"prefill": (8, 8), "decode": (1, 1)}
    state = PolicyState()
    for i in range(12):
        decisions, state = run_evaluations({**QUIET, "prompt": 4000.0 + 1000.0 * max(0, i - 4)}, counts, 1, state,
                                           T0 + 15 * i, policy=with_cold_start(300.0))
    got = scales(decisions)["prefill"]
    assert "forecast" in got.message
    assert "trend" in got.message
    rate = 4000.0 + 1000.0 * 7
    assert f"prefill needs {rate / 0.7:.0f} tokens/s" not in got.message


def test_a_fresh_controllers_rate_ramp_is_no_history() -> None:
    # The first rate window (60 s here) of a fresh controller ramps from nothing: it must not read as a trend.
    counts = {"prefill": (1, 1), "decode": (1, 1)}
    state = PolicyState()
    for i, rate in enumerate((1000.0, 2000.0, 3000.0, 4000.0, 4000.0, 4000.0, 4000.0)):
        _, state = run_evaluations({**QUIET, "prompt": rate}, counts, 1, state, T0 + 15 * i,
                                   policy=with_cold_start(300.0))
    rates = learned(state, "prefill").rates
    assert rates
    assert min(t for t, _ in rates) >= T0 + 60
    assert {r for _, r in rates} == {4000.0}


# ----------------------------------------------------------------------------------------- the policy file


def test_validation_names_the_field() -> None:
    doc = policy_doc()
    bad = copy.deepcopy(doc)
    bad["spec"]["signals"][0]["pool"] = "prefil"
    with pytest.raises(ValidationError, match="pool 'prefil' is not a variant"):
        ScalingPolicy.model_validate(bad)
    bad = copy.deepcopy(doc)
    bad["spec"]["target"] = lws("other")
    with pytest.raises(ValidationError, match="must be one of the policy's variants' targets"):
        ScalingPolicy.model_validate(bad)
    bad = copy.deepcopy(doc)
    bad["spec"]["policy"]["decode"]["variants"][0]["target"] = lws("prefill")
    with pytest.raises(ValidationError, match="named by two variants"):
        ScalingPolicy.model_validate(bad)
    bad = copy.deepcopy(doc)
    bad["spec"]["policy"]["chipBudget"] = 8
    with pytest.raises(ValidationError, match="more than chipBudget 8"):
        ScalingPolicy.model_validate(bad)
    bad = copy.deepcopy(doc)
    bad["spec"]["policy"]["prefill"]["variants"][0]["sliceTopology"] = "2x2x"
    with pytest.raises(ValidationError, match="AxB or AxBxC"):
        ScalingPolicy.model_validate(bad)
    bad = copy.deepcopy(doc)
    bad["spec"]["signals"][3]["pool"] = "decode"
    bad["spec"]["policy"] = {"type": "queue", "work": ["gen"], "capacityPerReplica": 1}
    with pytest.raises(ValidationError, match="pool applies to policies with several targets"):
        ScalingPolicy.model_validate(bad)


def test_spec_lists_every_target_primary_first() -> None:
    spec = ScalingPolicy.model_validate(policy_doc(big=True)).spec
    assert [t.ref() for t in spec.targets()] == [DEC, PRE, BIG]
    assert spec.signal_target(spec.signal("prompt")).ref() == PRE
    assert spec.signal_target(spec.signal("gen")).ref() == DEC


# ------------------------------------------------------------------------------------------------ properties

signal_values = st.one_of(st.none(), st.floats(0, 200000))
fractions = st.one_of(st.none(), st.floats(0, 1))
latencies = st.one_of(st.none(), st.floats(0, 5))
group_counts = st.tuples(st.integers(1, 8), st.integers(0, 8)).map(lambda t: (t[0], min(t[0], t[1])))


@st.composite
def situations(draw: st.DrawFn) -> tuple[dict[str, float | None], dict[str, tuple[int, int]]]:
    values = {
        "prompt": draw(signal_values), "pwait": draw(st.one_of(st.none(), st.floats(0, 50))),
        "ttft": draw(latencies), "gen": draw(signal_values), "kv": draw(fractions), "tpot": draw(latencies),
    }
    counts = {"prefill": draw(group_counts), "decode": draw(group_counts)}
    return values, counts


def _unbudgeted(values: dict[str, float | None], counts: dict[str, tuple[int, int]]) -> dict[str, int]:
    decisions, _ = decide(compiled(budget=None, max_replicas=100), observation(values, counts), PolicyState(), T0)
    return {n: d.desired for n, d in scales(decisions).items()}


@given(situations(), st.sampled_from([16, 24, 40, 64, 128]))
def test_no_pool_gets_more_than_its_signals_justify_and_the_budget_holds(
    situation: tuple[dict[str, float | None], dict[str, tuple[int, int]]], budget: int,
) -> None:
    values, counts = situation
    decisions, _ = decide(compiled(budget=budget), observation(values, counts), PolicyState(), T0)
    got = {n: d.desired for n, d in scales(decisions).items()}
    free = _unbudgeted(values, counts)
    for name, count in got.items():
        # The ratio follows the signals: a budget only takes slices away from what each pool's need asks.
        assert count <= max(free[name], counts[name][0]), (name, got, free)
    chips = 8 * sum(got.values())
    grew = any(got[n] > counts[n][0] for n in got)
    assert chips <= budget or not grew, (got, budget)
    assert all(isinstance(n, int) and n >= 0 for n in got.values())


@given(situations(), st.sampled_from([None, 24, 40, 64]))
def test_unknown_data_never_shrinks_a_pool(
    situation: tuple[dict[str, float | None], dict[str, tuple[int, int]]], budget: int | None,
) -> None:
    # With a budget too: the split under pressure must not take a holding pool's slices for the other.
    values, counts = situation
    decisions, _ = decide(compiled(budget=budget, max_replicas=100), observation(values, counts), PolicyState(), T0)
    got = scales(decisions)
    roles = {"prefill": ("prompt", "pwait", "ttft"), "decode": ("gen", "kv", "tpot")}
    for role, names in roles.items():
        if any(values[n] is None for n in names):
            assert got[role].desired >= counts[role][0], (role, values, counts, got[role].message)


@given(situations(), st.integers(0, 6), st.integers(0, 3))
def test_a_grant_never_exceeds_the_chips_free_plus_freed(
    situation: tuple[dict[str, float | None], dict[str, tuple[int, int]]], free_slices: int, jobs: int,
) -> None:
    values, counts = situation
    held = 8 * (counts["prefill"][0] + counts["decode"][0])
    train = training(jobs)
    quota = QuotaStatus("cq", "google.com/tpu", nominal=held + 16 * jobs + 8 * free_slices,
                        reserved=held + 16 * jobs)
    obs = observation(values, counts, training=train, quota=quota)
    decisions, _ = decide(compiled(capacity=True, budget=None, max_replicas=100), obs, PolicyState(), T0)
    got = scales(decisions)
    stopped = sum(d.workload.chips for d in decisions if isinstance(d, TrainingDecision))
    grown = sum(8 * max(0, got[n].desired - counts[n][0]) for n in got)
    shrunk = sum(8 * max(0, counts[n][0] - got[n].desired) for n in got)
    assert grown <= 8 * free_slices + stopped + shrunk
    victims = [d.workload.key for d in decisions if isinstance(d, TrainingDecision)]
    assert len(victims) == len(set(victims))


def test_a_pool_signal_is_combined_over_its_own_pools_pods() -> None:
    # Per-pod samples of the prefill pods: combined with the prefill target's ready pods, not spec.target's.
    from autoscaler.core.model import PodStatus  # noqa: PLC0415

    def pods(prefix: str, n: int) -> tuple[PodStatus, ...]:
        return tuple(PodStatus(f"{prefix}-{i}", True, 600.0) for i in range(n))

    prompt = SignalReading(
        20000.0, T0 - 5, per_replica={"prefill-0": 12000.0, "prefill-1": 8000.0},
        pod_times={"prefill-0": T0 - 5, "prefill-1": T0 - 5},
    )
    readings = {n: SignalReading(v, T0 - 5) for n, v in QUIET.items() if n != "prompt"}
    readings["prompt"] = prompt
    decode = ReplicaStatus(1, 1, pods=pods("decode", 1))
    members = {PRE.key: ReplicaStatus(2, 2, pods=pods("prefill", 2)), DEC.key: decode}
    obs = Observation(DEC, decode, readings, members=members)
    decisions, _ = decide(compiled(), obs, PolicyState(), T0)
    got = scales(decisions)["prefill"]
    assert (got.desired, got.reason) == (4, Reason.SCALE_UP), got.message
    # Three prefill groups ready, two reported: partial data is unknown for the prefill pool (never a smaller
    # number), whatever the decode pool's count is.
    members[PRE.key] = ReplicaStatus(3, 3, pods=pods("prefill", 3))
    obs = Observation(DEC, decode, readings, members=members)
    decisions, _ = decide(compiled(), obs, PolicyState(), T0)
    got = scales(decisions)["prefill"]
    assert got.desired == 3
    assert "unknown: prompt" in got.message
