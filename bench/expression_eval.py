"""Worst-case cost of composite-signal expressions that ``validate`` accepts, and of the ones it refuses.

Each shape is built as large as the limits in ``autoscaler.core.expressions`` allow (one token or one level
short of being refused) and timed through the controller's path: parsed once (``parse``, what validate and the
signal judge do), evaluated many times (``evaluate`` with the parsed tree, what every evaluation does). The
inputs are picked to keep every step busy (no early overflow): values near 1. Reported: parse time, and per
evaluation the minimum and the median of batches (microseconds).

Also timed: how fast the refusals are (the 2,988-term chain and a 1,000-character chain).

Run: ``python -m bench.expression_eval [--repeat 2000]``.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import statistics
import time

from autoscaler.core import expressions


def _chain(op: str, n: int) -> str:
    return op.join(["a"] * n)


def shapes() -> dict[str, str]:
    """The largest expression of each shape that ``parse`` accepts."""
    # Each binary operator adds one level (and two tokens): MAX_DEPTH caps a left-leaning chain.
    longest_chain = expressions.MAX_DEPTH
    balanced = "a"
    while True:  # a balanced tree of + and * grows until the token limit refuses it
        bigger = f"({balanced} * {balanced} + a)"
        try:
            expressions.parse(bigger)
        except ValueError:
            break
        balanced = bigger
    wide = "max(" + ", ".join(["a"] * ((expressions.MAX_TOKENS - 3) // 2)) + ")"
    while True:
        try:
            expressions.parse(wide)
            break
        except ValueError:
            wide = wide.replace("a, ", "", 1)
    nested = "a"
    for i in range(expressions.MAX_DEPTH - 1):
        candidate = f"sqrt({nested} + 1)" if i % 2 == 0 else f"ceil({nested})"
        try:
            expressions.parse(candidate)
        except ValueError:
            break
        nested = candidate
    out = {
        "chain of +": _chain(" + ", longest_chain),
        "chain of *": _chain(" * ", longest_chain),
        "chain of %": "1e15 % " + _chain(" % ", longest_chain - 1),
        "chain of **": _chain(" ** ", longest_chain),
        "balanced + and *": balanced,
        "max of many": wide,
        "nested calls": nested,
        "conditionals": "a if a > 1 else " * 8 + "a",
    }
    for name, text in out.items():
        expressions.parse(text)  # every shape must be accepted, or it measures nothing
        assert text, name
    return out


def timed(expr: str, repeat: int) -> tuple[float, float, float, int]:
    start = time.perf_counter()
    tree = expressions.parse(expr)
    parse_s = time.perf_counter() - start
    values = {"a": 1.0000001}
    batches = []
    batch = max(1, repeat // 20)
    for _ in range(20):
        start = time.perf_counter()
        for _ in range(batch):
            with contextlib.suppress(ValueError):  # an overflow is as costly to find as a result
                expressions.evaluate(expr, values, tree)
        batches.append((time.perf_counter() - start) / batch)
    nodes = sum(1 for n in ast.walk(tree) if isinstance(n, ast.expr))
    return parse_s, min(batches), statistics.median(batches), nodes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=2000)
    args = parser.parse_args()
    print(f"limits: {expressions.MAX_CHARS} chars, {expressions.MAX_TOKENS} tokens, depth {expressions.MAX_DEPTH}, "
          f"{expressions.MAX_NODES} nodes")
    worst = 0.0
    for name, expr in shapes().items():
        parse_s, best, median, nodes = timed(expr, args.repeat)
        worst = max(worst, median)
        print(f"{name:<18} {len(expr):>4} chars {nodes:>4} nodes  parse {parse_s * 1e6:8.1f} us  "
              f"eval min {best * 1e6:7.1f} us  median {median * 1e6:7.1f} us")
    print(f"worst median evaluation: {worst * 1e6:.1f} us")
    for name, expr in (("2,988-term chain", _chain("+", 2988)), ("1,000-char chain", _chain("+", 500)[:999])):
        start = time.perf_counter()
        try:
            expressions.parse(expr)
            verdict = "accepted"
        except ValueError as exc:
            verdict = f"refused ({exc})"
        print(f"{name}: {verdict[:70]} in {(time.perf_counter() - start) * 1e6:.0f} us")


if __name__ == "__main__":
    main()
