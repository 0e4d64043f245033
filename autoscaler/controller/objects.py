"""``ScalingPolicy`` objects: the controller watches them (hot reload is the watch) and writes their status.

1. ``PolicyObjects.on_event`` keeps the watched objects; each becomes one entry of ``PolicyStore.objects``
   (the object's ``apiVersion``, ``kind``, ``metadata.name`` and ``spec`` as YAML), so an object goes through
   exactly the validation, compilation and last-good rules of a file. A status-only change (our own write)
   changes nothing there.
2. An object acts only in its own namespace: ``spec.target.namespace`` defaults to it, and a target or
   preemptible training in another namespace is refused (whoever may create a ScalingPolicy in namespace A
   must not scale workloads of namespace B through the controller's rights).
3. ``StatusWriter.write`` runs after each pass: per object, the status (``policyfile.crd.ScalingPolicyStatus``)
   from the policy's last evaluation, or the reason it was rejected; one merge patch of ``/status`` per object
   whose status changed, only while leading; a condition's ``lastTransitionTime`` moves only when its
   status does. It runs after every probe chunk too, so only the objects whose inputs moved (a new
   evaluation, generation, refusal or conflict) are built again.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from kubernetes_asyncio import client

from autoscaler.controller.kube import call
from autoscaler.controller.loop import Outcome
from autoscaler.controller.observer import WatchSpec
from autoscaler.controller.reload import PolicyStore
from autoscaler.core.model import Reason, ScaleDecision, TrainingAction, TrainingDecision
from autoscaler.policyfile import crd, scalars

#: Reasons that mean the count was held at a bound or by a limit (HPA's ScalingLimited).
LIMITED = frozenset({Reason.LIMITED_BY_MAX, Reason.LIMITED_BY_MIN, Reason.RATE_LIMITED, Reason.WAITING_FOR_CAPACITY,
                     Reason.WAITING_FOR_ADMISSION})


def source_name(namespace: str, name: str) -> str:
    """How an object is named in the store, logs and problems."""
    return f"{crd.KIND} {namespace}/{name}"


def watch_specs(namespaces: list[str]) -> set[WatchSpec]:
    """One watch per listed namespace (a namespaced install), else one over every namespace."""
    return {WatchSpec(crd.GROUP, crd.VERSION, crd.PLURAL, ns) for ns in (namespaces or [""])}


def _rfc3339(unix: float) -> str:
    return datetime.datetime.fromtimestamp(unix, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class ObjectRef:
    namespace: str
    name: str
    generation: int


@dataclass
class PolicyObjects:
    """The watched ScalingPolicy objects, mirrored into ``store.objects``."""

    store: PolicyStore
    refs: dict[str, ObjectRef] = field(default_factory=dict)  # source name -> the object
    problems: dict[str, str] = field(default_factory=dict)  # source name -> why it was refused before loading

    def on_event(self, type_: str, obj: dict[str, Any]) -> bool:
        """Apply one watch event; True when the policies may have changed (the caller reloads)."""
        meta = obj.get("metadata") or {}
        ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        source = source_name(ns, name)
        if type_ == "DELETED":
            self.refs.pop(source, None)
            self.problems.pop(source, None)
            return self.store.objects.pop(source, None) is not None
        self.refs[source] = ObjectRef(ns, name, int(meta.get("generation") or 0))
        doc = document(obj)
        if doc.problem:
            # Refused before loading: it must not act on an earlier version either.
            self.problems[source] = doc.problem
            return self.store.objects.pop(source, None) is not None
        self.problems.pop(source, None)
        if self.store.objects.get(source) == doc.text:
            return False  # a status or metadata change: nothing to reload
        self.store.objects[source] = doc.text
        return True

    def policy_source(self, policy: str) -> str | None:
        """The object a loaded policy came from (None: a file)."""
        for source, cps in self.store.good().items():
            if source in self.refs and any(cp.name == policy for cp in cps):
                return source
        return None


@dataclass(frozen=True, slots=True)
class Document:
    """A ScalingPolicy object as a policy document (``text``), or why it may not act (``problem``; else "")."""

    text: str
    problem: str = ""


def document(obj: dict[str, Any]) -> Document:
    """The object as a policy document, and a problem when it may not act (another namespace)."""
    meta = obj.get("metadata") or {}
    ns = str(meta.get("namespace", ""))
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return Document("", "spec is missing")
    spec = dict(spec)
    target = spec.get("target")
    if isinstance(target, dict):
        target = dict(target)
        target.setdefault("namespace", ns)
        spec["target"] = target
        if target["namespace"] != ns:
            return Document("", f"spec.target.namespace {target['namespace']!r} is not the object's namespace "
                                f"{ns!r}: a ScalingPolicy acts only in its own namespace")
    problem = _pool_targets_here(spec, ns)
    if problem:
        return Document("", problem)
    for i, p in enumerate(spec.get("preemptible") or []):
        if isinstance(p, dict) and p.get("namespace", ns) != ns:
            return Document("", f"spec.preemptible[{i}].namespace {p.get('namespace')!r} is not the object's "
                                f"namespace {ns!r}: a ScalingPolicy acts only in its own namespace")
    doc = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": {"name": meta.get("name")},
           "spec": spec}
    return Document(scalars.dump(doc))  # read back by the loader to the object's own values


def _pool_targets_here(spec: dict[str, Any], ns: str) -> str:
    """A policy with several targets (type disaggregated): every variant's target defaults to the object's
    namespace and may not name another (rule 2 above, for each target). Edits ``spec`` in place (a copy)."""
    policy = spec.get("policy")
    if not isinstance(policy, dict) or policy.get("type") != "disaggregated":
        return ""
    policy = dict(policy)
    spec["policy"] = policy
    for role in ("prefill", "decode"):
        block = policy.get(role)
        if not isinstance(block, dict) or not isinstance(block.get("variants"), list):
            continue
        block = dict(block)
        policy[role] = block
        variants = []
        for i, given in enumerate(block["variants"]):
            variant = given
            if isinstance(given, dict) and isinstance(given.get("target"), dict):
                target = {"namespace": ns, **given["target"]}
                variant = {**given, "target": target}
                if target["namespace"] != ns:
                    return (f"spec.policy.{role}.variants[{i}].target.namespace {target['namespace']!r} is not the "
                            f"object's namespace {ns!r}: a ScalingPolicy acts only in its own namespace")
            variants.append(variant)
        block["variants"] = variants
    return ""


class _Inputs(NamedTuple):
    """What an object's status is built from (``StatusWriter.status``), besides the clock (times only) and the
    held Workloads and last scale time, which move only with a new outcome."""

    ref: ObjectRef
    problem: str | None
    rejection: str | None
    policy: str | None
    conflict: str | None
    #: Compared by identity (``_same``): a new evaluation is a new ``Outcome``, even with equal fields.
    outcome: Outcome | None
    compiled: object | None


def _same(before: _Inputs | None, now: _Inputs) -> bool:
    """Whether an object's status inputs did not move: the values equal, the outcome and compiled policy the
    very same objects."""
    return (
        before is not None and before.outcome is now.outcome and before.compiled is now.compiled
        and before.ref == now.ref and before.problem == now.problem and before.rejection == now.rejection
        and before.policy == now.policy and before.conflict == now.conflict
    )


@dataclass
class StatusWriter:
    """Writes each object's status after a pass (see the module docstring)."""

    api: client.ApiClient
    objects: PolicyObjects
    outcomes: dict[str, Outcome]
    wall: Callable[[], float]
    leading: Callable[[], bool]
    written: dict[str, dict[str, Any]] = field(default_factory=dict)  # source -> the status last written
    last_scale: dict[str, str] = field(default_factory=dict)  # source -> RFC 3339
    held: dict[str, dict[str, tuple[str, str]]] = field(default_factory=dict)  # source -> uid -> (ns, name)
    patches: int = 0
    #: Per object, what its status was last built from (``_Inputs``): an object whose inputs did not move has
    #: the status last written, and is not built again.
    built_from: dict[str, _Inputs] = field(default_factory=dict)

    async def write(self, _evaluated: list[str] | None = None) -> None:
        """Patch every object whose status changed (counted in ``patches``).

        Only the objects whose status inputs moved since the last write are built again (``_Inputs``: the
        object's generation, why it was refused or rejected, its policy, that policy's ownership conflict,
        compiled policy and last outcome, the last two by identity: every evaluation makes a new ``Outcome``).
        This runs after every pass **and every probe chunk**; building all 5,000 statuses each time (a pydantic
        model and its dump per object) cost ≈ 0.19 s of CPU per call with nothing to patch (2026-12-02 02:33
        UTC, load 3.7), twenty calls per probe round, several times the round's own CPU."""
        if not self.leading():
            return
        now = self.wall()
        by_source = self._policies_by_source()
        problems, store, outcomes = self.objects.problems, self.objects.store, self.outcomes
        built_from = self.built_from
        moved: dict[str, _Inputs] = {}  # the objects to build again: source -> what from
        for source, ref in self.objects.refs.items():
            policy = by_source.get(source)
            conflict = store.conflicts.get(policy) if policy is not None else None
            inputs = _Inputs(
                ref, problems.get(source), store.rejections.get(source), policy,
                None if conflict is None else conflict.message,
                outcomes.get(policy) if policy is not None else None,
                store.policies.get(policy) if policy is not None else None,
            )
            if source not in self.written or not _same(built_from.get(source), inputs):
                moved[source] = inputs
        for source in sorted(moved):
            inputs, ref = moved[source], moved[source].ref
            previous = self.written.get(source)
            status = self.status(source, ref, inputs.policy, now)
            status["conditions"] = _keep_transitions(status["conditions"], (previous or {}).get("conditions", []))
            if previous is not None and _without_times(previous) == _without_times(status):
                self.built_from[source] = inputs
                continue
            body = {"status": {**_unset(status), **status}}
            custom: Any = client.CustomObjectsApi(self.api)
            await call(custom.patch_namespaced_custom_object_status(
                crd.GROUP, crd.VERSION, ref.namespace, crd.PLURAL, ref.name, body,
                _content_type="application/merge-patch+json",
            ))
            self.written[source] = status
            self.built_from[source] = inputs
            self.patches += 1
        for gone in set(self.written) - set(self.objects.refs):
            self.written.pop(gone, None)
            self.built_from.pop(gone, None)

    def _policies_by_source(self) -> dict[str, str]:
        return {source: cp.name for source, cps in self.objects.store.good().items() if source in self.objects.refs
                for cp in cps}

    def status(self, source: str, ref: ObjectRef, policy: str | None, now: float) -> dict[str, Any]:
        stamp = _rfc3339(now)
        rejection = self.objects.problems.get(source) or self.objects.store.rejections.get(source)
        outcome = self.outcomes.get(policy) if policy is not None else None
        if rejection is not None:
            kept = "; the last good version stays in force" if policy is not None else ""
            return crd.ScalingPolicyStatus(
                observed_generation=ref.generation, reason="InvalidPolicy", message=rejection + kept,
                conditions=[_cond("ScalingActive", "False", "InvalidPolicy", rejection + kept, stamp)],
            ).model_dump(by_alias=True, exclude_none=True)
        conflict = self.objects.store.conflicts.get(policy) if policy is not None else None
        if conflict is not None:  # held by the one-owner-per-target rule (controller.reload): never evaluated
            held_msg = f"held, not evaluated: {conflict.message}"
            return crd.ScalingPolicyStatus(
                observed_generation=ref.generation, reason="OwnershipConflict", message=held_msg,
                conditions=[_cond("ScalingActive", "False", "OwnershipConflict", held_msg, stamp),
                            _cond("OwnershipConflict", "True", "OwnershipConflict", held_msg, stamp)],
            ).model_dump(by_alias=True, exclude_none=True)
        if outcome is None:
            return crd.ScalingPolicyStatus(
                observed_generation=ref.generation,
                conditions=[_cond("ScalingActive", "Unknown", "NotEvaluatedYet", "no evaluation yet", stamp)],
            ).model_dump(by_alias=True, exclude_none=True)
        scales = [d for d in outcome.decisions if isinstance(d, ScaleDecision)]
        # The top-level fields are spec.target's decision (the first for a single-target policy); a policy
        # with several targets lists every target's under `targets`.
        primary = self.objects.store.policies.get(policy or "")
        primary_key = primary.policy.spec.target.ref().key if primary is not None else None
        scale = next((d for d in scales if d.target.key == primary_key), scales[0] if scales else None)
        per_target = [
            crd.TargetStatus(target=d.target.key, current_replicas=d.current, desired_replicas=d.desired,
                             reason=d.reason.value, message=d.message)
            for d in scales
        ] if len(scales) > 1 else None
        if "scale" in outcome.acted:
            self.last_scale[source] = stamp
        held = self.held.setdefault(source, {})
        if outcome.observation is not None:
            for w in outcome.observation.training:
                if w.deactivated_by_us and not w.active:
                    held[w.uid or w.key] = (w.namespace, w.name)
                else:
                    held.pop(w.uid or w.key, None)
        for d in outcome.decisions:  # what this pass did, which the observation predates
            if isinstance(d, TrainingDecision) and d.action.value in outcome.acted:
                key = d.workload.uid or d.workload.key
                if d.action is TrainingAction.DEACTIVATE:
                    held[key] = (d.workload.namespace, d.workload.name)
                else:
                    held.pop(key, None)
        conditions = _conditions(outcome, scale, bool(held), stamp)
        signals = [
            crd.SignalStatus(name=s.name, value=s.value, age_seconds=None if s.age_s is None else round(s.age_s, 1),
                             state=s.state.value if s.ok else (s.reason or s.state.value))
            for s in (scale.signals.values() if scale is not None else ())
        ]
        return crd.ScalingPolicyStatus(
            observed_generation=ref.generation,
            current_replicas=scale.current if scale is not None else None,
            desired_replicas=scale.desired if scale is not None else None,
            last_scale_time=self.last_scale.get(source),
            reason=scale.reason.value if scale is not None else ("Error" if outcome.error else None),
            message=scale.message if scale is not None else outcome.error,
            last_evaluation_time=stamp,
            signals=signals,
            held_workloads=[crd.WorkloadRef(namespace=a, name=b) for a, b in sorted(held.values())],
            conditions=conditions,
            targets=per_target,
        ).model_dump(by_alias=True, exclude_none=True)


