"""The ScalingPolicy CRD: generated from the policy models (drift-checked), structural as the API server
requires, valid as a CustomResourceDefinition, and every shipped policy file is also a valid object of it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from autoscaler.policyfile import crd
from tests.kube.schema import as_json_schema

ROOT = Path(__file__).resolve().parents[2]
CRD_FILE = ROOT / "deploy" / "base" / "crd.yaml"
POLICY_FILES = sorted((ROOT / "policies").glob("*.yaml"))
_TYPED_ESCAPES = ("x-kubernetes-preserve-unknown-fields", "x-kubernetes-int-or-string")


def _schema() -> dict[str, Any]:
    (version,) = crd.generate()["spec"]["versions"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def structural_problems(node: dict[str, Any], path: str = "") -> list[str]:
    """The API server's structural-schema rules this generator must meet (a subset: what it could break)."""
    out = []
    if "$ref" in node or "oneOf" in node or "anyOf" in node or "allOf" in node:
        out.append(f"{path}: $ref/oneOf/anyOf/allOf")
    if "type" not in node and not any(node.get(k) for k in _TYPED_ESCAPES):
        out.append(f"{path}: no type")
    if "properties" in node and "additionalProperties" in node:
        out.append(f"{path}: properties with additionalProperties")
    if node.get("additionalProperties") is False:
        out.append(f"{path}: additionalProperties: false")
    for key in ("default", "title", "const", "discriminator"):
        if key in node:
            out.append(f"{path}: {key}")
    for name, prop in (node.get("properties") or {}).items():
        out.extend(structural_problems(prop, f"{path}.{name}"))
    if isinstance(node.get("items"), dict):
        out.extend(structural_problems(node["items"], f"{path}[]"))
    if isinstance(node.get("additionalProperties"), dict):
        out.extend(structural_problems(node["additionalProperties"], f"{path}{{}}"))
    return out


def _as_json_schema(node: Any) -> Any:
    return as_json_schema(node)


def test_the_checked_in_crd_is_generated_from_the_models() -> None:
    assert CRD_FILE.read_text() == crd.render(), "regenerate: python -m autoscaler.policyfile.crd deploy/base/crd.yaml"
    assert crd.main(["--check", str(CRD_FILE)]) == 0


def test_the_drift_check_fails_on_a_stale_file(tmp_path: Path) -> None:
    stale = tmp_path / "crd.yaml"
    stale.write_text(CRD_FILE.read_text().replace("minItems: 1", "minItems: 2", 1))
    assert crd.main(["--check", str(stale)]) == 1


def test_the_schema_is_structural() -> None:
    assert structural_problems(_schema()) == []
    broken = {"type": "object", "properties": {"a": {"anyOf": [{"type": "string"}, {"type": "integer"}]}}}
    assert structural_problems(broken) == [".a: $ref/oneOf/anyOf/allOf", ".a: no type"]


def test_the_crd_is_a_valid_custom_resource_definition() -> None:
    kubernetes_validate.validate(crd.generate(), "1.31.0", strict=True)


def test_status_subresource_and_printer_columns() -> None:
    (version,) = crd.generate()["spec"]["versions"]
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns == {"Target": ".spec.target.name", "Current": ".status.currentReplicas",
                       "Desired": ".status.desiredReplicas", "Reason": ".status.reason",
                       "Age": ".metadata.creationTimestamp"}
    status = _schema()["properties"]["status"]["properties"]
    for field in ("observedGeneration", "currentReplicas", "desiredReplicas", "lastScaleTime", "reason", "message",
                  "signals", "heldWorkloads", "conditions"):
        assert field in status
    assert status["conditions"]["items"]["properties"]["type"]["enum"] == list(crd.CONDITION_TYPES)


@pytest.mark.parametrize("path", POLICY_FILES, ids=lambda p: p.name)
def test_every_policy_file_is_also_a_valid_object(path: Path) -> None:
    schema = _as_json_schema(_schema())
    for doc in yaml.safe_load_all(path.read_text()):
        if doc and doc.get("kind") == "ScalingPolicy":
            jsonschema.validate(doc, schema)


@pytest.mark.parametrize(
    ("change", "where"),
    [
        pytest.param(lambda s: s["policy"].update(type="nope"), "type", id="unknown-policy-type"),
        pytest.param(lambda s: s.update(minReplicas=-1), "minReplicas", id="negative-min"),
        pytest.param(lambda s: s.update(bogus=1), "bogus", id="unknown-field"),
        pytest.param(lambda s: s["target"].pop("name"), "name", id="missing-target-name"),
    ],
)
def test_the_schema_rejects_bad_objects(change: Any, where: str) -> None:
    doc = yaml.safe_load((ROOT / "policies" / "recommended.yaml").read_text())
    change(doc["spec"])
    with pytest.raises(jsonschema.ValidationError, match=where):
        jsonschema.validate(doc, _as_json_schema(_schema()))
