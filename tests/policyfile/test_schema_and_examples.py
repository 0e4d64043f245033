"""The checked-in JSON Schema matches the models, accepts every shipped example and rejects what the models
reject; every file in ``policies/`` validates; the schema command's drift check fails on a stale file."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler import cli
from autoscaler.core import spec
from autoscaler.policyfile import loader, schema
from tests.policyfile.texts import BASE, edit

# jsonschema (a dependency of kubernetes-validate, a test requirement) ships no type stubs; imported this way
# it is Any to mypy without an ignore that would turn stale once stubs are installed.
jsonschema: Any = importlib.import_module("jsonschema")

POLICIES = Path(__file__).resolve().parents[2] / "policies"
EXAMPLES = sorted(POLICIES.glob("*.yaml"))


def test_checked_in_schema_is_current() -> None:
    checked = schema.check(POLICIES / "schema.json")
    assert checked.ok, checked.message


def test_check_reports_drift_with_the_command_to_fix_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stale = json.loads(schema.render())
    stale["properties"]["kind"] = {"const": "Something"}
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(stale, indent=2, sort_keys=True) + "\n")
    assert schema.main(["--check", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"regenerate it with: python -m autoscaler.policyfile.schema {path}" in err
    assert '+      "const": "ScalingPolicy",' in err


def test_write_then_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "schema.json"
    assert schema.main([str(path)]) == 0
    assert schema.main(["--check", str(path)]) == 0
    assert schema.main(["--check", str(tmp_path / "absent.json")]) == 1
    assert "cannot read" in capsys.readouterr().err


def test_schema_is_by_alias_and_stable() -> None:
    text = schema.render()
    assert text == schema.render()
    doc = json.loads(text)
    jsonschema.Draft202012Validator.check_schema(doc)
    assert doc["$schema"] == schema.DIALECT
    assert set(doc["properties"]) == {"apiVersion", "kind", "metadata", "spec"}
    assert "minReplicas" in doc["$defs"]["Spec"]["properties"]
    assert list(doc) == sorted(doc)


def test_examples_exist() -> None:
    names = {p.name for p in EXAMPLES}
    assert {"jetstream-prefill-backlog.yaml", "jetstream-slots-used.yaml", "vllm-queue-kv.yaml",
            "tgi-finetune-6gpu.yaml", "lws-prefill-decode.yaml"} <= names


def test_the_policies_directory_validates(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["validate", str(POLICIES)]) == 0, capsys.readouterr().out
    assert capsys.readouterr().out.endswith(": ok\n")


@pytest.mark.parametrize("path", [pytest.param(p, id=p.name) for p in EXAMPLES])
def test_each_example_validates_and_documents_itself(path: Path) -> None:
    assert loader.load_file(path)
    text = path.read_text(encoding="utf-8")
    header = text.split("apiVersion:", 1)[0]
    assert header.startswith("# yaml-language-server: $schema=./schema.json\n")
    # What it does, which tutorial, how to adapt: a header of at least a few lines of comments.
    assert header.count("\n#") >= 8, "each example starts with a comment saying what, from where, how to adapt"
    assert "To adapt" in header


@pytest.mark.parametrize("path", [pytest.param(p, id=p.name) for p in EXAMPLES])
def test_schema_accepts_each_example(path: Path) -> None:
    validator = jsonschema.Draft202012Validator(json.loads((POLICIES / "schema.json").read_text()))
    for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
        assert list(validator.iter_errors(doc)) == []


def _doc(text: str) -> Any:
    return yaml.safe_load(text)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(edit("    work: [waiting]", "    wrok: [waiting]"), id="unknown-field"),
        pytest.param(edit("    type: queue", "    type: hpq"), id="unknown-policy-type"),
        pytest.param(edit("  maxReplicas: 4", "  maxReplicas: four"), id="wrong-type"),
        pytest.param(edit("kind: ScalingPolicy", "kind: Deployment"), id="wrong-kind"),
    ],
)
def test_schema_rejects_what_the_models_reject(text: str) -> None:
    validator = jsonschema.Draft202012Validator(schema.generate())
    assert list(validator.iter_errors(_doc(text)))
    assert list(validator.iter_errors(_doc(BASE))) == []


def test_presets_in_the_examples_are_known() -> None:
    used = {
        sig.preset
        for path in EXAMPLES
        for policy in loader.load_file(path)
        for sig in policy.spec.signals
        if sig.preset is not None
    }
    assert used <= set(spec.KNOWN_PRESETS)
    assert len(used) >= 5  # the examples show most presets in use
