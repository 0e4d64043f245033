"""Scoring runs and writing them out: the stdout table and ``summary.json``.

Per run: SLO attainment (the fraction of all requests whose TTFT is within the SLO; a request never
served counts as a miss), TTFT and end-to-end percentiles, serving accelerator-hours (chips held by serving
replicas from admission until gone, cold starts and draining included, over the trace's span), the ratio
to the oracle, training chip-hours kept and lost, training goodput (kept chip-hours over the chip-hours
serving left free in the quota; checkpointed work only: what is computed but unsaved when the window ends is
``training_unsaved_chip_hours``), requests rejected by the servers (overload, too long) and abandoned by
clients (timeout), scale actions and preemptions.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from autoscaler.sim.oracle import OracleResult
from autoscaler.sim.simulation import RunResult


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile of ``values`` (inf allowed), q in [0, 100]."""
    if not values:
        return math.nan
    s = sorted(values)
    k = max(0, min(len(s) - 1, math.ceil(q / 100 * len(s)) - 1))
    return s[k]


def _finite(x: float, digits: int = 4) -> float | None:
    return round(x, digits) if math.isfinite(x) else None


def score(
    result: RunResult, *, slo_ttft_s: float, oracle: OracleResult | None, lower_bound_chip_s: float | None = None
) -> dict[str, Any]:
    """One run's row. ``oracle`` is the oracle re-solved at this run's own attainment (None: not computed)."""
    req = result.requests
    ttft = [f - a if not math.isnan(f) else math.inf for f, a in zip(req.first_token, req.arrival, strict=True)]
    e2e = [d - a if not math.isnan(d) else math.inf for d, a in zip(req.done, req.arrival, strict=True)]
    n = len(ttft)
    ok = sum(1 for x in ttft if x <= slo_ttft_s)
    hours = result.serving_chip_s / 3600
    useful = result.training_useful_chip_s / 3600
    free = result.free_chip_s / 3600
    return {
        "kind": result.kind,
        "pipeline": result.pipeline or None,
        "requests": n,
        "unserved_requests": sum(1 for x in ttft if not math.isfinite(x)),
        "rejected_requests": result.rejected_requests,
        "abandoned_requests": result.abandoned_requests,
        "slo_attainment": round(ok / n, 6) if n else 1.0,
        "ttft_p50_s": _finite(percentile(ttft, 50)),
        "ttft_p90_s": _finite(percentile(ttft, 90)),
        "ttft_p99_s": _finite(percentile(ttft, 99)),
        "e2e_p50_s": _finite(percentile(e2e, 50)),
        "e2e_p99_s": _finite(percentile(e2e, 99)),
        "serving_accelerator_hours": round(hours, 4),
        "mean_serving_chips": round(result.serving_chip_s / result.horizon_s, 3) if result.horizon_s else 0.0,
        **_versus_oracle(result, oracle, lower_bound_chip_s),
        "training_useful_chip_hours": round(useful, 4),
        "training_lost_chip_hours": round(result.training_lost_chip_s / 3600, 4),
        "training_unsaved_chip_hours": round(result.training_unsaved_chip_s / 3600, 4),
        "training_free_chip_hours": round(free, 4),
        "training_goodput": round(useful / free, 4) if free > 0 else None,
        "scale_actions": result.scale_actions,
        "preemptions": result.preemptions,
        **_slices(result),
        "notes": list(result.notes),
    }


def _slices(result: RunResult) -> dict[str, Any]:
    """Under a topology: every scale step must be a whole slice that fits (the audit's violations, none
    expected), and how long scale-ups waited because none fitted."""
    if not result.topology:
        return {}
    return {
        "slice_admissions": result.slice_admissions,
        "slice_violations": list(result.slice_violations),
        "unplaced_replica_hours": round(result.unplaced_replica_s / 3600, 4),
    }


def _versus_oracle(
    result: RunResult, oracle: OracleResult | None, lower_bound_chip_s: float | None
) -> dict[str, Any]:
    """The oracle at this run's attainment: its hours and the ratio, or, where no schedule of the search
    reaches that attainment, None and the gap (how far below it the best schedule stays)."""
    out: dict[str, Any] = {
        "lower_bound_hours_at_equal_slo": round(lower_bound_chip_s / 3600, 4) if lower_bound_chip_s is not None
        else None,
    }
    if oracle is None:
        return {"oracle_hours_at_equal_slo": None, "cost_vs_oracle": None, "oracle_attainment_gap": None, **out}
    if not oracle.met_target:
        gap = round(oracle.target - oracle.candidate.attainment, 6)
        return {"oracle_hours_at_equal_slo": None, "cost_vs_oracle": None, "oracle_attainment_gap": gap, **out}
    chip_s = oracle.candidate.chip_s
    return {
        "oracle_hours_at_equal_slo": round(chip_s / 3600, 4),
        "cost_vs_oracle": round(result.serving_chip_s / chip_s, 4) if chip_s > 0 else None,
        "oracle_attainment_gap": None,
        **out,
    }


COLUMNS = (
    ("policy", "{}", 14),
    ("SLO att.", "{:.2%}", 9),
    ("TTFT p50", "{:.2f}s", 9),
    ("TTFT p99", "{:.2f}s", 9),
    ("accel-h", "{:.2f}", 8),
    ("oracle-h", "{:.2f}", 8),
    ("×oracle", "{:.3f}", 8),
    ("train h", "{:.2f}", 8),
    ("lost h", "{:.2f}", 7),
    ("goodput", "{:.3f}", 8),
    ("actions", "{}", 8),
    ("preempt", "{}", 8),
)


def _cell(fmt: str, value: Any) -> str:
    if value is None:
        return "∞" if fmt.endswith("s") and fmt != "{}" else "-"
    return fmt.format(value)


def table(rows: dict[str, dict[str, Any]]) -> str:
    keys = ("slo_attainment", "ttft_p50_s", "ttft_p99_s", "serving_accelerator_hours", "oracle_hours_at_equal_slo",
            "cost_vs_oracle",
            "training_useful_chip_hours", "training_lost_chip_hours", "training_goodput", "scale_actions",
            "preemptions")
    first = max([COLUMNS[0][2], *(len(n) for n in rows)])
    widths = [first, *(w for _, _, w in COLUMNS[1:])]
    lines = ["  ".join(f"{name:>{w}}" if i else f"{name:<{w}}" for i, ((name, _, _), w) in enumerate(
        zip(COLUMNS, widths, strict=True)))]
    for name, row in rows.items():
        cells = [f"{name:<{first}}"]
        for (_, fmt, w), key in zip(COLUMNS[1:], keys, strict=True):
            cells.append(f"{_cell(fmt, row.get(key)):>{w}}")
        lines.append("  ".join(cells))
    return "\n".join(lines)


def write_scale_events(path: Path, results: list[RunResult]) -> None:
    """One JSON line per change of a run's desired count, with the decision's reason and sentence."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for r in results:
            for e in r.scale_events:
                f.write(json.dumps({"policy": r.name, "t_s": round(e.time, 3), "from": e.before, "to": e.after,
                                    "reason": e.reason, "message": e.message}, ensure_ascii=False) + "\n")


def write_summary(path: Path, summary: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=2, sort_keys=False, allow_nan=False) + "\n", encoding="utf-8")
