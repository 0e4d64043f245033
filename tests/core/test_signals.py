"""Judging signal readings and evaluating composite (``expr``) signals.

A reading is usable, or unknown with a reason, never a silent zero; composite expressions are evaluated
safely: allowed functions work, unknown inputs propagate, arithmetic failures are unknown, and dangerous
constructs are rejected when the policy loads or fail at evaluation without hanging.
"""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from autoscaler.core.model import SignalReading, SignalState
from autoscaler.core.signals import FUTURE_SKEW_S, MAX_READING, SignalJudge, evaluate_expression, judge
from autoscaler.core.spec import ScalingPolicy, SignalSpec, Spec

NOW = 5_000.0


def spec_with(signals: list[dict[str, Any]], **safety: Any) -> Spec:
    doc = {
        "apiVersion": "autoscaler.dev/v1alpha1",
        "kind": "ScalingPolicy",
        "metadata": {"name": "p"},
        "spec": {
            "target": {"kind": "Deployment", "name": "llm"},
            "maxReplicas": 10,
            "signals": signals,
            "policy": {"type": "kpa", "signal": signals[-1]["name"], "targetPerReplica": 1},
            "metricSafety": safety,
        },
    }
    return ScalingPolicy.model_validate(doc).spec


# --- judge: one raw reading --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reading", "ok", "value", "reason"),
    [
        pytest.param(SignalReading(3.5, NOW - 10), True, 3.5, "", id="fresh"),
        pytest.param(SignalReading(0.0, NOW - 10), True, 0.0, "", id="a-fresh-zero-is-a-real-zero"),
        pytest.param(SignalReading(3.5, NOW - 60), True, 3.5, "", id="exactly-at-the-age-limit"),
        pytest.param(SignalReading(3.5, NOW - 60.5), False, None, "stale: 60s old > maxAgeSeconds 60", id="stale"),
        pytest.param(None, False, None, "missing: no reading", id="missing"),
        pytest.param(SignalReading(None, NOW), False, None, "missing: empty result", id="empty-result"),
        pytest.param(SignalReading(None, NOW, error="timeout"), False, None, "source error: timeout", id="error"),
        pytest.param(SignalReading(1.0, NOW, error="partial"), False, None, "source error", id="error-with-value"),
        pytest.param(SignalReading(math.nan, NOW), False, None, "invalid: NaN", id="nan"),
        pytest.param(SignalReading(math.inf, NOW), False, None, "invalid: infinite", id="inf"),
        pytest.param(SignalReading(-math.inf, NOW), False, None, "invalid: infinite", id="minus-inf"),
        pytest.param(SignalReading(-0.5, NOW), False, None, "invalid: negative (-0.5)", id="negative"),
        pytest.param(SignalReading(1e15, NOW), True, 1e15, "", id="at-the-largest-reading"),
        pytest.param(SignalReading(1e308, NOW), False, None, "invalid: out of range (1e+308 > 1e+15)",
                     id="beyond-the-largest-reading"),
        pytest.param(SignalReading(2.0, None), False, None, "no timestamp", id="no-timestamp"),
        pytest.param(SignalReading(2.0, math.nan), False, None, "timestamp is NaN", id="nan-timestamp"),
        pytest.param(SignalReading(2.0, NOW + FUTURE_SKEW_S), True, 2.0, "", id="future-within-skew"),
        pytest.param(SignalReading(2.0, NOW + 30), False, None, "30s in the future", id="future-beyond-skew"),
    ],
)
def test_judge(reading: SignalReading | None, ok: bool, value: float | None, reason: str) -> None:
    judged = judge("q", reading, now=NOW, max_age_s=60.0)
    assert judged.ok is ok
    assert judged.value == value
    assert reason in judged.reason
    assert (judged.state is SignalState.OK) is ok


@given(
    value=st.floats(allow_nan=True, allow_infinity=True),
    age=st.floats(-100, 1000, allow_nan=False),
    limit=st.floats(1, 500),
)
def test_judge_never_lets_an_invalid_value_through(value: float, age: float, limit: float) -> None:
    stamp = NOW - age
    judged = judge("q", SignalReading(value, stamp), now=NOW, max_age_s=limit)
    real_age = NOW - stamp  # what the judge sees after float rounding
    usable = math.isfinite(value) and 0 <= value <= MAX_READING and -FUTURE_SKEW_S <= real_age <= limit
    assert judged.ok is usable
    if judged.ok:
        assert judged.value == value
        assert judged.age_s is not None
        assert 0 <= judged.age_s <= limit
    else:
        assert judged.value is None
        assert judged.reason


