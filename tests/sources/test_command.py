"""``autoscaler observe`` and ``autoscaler record`` end to end: the real CLI against the real Prometheus."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.cli import main
from autoscaler.sources.command import UsageError, parse_duration, parse_time
from tests.sources.conftest import CLUSTER, Fleet
from tests.sources.realprom import free_port

V1 = {"model_name": "m", "engine": "0"}


def write_policy(tmp_path: Path, url: str, *, extra_signals: list[dict[str, Any]] | None = None) -> Path:
    doc = {
        "apiVersion": "autoscaler.dev/v1alpha1",
        "kind": "ScalingPolicy",
        "metadata": {"name": "vllm"},
        "spec": {
            "target": {"kind": "Deployment", "name": "vllm", "namespace": "llm"},
            "maxReplicas": 10,
            "evaluationPeriodSeconds": 1,
            "source": {"type": "prometheus", "url": url, "cluster": CLUSTER},
            "signals": [
                {"name": "waiting", "preset": "vllm.waiting"},
                {"name": "kv", "preset": "vllm.kv_cache_usage"},
                {"name": "tgi", "preset": "tgi.queue_size"},
                {"name": "load", "expr": "waiting + 1"},
                *(extra_signals or []),
            ],
            "policy": {"type": "queue", "work": ["waiting"], "capacityPerReplica": 4},
        },
    }
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def observe_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["observe", *args, "--once", "--json"]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


@pytest.mark.prometheus
def test_observe_shows_values_ages_sources_and_unknowns(
    fleet: Fleet, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet.apply(
        [
            ("vllm-a", "vllm:num_requests_waiting", 5, V1),
            ("vllm-b", "vllm:num_requests_waiting", 2, V1),
            ("vllm-a", "vllm:kv_cache_usage_perc", 0.5, V1),
            ("vllm-b", "vllm:kv_cache_usage_perc", 0.25, V1),
        ]
    )
    policy = write_policy(tmp_path, fleet.prometheus.url)

    view = observe_json(capsys, "--policy", str(policy))

    [target] = view["targets"]
    assert target["target"] == "Deployment/llm/vllm"
    signals = target["signals"]
    source = f"prometheus {fleet.prometheus.url}"
    assert signals["waiting"]["value"] == 7.0
    assert signals["waiting"]["state"] == "ok"
    assert signals["waiting"]["source"] == source
    assert 0.0 <= signals["waiting"]["age_s"] < 10.0
    assert signals["kv"]["value"] == pytest.approx(0.375)
    # The vllm target has no TGI pods: unknown, null, with the reason; never zero.
    assert signals["tgi"] == {
        "value": None,
        "age_s": None,
        "source": source,
        "state": "unknown",
        "reason": "missing: empty result",
    }
    assert signals["load"]["value"] == 8.0
    assert target["decision"]["state"] == "unknown"
    assert "--replicas" in target["decision"]["reason"]


@pytest.mark.prometheus
def test_observe_with_replicas_takes_a_decision_or_says_why_not(
    fleet: Fleet, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = write_policy(tmp_path, fleet.prometheus.url)
    view = observe_json(capsys, "--policy", str(policy), "--replicas", "2")
    decision = view["targets"][0]["decision"]
    # The policy algorithms are written elsewhere; until then observe says so instead of crashing.
    assert decision["state"] in ("ok", "unavailable")
    if decision["state"] == "ok":
        assert decision["current"] == 2
    else:
        assert "queue" in decision["reason"]


@pytest.mark.prometheus
def test_observe_human_output(fleet: Fleet, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fleet.apply([("vllm-a", "vllm:num_requests_waiting", 3, V1), ("vllm-b", "vllm:num_requests_waiting", 3, V1)])
    policy = write_policy(tmp_path, fleet.prometheus.url)
    assert main(["observe", "--policy", str(policy), "--once"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "Deployment/llm/vllm  (policy vllm)"
    waiting = next(line for line in out if line.strip().startswith("waiting"))
    assert " 6 " in waiting
    assert "age " in waiting
    tgi = next(line for line in out if line.strip().startswith("tgi"))
    assert "unknown" in tgi
    assert "missing: empty result" in tgi


def test_observe_with_prometheus_down_is_unknown_not_a_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = write_policy(tmp_path, f"http://127.0.0.1:{free_port()}")
    view = observe_json(capsys, "--policy", str(policy), "--deadline", "1")
    signals = view["targets"][0]["signals"]
    assert {s["state"] for s in signals.values()} == {"unknown"}
    assert "cannot reach" in signals["waiting"]["reason"]
    assert signals["load"]["reason"].startswith("depends on unknown signal(s)")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(None, "no such file", id="missing-file"),
        pytest.param("kind: [", "p.yaml:1:8: (yaml): ", id="bad-yaml"),
        pytest.param("apiVersion: autoscaler.dev/v1alpha1\nkind: ScalingPolicy\n", "missing required field",
                     id="invalid"),
        pytest.param("", "no scalingpolicy documents", id="empty"),
    ],
)
def test_bad_policy_files_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, message: str
) -> None:
    path = tmp_path / "p.yaml"
    if content is not None:
        path.write_text(content)
    assert main(["observe", "--policy", str(path), "--once"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("autoscaler observe: ")
    assert message in err.lower()


@pytest.mark.prometheus
def test_record_saves_query_range_bodies(fleet: Fleet, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fleet.apply([("vllm-a", "vllm:num_requests_waiting", 4, V1), ("vllm-b", "vllm:num_requests_waiting", 5, V1)])
    pods_signal = {"name": "direct", "preset": "vllm.waiting", "source": {"type": "pods"}}
    policy = write_policy(tmp_path, fleet.prometheus.url, extra_signals=[pods_signal])
    out = tmp_path / "rec"

    # End a little in the future: the last step then holds the newest sample whatever the rounding.
    end = str(time.time() + 3)
    argv = ["record", "--policy", str(policy), "--start", "-20s", "--end", end, "--step", "1s", "--out", str(out)]
    code = main(argv)

    assert code == 0
    assert sorted(p.name for p in out.iterdir()) == ["kv.json", "tgi.json", "waiting.json"]
    body = json.loads((out / "waiting.json").read_text())
    assert body["status"] == "success"
    assert body["data"]["resultType"] == "matrix"
    # One series per pod (labelled by pod): replay combines them by the core's one rule, as the controller does.
    last = {s["metric"]["pod"]: s["values"][-1][1] for s in body["data"]["result"]}
    assert last == {"vllm-6b7c8d-aaaaa": "4", "vllm-6b7c8d-bbbbb": "5"}
    assert json.loads((out / "tgi.json").read_text())["data"]["result"] == []
    printed = capsys.readouterr().out
    assert "direct: skipped (source pods keeps no history" in printed


def test_record_with_too_many_points_says_which_step(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = write_policy(tmp_path, "http://127.0.0.1:1")
    code = main(["record", "--policy", str(policy), "--start", "-30d", "--step", "15s", "--out", str(tmp_path / "o")])
    assert code == 1
    assert "use --step 236" in capsys.readouterr().err


NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("now", NOW, id="now"),
        pytest.param("-1h", NOW - 3600, id="relative-hours"),
        pytest.param("now-90s", NOW - 90, id="now-minus"),
        pytest.param("1700000000", 1_700_000_000.0, id="unix-seconds"),
        pytest.param("1700000000.5", 1_700_000_000.5, id="unix-fraction"),
        pytest.param("2026-11-30T08:00:00Z", 1_796_025_600.0, id="rfc3339-z"),
        pytest.param("2026-11-30T09:00:00+01:00", 1_796_025_600.0, id="rfc3339-offset"),
    ],
)
def test_parse_time(text: str, expected: float) -> None:
    assert parse_time(text, now=NOW) == expected


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("yesterday", id="word"),
        pytest.param("2026-11-30T08:00:00", id="no-zone"),
        pytest.param("-1y", id="unknown-unit"),
    ],
)
def test_parse_time_rejects(text: str) -> None:
    with pytest.raises(UsageError):
        parse_time(text, now=NOW)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        pytest.param("15", 15.0, id="bare"),
        pytest.param("1.5m", 90.0, id="minutes"),
        pytest.param("250ms", 0.25, id="ms"),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_observe_refreshes_until_interrupted(tmp_path: Path) -> None:
    policy = write_policy(tmp_path, f"http://127.0.0.1:{free_port()}")
    # A shell without job control starts background commands with SIGINT ignored and children inherit that (as
    # nohup relies on): under `./scripts/test.sh &` the CLI would rightly ignore the Ctrl-C sent below. A handled
    # signal is reset to its default on exec, so the child starts as from an interactive terminal.
    ignored = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "autoscaler.cli", "observe", "--policy", str(policy), "--json", "--deadline", "0.5"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    finally:
        signal.signal(signal.SIGINT, ignored)
    try:
        assert proc.stdout is not None
        views = [json.loads(proc.stdout.readline()) for _ in range(2)]  # blocks until each refresh is printed
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 0
    assert views[1]["time"] > views[0]["time"]
    assert all(v["targets"][0]["signals"]["waiting"]["state"] == "unknown" for v in views)


@pytest.mark.prometheus
def test_record_several_policies_go_to_subdirectories(fleet: Fleet, tmp_path: Path) -> None:
    first = yaml.safe_load(write_policy(tmp_path, fleet.prometheus.url).read_text())
    second = json.loads(json.dumps(first))
    second["metadata"]["name"] = "tgi"
    second["spec"]["target"]["name"] = "tgi"
    second["spec"]["signals"] = [{"name": "raw", "query": 'sum(tgi_queue_size{cluster="test"})'}]
    second["spec"]["policy"]["work"] = ["raw"]
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump_all([first, second]))
    out = tmp_path / "rec"

    code = main(["record", "--policy", str(path), "--start", "-10s", "--out", str(out)])

    assert code == 0
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*.json")) == [
        "tgi/raw.json",
        "vllm/kv.json",
        "vllm/tgi.json",
        "vllm/waiting.json",
    ]
    assert json.loads((out / "tgi" / "raw.json").read_text())["data"]["result"][0]["metric"] == {}


def test_record_refuses_an_empty_range(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = write_policy(tmp_path, "http://127.0.0.1:1")
    code = main(["record", "--policy", str(policy), "--start", "now", "--end", "-1h", "--out", str(tmp_path / "o")])
    assert code == 1
    assert "must be after --start" in capsys.readouterr().err


class _FailingSecondQuery:
    """A Prometheus HTTP API answering its first ``query_range`` with one empty matrix and every later one with a
    500 (a Prometheus that falls over half-way through a recording)."""

    def __init__(self) -> None:
        import http.server  # noqa: PLC0415 - only this stand-in
        import threading  # noqa: PLC0415

        answered = [0]

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._answer()

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self._answer()

            def _answer(self) -> None:
                answered[0] += 1
                if answered[0] == 1:
                    body, code = {"status": "success", "data": {"resultType": "matrix", "result": []}}, 200
                else:
                    body, code = {"status": "error", "errorType": "internal", "error": "fell over"}, 500
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_record_writes_nothing_when_a_query_fails_half_way(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """audit4's sweep (2026-12-08): the first signal's file was written before the second query failed, beside an
    older recording's files, and replay would have read the mix as one recording. Now nothing is written unless
    every query was answered, and the older files stay as they were."""
    prom = _FailingSecondQuery()
    out = tmp_path / "rec"
    out.mkdir()
    (out / "waiting.json").write_text("older recording")
    try:
        code = main(["record", "--policy", str(write_policy(tmp_path, prom.url)), "--start", "-20s", "--step", "1s",
                     "--out", str(out)])
    finally:
        prom.close()
    assert code == 1
    assert "query_range on" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["waiting.json"]
    assert (out / "waiting.json").read_text() == "older recording"
