"""``autoscaler calibrate`` recovers known numbers from synthetic server counters, reports its error, and
fails clearly on unusable input."""

from __future__ import annotations

import itertools
import json
import random
import re
from pathlib import Path

import pytest

from autoscaler import calibrate, cli
from autoscaler.sim import profiles

TPS, BASE_S, PER_S = 4000.0, 0.030, 0.0005


def _dump(path: Path, pods: dict[str, list[tuple[float, float]]]) -> None:
    result = [{"metric": {"pod": pod}, "values": [[t, repr(v)] for t, v in samples]} for pod, samples in pods.items()]
    path.write_text(json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}))


def _record(directory: Path, *, noise: float = 0.0, queued: bool = False, seed: int = 1,
            rates: bool = False) -> None:
    """Two pods, 15 s steps: per interval a random request mix and batch, counters as a server exports them."""
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    files: dict[str, dict[str, list[tuple[float, float]]]] = {
        n: {} for n in (*calibrate.REQUIRED, "waiting")
    }
    for pod in ("p-0", "p-1"):
        acc = dict.fromkeys(("ttft_sum", "ttft_count", "prompt_tokens", "itl_sum", "itl_count"), 0.0)
        for by_pod in files.values():
            by_pod[pod] = []
        for k in range(40):
            t = 1_700_000_000.0 + 15 * k
            batch = rng.uniform(1, 40)
            waiting = rng.choice([0.0, 5.0]) if queued else 0.0
            if k:
                reqs = rng.randint(5, 20)
                prompt = rng.uniform(200, 3000)
                ttft = 0.02 + prompt / TPS + (2.0 if waiting else 0.0)
                acc["ttft_count"] += reqs
                acc["prompt_tokens"] += reqs * prompt
                acc["ttft_sum"] += reqs * ttft * (1 + rng.gauss(0, noise))
                tokens = rng.randint(500, 2000)
                acc["itl_count"] += tokens
                acc["itl_sum"] += tokens * (BASE_S + PER_S * batch) * (1 + rng.gauss(0, noise))
            for name, value in acc.items():
                files[name][pod].append((t, value))
            files["running"][pod].append((t, batch))
            files["waiting"][pod].append((t, waiting))
    if rates:
        # What a rate() query records: each interval's increase over its length, stamped at its end; the
        # first sample repeats the second so every interval carries one rate at both ends.
        for name in ("ttft_sum", "ttft_count", "prompt_tokens", "itl_sum", "itl_count"):
            for pod, samples in files[name].items():
                r = [(t1, (v1 - v0) / (t1 - t0)) for (t0, v0), (t1, v1) in itertools.pairwise(samples)]
                files[name][pod] = [(samples[0][0], r[0][1]), *r]
    for name, pods in files.items():
        _dump(directory / f"{name}.json", pods)


def test_recovers_the_numbers_exactly_without_noise(tmp_path: Path) -> None:
    _record(tmp_path)
    cal = calibrate.calibrate(tmp_path)
    assert cal.prefill_tokens_per_second == pytest.approx(TPS, rel=1e-6)
    # The running gauge is the mean of the interval's two samples, exactly the batch the fit needs only
    # when the batch is steady; here it jumps, so the decode fit carries that error and says so.
    assert cal.base_ms == pytest.approx(BASE_S * 1000, rel=0.2)
    assert cal.per_sequence_ms == pytest.approx(PER_S * 1000, rel=0.2)
    assert cal.prefill.r2 > 0.999


def test_reads_rates_as_a_rate_query_records_them(tmp_path: Path) -> None:
    """Rates stamped at each interval's end (a rate() over the recording's step) give the same fit as counters."""
    _record(tmp_path / "c")
    _record(tmp_path / "r", rates=True)
    from_counters = calibrate.calibrate(tmp_path / "c")
    from_rates = calibrate.calibrate(tmp_path / "r", rates=True)
    assert from_rates.prefill_tokens_per_second == pytest.approx(TPS, rel=1e-6)
    assert from_rates.base_ms == pytest.approx(from_counters.base_ms, rel=1e-6)
    assert from_rates.per_sequence_ms == pytest.approx(from_counters.per_sequence_ms, rel=1e-6)


def test_reports_the_error_of_a_noisy_fit(tmp_path: Path) -> None:
    _record(tmp_path, noise=0.05)
    cal = calibrate.calibrate(tmp_path)
    assert cal.prefill_tokens_per_second == pytest.approx(TPS, rel=0.1)
    assert cal.prefill.rmse > 0
    assert cal.decode.points == 2 * 39


