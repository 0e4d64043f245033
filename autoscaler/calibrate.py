"""``autoscaler calibrate``: fit a serving profile's prefill rate and decode step from a real server's metrics.

A command over two engines: it reads recorded metrics with replay's reader and writes a simulator profile.

Input: a directory of Prometheus ``query_range`` dumps, one file per series kind, named as below (the
format ``autoscaler record`` writes: one response body per signal, one series per pod). Counters are
cumulative (``rate`` is taken here, from consecutive samples; a counter reset skips that interval):

====================  ==================================================================================
file                  what it holds (vLLM / TGI / JetStream examples)
====================  ==================================================================================
``ttft_sum.json``     TTFT histogram sum (``vllm:time_to_first_token_seconds_sum``,
                      ``jetstream_time_to_first_token_sum``)
``ttft_count.json``   TTFT histogram count (``…_count``)
``prompt_tokens.json`` prompt tokens processed (``vllm:prompt_tokens_total``, ``tgi_request_input_length_sum``)
``itl_sum.json``      inter-token latency histogram sum (``vllm:inter_token_latency_seconds_sum``, older
                      ``vllm:time_per_output_token_seconds_sum``, ``jetstream_time_per_output_token_sum``,
                      ``tgi_request_mean_time_per_token_duration_sum``)
``itl_count.json``    its count
``running.json``      gauge: sequences in the batch (``vllm:num_requests_running``, ``tgi_batch_current_size``)
``waiting.json``      optional gauge: requests queued (``vllm:num_requests_waiting``, ``tgi_queue_size``);
                      intervals with a queue are left out of the prefill fit (their TTFT includes waiting)
====================  ==================================================================================

A latency histogram may instead be recorded whole, as the server exposes it (``ttft.json``, ``itl.json``:
``{__name__=~"vllm:time_to_first_token_seconds_(bucket|sum|count)"}``): its ``_sum`` and ``_count`` are taken
(the count from the ``le="+Inf"`` bucket if ``_count`` is missing; ``_created`` and the other buckets are
ignored). Series are paired across files by the pod they come from (``namespace``/``pod``, else
``instance``), so metric-specific labels (``model_name``, ``engine``, TGI's ``method``) do not matter; two
series of one pod in one file (vLLM engines, a pattern that also matches ``_created``) are an error, not a
guess.

With ``--rates`` the five counter files hold per-second rates instead (``rate(x[1m])``, as ``record`` writes
a counter preset's rate form, or a ``query:`` signal over a histogram's ``_sum``/``_count``); an interval
then uses the rates sampled at its end, which a ``rate()`` over the recording's step covers exactly (the fits
use ratios, so the interval's length cancels).

Fits, per interval between consecutive samples of one pod (ordinary least squares):

* prefill: mean TTFT = ``a + mean prompt tokens / prefillTokensPerSecond`` over intervals with first tokens
  and (if ``waiting`` is given) an empty queue: ``prefillTokensPerSecond = 1 / slope``;
* decode: mean inter-token latency = ``baseMs + perSequenceMs × mean running batch`` over intervals with
  generated tokens.

Each fit reports its points, RMSE and R². The profile written is a copy of ``--base`` (a bundled or given
profile) with those numbers replaced and their ``sources`` saying where they came from.
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from autoscaler.replay.traces import Series, TraceError, read_query_range
from autoscaler.sim import cluster as cluster_mod
from autoscaler.sim import profiles as profiles_mod
from autoscaler.sim.yamldoc import SimFileError

PROG = "autoscaler calibrate"
REQUIRED = ("ttft_sum", "ttft_count", "prompt_tokens", "itl_sum", "itl_count", "running")
OPTIONAL = ("waiting",)
#: An interval counts as unqueued when the mean waiting gauge is at most this.
QUEUE_FREE = 0.5


class CalibrationError(ValueError):
    """Input that cannot be fitted; the message says which file and what to do."""


@dataclass(frozen=True)
class Fit:
    """``y = intercept + slope × x`` by least squares, with its error."""

    intercept: float
    slope: float
    points: int
    rmse: float
    r2: float


def fit_line(xs: list[float], ys: list[float]) -> Fit:
    n = len(xs)
    if n < 3:
        raise CalibrationError(f"only {n} usable intervals; record a longer window with varied load")
    mx, my = math.fsum(xs) / n, math.fsum(ys) / n
    sxx = math.fsum((x - mx) ** 2 for x in xs)
    if sxx <= 0:
        raise CalibrationError("the explanatory variable never varies; record a window with varied load")
    slope = math.fsum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    intercept = my - slope * mx
    resid = [y - (intercept + slope * x) for x, y in zip(xs, ys, strict=True)]
    ss_res = math.fsum(r * r for r in resid)
    ss_tot = math.fsum((y - my) ** 2 for y in ys)
    return Fit(intercept, slope, n, math.sqrt(ss_res / n), 1 - ss_res / ss_tot if ss_tot > 0 else 1.0)


PodKey = tuple[tuple[str, str], ...]


def _key(s: Series) -> PodKey:
    """Which pod a series belongs to: its ``namespace``/``pod`` labels (what Prometheus' Kubernetes discovery
    attaches to every series of a pod), else its ``instance``, else all its labels but the metric name and a
    histogram's ``le``. Metric-specific labels (vLLM's ``model_name``, TGI's ``method``) differ between the
    files of one pod, so they do not pair series."""
    labels = dict(s.labels)
    if "pod" in labels:
        return (("namespace", labels.get("namespace", "")), ("pod", labels["pod"]))
    if "instance" in labels:
        return (("instance", labels["instance"]),)
    return tuple((k, v) for k, v in s.labels if k not in ("__name__", "le"))


def _name(s: Series) -> str:
    labels = dict(s.labels)
    shown = ", ".join(f'{k}="{v}"' for k, v in s.labels if k != "__name__")
    return f"{labels.get('__name__', '')}{{{shown}}}"


def _by_pod(path: Path, series: list[Series]) -> dict[PodKey, Series]:
    """One series per pod; two for one pod is an error (summing or picking one silently would fit garbage)."""
    out: dict[PodKey, Series] = {}
    for s in series:
        key = _key(s)
        if key in out:
            raise CalibrationError(
                f"{path}: two series for one pod: {_name(out[key])} and {_name(s)}; record one series per pod "
                "(e.g. sum by (namespace, pod) (...) over vLLM's engines, or the exact metric name rather than a "
                "pattern that also matches its _created series)")
        out[key] = s
    return out


class _SumCount(NamedTuple):
    """A histogram's ``_sum`` and ``_count`` series, per pod."""

    sums: dict[PodKey, Series]
    counts: dict[PodKey, Series]


