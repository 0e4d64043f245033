"""The cluster actuator the loop calls: scale decisions go to ``targets``, training decisions to ``workloads``.

``refusals`` are the errors that mean "not ours to change" (another autoscaler owns the target; a Workload
that cannot be found again); the loop reports them as Warning Events instead of retrying.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from kubernetes_asyncio import client

from autoscaler.controller.kube import DEFAULT_RETRY, Refusal, RetryPolicy
from autoscaler.controller.targets import KubeTargets, ScaleResult
from autoscaler.controller.workloads import KueueGate
from autoscaler.core.engine import CompiledPolicy
from autoscaler.core.model import ScaleDecision, TrainingDecision


class KubeActuator:
    refusals: tuple[type[BaseException], ...] = (Refusal,)

    def __init__(
        self, api: client.ApiClient, *, retry: RetryPolicy = DEFAULT_RETRY, now: Callable[[], float] = time.time
    ) -> None:
        self.targets = KubeTargets(api, retry=retry, now=now)
        self.gate = KueueGate(api, retry=retry, now=now)

    async def scale(self, policy: CompiledPolicy, decision: ScaleDecision) -> ScaleResult:
        return await self.targets.scale(policy, decision)

    async def check_scale(self, policy: CompiledPolicy, decision: ScaleDecision) -> ScaleResult:
        """The scale as a server-side dry run (``dryRun=All``): ownership, RBAC, admission, nothing stored."""
        return await self.targets.scale(policy, decision, dry_run=True)

    async def training(self, policy: CompiledPolicy, decision: TrainingDecision) -> bool:
        return await self.gate.apply(policy, decision)
