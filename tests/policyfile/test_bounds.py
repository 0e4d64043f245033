"""``validate`` refuses what upstream APIs refuse and what cannot be meant, each at its FILE:LINE:COL.

One named case per guard (issue 12, "Policies and expressions"): empty ``behavior`` policy lists, non-finite
numbers, booleans where numbers go, periods below 1 s, absurd magnitudes, and expressions past their size,
depth or number limits. The guards live in the models (``core.specbase``, ``core.expressions``), so every
command that loads a policy refuses the same files; the last test checks ``replay`` does.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from autoscaler import cli
from autoscaler.core import expressions
from tests.policyfile.texts import BASE, edit

ROOT = Path(__file__).resolve().parents[2]

#: The base with a composite signal ``c`` whose ``expr: EXPR`` is at line 15, column 13.
EXPR_BASE = edit("      preset: vllm.waiting", "      preset: vllm.waiting\n    - name: c\n      expr: EXPR",
                 edit("    work: [waiting]", "    work: [c]"))
BEHAVIOR = "    behavior:\n      {direction}:\n        policies: []\n"
SCALE_UP_EMPTY = BASE + BEHAVIOR.format(direction="scaleUp")
HPA = edit(
    "    type: queue",
    "    type: hpa\n    metrics:\n      - signal: waiting\n        type: External\n"
    "        target: {type: AverageValue, averageValue: AVG}",
    edit("    work: [waiting]", "", edit("    capacityPerReplica: 10", "")),
)


def _expr(text: str) -> str:
    return EXPR_BASE.replace("EXPR", text)


CASES = [
    # --- upstream HPA: an empty policy list is refused (validateScalingRules: "must specify at least one Policy")
    pytest.param(SCALE_UP_EMPTY, "p.yaml:20:19: spec.policy.behavior.scaleUp.policies: ", "at least 1 item",
                 id="queue-empty-scale-up-policies"),
    pytest.param(BASE + BEHAVIOR.format(direction="scaleDown"),
                 "p.yaml:20:19: spec.policy.behavior.scaleDown.policies: ", "at least 1 item",
                 id="queue-empty-scale-down-policies"),
    pytest.param(HPA.replace("AVG", "10") + BEHAVIOR.format(direction="scaleDown").replace("    b", "    b", 1),
                 "p.yaml:24:19: spec.policy.behavior.scaleDown.policies: ", "at least 1 item",
                 id="hpa-empty-scale-down-policies"),
    # --- numbers that cannot be meant
    pytest.param(HPA.replace("AVG", ".inf"), "p.yaml:19:52: spec.policy.metrics[0].target.averageValue: ",
                 "finite number", id="infinite-target"),
    pytest.param(HPA.replace("AVG", ".nan"), "p.yaml:19:52: spec.policy.metrics[0].target.averageValue: ",
                 "finite number", id="nan-target"),
    pytest.param(HPA.replace("AVG", "1e300"), "p.yaml:19:52: spec.policy.metrics[0].target.averageValue: ",
                 "out of range", id="absurd-target"),
    pytest.param(edit("  maxReplicas: 4", "  maxReplicas: 4\n  evaluationPeriodSeconds: true"),
                 "p.yaml:11:28: spec.evaluationPeriodSeconds: ", "not the boolean true", id="boolean-period"),
    pytest.param(edit("  maxReplicas: 4", "  maxReplicas: true"),
                 "p.yaml:10:16: spec.maxReplicas: ", "not the boolean true", id="boolean-count"),
    pytest.param(edit("    capacityPerReplica: 10", "    capacityPerReplica: false"),
                 "p.yaml:17:25: spec.policy.capacityPerReplica: ", "not the boolean false", id="boolean-capacity"),
    # read by the native parser (plain text), so refused only by the models' number check, which the loader
    # skips when every number field holds a plain number in range: each must still be refused
    pytest.param(edit("    capacityPerReplica: 10", "    capacityPerReplica: 10000000000000000000"),
                 "p.yaml:17:25: spec.policy.capacityPerReplica: ", "out of range", id="absurd-integer-capacity"),
    pytest.param(edit("    capacityPerReplica: 10", "    capacityPerReplica: '1e300'"),
                 "p.yaml:17:25: spec.policy.capacityPerReplica: ", "not the string '1e300': write it without quotes",
                 id="absurd-quoted-capacity"),
    pytest.param(edit("    capacityPerReplica: 10", "    capacityPerReplica: 'nan'"),
                 "p.yaml:17:25: spec.policy.capacityPerReplica: ", "not the string 'nan'", id="quoted-nan-capacity"),
    pytest.param(BASE + "  metricSafety:\n    fallback: {failureThreshold: 2, replicas: true}\n",
                 "p.yaml:19:47: spec.metricSafety.fallback.replicas: ", "not the boolean true",
                 id="boolean-nested-replicas"),
    pytest.param(edit("  maxReplicas: 4", "  maxReplicas: 4\n  evaluationPeriodSeconds: 0.001"),
                 "p.yaml:11:28: spec.evaluationPeriodSeconds: ", "greater than or equal to 1",
                 id="period-below-one-second"),
    pytest.param(edit("  maxReplicas: 4", "  maxReplicas: 4\n  evaluationPeriodSeconds: 1e300"),
                 "p.yaml:11:28: spec.evaluationPeriodSeconds: ", "out of range", id="absurd-period"),
    pytest.param(edit("  maxReplicas: 4", "  maxReplicas: 1e300"),
                 "p.yaml:10:16: spec.maxReplicas: ", "out of range", id="absurd-count"),
    pytest.param(edit("  maxReplicas: 4", "  maxReplicas: 1000000"),
                 "p.yaml:10:16: spec.maxReplicas: ", "less than or equal to 100000", id="too-many-replicas"),
    pytest.param(edit("      preset: vllm.waiting", "      preset: vllm.waiting\n      maxAgeSeconds: 0.01"),
                 "p.yaml:14:22: spec.signals[0].maxAgeSeconds: ", "greater than or equal to 1",
                 id="max-age-below-one-second"),
    pytest.param(BASE + "  metricSafety:\n    fallback: {failureThreshold: .inf, replicas: 2}\n",
                 "p.yaml:19:34: spec.metricSafety.fallback.failureThreshold: ", "finite number",
                 id="infinite-threshold"),
    # --- expressions: size, depth, numbers
    pytest.param(_expr("+".join(["waiting"] * 2988)), "p.yaml:15:13: spec.signals[1].expr: ",
                 f"the limit is {expressions.MAX_CHARS}", id="expression-2988-terms"),
    pytest.param(_expr("+".join(["w"] * 200)), "p.yaml:15:13: spec.signals[1].expr: ",
                 f"tokens; the limit is {expressions.MAX_TOKENS}", id="expression-too-many-tokens"),
    pytest.param(_expr("-" * 40 + "waiting"), "p.yaml:15:13: spec.signals[1].expr: ",
                 f"levels deep; the limit is {expressions.MAX_DEPTH}", id="expression-too-deep"),
    pytest.param(_expr("waiting * 1e300"), "p.yaml:15:13: spec.signals[1].expr: ", "out of range",
                 id="expression-absurd-constant"),
    pytest.param(_expr("waiting * 9" + "9" * 30), "p.yaml:15:13: spec.signals[1].expr: ", "out of range",
                 id="expression-huge-integer-literal"),
    pytest.param(_expr("max(waiting, key=abs)"), "p.yaml:15:13: spec.signals[1].expr: ", "keyword argument",
                 id="expression-keyword-argument"),
]


@pytest.mark.parametrize(("content", "prefix", "fragment"), CASES)
def test_refused_at_its_line(
    content: str, prefix: str, fragment: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("p.yaml").write_text(content)
    assert cli.main(["validate", "p.yaml"]) == 1
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert len(lines) == 1, out
    assert lines[0].startswith(prefix), lines[0]
    assert fragment in lines[0][len(prefix):], lines[0]
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(_expr("max(waiting / 10, waiting * 0.8) + ceil(waiting / 3) ** 2"), id="usual-expression"),
        pytest.param(_expr("+".join(["waiting"] * 30)), id="thirty-terms"),
        pytest.param(HPA.replace("AVG", "1e12"), id="large-but-meant-target"),
        pytest.param(edit("  maxReplicas: 4", "  maxReplicas: 4\n  evaluationPeriodSeconds: 1"), id="one-second"),
        pytest.param(BASE + "    behavior:\n      scaleUp:\n        stabilizationWindowSeconds: 0\n",
                     id="behavior-without-policies-takes-defaults"),
    ],
)
def test_meant_input_passes(content: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(content)
    assert cli.main(["validate", str(path)]) == 0, capsys.readouterr().out


def test_every_command_that_loads_policies_refuses_the_same_file(tmp_path: Path) -> None:
    # replay crashed with OverflowError on `averageValue: .inf` that validate accepted; now the model refuses it,
    # so replay reports the same FILE:LINE:COL and exits 1.
    policy = tmp_path / "p.yaml"
    policy.write_text(HPA.replace("AVG", ".inf"))
    trace = tmp_path / "t.csv"
    trace.write_text("timestamp,waiting\n0,1\n15,2\n")
    proc = subprocess.run(
        [sys.executable, "-m", "autoscaler.cli", "replay", "--policy", str(policy), "--metrics", str(trace),
         "--out", str(tmp_path / "out"), "--no-plot"],
        capture_output=True, text=True, timeout=60, cwd=ROOT, check=False,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert f"{policy}:19:52: spec.policy.metrics[0].target.averageValue: " in proc.stderr
