"""Composite-signal expressions (``expr: max(backlog / 10, kv / 0.8)``): one bounded parser and one evaluator.

The same ``parse`` runs when a policy is validated (``spec.SignalSpec``) and when the controller builds its
evaluator (``signals.SignalJudge``), so nothing the validator let through can cost more at run time.
An expression is refused, with the limit it broke, when:

- it is longer than ``MAX_CHARS`` characters or has more than ``MAX_TOKENS`` tokens. Counted *before*
  ``ast.parse``: CPython builds the tree recursively, and a 3 KB chain of 2,988 terms raises RecursionError
  inside a validator, where it has no FILE:LINE:COL;
- its tree is deeper than ``MAX_DEPTH`` (the evaluator recurses once per level) or has more than
  ``MAX_NODES`` nodes;
- it uses anything but numbers, signal names, arithmetic, comparisons, ``and``/``or``, ``x if c else y``
  and the functions in ``FUNCTIONS``;
- a number in it is not finite or exceeds ``MAX_CONSTANT`` in magnitude.

Evaluation is in floating point only: every operator and function converts its operands to ``float`` and
``ceil``/``floor`` return floats, so no step can build a Python big integer (``ceil(x) ** 9 ** 9`` or
``ceil(x) * ceil(x) * ...`` would otherwise compute for minutes inside the event loop). A float operation takes
constant time, so an expression's cost is bounded by its node count; ``bench/expression_eval.py`` measures the
worst case validate accepts. Overflow, division by zero, a domain error, or a result that is NaN, infinite or
negative is a ``ValueError`` with the cause: the signal is unknown, never zero.
"""

from __future__ import annotations

import ast
import io
import keyword
import math
import operator
import tokenize
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from simpleeval import InvalidExpression, SimpleEval

from autoscaler.core import fast

#: Longest expression text. The examples are under 60 characters; a long formula belongs in PromQL.
MAX_CHARS = 1000
#: Most tokens (names, numbers, operators, parentheses). Bounds the parser's recursion before it runs.
MAX_TOKENS = 256
#: Deepest tree (``a + b`` is 2 deep; ``max(a / 10, b)`` 3). The evaluator recurses once per level.
MAX_DEPTH = 32
#: Most tree nodes.
MAX_NODES = 256
#: Largest number written in an expression (Kubernetes quantities stop near 9.2e15 milli-units).
MAX_CONSTANT = 1e15

#: Functions an expression may call, by name.
FUNCTION_NAMES = ("max", "min", "abs", "ceil", "floor", "sqrt", "clamp")

_ALLOWED_NODES = (
    ast.Expression, ast.BinOp, ast.UnaryOp, ast.Call, ast.Name, ast.Load, ast.Constant,
    ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.USub, ast.UAdd,
    ast.IfExp, ast.Compare, ast.Gt, ast.GtE, ast.Lt, ast.LtE, ast.Eq, ast.NotEq, ast.BoolOp, ast.And, ast.Or,
)


def parse(expr: str) -> ast.expr:
    """The checked tree of ``expr``; ``ValueError`` (one sentence, the limit or construct) when refused."""
    shown = expr if len(expr) <= 60 else expr[:57] + "..."
    if len(expr) > MAX_CHARS:
        raise ValueError(f"expression is {len(expr)} characters long; the limit is {MAX_CHARS}")
    tokens = _count_tokens(expr, shown)
    if tokens > MAX_TOKENS:
        raise ValueError(
            f"expression has {tokens} tokens; the limit is {MAX_TOKENS} (compute large sums in the query instead)"
        )
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"expression {shown!r} is not valid: {exc.msg}") from None
    except (RecursionError, MemoryError, ValueError):
        # Not reachable within MAX_TOKENS; kept so that no parser failure can escape as an internal error.
        raise ValueError(f"expression {shown!r} is too complex to parse") from None
    nodes, depth = 0, 0
    stack: list[tuple[ast.AST, int]] = [(tree.body, 1)]
    while stack:  # iterative: the check itself must not recurse
        node, level = stack.pop()
        _check_node(node, shown)
        if not isinstance(node, ast.expr):
            continue  # operators and the Load context: checked, not counted
        nodes += 1
        depth = max(depth, level)
        stack.extend((child, level + 1) for child in ast.iter_child_nodes(node))
    if depth > MAX_DEPTH:
        raise ValueError(f"expression {shown!r} nests {depth} levels deep; the limit is {MAX_DEPTH}")
    if nodes > MAX_NODES:
        raise ValueError(f"expression {shown!r} has {nodes} nodes; the limit is {MAX_NODES}")
    return tree.body


@dataclass(frozen=True, slots=True)
class Compiled:
    """A checked expression: its tree and the signal names it reads. Shared by every validator, policy and
    evaluator given the same text, so nothing may change the tree (the evaluator only reads it)."""

    tree: ast.expr
    names: frozenset[str]