# --- composite expressions: evaluation ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "names", "expected"),
    [
        pytest.param("max(backlog / 10, kv / 0.8)", {"backlog": 25, "kv": 0.6}, 2.5, id="max-backlog"),
        pytest.param("max(backlog / 10, kv / 0.8)", {"backlog": 5, "kv": 0.96}, 1.2, id="max-kv"),
        pytest.param("min(a, b) + abs(a - b)", {"a": 2, "b": 5}, 5.0, id="min-abs"),
        pytest.param("ceil(a / 3) + floor(a / 3)", {"a": 7}, 5.0, id="ceil-floor"),
        pytest.param("sqrt(a)", {"a": 16}, 4.0, id="sqrt"),
        pytest.param("clamp(a, 1, 3)", {"a": 7}, 3.0, id="clamp-high"),
        pytest.param("clamp(a, 1, 3)", {"a": 0}, 1.0, id="clamp-low"),
        pytest.param("a ** 2", {"a": 3}, 9.0, id="power"),
        pytest.param("a ** 0.5", {"a": 2.25}, 1.5, id="fractional-power"),
        pytest.param("a % 4 + a // 4", {"a": 10}, 4.0, id="mod-floordiv"),
        pytest.param("a if a > b else b", {"a": 1, "b": 4}, 4.0, id="conditional"),
        pytest.param("(a > 1) + (b >= 4) + (a == 1)", {"a": 1, "b": 4}, 2.0, id="comparisons-count-as-numbers"),
        pytest.param("a and b", {"a": 3, "b": 0}, 0.0, id="and"),
        pytest.param("-a + 5", {"a": 2}, 3.0, id="unary-minus"),
    ],
)
def test_expression_evaluates(expr: str, names: dict[str, float], expected: float) -> None:
    assert evaluate_expression(expr, names) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("expr", "names", "error"),
    [
        pytest.param("a / b", {"a": 1, "b": 0}, "division by zero", id="division-by-zero"),
        pytest.param("a // b", {"a": 1, "b": 0}, "division by zero", id="floordiv-by-zero"),
        pytest.param("a % b", {"a": 1, "b": 0}, "division by zero", id="modulo-by-zero"),
        pytest.param("sqrt(a - 5)", {"a": 1}, "failed", id="sqrt-of-negative"),
        pytest.param("a - 5", {"a": 1}, "gave -4.0", id="negative-result"),
        pytest.param("a * b * 10", {"a": 1, "b": 1e308}, "gave inf", id="infinite-result"),
        pytest.param("10 ** 10 ** 10", {}, "failed", id="tower-of-powers"),
        pytest.param("3999999 ** 3999999", {}, "failed", id="huge-power-under-simpleeval-max-power"),
        pytest.param("a ** 400", {"a": 10}, "failed", id="power-overflow"),
        pytest.param("(0 - a) ** 0.5", {"a": 4}, "failed", id="complex-power"),
        pytest.param("ceil(a * b * 10)", {"a": 1, "b": 1e308}, "failed", id="ceil-of-infinity"),
        pytest.param("max()", {}, "failed", id="max-without-arguments"),
        pytest.param("clamp(a)", {"a": 1}, "failed", id="wrong-arity"),
    ],
)
def test_expression_failure_is_an_error_not_a_number(expr: str, names: dict[str, float], error: str) -> None:
    with pytest.raises(ValueError, match=re.escape(error)):
        evaluate_expression(expr, names)


@pytest.mark.parametrize(
    "expr",
    [
        pytest.param("a.__class__", id="attribute"),
        pytest.param("a.real", id="harmless-attribute"),
        pytest.param("__import__('os')", id="import-call"),
        pytest.param("(lambda: 1)()", id="lambda"),
        pytest.param("[a][0]", id="subscript"),
        pytest.param("'x' * 10", id="string"),
        pytest.param("exec('1')", id="exec"),
        pytest.param("open('/etc/passwd')", id="open"),
        pytest.param("a << 100000", id="shift"),
        pytest.param("~a", id="invert"),
        pytest.param("[x for x in (1, 2)]", id="comprehension"),
        pytest.param("(b := 1)", id="walrus"),
        pytest.param("f'{a}'", id="f-string"),
        pytest.param("a in (1, 2)", id="membership"),
        pytest.param("a +", id="syntax-error"),
        pytest.param("max(a, key=abs)", id="keyword-argument"),
    ],
)
def test_dangerous_expressions_are_rejected_at_load(expr: str) -> None:
    with pytest.raises(ValidationError):
        SignalSpec.model_validate({"name": "c", "expr": expr})


@pytest.mark.parametrize(
    "expr",
    [
        pytest.param("a.__class__", id="attribute"),
        pytest.param("__import__('os')", id="import-call"),
        pytest.param("(lambda: 1)()", id="lambda"),
        pytest.param("a << 3", id="shift"),
        pytest.param("a in (1, 2)", id="membership"),
    ],
)
def test_the_evaluator_refuses_them_too(expr: str) -> None:
    # A second line of defence for a Spec that bypassed validation (model_construct): no code runs.
    with pytest.raises(ValueError, match="failed"):
        evaluate_expression(expr, {"a": 1.0})


@given(
    backlog=st.floats(0, 1e9),
    kv=st.floats(0, 1),
)
def test_composite_matches_plain_arithmetic(backlog: float, kv: float) -> None:
    assert evaluate_expression("max(backlog / 10, kv / 0.8)", {"backlog": backlog, "kv": kv}) == max(
        backlog / 10, kv / 0.8
    )