def test_queued_intervals_are_left_out_of_the_prefill_fit(tmp_path: Path) -> None:
    _record(tmp_path, queued=True)
    cal = calibrate.calibrate(tmp_path)
    # With the queued intervals (TTFT + 2 s of waiting) the slope would be meaningless; without them exact.
    assert cal.prefill_tokens_per_second == pytest.approx(TPS, rel=1e-6)
    assert cal.prefill.points < cal.decode.points


def test_cli_writes_a_profile_the_simulator_loads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _record(tmp_path / "m", noise=0.02)
    out = tmp_path / "profile.yaml"
    assert cli.main(["calibrate", "--metrics", str(tmp_path / "m"), "--out", str(out), "--name", "mine"]) == 0
    prof = profiles.load(out)["mine"]
    assert prof.prefill_tokens_per_second == pytest.approx(TPS, rel=0.1)
    assert "R²" in prof.sources["decodeStep"]
    assert "RMSE" in capsys.readouterr().out


def test_missing_file_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _record(tmp_path)
    (tmp_path / "itl_sum.json").unlink()
    assert cli.main(["calibrate", "--metrics", str(tmp_path), "--out", str(tmp_path / "p.yaml")]) == 1
    err = capsys.readouterr().err
    assert "itl_sum.json: missing" in err
    assert "Traceback" not in err


def test_every_bundled_profile_parameter_has_a_source_or_says_estimate() -> None:
    from autoscaler.sim import cluster as cluster_mod  # noqa: PLC0415

    for name, prof in profiles.load(cluster_mod.bundled("profiles.yaml")).items():
        missing = [p for p in profiles.SOURCED if not prof.sources.get(p, "").strip()]
        assert missing == [], f"{name}: no source for {missing}"


# ----- a real server's scrape format -----------------------------------------------------------------------
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
#: vLLM's bucket bounds for TTFT and inter-token latency (seconds; the last is +Inf).
TTFT_LE = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
ITL_LE = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)


def _histogram_text(name: str, help_: str, labels: str, bounds: tuple[float, ...], counts: list[float],
                    total: float) -> list[str]:
    lines = [f"# HELP {name} {help_}", f"# TYPE {name} histogram"]
    cum = 0.0
    for le, c in zip((*[f"{b:g}" for b in bounds], "+Inf"), counts, strict=True):
        cum += c
        lines.append(f'{name}_bucket{{{labels},le="{le}"}} {cum!r}')
    lines += [f"{name}_count{{{labels}}} {cum!r}", f"{name}_sum{{{labels}}} {total!r}",
              f"{name}_created{{{labels}}} 1.7e+09"]
    return lines