def _histogram(path: Path) -> _SumCount:
    """A histogram recorded whole (``{__name__=~"x_(bucket|sum|count)"}``, as a real server exposes it): its
    ``_sum`` and ``_count`` per pod, the count from the ``le="+Inf"`` bucket when ``_count`` was not recorded.
    Other buckets and ``_created`` carry nothing the fit needs (a mean needs the sum: buckets alone bound
    it only to their width)."""
    parts: dict[str, list[Series]] = {"sum": [], "count": [], "inf": []}
    for s in read_query_range(path):
        labels = dict(s.labels)
        name = labels.get("__name__", "")
        if not name:
            raise CalibrationError(f"{path}: a series without __name__ ({_name(s)}): record the histogram's "
                                   "series as the server exposes them (no function over them)")
        if name.endswith("_sum"):
            parts["sum"].append(s)
        elif name.endswith("_count"):
            parts["count"].append(s)
        elif name.endswith("_bucket") and labels.get("le", "").lstrip("+").lower() == "inf":
            parts["inf"].append(s)
    if not parts["sum"]:
        raise CalibrationError(f"{path}: no _sum series: a histogram's buckets do not give its mean; record its "
                               "_sum and _count too")
    count = parts["count"] or parts["inf"]
    if not count:
        raise CalibrationError(f"{path}: no _count series (nor a le=\"+Inf\" bucket); record the histogram's _count")
    return _SumCount(_by_pod(path, parts["sum"]), _by_pod(path, count))


#: A whole histogram's file, standing for the two files of its sum and count.
HISTOGRAMS = {"ttft": ("ttft_sum", "ttft_count"), "itl": ("itl_sum", "itl_count")}


