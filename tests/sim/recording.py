"""A simulator policy controller that keeps what each evaluation saw and learned, shared by the closed-loop tests
of ``waitForAdmission`` (``slo`` in test_wait_for_admission.py, ``disaggregated`` in
test_disaggregated_admission_slots.py). It changes nothing: it calls the simulator's own ``_decide_and_apply``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from autoscaler.core.model import Observation
from autoscaler.sim.simulation import PolicyController, Simulation


class Seen(NamedTuple):
    """One evaluation: the watched target's replicas waiting for admission and starting, and the utilization the
    policy had learned before and after it."""

    now: float
    gated: int
    starting: int
    before: float | None
    after: float | None


class Counts(NamedTuple):
    """The watched target's replicas (or groups) waiting for admission and starting, as the Observation gave them."""

    gated: int
    starting: int


class Recording(PolicyController):
    """The simulator's policy controller, recording a ``Seen`` per evaluation: ``learned`` reads the utilization
    from the policy's state, ``counts`` the watched target's replicas from the Observation."""

    def __init__(self, *args: Any, learned: Callable[[PolicyController], float | None],
                 counts: Callable[[Observation], Counts], **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.seen: list[Seen] = []
        self._learned = learned
        self._counts = counts

    def _decide_and_apply(self, sim: Simulation, obs: Observation, now: float, pool_of: Any) -> None:
        before = self._learned(self)
        super()._decide_and_apply(sim, obs, now, pool_of)
        gated, starting = self._counts(obs)
        self.seen.append(Seen(now, gated, starting, before, self._learned(self)))