@given(a=st.floats(0, 1e300), b=st.floats(0, 1e300), op=st.sampled_from(["+", "-", "*", "/", "**", "%", "//"]))
def test_a_composite_is_finite_and_non_negative_or_an_error(a: float, b: float, op: str) -> None:
    try:
        value = evaluate_expression(f"a {op} b", {"a": a, "b": b})
    except ValueError:
        return
    assert math.isfinite(value)
    assert value >= 0


# --- the judge over a whole policy -------------------------------------------------------------------------

CHAIN: list[dict[str, Any]] = [
    {"name": "waiting", "query": "w"},
    {"name": "kv", "query": "k"},
    {"name": "pressure", "expr": "max(waiting / 10, kv / 0.8)"},
    {"name": "doubled", "expr": "pressure * 2"},
]


def test_composites_are_evaluated_after_their_inputs_whatever_the_order() -> None:
    reordered = [CHAIN[3], CHAIN[2], CHAIN[0], CHAIN[1]]
    spec = spec_with(reordered)
    out = SignalJudge(spec).judge_all(
        {"waiting": SignalReading(30.0, NOW - 5), "kv": SignalReading(0.4, NOW - 20)}, NOW
    )
    assert out["pressure"].value == pytest.approx(3.0)
    assert out["doubled"].value == pytest.approx(6.0)
    assert out["doubled"].age_s == pytest.approx(20.0)  # the age of the oldest input
    assert out["doubled"].source == "expr"


@pytest.mark.parametrize(
    ("readings", "unknown", "reason"),
    [
        pytest.param({"kv": SignalReading(0.4, NOW)}, {"waiting", "pressure", "doubled"}, "waiting: missing",
                     id="missing-input-propagates-through-two-levels"),
        pytest.param({"waiting": SignalReading(1.0, NOW), "kv": SignalReading(math.nan, NOW)},
                     {"kv", "pressure", "doubled"}, "kv: invalid: NaN", id="nan-input"),
        pytest.param({"waiting": SignalReading(1.0, NOW - 500), "kv": SignalReading(0.4, NOW)},
                     {"waiting", "pressure", "doubled"}, "waiting: stale", id="stale-input"),
    ],
)
def test_unknown_inputs_propagate(readings: dict[str, SignalReading], unknown: set[str], reason: str) -> None:
    out = SignalJudge(spec_with(CHAIN)).judge_all(readings, NOW)
    assert {n for n, v in out.items() if not v.ok} == unknown
    assert reason in out["pressure"].reason
    assert out["doubled"].reason.startswith("depends on unknown signal(s): pressure")


def test_a_composite_age_limit_bounds_its_oldest_input() -> None:
    signals = [*CHAIN[:2], {**CHAIN[2], "maxAgeSeconds": 30}]
    out = SignalJudge(spec_with(signals)).judge_all(
        {"waiting": SignalReading(30.0, NOW - 5), "kv": SignalReading(0.4, NOW - 45)}, NOW
    )
    assert out["kv"].ok  # within the default 120 s
    assert not out["pressure"].ok
    assert "stale: oldest input 45s old > maxAgeSeconds 30" in out["pressure"].reason


def test_a_reading_for_a_composite_is_ignored() -> None:
    out = SignalJudge(spec_with(CHAIN)).judge_all({"pressure": SignalReading(99.0, NOW)}, NOW)
    assert not out["pressure"].ok


def test_the_default_age_limit_comes_from_metric_safety() -> None:
    spec = spec_with([{"name": "waiting", "query": "w"}], maxAgeSeconds=10)
    out = SignalJudge(spec).judge_all({"waiting": SignalReading(1.0, NOW - 11)}, NOW)
    assert "maxAgeSeconds 10" in out["waiting"].reason


@pytest.mark.parametrize(
    ("signals", "error"),
    [
        pytest.param([{"name": "a", "expr": "b + 1"}], "undefined signal", id="undefined-input"),
        pytest.param([{"name": "a", "expr": "b"}, {"name": "b", "expr": "a"}], "cycle", id="cycle"),
        pytest.param([{"name": "a", "expr": "a + 1"}], "cycle", id="self-reference"),
        pytest.param([{"name": "a", "query": "q", "expr": "1"}], "exactly one", id="two-definitions"),
    ],
)
def test_composite_spec_errors(signals: list[dict[str, Any]], error: str) -> None:
    with pytest.raises(ValidationError, match=error):
        spec_with(signals)


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("True", id="constant-true"),
        pytest.param("None", id="constant-none"),
        pytest.param("if", id="keyword"),
        pytest.param("lambda", id="lambda-keyword"),
        pytest.param("max", id="function-max"),
        pytest.param("sqrt", id="function-sqrt"),
    ],
)
def test_reserved_signal_names_are_rejected(name: str) -> None:
    # `True + 1` would read the constant and `sqrt(sqrt)` the function, silently dropping the dependency.
    with pytest.raises(ValidationError, match="reserved"):
        SignalSpec.model_validate({"name": name, "query": "q"})
