"""``autoscaler replay`` end to end: the bundled example, a Prometheus dump directory, and bad input."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from autoscaler import cli
from autoscaler.replay import command

DATA = Path(__file__).parent / "data"


def replay(out: Path, *args: str) -> int:
    return cli.main(["replay", "--out", str(out), *args])


def outputs(out: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    lines = (out / "decisions.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines], json.loads((out / "summary.json").read_text(encoding="utf-8"))


def test_example_recorded_with_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert replay(tmp_path, "--example") == 0
    decisions, summary = outputs(tmp_path)
    assert summary["mode"] == "recorded"
    assert summary["evaluations"] == len(decisions) == 233
    assert (tmp_path / "replay.svg").read_text(encoding="utf-8").startswith("<svg xmlns=\"http://www.w3.org/2000/svg\"")
    assert all(d["current"] == d["recorded"] == 5 for d in decisions)  # the recorded static fleet
    # The four-minute scrape outage in the example: stale ⇒ hold with MetricsUnknown.
    held = [d for d in decisions if d["reason"] == "MetricsUnknown"]
    assert held
    assert summary["evaluations_with_unknown_signals"] == len(held)
    assert all(d["desired"] == d["current"] for d in held)
    assert all("stale" in d["signals"]["backlog"]["reason"] for d in held)
    assert summary["max_replicas"] > 5  # the backlog peaks ask for more than the recorded 5
    out = capsys.readouterr().out
    assert "mode recorded: 233 evaluations every 15s" in out
    assert "scale events (recorded mode" in out
    # A summary and the events (messages wrapped to the terminal, so several lines each), not every evaluation.
    rows = [ln for ln in out.splitlines() if ln.startswith("  2023-")]
    assert 0 < len(rows) <= 40 < summary["evaluations"]


def test_example_whatif_with_actuation_delay(tmp_path: Path) -> None:
    assert replay(tmp_path, "--example", "--mode", "whatif", "--actuation-delay", "60", "--no-plot", "-q") == 0
    decisions, summary = outputs(tmp_path)
    assert summary["mode"] == "whatif"
    assert not (tmp_path / "replay.svg").exists()
    for before, after in itertools.pairwise(decisions):
        assert after["current"] == before["desired"]  # the policy's decisions are the count
    starting = [d for d in decisions if d["replicas"]["starting"] > 0]
    assert starting  # new replicas spend 60 s starting
    assert all(d["replicas"]["spec"] == d["replicas"]["ready"] + d["replicas"]["starting"] for d in decisions)
    assert summary["scale_ups"] >= 1
    assert summary["scale_ups"] + summary["scale_downs"] < 20  # its own count damps the flapping of recorded mode


def test_prometheus_dump_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = replay(
        tmp_path, "--policy", str(DATA / "dump-policy.yaml"), "--metrics", str(DATA / "prom_dump"), "--no-plot"
    )
    assert code == 0
    decisions, summary = outputs(tmp_path)
    assert summary["evaluations"] == 40
    assert [d["recorded"] for d in decisions] == [1] * 10 + [2] * 30  # from replicas.json
    assert any("2 series" in n and "combined by sum" in n for n in summary["notes"])
    # The burst: 30 + 25 = 55 summed over both pods → ceil(55 / 10) = 6.
    assert decisions[12]["signals"]["backlog"]["value"] == 55.0
    assert decisions[12]["desired"] > decisions[12]["current"]
    # One pod's failed scrape ("NaN") makes the total unknown: hold.
    nan = decisions[15]
    assert nan["reason"] == "MetricsUnknown"
    assert nan["signals"]["backlog"]["input"] == "NaN"
    assert summary["evaluations_with_unknown_signals"] == 1
    assert "combined by sum" in capsys.readouterr().out


def other(doc: str) -> str:
    """The same policy under another name, for another target (one policy per target)."""
    return doc.replace("name: dump-backlog", "name: other").replace("name: jetstream-llama", "name: other")


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        pytest.param(["--policy", "{tmp}/none.yaml", "--metrics", "{tmp}/t.csv"], 1, "{tmp}/none.yaml", id="no-policy"),
        pytest.param(
            ["--policy", "{tmp}/bad.yaml", "--metrics", "{tmp}/t.csv"], 1, "{tmp}/bad.yaml", id="invalid-policy"
        ),
        pytest.param(
            ["--policy", "{data}/dump-policy.yaml", "--metrics", "{tmp}/nan.csv"],
            1,
            "{tmp}/nan.csv:3: column 'backlog': 'n/a' is not a number",
            id="bad-csv-row",
        ),
        pytest.param(
            ["--policy", "{data}/dump-policy.yaml", "--metrics", "{tmp}/kv.csv"],
            1,
            "no data for signal(s) backlog of policy 'dump-backlog' (the trace has: kv)",
            id="missing-signal",
        ),
        pytest.param(
            ["--policy", "{data}/dump-policy.yaml", "--metrics", "{tmp}/norep.csv"],
            1,
            "no recorded replica count",
            id="recorded-without-replicas",
        ),
        pytest.param(
            ["--policy", "{tmp}/two.yaml", "--metrics", "{tmp}/t.csv"], 1, "pick one with --name", id="two-policies"
        ),
        pytest.param(["--metrics", "{tmp}/t.csv"], 2, "needs --policy FILE", id="no-policy-option"),
        pytest.param(["--example", "--actuation-delay", "30"], 2, "only applies to --mode whatif", id="delay-recorded"),
    ],
)
def test_bad_input_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], code: int, message: str
) -> None:
    write(tmp_path / "t.csv", "timestamp,backlog,replicas\n0,1,1\n")
    write(tmp_path / "nan.csv", "timestamp,backlog,replicas\n0,1,1\n15,n/a,1\n")
    write(tmp_path / "kv.csv", "timestamp,kv,replicas\n0,1,1\n")
    write(tmp_path / "norep.csv", "timestamp,backlog\n0,1\n")
    write(tmp_path / "bad.yaml", "apiVersion: autoscaler.dev/v1alpha1\nkind: ScalingPolicy\nspec: {}\n")
    doc = (DATA / "dump-policy.yaml").read_text(encoding="utf-8")
    write(tmp_path / "two.yaml", doc + "---\n" + other(doc))
    fill = {"tmp": str(tmp_path), "data": str(DATA)}
    assert replay(tmp_path / "out", *[a.format(**fill) for a in args], "--no-plot") == code
    err = capsys.readouterr().err
    assert err.startswith("autoscaler replay: ")
    assert err.count("\n") == 1
    assert message.format(**fill) in err
    assert "Traceback" not in err


def test_name_picks_one_policy(tmp_path: Path) -> None:
    doc = (DATA / "dump-policy.yaml").read_text(encoding="utf-8")
    two = write(tmp_path / "two.yaml", doc + "---\n" + other(doc))
    args = ["--policy", str(two), "--name", "other", "--metrics", str(DATA / "prom_dump"), "--no-plot", "-q"]
    assert replay(tmp_path / "out", *args) == 0
    assert outputs(tmp_path / "out")[1]["policy"] == "other"


def test_quiet_prints_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert replay(tmp_path, "--example", "--no-plot", "--quiet") == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == ""  # no progress bar: not a terminal, and --quiet


def test_usage_errors_from_argparse() -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["replay", "--example", "--mode", "later"])
    assert exc.value.code == 2


def test_example_files_are_packaged() -> None:
    assert command.EXAMPLE_POLICY.is_file()
    assert command.EXAMPLE_TRACE.is_file()
    assert (command.EXAMPLE_DIR / "ATTRIBUTION.md").is_file()


POLICIES = sorted((Path(__file__).resolve().parents[2] / "policies").glob("*.yaml"))


@pytest.mark.parametrize("policy", [pytest.param(p, id=p.stem) for p in POLICIES])
def test_a_reading_near_the_largest_float_is_invalid_not_a_failure_of_the_core(
    policy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A trace (or a broken exporter) with readings of 1e308: every bundled policy holds on them as invalid
    (``signals.MAX_READING``); before, hpa's milli-units, slo's and disaggregated's products overflowed to
    infinity and the evaluation failed inside the core (slo: 'cannot convert float NaN to integer')."""
    import yaml  # noqa: PLC0415

    doc = next(d for d in yaml.safe_load_all(policy.read_text(encoding="utf-8")) if d)
    names = [s["name"] for s in doc["spec"].get("signals", [])]
    rows = ["timestamp," + ",".join(names) + ",replicas"]
    rows += [f"{1_700_000_000 + 15 * i}," + ",".join(["1e308"] * len(names)) + ",3" for i in range(4)]
    trace = tmp_path / "trace.csv"
    trace.write_text("\n".join(rows) + "\n", encoding="utf-8")
    many = doc["spec"]["policy"]["type"] == "disaggregated"  # several targets: whatif only
    code = replay(tmp_path / "out", "--policy", str(policy), "--name", doc["metadata"]["name"], "--metrics",
                  str(trace), "--no-plot", "-q", *(["--mode", "whatif"] if many else []))
    assert code == 0, capsys.readouterr().err
    decisions, _ = outputs(tmp_path / "out")
    assert decisions
    assert all("out of range (1e+308 > 1e+15)" in str(d["signals"]) for d in decisions)
