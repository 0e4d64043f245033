"""``autoscaler calibrate`` recovers known numbers from synthetic server counters, reports its error, and
fails clearly on unusable input."""

from __future__ import annotations

import itertools
import json
import random
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