def _scrape_recording(directory: Path, layout: str) -> None:
    """Two vLLM pods scraped every 15 s: each scrape is the text exposition vLLM serves on /metrics
    (# HELP/# TYPE, histograms as cumulative _bucket{le}, _sum, _count and _created, counters as _total and
    _created, labels engine and model_name), parsed by the Prometheus client's own text parser; the series
    get the target labels Prometheus' pod discovery adds, and each file holds what a query_range of the
    recorded query returns. ``layout``: ``parts`` (one exact metric name per file), ``whole`` (each latency
    histogram recorded whole, ``{__name__=~"..._(bucket|sum|count|created)"}``), or ``pattern`` (the prompt
    counter recorded by a pattern that also matches its _created series)."""
    from prometheus_client.parser import text_string_to_metric_families  # noqa: PLC0415

    rng = random.Random(3)
    series: dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[float, float]]] = {}
    for pod in ("vllm-0", "vllm-1"):
        ttft_counts, itl_counts = [0.0] * (len(TTFT_LE) + 1), [0.0] * (len(ITL_LE) + 1)
        acc = dict.fromkeys(("ttft_sum", "prompt", "itl_sum"), 0.0)
        labels = f'engine="0",model_name="{MODEL}"'
        for k in range(40):
            t = 1_700_000_000.0 + 15 * k
            batch = rng.uniform(1, 40)
            if k:
                reqs, prompt = rng.randint(5, 20), rng.uniform(200, 3000)
                ttft = 0.02 + prompt / TPS
                ttft_counts[sum(b < ttft for b in TTFT_LE)] += reqs
                acc["ttft_sum"] += reqs * ttft
                acc["prompt"] += reqs * prompt
                tokens, itl = rng.randint(500, 2000), BASE_S + PER_S * batch
                itl_counts[sum(b < itl for b in ITL_LE)] += tokens
                acc["itl_sum"] += tokens * itl
            text = "\n".join([
                "# HELP vllm:num_requests_running Number of requests in model execution batches.",
                "# TYPE vllm:num_requests_running gauge", f"vllm:num_requests_running{{{labels}}} {batch!r}",
                "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
                "# TYPE vllm:num_requests_waiting gauge", f"vllm:num_requests_waiting{{{labels}}} 0.0",
                "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.",
                "# TYPE vllm:prompt_tokens_total counter", f"vllm:prompt_tokens_total{{{labels}}} {acc['prompt']!r}",
                f"vllm:prompt_tokens_created{{{labels}}} 1.7e+09",
                *_histogram_text("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                                 labels, TTFT_LE, ttft_counts, acc["ttft_sum"]),
                *_histogram_text("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                                 labels, ITL_LE, itl_counts, acc["itl_sum"]),
            ]) + "\n"
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    target = {"namespace": "llm", "pod": pod, "instance": f"10.0.0.{pod[-1]}:8000",
                              "job": "llm/vllm-podmonitor"}
                    key = (sample.name, tuple(sorted({**sample.labels, **target}.items())))
                    series.setdefault(key, []).append((t, sample.value))

    def query(path: Path, match: str) -> None:
        result = [{"metric": {"__name__": name, **dict(labels)}, "values": [[t, repr(v)] for t, v in samples]}
                  for (name, labels), samples in sorted(series.items()) if re.fullmatch(match, name)]
        path.write_text(json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}))

    directory.mkdir(parents=True, exist_ok=True)
    query(directory / "running.json", "vllm:num_requests_running")
    query(directory / "waiting.json", "vllm:num_requests_waiting")
    query(directory / "prompt_tokens.json",
          "vllm:prompt_tokens_.*" if layout == "pattern" else "vllm:prompt_tokens_total")
    for short, metric in (("ttft", "vllm:time_to_first_token_seconds"), ("itl", "vllm:inter_token_latency_seconds")):
        if layout == "whole":
            query(directory / f"{short}.json", f"{metric}_(bucket|sum|count|created)")
        else:
            query(directory / f"{short}_sum.json", f"{metric}_sum")
            query(directory / f"{short}_count.json", f"{metric}_count")


@pytest.mark.parametrize("layout", ["parts", "whole"])
def test_reads_a_vllm_scrape_as_prometheus_records_it(tmp_path: Path, layout: str) -> None:
    """The text exposition vLLM serves, through Prometheus, recorded per metric or histogram by histogram:
    the same numbers as from plain counters."""
    _scrape_recording(tmp_path, layout)
    cal = calibrate.calibrate(tmp_path)
    assert cal.prefill_tokens_per_second == pytest.approx(TPS, rel=1e-6)
    assert cal.base_ms == pytest.approx(BASE_S * 1000, rel=0.2)
    assert cal.per_sequence_ms == pytest.approx(PER_S * 1000, rel=0.2)
    assert cal.prefill.points == cal.decode.points == 2 * 39


def test_a_pattern_that_also_matches_created_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``vllm:prompt_tokens_.*`` returns the counter and its _created timestamp for each pod: fitting either
    silently would be garbage, so the run stops and names both."""
    _scrape_recording(tmp_path, "pattern")
    assert cli.main(["calibrate", "--metrics", str(tmp_path), "--out", str(tmp_path / "p.yaml")]) == 1
    err = capsys.readouterr().err
    assert "two series for one pod" in err
    assert "vllm:prompt_tokens_created" in err
    assert "vllm:prompt_tokens_total" in err


def test_a_histogram_without_its_sum_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _scrape_recording(tmp_path, "whole")
    doc = json.loads((tmp_path / "ttft.json").read_text())
    doc["data"]["result"] = [s for s in doc["data"]["result"] if not s["metric"]["__name__"].endswith("_sum")]
    (tmp_path / "ttft.json").write_text(json.dumps(doc))
    assert cli.main(["calibrate", "--metrics", str(tmp_path), "--out", str(tmp_path / "p.yaml")]) == 1
    assert "no _sum series" in capsys.readouterr().err
