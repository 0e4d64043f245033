"""Plain scalars that start like a number are read as kubectl reads them (``policyfile.scalars``), by every path
of the loader, and the controller's text of an object reads back to the object's own values.

The last test asks kubectl itself (when installed): ``kubectl create --dry-run=client -o json`` prints the JSON
it would send, read through sigs.k8s.io/yaml (go-yaml v2). It needs the API's discovery only, which a few
lines of HTTP serve here.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import math
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pydantic
import pytest

from autoscaler.controller import objects
from autoscaler.policyfile import loader, scalars
from tests.policyfile.test_fast_yaml import no_native, slow
from tests.policyfile.texts import edit

#: (written plain, what kubectl reads). PyYAML (YAML 1.1) reads the first seven otherwise: '1e3', '1.0e3',
#: '-.5', '0o12', '0X1F' and '08' as strings, 1:30 as 90 and the date as a date.
KUBECTL_READS: list[tuple[str, Any]] = [
    ("1e3", 1000.0),
    ("1.0e3", 1000.0),
    ("-.5", -0.5),
    ("0o12", 10),
    ("0X1F", 31),
    ("08", 8.0),
    ("1:30", "1:30"),
    ("2026-12-07", "2026-12-07"),
    ("012", 10),
    ("0x1f", 31),
    ("0b11", 3),
    ("-0b11", -3),
    ("1_000", 1000),
    ("+12", 12),
    ("12.", 12.0),
    (".5e1", 5.0),
    ("1e-3", 0.001),
    ("-1.5E+2", -150.0),
    (".inf", math.inf),
    ("-.Inf", -math.inf),
    ("12", 12),
    ("0.85", 0.85),
    ("1.5.6", "1.5.6"),
    ("0x", "0x"),
    ("v5e-8", "v5e-8"),
    ("18446744073709551615", 18446744073709551615),
    ("18446744073709551616", 1.8446744073709552e19),
    ("true", True),
    ("null", None),
    ("y", True),
    ("Y", True),
    ("n", False),
    ("N", False),
    ("yes", True),
    ("off", False),
    ("yn", "yn"),
]


class _Anything(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="allow")


def _read(text: str, tmp_path: Path) -> dict[str, Any]:
    path = tmp_path / "v.yaml"
    path.write_text(text)
    return dict(loader.load_model(path, _Anything).model_extra or {})


def _document(pairs: list[tuple[str, Any]]) -> str:
    return "".join(f"k{i}: {written}\n" for i, (written, _) in enumerate(pairs))


def test_every_path_reads_a_number_as_kubectl_does(tmp_path: Path) -> None:
    text = _document(KUBECTL_READS)
    expected = {f"k{i}": value for i, (_, value) in enumerate(KUBECTL_READS)}
    for way in (contextlib.nullcontext, no_native, slow):
        with way():
            read = _read(text, tmp_path)
        assert read == expected, way
        assert {k: type(v) for k, v in read.items()} == {k: type(v) for k, v in expected.items()}, way


def test_a_quoted_number_stays_a_string(tmp_path: Path) -> None:
    assert _read("a: '12'\nb: \"1e3\"\nc: !!str 08\n", tmp_path) == {"a": "12", "b": "1e3", "c": "08"}


@pytest.mark.parametrize(
    ("written", "replicas"),
    [("1e1", 10), ("0o12", 10), ("0X0A", 10), ("012", 10), ("1_0", 10), ("10.0", 10), ("08", 8)],
)
def test_a_policy_number_written_as_kubectl_reads_it(written: str, replicas: int, tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(edit("  maxReplicas: 4", f"  maxReplicas: {written}"))
    for way in (contextlib.nullcontext, no_native, slow):
        with way():
            [policy] = loader.load_file(path)
        assert policy.spec.max_replicas == replicas


def _object(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaler.dev/v1alpha1",
        "kind": "ScalingPolicy",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {
            "target": {"kind": "Deployment", "name": "web"},
            "maxReplicas": 4,
            "signals": [{"name": "waiting", "preset": "vllm.waiting"}],
            "policy": {"type": "queue", "work": ["waiting"], "capacityPerReplica": 10},
            **spec,
        },
    }


@pytest.mark.parametrize("name", ["1e3", "08", "0o12", "1-30", "y", "n"])
def test_the_controller_reads_an_object_back_to_its_own_strings(name: str) -> None:
    """A Deployment may be named ``1e3`` (a DNS label): the object's text must not turn it into a number."""
    obj = _object(target={"kind": "Deployment", "name": name})
    [loaded] = loader.load_text(objects.document(obj).text, "object")
    assert loaded.policy.spec.target.name == name