def _load(directory: Path) -> dict[str, dict[PodKey, Series]]:
    out: dict[str, dict[PodKey, Series]] = {}
    for whole, (sum_name, count_name) in HISTOGRAMS.items():
        path = directory / f"{whole}.json"
        if path.is_file() and not (directory / f"{sum_name}.json").is_file():
            found = _histogram(path)
            out[sum_name], out[count_name] = found.sums, found.counts
    for name in (*REQUIRED, *OPTIONAL):
        if name in out:
            continue
        path = directory / f"{name}.json"
        if not path.is_file():
            if name in REQUIRED:
                raise CalibrationError(f"{path}: missing; calibrate needs {', '.join(f'{n}.json' for n in REQUIRED)}"
                                       " (or ttft.json / itl.json holding a whole histogram; docs/simulate.md, "
                                       "'Calibrating')")
            continue
        out[name] = _by_pod(path, read_query_range(path))
    return out


def _at(series: Series, t: float) -> float | None:
    """The value sampled at exactly ``t`` (series are read at the same step), else None."""
    lo, hi = 0, len(series.times)
    while lo < hi:
        mid = (lo + hi) // 2
        if series.times[mid] < t:
            lo = mid + 1
        else:
            hi = mid
    if lo < len(series.times) and abs(series.times[lo] - t) < 1e-6:
        return series.values[lo]
    return None


class Points(NamedTuple):
    """The points each fit is made from, one per pod interval: ``(x, y)`` pairs."""

    #: (mean prompt tokens, mean TTFT).
    prefill: list[tuple[float, float]]
    #: (mean batch, mean inter-token latency).
    decode: list[tuple[float, float]]


def points(data: dict[str, dict[PodKey, Series]], *, rates: bool = False) -> Points:
    """(mean prompt tokens, mean TTFT) and (mean batch, mean inter-token latency) per pod interval."""
    prefill: list[tuple[float, float]] = []
    decode: list[tuple[float, float]] = []
    pods = set(data["ttft_sum"])
    for name in REQUIRED[1:]:
        pods &= set(data[name])
    single = all(len(data[n]) == 1 for n in REQUIRED)
    if not pods and single:
        # One series each with different labels: one server.
        pods = {()}
        data = {n: {(): next(iter(v.values()))} for n, v in data.items()}
    if not pods:
        raise CalibrationError("no pod appears in every file (series are paired by their labels); record them "
                               "from the same pods")
    for pod in sorted(pods):
        s = {n: data[n][pod] for n in data if pod in data[n]}
        times = s["ttft_sum"].times
        for t0, t1 in itertools.pairwise(times):
            v = {}
            for n in (*REQUIRED, *OPTIONAL):
                if n not in s:
                    continue
                a, b = _at(s[n], t0), _at(s[n], t1)
                if a is None or b is None:
                    break
                v[n] = (a, b)
            else:
                counted = ("ttft_sum", "ttft_count", "prompt_tokens", "itl_sum", "itl_count")
                # Counters: the interval's increase. Rates (per second, as a rate() query at the recording's
                # step records them): the sample at the interval's end covers it; every fit uses ratios, in
                # which the interval's length cancels.
                d = ({n: v[n][1] for n in counted} if rates else {n: v[n][1] - v[n][0] for n in counted})
                if any(x < 0 for x in d.values()):
                    continue  # a counter reset (the pod restarted)
                queued = "waiting" in v and (v["waiting"][0] + v["waiting"][1]) / 2 > QUEUE_FREE
                if d["ttft_count"] > 0 and d["prompt_tokens"] > 0 and not queued:
                    prefill.append((d["prompt_tokens"] / d["ttft_count"], d["ttft_sum"] / d["ttft_count"]))
                if d["itl_count"] > 0:
                    batch = (v["running"][0] + v["running"][1]) / 2
                    decode.append((batch, d["itl_sum"] / d["itl_count"]))
    return Points(prefill, decode)


@dataclass(frozen=True)
class Calibration:
    prefill: Fit
    decode: Fit

    @property
    def prefill_tokens_per_second(self) -> float:
        return 1.0 / self.prefill.slope

    @property
    def base_ms(self) -> float:
        return self.decode.intercept * 1000

    @property
    def per_sequence_ms(self) -> float:
        return self.decode.slope * 1000


