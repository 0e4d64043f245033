"""Properties of the bounded expression parser and evaluator (``autoscaler.core.expressions``).

- any text either parses within the limits or is refused with ``ValueError``: never RecursionError,
  MemoryError or another exception, whatever the call depth;
- an accepted expression evaluates to a finite, non-negative ``float`` or raises ``ValueError``: never an
  ``int`` (a Python big integer is what made one evaluation take 42 s);
- the numbers of accepted trees stay within the limits they were checked against.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.core import expressions
from autoscaler.core.model import SignalReading
from autoscaler.core.signals import SignalJudge
from autoscaler.core.spec import SignalSpec, Spec

NAMES = ("a", "b", "c")
VALUES = st.floats(min_value=0, max_value=1e300, allow_nan=False, allow_infinity=False)


def _atoms() -> st.SearchStrategy[str]:
    numbers = st.one_of(st.integers(0, 10**6), st.floats(0, 1e6, allow_nan=False)).map(repr)
    return st.one_of(st.sampled_from(NAMES), numbers)


def _extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    binary = st.tuples(inner, st.sampled_from(["+", "-", "*", "/", "//", "%", "**", ">", "==", "and", "or"]), inner)
    calls = st.tuples(st.sampled_from(["ceil", "floor", "abs", "sqrt"]), inner)
    many = st.tuples(st.sampled_from(["max", "min"]), st.lists(inner, min_size=1, max_size=4))
    return st.one_of(
        binary.map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        calls.map(lambda t: f"{t[0]}({t[1]})"),
        many.map(lambda t: f"{t[0]}({', '.join(t[1])})"),
        st.tuples(inner, inner, inner).map(lambda t: f"({t[0]} if {t[1]} else {t[2]})"),
        inner.map(lambda e: f"-{e}"),
    )


EXPRESSIONS = st.recursive(_atoms(), _extend, max_leaves=80)


@settings(max_examples=150, deadline=None)
@given(expr=EXPRESSIONS, a=VALUES, b=VALUES, c=VALUES)
def test_accepted_expressions_give_a_float_or_a_value_error(expr: str, a: float, b: float, c: float) -> None:
    try:
        tree = expressions.parse(expr)
    except ValueError:
        return
    try:
        value = expressions.evaluate(expr, {"a": a, "b": b, "c": c}, tree)
    except ValueError:
        return
    assert type(value) is float
    assert math.isfinite(value)
    assert value >= 0


@settings(max_examples=150, deadline=None)
@given(text=st.text(alphabet="ab1.e+-*/%()<>=, ifelsmaxcl", max_size=1200))
def test_any_text_parses_or_is_refused_with_a_value_error(text: str) -> None:
    try:
        tree = expressions.parse(text)
    except ValueError:
        return
    depth, nodes = _shape(tree)
    assert depth <= expressions.MAX_DEPTH
    assert nodes <= expressions.MAX_NODES


def _shape(tree: ast.AST) -> tuple[int, int]:
    depth, nodes, stack = 0, 0, [(tree, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, ast.expr):  # as parse counts: operators and contexts are not nodes of their own
            depth, nodes = max(depth, level), nodes + 1
            stack.extend((child, level + 1) for child in ast.iter_child_nodes(node))
    return depth, nodes


def _at_depth(frames: int, fn: Callable[[], object]) -> object:
    return fn() if frames == 0 else _at_depth(frames - 1, fn)


@pytest.mark.parametrize(
    "expr",
    [
        pytest.param("+".join(["a"] * 2988), id="2988-term-chain"),
        pytest.param("+".join(["a"] * 499), id="longest-chain-under-the-character-limit"),
        pytest.param("-" * 999 + "a", id="999-unary-minus"),
        pytest.param("**".join(["a"] * 333), id="power-tower"),
        pytest.param("sqrt(" * 200 + "a" + ")" * 200, id="200-nested-calls"),
    ],
)
def test_refused_before_the_parser_recurses_even_deep_in_the_stack(expr: str) -> None:
    # 700 frames deep, CPython's parser raises RecursionError on a chain of ~500 terms; the token limit stops
    # the text before the parser sees it.
    with pytest.raises(ValueError, match="limit is"):
        _at_depth(700, lambda: expressions.parse(expr))


@pytest.mark.parametrize("fn", expressions.FUNCTION_NAMES)
def test_every_function_returns_a_float(fn: str) -> None:
    # math.ceil returns an int, and ints grow without bound under * and **. (The evaluator converts the final
    # result to float, so this is checked on the functions themselves, not through evaluate.)
    args = {"clamp": (2.5, 1, 3), "max": (2.5, 1), "min": (2.5, 4)}.get(fn, (2.5,))
    assert type(expressions.FUNCTIONS[fn](*args)) is float


@pytest.mark.parametrize(
    "op", [ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow], ids=lambda o: o.__name__
)
def test_every_arithmetic_operator_works_in_floats(op: type) -> None:
    # Integer constants stay integers under operator.mul: 999999 * 999999 * ... builds a big integer.
    assert type(expressions.OPERATORS[op](7, 3)) is float


@pytest.mark.parametrize(
    "expr",
    [
        pytest.param("ceil(a) * ceil(a) * ceil(a) * ceil(a) * ceil(a) * ceil(a) * ceil(a) * ceil(a)", id="product"),
        pytest.param("ceil(a) ** ceil(a)", id="power"),
        pytest.param("ceil(a) ** 999999 % 7", id="power-modulo"),
    ],
)
def test_no_step_builds_a_big_integer(expr: str) -> None:
    # With integer ceil these ran for seconds to minutes; in floats they overflow at once (unknown, not zero).
    with pytest.raises(ValueError, match=r"failed|gave inf"):
        expressions.evaluate(expr, {"a": 1e300})


def test_the_judge_refuses_a_spec_that_bypassed_validation() -> None:
    # A model_construct'ed signal carries an expression validate would refuse: the judge marks it unknown.
    spec = Spec.model_validate(
        {"target": {"kind": "Deployment", "name": "d"}, "maxReplicas": 3,
         "signals": [{"name": "a", "metric": "m"}, {"name": "c", "expr": "a"}],
         "policy": {"type": "queue", "work": ["c"], "capacityPerReplica": 1}}
    )
    bad = SignalSpec.model_construct(name="c", expr="+".join(["a"] * 2988))
    forged = spec.model_copy(update={"signals": [spec.signals[0], bad]})
    judged = SignalJudge(forged).judge_all({"a": SignalReading(value=1.0, timestamp=0.0)}, now=0.0)
    assert not judged["c"].ok
    assert "limit is" in judged["c"].reason
