"""The ``ScalingPolicy`` CustomResourceDefinition (``autoscaler.dev/v1alpha1``), generated from the same models
as ``policies/schema.json``, and the model of its ``status``.

The same YAML is a policy file (``validate``, ``replay``, ``simulate``, ``observe``, ``run --policies``) and a
namespaced object the controller watches. Its ``spec`` schema is the policy models' JSON Schema made
*structural*, as the API server requires of a CRD
(https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#specifying-a-structural-schema):

1. ``$ref`` inlined; ``title``, ``default`` and ``discriminator`` dropped (the controller applies the models'
   defaults; a server-side default would rewrite what users applied);
2. ``anyOf: [X, null]`` becomes ``X`` with ``nullable: true``;
3. a ``oneOf`` of objects (the source and policy types, told apart by ``type``) becomes one object with every
   variant's properties, ``type`` an enum of the variants' values, and the properties all variants require;
4. ``const`` becomes a one-value ``enum``; numeric ``exclusiveMinimum: x`` becomes ``minimum: x`` with
   ``exclusiveMinimum: true`` (OpenAPI v3.0); ``additionalProperties: false`` is dropped (the server prunes
   unknown fields, and ``kubectl apply`` rejects them with its default ``--validate=strict``).

What the schema cannot say (one variant's fields only with its own ``type``, cross-field rules) the
controller checks with the models when it loads the object, and reports in the status (``ScalingActive``
false, reason ``InvalidPolicy``), as ``autoscaler validate`` reports it for a file.

Usage::

    python -m autoscaler.policyfile.crd deploy/base/crd.yaml           # (re)write it
    python -m autoscaler.policyfile.crd --check deploy/base/crd.yaml   # exit 1 when it is out of date
"""

from __future__ import annotations

import argparse
import copy
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field

from autoscaler.core.spec import Spec
from autoscaler.core.specbase import SpecModel

GROUP = "autoscaler.dev"
VERSION = "v1alpha1"
PLURAL = "scalingpolicies"
KIND = "ScalingPolicy"

#: The conditions the controller sets, in the HPA tradition plus ours.
CONDITION_TYPES = (
    "AbleToScale", "ScalingActive", "ScalingLimited", "MetricsKnown", "OwnershipConflict", "TrainingHeldDown",
)


class SignalStatus(SpecModel):
    name: str
    value: float | None = Field(default=None, description="The last value read; absent when unknown.")
    age_seconds: float | None = Field(default=None, description="Age of the sample at the last evaluation.")
    state: str = Field(default="", description="ok, or why the value is unknown (missing, stale, NaN, ...).")


class WorkloadRef(SpecModel):
    namespace: str
    name: str


class Condition(SpecModel):
    type: Literal[
        "AbleToScale", "ScalingActive", "ScalingLimited", "MetricsKnown", "OwnershipConflict", "TrainingHeldDown"
    ]
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str = ""
    last_transition_time: str = Field(description="RFC 3339, when status last changed.")


class TargetStatus(SpecModel):
    """One target of a policy with several targets (type disaggregated): its last decision."""

    target: str = Field(description="Kind/namespace/name.")
    current_replicas: int | None = None
    desired_replicas: int | None = None
    reason: str | None = None
    message: str | None = None


class ScalingPolicyStatus(SpecModel):
    """What the controller last saw and decided, written once per pass (merge patch of ``/status``)."""

    observed_generation: int | None = Field(default=None, description="The metadata.generation acted on.")
    current_replicas: int | None = None
    desired_replicas: int | None = None
    last_scale_time: str | None = Field(default=None, description="RFC 3339, the last scale this controller made.")
    reason: str | None = Field(default=None, description="The last decision's reason (ScaleUp, MetricsUnknown, ...).")
    message: str | None = Field(default=None, description="The last decision's sentence, with its numbers.")
    last_evaluation_time: str | None = None
    signals: list[SignalStatus] = Field(default_factory=list)
    held_workloads: list[WorkloadRef] = Field(
        default_factory=list, description="Training Workloads this policy holds deactivated."
    )
    conditions: list[Condition] = Field(default_factory=list)
    targets: list[TargetStatus] | None = Field(
        default=None,
        description="A policy with several targets: each target's last decision (the fields above are "
        "spec.target's).",
    )


# --- structural schema -------------------------------------------------------------------------------------

_DROP = {"title", "default", "discriminator", "$schema", "$defs"}


def structural(schema: dict[str, Any], defs: dict[str, Any] | None = None) -> dict[str, Any]:
    """``schema`` (pydantic's JSON Schema, with ``$defs``) as a structural OpenAPI v3 schema."""
    defs = schema.get("$defs", {}) if defs is None else defs
    return _convert(schema, defs, depth=0)


