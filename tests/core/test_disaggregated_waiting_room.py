"""The ``disaggregated`` type's fit check sees the blocks as the grant does (``arbitration.sliced_view``): a
group of the policy's own that waits for Kueue's admission takes its place before any new group is counted on
one, so the plan never asks for a group on a place the waiting one will take."""

from __future__ import annotations

import dataclasses

from autoscaler.core.engine import compile_policy, decide
from autoscaler.core.model import (
    Decision,
    PolicyState,
    QuotaStatus,
    ReplicaStatus,
    TrainingDecision,
    TrainingWorkload,
)
from autoscaler.core.spec import ScalingPolicy
from tests.core.test_disaggregated import (
    DEC,
    PRE,
    QUIET,
    SETTLED,
    T0,
    full_block,
    observation,
    policy_doc,
    scales,
    training,
)


def held(jobs: tuple[TrainingWorkload, ...]) -> QuotaStatus:
    """``full_block``'s block, the ClusterQueue's reservation what its groups and jobs hold (8 chips each)."""
    return dataclasses.replace(full_block(jobs), reserved=8 * (2 + len(jobs)))


def _prefill_waiting_decode_asking(jobs: int) -> list[Decision]:
    """One 4x4x4 block with a prefill and a decode group and ``jobs`` 8-chip training jobs that may not stop yet
    (resumed 10 s ago, ``minRunSeconds`` 600); prefill's second group waits for admission (gated), and decode's
    2,500 generated tokens/s need a second group."""
    doc = policy_doc(capacity=True, budget=None)
    doc["spec"]["capacity"]["minRunSeconds"] = 600
    pol = compile_policy(ScalingPolicy.model_validate(doc))
    running = tuple(dataclasses.replace(w, resumed_at=T0 - 10) for w in training(jobs, chips=8))
    obs = observation({**QUIET, "gen": 2500.0}, {"prefill": (2, 1), "decode": (1, 1)}, training=running,
                      quota=held(running))
    members = dict(obs.members)
    members[PRE.key] = ReplicaStatus(2, 1, gated=1)
    obs = dataclasses.replace(obs, members=members, replicas=members[DEC.key])
    decisions, _ = decide(pol, obs, PolicyState(), T0)
    return decisions


def test_a_new_group_is_not_counted_on_the_place_a_group_waiting_for_admission_takes() -> None:
    # One 4x4x4 block: a prefill and a decode group, five training jobs that may not stop yet (minRunSeconds),
    # one 2x2x2 place free. Prefill's second group waits for admission: the free place is the one Kueue gives
    # it. Decode's 2,500 generated tokens/s need 3,571 of 2,000-per-group capacity: a second group, which has no
    # place left, so the plan holds decode at one group and says why (before: it asked for the second on the
    # free place, and the grant, placing both in target order, gave it to decode, leaving prefill's waiting).
    decisions = _prefill_waiting_decode_asking(jobs=5)
    got = scales(decisions)
    assert got["decode"].desired == 1, got["decode"].message
    assert "does not fit as whole slices in the blocks" in got["decode"].message
    assert got["prefill"].desired == 2
    assert not [d for d in decisions if isinstance(d, TrainingDecision)]


def test_with_the_waiting_group_placed_a_new_group_still_fits_where_a_second_place_is_free() -> None:
    # The same block with four jobs: two places free, one for prefill's waiting group, one for decode's new.
    decisions = _prefill_waiting_decode_asking(jobs=4)
    got = scales(decisions)
    assert got["decode"].desired == 2, got["decode"].message
    assert got["prefill"].desired == 2


def test_a_group_waiting_where_nothing_is_free_never_stops_the_other_role_shrinking() -> None:
    # Every place held (decode's three groups, prefill's one, four jobs that may not stop yet) and prefill's
    # second group waiting for admission: it has no place. Decode's quiet load needs two groups (KV use 0.3 of
    # three groups at target 0.8: 2,250 tokens/s): a shrink adds no group, so it needs no place, and it goes
    # through (a fit check that placed the waiting group first even for a mix adding nothing would find no mix
    # placeable and hold decode at three).
    doc = policy_doc(capacity=True, budget=None)
    doc["spec"]["capacity"]["minRunSeconds"] = 600
    pol = compile_policy(ScalingPolicy.model_validate(doc))
    jobs = tuple(dataclasses.replace(w, resumed_at=T0 - 10) for w in training(6, chips=8))
    obs = observation(QUIET, {"prefill": (2, 1), "decode": (3, 3)}, training=jobs, quota=held(jobs))
    members = dict(obs.members)
    members[PRE.key] = ReplicaStatus(2, 1, gated=1)
    obs = dataclasses.replace(obs, members=members, replicas=members[DEC.key])
    decisions, _ = decide(pol, obs, SETTLED, T0)
    got = scales(decisions)
    assert got["decode"].desired == 2, got["decode"].message