def _cond(type_: str, status: str, reason: str, message: str, stamp: str) -> crd.Condition:
    return crd.Condition.model_validate(
        {"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": stamp}
    )


def _conditions(outcome: Outcome, scale: ScaleDecision | None, held: bool, stamp: str) -> list[crd.Condition]:
    out = []
    if outcome.refused:
        out.append(_cond("AbleToScale", "False", "OwnershipConflict", outcome.error or "", stamp))
    elif outcome.error and outcome.error.startswith(("scale", "deactivate", "reactivate")):
        out.append(_cond("AbleToScale", "False", "FailedUpdateScale", outcome.error, stamp))
    else:
        out.append(_cond("AbleToScale", "True", "SucceededRescale" if "scale" in outcome.acted else "ReadyForNewScale",
                         "the target's scale can be read and written", stamp))
    if scale is None:
        out.append(_cond("ScalingActive", "False", "FailedGetObservation", outcome.error or "no decision", stamp))
    elif scale.reason is Reason.SCALING_DISABLED:
        out.append(_cond("ScalingActive", "False", "ScalingDisabled", scale.message, stamp))
    else:
        out.append(_cond("ScalingActive", "True", "ValidMetricFound", "the policy computes a replica count", stamp))
    if scale is not None and scale.reason in LIMITED:
        out.append(_cond("ScalingLimited", "True", scale.reason.value, scale.message, stamp))
    else:
        out.append(_cond("ScalingLimited", "False", "DesiredWithinRange", "the desired count is within limits", stamp))
    unknown = [s.name for s in (scale.signals.values() if scale is not None else ()) if not s.ok]
    if scale is None:
        out.append(_cond("MetricsKnown", "Unknown", "NotObserved", outcome.error or "", stamp))
    elif unknown:
        out.append(_cond("MetricsKnown", "False", "MetricsUnknown",
                         f"unknown: {', '.join(sorted(unknown))}; the count holds (unknown is never idle)", stamp))
    else:
        out.append(_cond("MetricsKnown", "True", "AllSignalsKnown", "every signal has a fresh value", stamp))
    out.append(_cond("OwnershipConflict", "True" if outcome.refused else "False",
                     "OwnershipConflict" if outcome.refused else "NoConflict",
                     outcome.error or "" if outcome.refused else "no other autoscaler owns the target", stamp))
    out.append(_cond("TrainingHeldDown", "True" if held else "False",
                     "DeactivateTraining" if held else "NoTrainingHeld",
                     "training Workloads are deactivated for serving" if held else "no training is held down",
                     stamp))
    return out


