"""``autoscaler simulate`` end to end: the bundled default, both shared traces, and clear errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from autoscaler import cli
from autoscaler.sim import cluster as cluster_mod
from tests.sim.conftest import CODE, CONV, ROOT, TPU_CLUSTER, shared_trace

KEYS = {
    "slo_attainment", "ttft_p50_s", "ttft_p99_s", "serving_accelerator_hours", "cost_vs_oracle",
    "training_useful_chip_hours", "training_lost_chip_hours", "training_goodput", "scale_actions", "preemptions",
    "oracle_hours_at_equal_slo", "rejected_requests", "training_unsaved_chip_hours",
}


def _summary(out: Path) -> dict[str, object]:
    data = json.loads((out / "summary.json").read_text())
    assert isinstance(data, dict)
    return data


def test_no_arguments_runs_the_bundled_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli.main(["simulate"]) == 0
    out = tmp_path / "out" / "simulate"
    summary = _summary(out)
    policies = summary["policies"]
    assert isinstance(policies, dict)
    assert list(policies) == ["static-peak", "hpa", "hpa-tuned", "keda", "kueue-only", "recommended"]
    for row in [*policies.values(), summary["oracle"]]:
        assert set(row) >= KEYS
    assert [n for n, row in policies.items() if row["tuned_with_hindsight"]] == ["hpa-tuned"]
    assert summary["routing"] == "service"
    feas, orc, bound = summary["feasibility"], summary["oracle"], summary["lower_bound_accelerator_hours"]
    assert isinstance(feas, dict)
    assert isinstance(orc, dict)
    assert isinstance(bound, float)
    assert set(feas) == {"prefill_over_slo_fraction", "over_context_fraction"}
    assert 0 < bound < orc["serving_accelerator_hours"]
    trace = summary["trace"]
    assert isinstance(trace, dict)
    assert trace["name"] == "AzureLLMInferenceTrace_conv"
    assert trace["rate_scale"] == 1.0
    assert (out / "timeline.png").stat().st_size > 10_000
    events = [json.loads(line) for line in (out / "scale_events.jsonl").read_text().splitlines()]
    assert {e["policy"] for e in events} >= {"hpa", "recommended", "oracle"}
    assert all(e["from"] != e["to"] and e["reason"] for e in events)
    stdout = capsys.readouterr().out
    for name in ("static-peak", "hpa", "hpa-tuned", "keda", "kueue-only", "recommended", "oracle"):
        assert f"\n{name} " in stdout
    # The feasibility report comes before the table.
    assert stdout.index("feasibility on") < stdout.index("\npolicy ")
    # The README shows this run's table: it must be what the command prints today (a change that moves the
    # default run re-measures the README's block in the same commit).
    readme = re.search(r"```console\n\$ autoscaler simulate\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert readme is not None, "README.md has no `$ autoscaler simulate` console block"
    assert _table(stdout) == _table(readme.group(1)), "README's default-run table differs from the command's"


def _table(text: str) -> list[str]:
    """The result table's lines, from its header to the oracle's row, trailing spaces dropped."""
    lines = [line.rstrip() for line in text.splitlines()]
    start = next(i for i, line in enumerate(lines) if line.startswith("policy "))
    end = next(i for i, line in enumerate(lines) if line.startswith("oracle "))
    return lines[start:end + 1]


@pytest.mark.parametrize(
    ("trace", "extra"),
    [
        pytest.param(CONV, ["--policy", str(ROOT / "policies" / "recommended.yaml")], id="conv"),
        pytest.param(CODE, ["--cluster", str(TPU_CLUSTER), "--policy",
                            str(ROOT / "policies" / "recommended-jetstream.yaml")], id="code"),
    ],
)
def test_shared_traces_end_to_end(trace: Path, extra: list[str], tmp_path: Path) -> None:
    args = ["simulate", "--requests", str(shared_trace(trace)), "--duration", "900", "--rate-scale", "1.2",
            "--out", str(tmp_path), "--no-plot", *extra]
    assert cli.main(args) == 0
    summary = _summary(tmp_path)
    tr = summary["trace"]
    assert isinstance(tr, dict)
    assert tr["rate_scale"] == 1.2
    assert tr["duration_s"] <= 900
    oracle = summary["oracle"]
    assert isinstance(oracle, dict)
    assert oracle["cost_vs_oracle"] == 1.0
    # Same inputs, same seed: the very same numbers.
    assert cli.main([*args[:-len(extra) - 3], "--out", str(tmp_path / "again"), "--no-plot", *extra]) == 0
    assert _summary(tmp_path / "again") == summary


@pytest.mark.parametrize(
    ("make_args", "code", "fragment"),
    [
        pytest.param(lambda d: ["--requests", str(d / "bad.csv")], 1, "bad.csv:3: bad row", id="bad-trace-row"),
        pytest.param(lambda d: ["--cluster", str(d / "bad.yaml")], 1, "bad.yaml:1:1", id="bad-cluster"),
        pytest.param(lambda d: ["--baselines", "hpa,magic"], 2, "unknown baseline(s) magic", id="bad-baseline"),
        pytest.param(lambda d: ["--rate-scale", "0"], 2, "--rate-scale must be a positive", id="bad-scale"),
        pytest.param(lambda d: ["--policy", str(d / "bad-policy.yaml")], 1, "missing required field", id="bad-policy"),
    ],
)
def test_bad_input_is_one_clear_line(make_args: object, code: int, fragment: str, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "bad.csv").write_text("arrival_s,input_tokens,output_tokens\n0,1,1\n1,two,1\n")
    (tmp_path / "bad.yaml").write_text("kind: Nope\n")
    (tmp_path / "bad-policy.yaml").write_text("apiVersion: autoscaler.dev/v1alpha1\nkind: ScalingPolicy\n")
    assert callable(make_args)
    assert cli.main(["simulate", "--out", str(tmp_path / "o"), *make_args(tmp_path)]) == code
    err = capsys.readouterr().err
    assert err.startswith("autoscaler simulate: ")
    assert fragment in err
    assert "Traceback" not in err


def test_skip_bad_rows_reports_the_count(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = "\n".join(f"{i * 0.5},{500},{20}" for i in range(400))
    (tmp_path / "t.csv").write_text(f"arrival_s,input_tokens,output_tokens\n{rows}\nbad,1,1\n")
    args = ["simulate", "--requests", str(tmp_path / "t.csv"), "--skip-bad-rows", "--baselines", "hpa",
            "--out", str(tmp_path / "o"), "--no-plot"]
    assert cli.main(args) == 0
    assert "1 bad rows skipped" in capsys.readouterr().out
    trace = _summary(tmp_path / "o")["trace"]
    assert isinstance(trace, dict)
    assert trace["skipped_rows"] == 1


def test_bundled_recommended_policy_is_the_repository_one() -> None:
    bundled = cluster_mod.bundled("recommended.yaml").read_text()
    assert bundled == (ROOT / "policies" / "recommended.yaml").read_text()
