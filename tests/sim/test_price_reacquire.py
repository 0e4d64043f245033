"""``scaleDown.priceReacquire`` in the closed loop (tests/core/test_slo_reacquire.py has the rule on its own numbers).

The held-out slow ramp (``bench.synthetic``, seed 2) on the TGI cluster: 16 GPUs shared with six 2-GPU trainers
that the arbitration may stop at most twice an hour each (``maxPreemptionsPerHour`` 2, the default). Early in the
ramp the recommended policy releases replicas and takes them back; each release resumes a trainer on the chips and
each return stops one. Without the rule, the trainers resumed first run out of stops, and when the ramp's top
needs 7-8 replicas only 5 can be had (``WaitingForCapacity`` for the rest of the hour: docs/slo.md Session 25,
collapse 0). With it, a release that would resume a trainer with its stops spent waits for evidence spanning the
time the replica would take to come back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autoscaler.core.engine import CompiledPolicy, Decided, compile_policy
from autoscaler.core.model import Observation, PolicyState
from autoscaler.core.spec import ScalingPolicy
from autoscaler.policyfile.loader import load_file
from autoscaler.sim import cluster as cluster_mod
from autoscaler.sim import oracle, traces
from autoscaler.sim.simulation import PolicyController, Simulation
from bench import synthetic

ROOT = Path(__file__).resolve().parents[2]


class Tap:
    """The compiled policy, keeping the message of every evaluation's scale decision (it changes nothing)."""

    def __init__(self, compiled: CompiledPolicy) -> None:
        self.compiled = compiled
        self.messages: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.compiled, name)

    def decide(self, observation: Observation, state: PolicyState, now: float) -> Decided:
        decided = self.compiled.decide(observation, state, now)
        self.messages.append(decided.decisions[0].message)
        return decided


def _run(tmp_path: Path, *, option: bool) -> tuple[float, list[str]]:
    path = synthetic.write_held_out(tmp_path, "tgi", ("slow-ramp@seed2",))["slow-ramp@seed2"]
    doc = load_file(ROOT / "policies" / "recommended.yaml")[0].model_dump(mode="json", by_alias=True,
                                                                          exclude_none=True)
    doc["spec"]["policy"].setdefault("scaleDown", {})["priceReacquire"] = option
    pol = ScalingPolicy.model_validate(doc)
    cl = cluster_mod.load(None)
    tap = Tap(compile_policy(pol))
    pc = PolicyController(tap, cl.pipeline_for(pol.metadata.name), "default")  # type: ignore[arg-type]
    trace = traces.reshape(traces.load(path), time_scale=1.0, rate_scale=1.0, duration_s=3600.0, start_s=0.0, seed=0)
    # One replica at the start, as the grid's warm start has it on this trace (the oracle's fleet at time 0).
    res = Simulation(cluster=cl, trace=trace, controller=pc, initial_replicas=1).run()
    return oracle.attainment(res, cl.spec.slo.ttft_seconds), tap.messages


@pytest.mark.parametrize("option", [True, False], ids=["priceReacquire", "as-before"])
def test_releases_the_preemption_budget_could_not_buy_back_are_kept_on_a_slow_ramp(
    tmp_path: Path, option: bool
) -> None:
    attainment, messages = _run(tmp_path, option=option)
    spent = [m for m in messages if "maxPreemptionsPerHour 2" in m and "even with all eligible training stopped" in m]
    if not option:
        # The premise: the budget spent on the early releases leaves the ramp's top short of replicas.
        assert spent, "without the rule the trainers' stops run out"
        assert attainment < 0.9
        return
    assert spent == []
    assert attainment >= 0.99
    assert any("the preemption budget could not buy it back" in m for m in messages)