def _keep_transitions(new: list[dict[str, Any]], old: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A condition's lastTransitionTime changes only when its status changes (the Kubernetes convention)."""
    before = {c["type"]: c for c in old}
    out = []
    for cond in new:
        prev = before.get(cond["type"])
        same = prev is not None and prev["status"] == cond["status"]
        out.append({**cond, "lastTransitionTime": prev["lastTransitionTime"]} if same and prev else cond)
    return out


#: The status fields a pass may leave unset, by their wire names; ``lastScaleTime`` is not one of them: it is a
#: fact about the past (the last scale this controller made), kept until the next scale replaces it.
_PASS_FIELDS = tuple(
    f.alias or name for name, f in crd.ScalingPolicyStatus.model_fields.items() if f.alias != "lastScaleTime"
)


def _unset(status: dict[str, Any]) -> dict[str, None]:
    """A ``null`` for each field of the last pass that ``status`` does not set. The status is written as a JSON
    merge patch (RFC 7386), in which an absent key keeps the stored value and only ``null`` deletes it: without
    these, a policy that turned invalid kept its old ``currentReplicas``/``desiredReplicas`` and a policy that
    went from several targets to one kept its old ``targets`` list beside the new decision."""
    return {name: None for name in _PASS_FIELDS if name not in status}


def _without_times(status: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in status.items() if k != "lastEvaluationTime"}
