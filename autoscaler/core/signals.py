"""Judging raw signal readings: a value is usable, or unknown with a reason. Never silently zero.

A reading is unknown when it is missing, came with a source error, is NaN, infinite or negative, or is
older than its ``maxAgeSeconds``. Composite signals (``expr``) are evaluated with ``simpleeval`` over
the usable values (never ``eval``); a composite that depends on an unknown signal is itself unknown.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from simpleeval import SimpleEval

from autoscaler.core.model import SignalReading, SignalState, SignalValue
from autoscaler.core.spec import Spec

#: Samples stamped slightly in the future (clock skew between hosts) still count as fresh.
FUTURE_SKEW_S = 5.0


def _clamp(value: float, low: float, high: float) -> float:
    return max(low, min(high, value))


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "max": max,
    "min": min,
    "abs": abs,
    "ceil": math.ceil,
    "floor": math.floor,
    "sqrt": math.sqrt,
    "clamp": _clamp,
}


def judge(name: str, reading: SignalReading | None, *, now: float, max_age_s: float) -> SignalValue:
    """Turn one raw reading into an ok value or an unknown with the reason."""
    if reading is None:
        return SignalValue(name, SignalState.UNKNOWN, None, "missing: no reading for this signal")
    source = reading.source
    if reading.error is not None:
        return SignalValue(name, SignalState.UNKNOWN, None, f"source error: {reading.error}", source=source)
    value = reading.value
    if value is None:
        return SignalValue(name, SignalState.UNKNOWN, None, "missing: empty result", source=source)
    age = None if reading.timestamp is None else now - reading.timestamp
    if math.isnan(value):
        return SignalValue(name, SignalState.UNKNOWN, None, "invalid: NaN", age, source)
    if math.isinf(value):
        return SignalValue(name, SignalState.UNKNOWN, None, "invalid: infinite", age, source)
    if value < 0:
        return SignalValue(name, SignalState.UNKNOWN, None, f"invalid: negative ({value:g})", age, source)
    if age is None:
        return SignalValue(name, SignalState.UNKNOWN, None, "missing: sample has no timestamp", source=source)
    if age > max_age_s:
        return SignalValue(
            name, SignalState.UNKNOWN, None, f"stale: {age:.0f}s old > maxAgeSeconds {max_age_s:g}", age, source
        )
    if age < -FUTURE_SKEW_S:
        return SignalValue(
            name, SignalState.UNKNOWN, None, f"invalid: sample {-age:.0f}s in the future", age, source
        )
    return SignalValue(name, SignalState.OK, float(value), "", max(age, 0.0), source)


@dataclass(frozen=True)
class SignalJudge:
    """Judges all signals of one policy; built once per policy (expressions are parsed once)."""

    spec: Spec

    def __post_init__(self) -> None:
        parsed = {s.name: ast.parse(s.expr, mode="eval").body for s in self.spec.signals if s.expr is not None}
        object.__setattr__(self, "_parsed", parsed)
        object.__setattr__(self, "_order", _evaluation_order(self.spec))

    def judge_all(self, readings: Mapping[str, SignalReading], now: float) -> dict[str, SignalValue]:
        default_age = self.spec.metric_safety.max_age_seconds
        parsed: dict[str, ast.expr] = self._parsed  # type: ignore[attr-defined]
        out: dict[str, SignalValue] = {}
        for name in self._order:  # type: ignore[attr-defined]
            sig = self.spec.signal(name)
            if sig.expr is None:
                max_age = sig.max_age_seconds or default_age
                out[name] = judge(name, readings.get(name), now=now, max_age_s=max_age)
            else:
                out[name] = _evaluate(name, sig.expr, parsed[name], sig.expression_names(), out)
        return out


def _evaluation_order(spec: Spec) -> list[str]:
    """Raw signals first, then composites after the signals they use (the spec forbids cycles)."""
    order: list[str] = []
    placed: set[str] = set()

    def place(name: str) -> None:
        if name in placed:
            return
        for dep in sorted(spec.signal(name).expression_names()):
            place(dep)
        placed.add(name)
        order.append(name)

    for sig in spec.signals:
        place(sig.name)
    return order


def _evaluate(
    name: str, expr: str, tree: ast.expr, uses: set[str], values: Mapping[str, SignalValue]
) -> SignalValue:
    unknown = sorted(u for u in uses if not values[u].ok)
    if unknown:
        why = "; ".join(f"{u}: {values[u].reason}" for u in unknown)
        return SignalValue(name, SignalState.UNKNOWN, None, f"depends on unknown signal(s): {why}")
    names = {u: values[u].value for u in uses}
    ages = [values[u].age_s for u in uses if values[u].age_s is not None]
    evaluator = SimpleEval(functions=_FUNCTIONS, names=names)
    try:
        result = evaluator.eval(expr, previously_parsed=tree)
    except ZeroDivisionError:
        return SignalValue(name, SignalState.UNKNOWN, None, f"invalid: division by zero in {expr!r}")
    except (ValueError, TypeError, OverflowError) as exc:
        return SignalValue(name, SignalState.UNKNOWN, None, f"invalid: {expr!r} failed: {exc}")
    if isinstance(result, bool):
        result = float(result)
    if not isinstance(result, int | float) or math.isnan(result) or math.isinf(result) or result < 0:
        return SignalValue(name, SignalState.UNKNOWN, None, f"invalid: {expr!r} gave {result!r}")
    return SignalValue(name, SignalState.OK, float(result), "", max(ages) if ages else None, "expr")