@fast.memoized(maxsize=4096)
def compiled(expr: str) -> Compiled:
    """``parse`` and ``names`` once per expression text (validation asks three times per signal: the field, the
    references, the cycles; the controller's evaluator once more). ``ValueError`` as ``parse``."""
    tree = parse(expr)
    return Compiled(tree, frozenset(names(tree)))


def _count_tokens(expr: str, shown: str) -> int:
    count = 0
    try:
        for tok in tokenize.generate_tokens(io.StringIO(expr).readline):
            if tok.type not in (tokenize.NEWLINE, tokenize.NL, tokenize.ENDMARKER, tokenize.INDENT, tokenize.DEDENT):
                count += 1
                if count > MAX_TOKENS:
                    break
    except (tokenize.TokenError, SyntaxError) as exc:
        msg = exc.args[0] if exc.args else "cannot be read"
        raise ValueError(f"expression {shown!r} is not valid: {msg}") from None
    return count


def _check_node(node: ast.AST, shown: str) -> None:
    if not isinstance(node, _ALLOWED_NODES):
        raise ValueError(f"expression {shown!r} uses {type(node).__name__}, which is not allowed")
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTION_NAMES:
            raise ValueError(
                f"expression {shown!r} calls an unknown function; allowed: {', '.join(FUNCTION_NAMES)}"
            )
        if node.keywords:
            raise ValueError(f"expression {shown!r} passes a keyword argument; functions take positional ones")
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"expression {shown!r} may only contain numbers, not {value!r}")
        if not math.isfinite(value) or abs(value) > MAX_CONSTANT:
            raise ValueError(
                f"expression {shown!r}: the number {value:.6g} is out of range (at most {MAX_CONSTANT:g})"
            )
    if isinstance(node, ast.Name) and keyword.iskeyword(node.id):
        raise ValueError(f"expression {shown!r} uses the keyword {node.id!r}")


def names(tree: ast.expr) -> set[str]:
    """The signal names ``tree`` refers to (function names excluded)."""
    found = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    calls = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    return found - calls


# --- evaluation ------------------------------------------------------------------------------------------


def _f(op: Callable[[float, float], Any]) -> Callable[[Any, Any], Any]:
    def apply(a: Any, b: Any) -> Any:
        return op(float(a), float(b))

    return apply


def _clamp(value: float, low: float, high: float) -> float:
    return max(float(low), min(float(high), float(value)))


def _float_args(fn: Callable[..., Any]) -> Callable[..., float]:
    def apply(*args: Any) -> float:
        return float(fn(*(float(a) for a in args)))

    return apply


#: Every function returns a float (``math.ceil`` alone returns an int, which ``*`` and ``**`` grow unboundedly).
FUNCTIONS: dict[str, Callable[..., float]] = {
    "max": _float_args(max),
    "min": _float_args(min),
    "abs": _float_args(abs),
    "ceil": _float_args(math.ceil),
    "floor": _float_args(math.floor),
    "sqrt": _float_args(math.sqrt),
    "clamp": _float_args(_clamp),
}

#: Exactly the operators ``parse`` admits, on floats; anything else fails in the evaluator too.
OPERATORS: dict[type, Callable[..., Any]] = {
    ast.Add: _f(operator.add),
    ast.Sub: _f(operator.sub),
    ast.Mult: _f(operator.mul),
    ast.Div: _f(operator.truediv),
    ast.FloorDiv: _f(operator.floordiv),
    ast.Mod: _f(operator.mod),
    # math.pow raises OverflowError at once where int ** int would compute for minutes.
    ast.Pow: _f(math.pow),
    ast.USub: lambda a: -float(a),
    ast.UAdd: float,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
}


def evaluate(expr: str, values: Mapping[str, float], tree: ast.expr | None = None) -> float:
    """Evaluate ``expr`` (parsed as ``tree`` when given; else parsed here, with the limits) over ``values``.

    Raises ``ValueError`` with the cause when there is no usable number: the limits, division by zero,
    a domain error, an overflow, a refused construct, or a NaN/infinite/negative result.
    """
    if tree is None:
        tree = parse(expr)
    evaluator = SimpleEval(operators=OPERATORS, functions=FUNCTIONS, names={k: float(v) for k, v in values.items()})
    try:
        result = evaluator.eval(expr, previously_parsed=tree)
    except ZeroDivisionError:
        raise ValueError(f"division by zero in {expr!r}") from None
    except (ArithmeticError, ValueError, TypeError, InvalidExpression, KeyError, RecursionError) as exc:
        raise ValueError(f"{expr!r} failed: {exc}") from None
    if isinstance(result, bool):
        result = float(result)
    if not isinstance(result, int | float):
        raise ValueError(f"{expr!r} gave {result!r}, not a number")
    try:
        value = float(result)
    except OverflowError:
        raise ValueError(f"{expr!r} gave a number too large") from None
    if math.isnan(value) or math.isinf(value) or value < 0:
        raise ValueError(f"{expr!r} gave {value!r}")
    return value