def _convert(node: dict[str, Any], defs: dict[str, Any], depth: int) -> dict[str, Any]:
    if depth > 40:
        raise ValueError("schema nests too deeply (a recursive model cannot be a structural schema)")
    if "$ref" in node:
        target = copy.deepcopy(defs[node["$ref"].rsplit("/", 1)[-1]])
        extra = {k: v for k, v in node.items() if k != "$ref"}
        return _convert({**target, **extra}, defs, depth + 1)
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        nullable = len(options) < len(node["anyOf"])
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        one = _convert({**options[0], **rest}, defs, depth + 1) if len(options) == 1 else _union(
            options, rest, defs, depth)
        if nullable:
            one["nullable"] = True
        return one
    if "oneOf" in node:
        return _union(node["oneOf"], {k: v for k, v in node.items() if k != "oneOf"}, defs, depth)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP:
            continue
        if key == "const":
            out["enum"] = [value]
        elif key == "properties":
            out["properties"] = {k: _convert(v, defs, depth + 1) for k, v in value.items()}
        elif key == "items":
            out["items"] = _convert(value, defs, depth + 1)
        elif key == "additionalProperties":
            if isinstance(value, dict):
                out["additionalProperties"] = _convert(value, defs, depth + 1)
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
        else:
            out[key] = copy.deepcopy(value)
    if "enum" in out and "type" not in out:
        kinds = {type(v) for v in out["enum"]}
        out["type"] = "string" if kinds == {str} else "integer" if kinds == {int} else "number"
    if "properties" in out:
        out["type"] = "object"
    return out


def _union(options: list[dict[str, Any]], rest: dict[str, Any], defs: dict[str, Any], depth: int) -> dict[str, Any]:
    variants = [_convert(o, defs, depth + 1) for o in options]
    if not all(v.get("type") == "object" and "properties" in v for v in variants):
        # Scalars of several types: let them through; the models check them.
        return {"x-kubernetes-preserve-unknown-fields": True,
                **({"description": rest["description"]} if "description" in rest else {})}
    merged: dict[str, Any] = {}
    for v in variants:
        for name, prop in v["properties"].items():
            if name in merged and merged[name].get("enum") and prop.get("enum"):
                merged[name] = {**merged[name], "enum": sorted({*merged[name]["enum"], *prop["enum"]})}
            elif name in merged and _shape(merged[name]) != _shape(prop):
                # The same field name with different shapes in two variants: the models decide.
                merged[name] = {"x-kubernetes-preserve-unknown-fields": True}
            else:
                merged.setdefault(name, prop)
    required = set.intersection(*(set(v.get("required", [])) for v in variants))
    out: dict[str, Any] = {"type": "object", "properties": dict(sorted(merged.items()))}
    if required:
        out["required"] = sorted(required)
    if "description" in rest:
        out["description"] = rest["description"]
    return out


def _shape(schema: Any) -> Any:
    """A schema without its descriptions: two variants' fields that differ only in wording are one field."""
    if isinstance(schema, dict):
        return {k: _shape(v) for k, v in schema.items() if k != "description"}
    if isinstance(schema, list):
        return [_shape(v) for v in schema]
    return schema


def generate() -> dict[str, Any]:
    spec = structural(Spec.model_json_schema(by_alias=True, mode="validation"))
    status = structural(ScalingPolicyStatus.model_json_schema(by_alias=True, mode="validation"))
    status.pop("required", None)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {"kind": KIND, "listKind": f"{KIND}List", "plural": PLURAL, "singular": "scalingpolicy",
                      "shortNames": ["sp"], "categories": ["autoscaler"]},
            "scope": "Namespaced",
            "versions": [{
                "name": VERSION,
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Target", "type": "string", "jsonPath": ".spec.target.name"},
                    {"name": "Current", "type": "integer", "jsonPath": ".status.currentReplicas"},
                    {"name": "Desired", "type": "integer", "jsonPath": ".status.desiredReplicas"},
                    {"name": "Reason", "type": "string", "jsonPath": ".status.reason"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                ],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "description": "A scaling policy: what to scale, on which signals, how; the same document "
                                   "as a policy file (docs/policies.md).",
                    "required": ["spec"],
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"type": "object"},
                        "spec": spec,
                        "status": status,
                    },
                }},
            }],
        },
    }


HEADER = (
    "# GENERATED by `python -m autoscaler.policyfile.crd deploy/base/crd.yaml` from the policy models\n"
    "# (autoscaler.core.spec) and the status model (autoscaler.policyfile.crd): do not edit.\n"
)


def render() -> str:
    return HEADER + yaml.safe_dump(generate(), sort_keys=False, width=120, allow_unicode=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m autoscaler.policyfile.crd",
        description="Write (or check) the ScalingPolicy CustomResourceDefinition.",
    )
    parser.add_argument("path", help="the CRD file, e.g. deploy/base/crd.yaml; '-' prints it")
    parser.add_argument("--check", action="store_true", help="exit 1 when the file differs from the models")
    args = parser.parse_args(argv)
    text = render()
    if args.path == "-":
        sys.stdout.write(text)
        return 0
    path = Path(args.path)
    if args.check:
        try:
            current = path.read_text(encoding="utf-8")
        except OSError as exc:
            print(f"{path}: cannot read ({exc.strerror or exc}); generate it with: "
                  f"python -m autoscaler.policyfile.crd {path}")
            return 1
        if current != text:
            print(f"{path} is out of date with the models; regenerate it with: "
                  f"python -m autoscaler.policyfile.crd {path}")
            return 1
        print(f"{path}: up to date")
        return 0
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