def test_the_controller_refuses_a_string_where_the_crd_says_integer() -> None:
    """What the API server refuses (``type: integer``), the controller refuses too, should one arrive."""
    with pytest.raises(loader.PolicyFileError) as caught:
        loader.load_text(objects.document(_object(maxReplicas="12")).text, "object")
    assert "spec.maxReplicas: should be a number, not the string '12'" in str(caught.value.problems[0])


@pytest.mark.parametrize("written", ["n", "y", "no", "on"])
def test_a_name_kubectl_reads_as_a_boolean_is_refused_with_what_to_do(written: str, tmp_path: Path) -> None:
    """go-yaml v2 (kubectl) reads a plain ``n`` or ``y`` as a boolean, as PyYAML reads ``no`` and ``on``: the API
    server refuses a boolean where the CRD says string, and so does the loader, saying to quote it."""
    path = tmp_path / "p.yaml"
    path.write_text(edit("    name: web", f"    name: {written}"))
    for way in (contextlib.nullcontext, no_native, slow):
        with way(), pytest.raises(loader.PolicyFileError) as caught:
            loader.load_file(path)
        problem = str(caught.value.problems[0])
        assert "spec.target.name: should be a string, not the boolean" in problem, way
        assert "put the text in quotes" in problem
    path.write_text(edit("    name: web", f"    name: '{written}'"))
    [policy] = loader.load_file(path)
    assert policy.spec.target.name == written


def test_dump_quotes_what_would_read_otherwise() -> None:
    for text in ("1e3", "08", "-.5", "0o12", "1:30", "12", "true", "2026-12-07", "y", "N"):
        assert scalars.dump({"a": text}) != f"a: {text}\n" or scalars.tag(text) == scalars.STR_TAG


# --- kubectl itself ----------------------------------------------------------------------------------------

KUBECTL = shutil.which("kubectl")
_DISCOVERY = {
    "/api": {"kind": "APIVersions", "versions": ["v1"],
             "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]},
    "/api/v1": {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
        {"name": "configmaps", "singularName": "configmap", "namespaced": True, "kind": "ConfigMap",
         "verbs": ["create", "get", "list"]}]},
    "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": []},
}


class _Discovery(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = _DISCOVERY.get(self.path.split("?")[0])
        self.send_response(200 if body else 404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(json.dumps(body or {"kind": "Status", "code": 404}).encode())

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def _discovery() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Discovery)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _same(a: Any, b: Any) -> bool:
    """Equal, and of one kind (a JSON number prints 2**64 as 18446744073709552000: equal as doubles)."""
    numbers = (int, float)
    if isinstance(a, numbers) and isinstance(b, numbers) and not isinstance(a, bool) and not isinstance(b, bool):
        return a == b or math.isclose(a, b, rel_tol=1e-15)
    return type(a) is type(b) and a == b


@pytest.mark.skipif(KUBECTL is None, reason="kubectl not installed")
def test_kubectl_reads_what_the_loader_reads(tmp_path: Path) -> None:
    # One deliberate difference (scalars' docstring): 1e400 (kubectl: a string; here infinity, refused as
    # such). kubectl refuses a file holding .inf (JSON has none).
    finite = [(w, v) for w, v in KUBECTL_READS if not (isinstance(v, float) and math.isinf(v))]
    pairs = [*finite, ("1e400", math.inf)]
    body = "".join(f"  k{i}: {written}\n" for i, (written, _) in enumerate(pairs))
    manifest = tmp_path / "m.yaml"
    manifest.write_text(f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\nvalues:\n{body}")
    with _discovery() as url:
        run = subprocess.run(
            [str(KUBECTL), "create", "--dry-run=client", "-o", "json", "--validate=false", "-s", url,
             "-f", str(manifest)],
            check=False, capture_output=True, text=True, timeout=60,
            env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
        )
    assert run.returncode == 0, run.stderr
    kubectl = json.loads(run.stdout)["values"]
    ours = _read(f"values:\n{body}", tmp_path)["values"]
    differ = {k: (kubectl[k], ours[k]) for k in kubectl if not _same(kubectl[k], ours[k])}
    assert differ == {f"k{len(pairs) - 1}": ("1e400", math.inf)}
