"""``autoscaler validate`` on named bad inputs: exit status, and each problem's FILE:LINE:COL and field path.

Each case edits one line of ``texts.BASE`` (or is a file of its own), so the expected line numbers can be
read off the base text. Messages are checked by a fragment: the allowed-field lists they contain grow as
policy types gain fields, the location must not move.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from autoscaler import cli
from autoscaler.policyfile import loader
from tests.policyfile.texts import BASE, edit

HPA = edit(
    "    type: queue",
    "    type: hpa\n"
    "    metrics:\n"
    "      - signal: waiting\n"
    "        type: External\n"
    "        target:\n"
    "          type: AverageValue\n"
    "          averageValue: 10",
    edit("    work: [waiting]", "", edit("    capacityPerReplica: 10", "")),
)
LAUGHS = "".join(
    [
        "a: &a [x,x,x,x,x,x,x,x,x,x]\n",
        *(f"{n}: &{n} [{','.join([f'*{p}'] * 10)}]\n" for p, n in zip("abcd", "bcde", strict=True)),
        "f: [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\n",
    ]
)
SIGNAL = "      preset: vllm.waiting"

CASES = [
    pytest.param(edit("    work: [waiting]", "    wrok: [waiting]"),
                 [("p.yaml:15:5: spec.policy.work: ", "missing required field 'work'"),
                  ("p.yaml:16:5: spec.policy.wrok: ", "unknown field 'wrok'; did you mean 'work'?")],
                 id="misspelt-policy-field"),
    pytest.param(edit("spec:", "spc:"),
                 [("p.yaml:1:1: spec: ", "missing required field 'spec'"),
                  ("p.yaml:5:1: spc: ", "did you mean 'spec'?")],
                 id="misspelt-top-level-field"),
    pytest.param(edit("  maxReplicas: 4", "  maxReplicas: four"),
                 [("p.yaml:10:16: spec.maxReplicas: ", "should be a number, not the string 'four'")],
                 id="wrong-type"),
    # A string is refused where the CRD says integer or number, as the API server refuses it (robust3).
    pytest.param(edit("  maxReplicas: 4", '  maxReplicas: "4"'),
                 [("p.yaml:10:16: spec.maxReplicas: ", "not the string '4': write it without quotes (the API "
                   "server refuses a string here)")],
                 id="quoted-integer"),
    pytest.param(edit("  maxReplicas: 4", "  maxReplicas: '0.5'"),
                 [("p.yaml:10:16: spec.maxReplicas: ", "not the string '0.5': write it without quotes")],
                 id="single-quoted-number"),
    # YAML 1.1's base 60 (PyYAML: 90) is text to kubectl (go-yaml) and YAML 1.2: the API server refuses it.
    pytest.param(edit("  maxReplicas: 4", "  maxReplicas: 1:30"),
                 [("p.yaml:10:16: spec.maxReplicas: ", "not the string '1:30': Kubernetes (and YAML 1.2) read "
                   "1:30 as text, not as YAML 1.1's base 60; write 90")],
                 id="base-60-integer"),
    # Explicit tags on what they cannot be, and a 5,000-digit integer: each ended validate with an internal
    # error (PyYAML's constructor, Python's int limit), or took 1:30 as 90 (robust3's sweep).
    pytest.param(edit("  maxReplicas: 4", "  maxReplicas: !!float abc"),
                 [("p.yaml:10:16: (yaml): ", "cannot read 'abc' as a number (its tag !!float asks for one)")],
                 id="float-tag-on-text"),
    pytest.param(edit("  maxReplicas: 4", "  maxReplicas: !!int 1:30"),
                 [("p.yaml:10:16: (yaml): ", "cannot read '1:30' as an integer (its tag !!int asks for one)")],
                 id="int-tag-on-base-60"),
    pytest.param(edit("  maxReplicas: 4", "  maxReplicas: " + "9" * 5000),
                 [("p.yaml:10:16: spec.maxReplicas: ", "should be a finite number, not inf")],
                 id="five-thousand-digits"),
    # A policy saved from the cluster (kubectl get -o yaml): each field says why it is not one (robust3).
    pytest.param(edit("  name: web", "  name: web\n  namespace: llm\n  uid: 1b2c", edit("    name: web", "    name: w"))
                 + "status: {conditions: []}\n",
                 [("p.yaml:5:3: metadata.namespace: ", "unknown field 'namespace': the namespace scaled is "
                   "spec.target.namespace: write it there"),
                  ("p.yaml:6:3: metadata.uid: ", "unknown field 'uid': the API server writes it (a policy saved "
                   "with kubectl get -o yaml): delete it (allowed: name, labels, annotations)"),
                  ("p.yaml:20:1: status: ", "the API server writes it")],
                 id="saved-from-the-cluster"),
    pytest.param("apiVersion: v1\nkind: List\nitems:\n- " + BASE.replace("\n", "\n  ").rstrip() + "\n",
                 [("p.yaml:2:7: kind: ", "a kubectl List: write each of its items as a document of its own")],
                 id="kubectl-list"),
    pytest.param(gzip.compress(BASE.encode()), [("p.yaml:1:1: (file): ", "gzip-compressed; decompress it first")],
                 id="gzip-compressed"),
    pytest.param(edit("  maxReplicas: 4", "  maxReplicas: 2026-12-07"),
                 [("p.yaml:10:16: spec.maxReplicas: ", "should be a number, not the string '2026-12-07'")],
                 id="a-date-for-a-number"),
    pytest.param(edit("    type: queue", "    type: queeu"),
                 [("p.yaml:15:11: spec.policy.type: ", "unknown policy type 'queeu'; did you mean 'queue'?")],
                 id="misspelt-policy-type"),
    pytest.param(edit("    type: queue", "    type: banana"),
                 [("p.yaml:15:11: spec.policy.type: ",
                   "unknown policy type 'banana'; known types: disaggregated, hpa, ")],
                 id="unknown-policy-type-lists-known"),
    pytest.param(edit("    type: queue", ""), [("p.yaml:16:5: spec.policy.type: ", "missing 'type'")],
                 id="policy-without-type"),
    pytest.param(edit("    work: [waiting]", "    work: [waiting, running]"),
                 [("p.yaml:16:21: spec.policy.work[1]: ", "undefined signal 'running'; defined: waiting")],
                 id="undefined-signal-in-policy"),
    pytest.param(edit("      - signal: waiting", "      - signal: wating", HPA),
                 [("p.yaml:17:17: spec.policy.metrics[0].signal: ", "undefined signal 'wating'")],
                 id="undefined-signal-in-hpa-metric"),
    pytest.param(edit(SIGNAL, f"{SIGNAL}\n    - name: load\n      expr: waiting + runing"),
                 [("p.yaml:15:13: spec.signals[1].expr: ", "undefined signal(s) runing")],
                 id="undefined-signal-in-expr"),
    pytest.param(edit("  minReplicas: 1", "  minReplicas: 5"),
                 [("p.yaml:9:16: spec.minReplicas: ", "minReplicas (5) is greater than maxReplicas (4)")],
                 id="min-greater-than-max"),
    pytest.param(edit("  minReplicas: 1", "  minReplicas: 0"),
                 [("p.yaml:9:16: spec.minReplicas: ", "needs scaleToZero.enabled")], id="min-zero-without-stz"),
    pytest.param(edit(SIGNAL, f"{SIGNAL}\n    - name: waiting\n      preset: vllm.running"),
                 [("p.yaml:14:13: spec.signals[1].name: ", "'waiting' is defined twice")],
                 id="duplicate-signal-name"),
    pytest.param(edit(SIGNAL, f"{SIGNAL}\n    - name: a\n      expr: b + 1\n    - name: b\n      expr: a * 2"),
                 [("p.yaml:15:13: spec.signals[1].expr: ", "cycle: a -> b -> a")], id="expression-cycle"),
    pytest.param(edit(SIGNAL, "      preset: vllm.waitng"),
                 [("p.yaml:13:15: spec.signals[0].preset: ", "unknown preset 'vllm.waitng'; did you mean "
                   "'vllm.waiting'?")],
                 id="misspelt-preset"),
    pytest.param(edit(SIGNAL, f"{SIGNAL}\n      query: sum(up)"),
                 [("p.yaml:13:15: spec.signals[0].preset: ", "exactly one of query, preset, metric, expr")],
                 id="two-signal-definitions"),
    pytest.param(edit(SIGNAL, f"{SIGNAL}\n    - name: x\n      expr: __import__('os')"),
                 [("p.yaml:15:13: spec.signals[1].expr: ", "calls an unknown function")],
                 id="expression-calls-a-builtin"),
    pytest.param(edit("          averageValue: 10", "          averageValue: ten", HPA),
                 [("p.yaml:21:25: spec.policy.metrics[0].target.averageValue: ", "not the string 'ten'")],
                 id="hpa-average-value-not-a-number"),
    pytest.param(edit("          type: AverageValue", "          type: Value", HPA),
                 [("p.yaml:20:11: spec.policy.metrics[0].target: ", "target type Value needs 'value'")],
                 id="hpa-target-type-mismatch"),
    pytest.param(edit("    work: [waiting]", "    work: [waiting, waiting]"),
                 [("p.yaml:15:5: spec.policy: ", "waiting")], id="error-of-a-policy-type-model"),
    pytest.param(edit("    kind: Deployment", "    kind: Deploymnet"),
                 [("p.yaml:7:11: spec.target.kind: ", "did you mean 'Deployment'?")], id="misspelt-target-kind"),
    pytest.param(edit("    work: [waiting]", "    work: [waiting"),
                 [("p.yaml:17:23: (yaml): ", "expected ',' or ']'")], id="malformed-yaml"),
    pytest.param(edit("    work: [waiting]", "\twork: [waiting]"),
                 [("p.yaml:16:1: (yaml): ", "never tabs")], id="tab-indentation"),
    pytest.param(edit("  maxReplicas: 4", "  maxReplicas: 4\n  maxReplicas: 5"),
                 [("p.yaml:11:3: spec.maxReplicas: ", "duplicate key 'maxReplicas' (first at line 10)")],
                 id="duplicate-key"),
    pytest.param("", [("p.yaml:1:1: (file): ", "no ScalingPolicy documents")], id="empty-file"),
    pytest.param("# a comment\n---\n", [("p.yaml:1:1: (file): ", "no ScalingPolicy documents")],
                 id="comments-only"),
    pytest.param("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: x\n",
                 [("p.yaml:1:1: (file): ", "no ScalingPolicy documents (skipped: Deployment)")],
                 id="kubernetes-manifest-only"),
    pytest.param(edit("kind: ScalingPolicy", "kind: ScalingPolicies"),
                 [("p.yaml:2:7: kind: ", "did you mean 'ScalingPolicy'?")], id="misspelt-kind"),
    pytest.param("apiVersion: example.com/v1\nkind: Gizmo\n",
                 [("p.yaml:2:7: kind: ", "not a ScalingPolicy: kind 'Gizmo'")], id="unknown-kind"),
    pytest.param("name: web\nspec: {}\n", [("p.yaml:1:1: (yaml): ", "no apiVersion and kind")],
                 id="no-header"),
    pytest.param("- a\n- b\n", [("p.yaml:1:1: (yaml): ", "document 1 is a list, not a mapping")],
                 id="document-is-a-list"),
    pytest.param(b"\xff\xfe\x00garbage", [("p.yaml:1:1: (file): ", "not UTF-8 text: byte 0xff at offset 0")],
                 id="binary-junk"),
    pytest.param(BASE.replace("  name: web", "  name: caf\xe9").encode("latin-1"),
                 [("p.yaml:4:12: (file): ", "not UTF-8 text: byte 0xe9")], id="latin-1-text"),
    pytest.param(edit("  name: web", "  name: w\x01b"),
                 [("p.yaml:4:10: (yaml): ", "unacceptable character '\\x01'")], id="control-character"),
    pytest.param(b"#" * (loader.MAX_FILE_BYTES + 1),
                 [("p.yaml:1:1: (file): ", "larger than the 256 KiB limit")], id="huge-file"),
    pytest.param(LAUGHS, [("p.yaml:1:1: (yaml): ", "counting each alias expansion")], id="billion-laughs"),
    pytest.param("kind: ScalingPolicy\nmetadata: &m\n  name: *m\n",
                 [("p.yaml:2:11: metadata.name: ", "recursive alias")], id="recursive-alias"),
    pytest.param("kind: ScalingPolicy\nspec: " + "[" * 60 + "]" * 60 + "\n",
                 [("p.yaml:2:57: spec[0]", "nested too deeply")], id="deep-nesting"),
    pytest.param("kind: ScalingPolicy\nspec: " + "[" * 5000 + "]" * 5000 + "\n",
                 [("p.yaml:1:1: (yaml): ", "nested too deeply")], id="very-deep-nesting"),
    pytest.param(f"kind: ScalingPolicy\na: &a {'[' * 30}1{']' * 30}\nb: {'[' * 30}*a{']' * 30}\n",
                 [("p.yaml:2:4: b[0]", "nested too deeply")], id="deep-nesting-through-an-alias"),
    pytest.param(edit("  maxReplicas: 4", "  maxReplicas: !Ref four"),
                 [("p.yaml:10:16: (yaml): ", "could not determine a constructor for the tag '!Ref'")],
                 id="custom-tag"),
    pytest.param(BASE + "  metricSafety:\n    fallback:\n      failureThreshold: 3\n",
                 [("p.yaml:20:7: spec.metricSafety.fallback.replicas: ", "needs 'replicas'")],
                 id="static-fallback-without-replicas"),
    pytest.param(edit("  minReplicas: 1", "  minReplicas: 1\n  source:\n    type: promethues\n    url: http://x"),
                 [("p.yaml:11:11: spec.source.type: ", "unknown source type 'promethues'; did you mean "
                   "'prometheus'?")],
                 id="misspelt-source-type"),
    pytest.param(BASE + "  scaleToZero:\n    enabled: true\n    activation:\n      signal: nope\n      threshold: 1\n",
                 [("p.yaml:21:15: spec.scaleToZero.activation.signal: ", "undefined signal 'nope'")],
                 id="undefined-activation-signal"),
    pytest.param(edit(SIGNAL, f"{SIGNAL}\n      labels:\n        version: 2"),
                 [("p.yaml:15:18: spec.signals[0].labels.version: ", "valid string (got 2)")],
                 id="label-value-not-a-string"),
    pytest.param("base: &b {kind: Deployment, name: web}\n" + edit("  target:", "  target:\n    <<: *b\n    nmae: x"),
                 [("p.yaml:1:1: base: ", "unknown field 'base'"),
                  ("p.yaml:9:5: spec.target.nmae: ", "did you mean 'name'?")],
                 id="merge-key-and-misspelt-field"),
    # A source URL without http(s):// passed and then failed every read ("request to frontend:9090 failed").
    pytest.param(edit("  minReplicas: 1", "  minReplicas: 1\n  source:\n    type: prometheus\n    url: frontend:9090"),
                 [("p.yaml:12:10: spec.source.url: ", "must be an http:// or https:// URL with a host, e.g. "
                   "http://prometheus.monitoring.svc:9090 (got 'frontend:9090')")],
                 id="source-url-without-scheme"),
    pytest.param(edit("  minReplicas: 1", "  minReplicas: 1\n  source:\n    type: prometheus\n    url: ftp://x"),
                 [("p.yaml:12:10: spec.source.url: ", "(got 'ftp://x')")], id="source-url-not-http"),
    pytest.param(edit("  minReplicas: 1",
                      "  minReplicas: 1\n  source: {type: pods, endpoints: ['http://a:8000/metrics', 'b:8000']}"),
                 [("p.yaml:10:35: spec.source.endpoints: ", "each endpoint must be an http:// or https:// URL "
                   "with a host")], id="pods-endpoint-without-scheme"),
]


@pytest.mark.parametrize(("content", "expected"), CASES)
def test_bad_input_is_reported_at_its_line(
    content: str | bytes, expected: list[tuple[str, str]], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("p.yaml").write_bytes(content if isinstance(content, bytes) else content.encode())
    assert cli.main(["validate", "p.yaml"]) == 1
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert len(lines) == len(expected), out
    for line, (prefix, fragment) in zip(lines, expected, strict=True):
        assert line.startswith(prefix), line
        assert fragment in line[len(prefix):], line
    assert "Traceback" not in err
    assert err.startswith("autoscaler validate: ")


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(BASE, id="base"),
        pytest.param(HPA, id="hpa-variant"),
        pytest.param("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n---\n" + BASE,
                     id="beside-a-deployment"),
        pytest.param("---\n" + BASE + "---\n", id="empty-documents-around"),
        pytest.param("\ufeff" + BASE, id="utf-8-bom"),
        pytest.param(edit("    kind: Deployment", "    <<: {kind: Deployment}"), id="merge-key"),
    ],
)
def test_valid_input_passes(content: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(content, encoding="utf-8")
    assert cli.main(["validate", str(path)]) == 0
    assert capsys.readouterr().out == "1 file, 1 policy: ok\n"