def calibrate(directory: Path, *, rates: bool = False) -> Calibration:
    found = points(_load(directory), rates=rates)
    pre, dec = found.prefill, found.decode
    try:
        pf = fit_line([x for x, _ in pre], [y for _, y in pre])
    except CalibrationError as exc:
        raise CalibrationError(f"prefill fit: {exc}") from None
    try:
        df = fit_line([x for x, _ in dec], [y for _, y in dec])
    except CalibrationError as exc:
        raise CalibrationError(f"decode fit: {exc}") from None
    if pf.slope <= 0:
        raise CalibrationError("prefill fit: TTFT does not grow with prompt length in these intervals "
                               f"(slope {pf.slope:.3g} s/token); the window is too short or always queued")
    if df.intercept <= 0 or df.slope < 0:
        raise CalibrationError(f"decode fit: step = {df.intercept * 1000:.3g} ms + {df.slope * 1000:.3g} ms × batch "
                               "is not physical; record a window where the batch size varies")
    return Calibration(pf, df)


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "calibrate",
        help="fit a simulator profile's prefill rate and decode step from a real server's recorded metrics",
        description=(__doc__ or "").replace("``", ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--metrics", type=Path, required=True, metavar="DIR",
                        help="directory of query_range dumps: ttft_sum, ttft_count, prompt_tokens, itl_sum, "
                             "itl_count, running (and optional waiting) .json")
    parser.add_argument("--out", type=Path, required=True, metavar="PROFILE",
                        help="profiles YAML to write (one profile; use it with a cluster's profilesFile)")
    parser.add_argument("--base", default="tgi-gemma2-9b-2xl4", metavar="NAME",
                        help="profile whose other numbers are kept (default tgi-gemma2-9b-2xl4)")
    parser.add_argument("--profiles", type=Path, metavar="FILE", help="profiles file holding --base (default bundled)")
    parser.add_argument("--name", default="calibrated", metavar="NAME", help="name of the written profile")
    parser.add_argument("--rates", action="store_true",
                        help="the counter files hold per-second rates (recorded as rate(...[1m]) queries, e.g. by "
                             "record with counter presets' rate form) instead of cumulative counters")
    parser.set_defaults(func=run)


def _fail(message: str, code: int = 1) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return code


def run(args: argparse.Namespace) -> int:
    try:
        profs = profiles_mod.load(args.profiles or cluster_mod.bundled("profiles.yaml"))
    except SimFileError as exc:
        return _fail(str(exc))
    if args.base not in profs:
        return _fail(f"no profile {args.base!r}; known: {', '.join(sorted(profs))}", 2)
    try:
        cal = calibrate(args.metrics, rates=args.rates)
    except (CalibrationError, TraceError) as exc:
        return _fail(str(exc))
    base = profs[args.base]
    doc = base.model_dump(by_alias=True, exclude_none=True, mode="json")
    where = f"autoscaler calibrate --metrics {args.metrics}"
    doc["prefillTokensPerSecond"] = round(cal.prefill_tokens_per_second, 1)
    doc["decodeStep"] = {"baseMs": round(cal.base_ms, 3), "perSequenceMs": round(cal.per_sequence_ms, 4)}
    doc.setdefault("sources", {})
    doc["sources"]["prefillTokensPerSecond"] = (
        f"{where}: fit of mean TTFT on mean prompt over {cal.prefill.points} unqueued intervals, "
        f"RMSE {cal.prefill.rmse:.3g} s, R² {cal.prefill.r2:.3f}")
    doc["sources"]["decodeStep"] = (
        f"{where}: fit of mean inter-token latency on mean batch over {cal.decode.points} intervals, "
        f"RMSE {cal.decode.rmse * 1000:.3g} ms, R² {cal.decode.r2:.3f}")
    doc["source"] = f"calibrated from {args.metrics} (base profile {args.base})"
    try:
        profiles_mod.ProfileFile.model_validate({"profiles": {args.name: doc}})
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(yaml.safe_dump({"profiles": {args.name: doc}}, sort_keys=False, allow_unicode=True),
                            encoding="utf-8")
    except OSError as exc:
        return _fail(f"cannot write {args.out}: {exc}")
    print(f"prefill: {cal.prefill_tokens_per_second:.0f} tokens/s (+{cal.prefill.intercept:.3f} s), "
          f"{cal.prefill.points} intervals, RMSE {cal.prefill.rmse:.3g} s, R² {cal.prefill.r2:.3f}")
    print(f"decode step: {cal.base_ms:.2f} ms + {cal.per_sequence_ms:.3f} ms × batch, {cal.decode.points} "
          f"intervals, RMSE {cal.decode.rmse * 1000:.3g} ms, R² {cal.decode.r2:.3f}")
    print(f"wrote profile {args.name} to {args.out}")
    return 0
