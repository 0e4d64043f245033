"""The ``autoscaler replay`` sub-command: a dry run of a policy over a recorded metric trace.

Nothing is contacted: the policy file and the trace are read, every evaluation goes through
``autoscaler.core.engine.decide``, and the results are written to ``--out``. Bad input is one line on stderr
(``autoscaler replay: what is wrong; what to do``) and exit status 1, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autoscaler import forked

if TYPE_CHECKING:
    from collections.abc import Iterator

    from autoscaler.core.spec import ScalingPolicy
    from autoscaler.replay import engine, plot, report

PROG = "autoscaler replay"


#: The bundled example (``--example``): a JetStream backlog trace derived from the Azure conversation trace.
EXAMPLE_DIR = Path(__file__).resolve().parent.parent / "data" / "replay"
EXAMPLE_POLICY = EXAMPLE_DIR / "jetstream-backlog.yaml"
EXAMPLE_TRACE = EXAMPLE_DIR / "azure_conv_jetstream.csv"


class UsageError(Exception):
    """Bad input (exit status 1) or a bad combination of options (2), reported as one line."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "replay",
        help="dry-run a policy over a recorded metric trace (contacts nothing)",
        description=(
            "Replay a ScalingPolicy over recorded metrics: Prometheus /api/v1/query_range JSON (one file per "
            "signal, named after it, or a directory of them; replicas.json = recorded replica count) or a CSV "
            "with a 'timestamp' column (unix seconds or RFC 3339), one column per signal and optionally "
            "'replicas'. Writes decisions.jsonl, summary.json and replay.svg to --out."
        ),
    )
    parser.add_argument("--policy", metavar="FILE", help="policy file (YAML, kind ScalingPolicy)")
    parser.add_argument("--name", metavar="NAME", help="which policy, when the file holds several (metadata.name)")
    parser.add_argument(
        "--metrics",
        action="append",
        metavar="PATH",
        help="a CSV, a query_range JSON file, or a directory of them; repeat for several",
    )
    parser.add_argument(
        "--mode",
        choices=("recorded", "whatif"),
        default="recorded",
        help="recorded: current count = recorded count (what would it have decided then); "
        "whatif: the policy's decisions become the count (default: recorded)",
    )
    parser.add_argument(
        "--actuation-delay",
        type=_seconds,
        default=0.0,
        metavar="S",
        help="whatif: seconds before new replicas are ready (they are 'starting' until then; default 0)",
    )
    parser.add_argument(
        "--initial-replicas",
        type=replica_count,
        metavar="N",
        help="the count before the first recorded one; without recorded replicas, the recorded count "
        "throughout; in whatif, the starting count (default: first recorded, else minReplicas)",
    )
    parser.add_argument(
        "--flap-window",
        type=_seconds,
        default=None,
        metavar="S",
        help="a scale event reversing the previous one within S seconds is a flap (default 300)",
    )
    parser.add_argument("--out", default="out/replay", metavar="DIR", help="output directory (default out/replay)")
    parser.add_argument("--no-plot", action="store_true", help="skip replay.svg (the plot)")
    parser.add_argument(
        "--example",
        action="store_true",
        help="replay the bundled example: a JetStream backlog trace derived from the Azure LLM inference trace "
        "2023 (conversation) with the policy it pairs with; --policy/--metrics override either",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bar and no table")
    parser.set_defaults(func=run)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: seconds must be finite and ≥ 0")
    return value


def replica_count(text: str) -> int:
    """A ``--replicas`` argument: a whole number ≥ 0 (a usage error, exit 2, otherwise); ``observe`` uses it too."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a replica count is ≥ 0")
    return value


def load_policy(path: str, name: str | None) -> ScalingPolicy:
    """The one policy to replay; problems become a ``UsageError`` naming the first (file:line:col)."""
    import yaml  # noqa: PLC0415 - see run

    from autoscaler.policyfile.loader import PolicyFileError, load_file  # noqa: PLC0415 - see run

    try:
        found = load_file(path)
    except PolicyFileError as exc:
        first = exc.problems[0] if exc.problems else None
        more = f" (and {len(exc.problems) - 1} more; run autoscaler validate {path})" if len(exc.problems) > 1 else ""
        raise UsageError(f"{first or exc}{more}") from None
    except FileNotFoundError:
        raise UsageError(f"{path}: no such policy file") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except (yaml.YAMLError, ValueError) as exc:
        # The loader reports problems as PolicyFileError; should anything else slip through, still one line.
        text = " ".join(str(exc).split())
        raise UsageError(f"{path}: not a valid policy: {text[:300]}; run autoscaler validate {path}") from None
    if name is not None:
        found = [p for p in found if p.metadata.name == name]
        if not found:
            raise UsageError(f"{path}: no policy named {name!r}")
    if not found:
        raise UsageError(f"{path}: no ScalingPolicy document in the file")
    if len(found) > 1:
        names = ", ".join(p.metadata.name for p in found)
        raise UsageError(f"{path}: holds {len(found)} policies ({names}); pick one with --name")
    return found[0]


#: A replay decided in bulk splits its evaluations over two processes from this many on (a few tenths of a second of
#: work each; fewer are not worth the fork).
SPLIT_FROM = 16_384


def _exact_halves(replay: engine.Stream, args: argparse.Namespace) -> bool:
    """Whether the halves' replica-seconds add to what one tally sums (``report.Tally.join``): whole numbers
    under 2**53 throughout."""
    period = replay.period_s
    highest = max(max(replay.recorded.values, default=0.0) if replay.recorded is not None else 0.0,
                  float(args.initial_replicas or 0))
    return period.is_integer() and highest * period * replay.evaluations < 2.0**53


def _in_bulk(
    replay: engine.Stream, bulk: engine.Bulk, writer: report.DecisionWriter, counts: report.Tally,
    columns: plot.Columns | None, out: Path, *, split: bool,
) -> None:
    """The evaluations of the bulk path handed to the writers in order: the stretches decided in bulk a block at a
    time, the evaluations decided one at a time (``Bulk.evaluations``) one by one. With ``split``, a long replay on
    a machine with a free core is split in two at a pixel column's edge (``_halves``): a forked child decides and
    writes the later half (``_later``, into a file of its own, appended after this process's half), this process
    the first; the halves' tallies and columns are then joined. Same files as one process writes
    (``tests/replay/test_bulk.py``); if the child gives no answer, this process decides the later half too."""
    count = bulk.count
    half = _halves(bulk, columns) if split and bulk.splits and count >= SPLIT_FROM and forked.cores() >= 2 else None
    if half is None:
        _feed(bulk.evaluations(), writer, counts, columns)
        return
    later = out / ".decisions.later.jsonl"
    try:
        with forked.Child(_later, replay, bulk, half, counts.flap_window_s, columns is not None, later) as child:
            _feed(bulk.evaluations(0, half), writer, counts, columns)
            answer = child.result()
        if answer is not None:
            writer.append(later)
    finally:
        later.unlink(missing_ok=True)  # whatever happened here: --out holds only the command's files
    if answer is None:
        _feed(bulk.evaluations(half, None, bulk.memory_at(half)[0]), writer, counts, columns)
        return
    tally, drawn = answer[0]
    counts.join(tally)
    if columns is not None:
        columns.join(drawn)


def _halves(bulk: engine.Bulk, columns: plot.Columns | None) -> int | None:
    """Where to split: the pixel column's edge nearest the middle from which the policy's memory is known
    (``Bulk.warmable``: the evaluations before it within the window were decided in bulk), within a quarter of
    the evaluations of the middle; None when there is none."""
    count = bulk.count
    step = columns.per_column if columns is not None else 1
    middle = max(step, round(count / 2 / step) * step)
    for shift in range(0, count // 4 + 1, step):
        for half in (middle - shift, middle + shift):
            if 0 < half < count and bulk.warmable(half):
                return half
    return None


def _feed(items: Iterator[engine.Block | engine.Step], writer: report.DecisionWriter, counts: report.Tally,
          columns: plot.Columns | None) -> None:
    from autoscaler.replay.engine import Block  # noqa: PLC0415 - imported already

    for item in items:
        if isinstance(item, Block):
            writer.add_block(item)
            counts.add_block(item)
            if columns is not None:
                columns.add_block(item)
        else:
            writer.add(item)
            counts.add(item)
            if columns is not None:
                columns.add(item)


def _later(
    replay: engine.Stream, bulk: engine.Bulk, half: int, flap_window_s: float, drawing: bool, path: Path
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """In the forked child: evaluations ``half`` on, decided from the policy's memory there (``Bulk.memory_at``),
    written to ``path``, counted and reduced to columns; returns the tally's and the columns' parts."""
    from autoscaler.replay import plot, report  # noqa: PLC0415 - imported already, in the parent

    memory, previous = bulk.memory_at(half)
    counts = report.Tally(replay, flap_window_s=flap_window_s)
    counts.resume(previous)
    columns = plot.Columns(replay, evaluations=replay.evaluations, start=replay.start) if drawing else None
    if columns is not None:
        columns.start_at(half)
    with report.DecisionWriter(path, replay.target) as writer:
        _feed(bulk.evaluations(half, None, memory), writer, counts, columns)
    if columns is not None:
        columns.finish()
        return counts.part(), columns.part()
    return counts.part(), None


def run(args: argparse.Namespace) -> int:
    # Imported here, not at the top: `autoscaler replay --help` then costs no policy models (pydantic) and no
    # decision core, and the command line builds only the parser of the command it runs.
    from autoscaler.replay import traces  # noqa: PLC0415

    try:
        return _run(args)
    except UsageError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return exc.code
    except traces.TraceError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace) -> int:
    from autoscaler.replay import report  # noqa: PLC0415 - see run

    flap_window_s = report.DEFAULT_FLAP_WINDOW_S if args.flap_window is None else args.flap_window
    if args.actuation_delay and args.mode != "whatif":
        raise UsageError("--actuation-delay only applies to --mode whatif (recorded replays the real counts)", 2)
    policy_path = args.policy or (str(EXAMPLE_POLICY) if args.example else None)
    metrics = args.metrics or ([str(EXAMPLE_TRACE)] if args.example else None)
    if policy_path is None or metrics is None:
        raise UsageError("needs --policy FILE and --metrics PATH (or --example for the bundled trace)", 2)
    return _replay(args, policy_path, metrics, flap_window_s)


def _replay(args: argparse.Namespace, policy_path: str, metrics: list[str], flap_window_s: float) -> int:
    from autoscaler.core.engine import compile_policy  # noqa: PLC0415 - see run
    from autoscaler.replay import engine, plot, report, traces  # noqa: PLC0415 - see run

    # The bulk path imports numpy: its OpenBLAS would start a thread per core at import (30-40 ms of CPU here),
    # for matrix products replay never computes, and a forked child (``_in_bulk``) would not have them.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    policy = load_policy(policy_path, args.name)
    compiled = compile_policy(policy)
    trace = traces.load(metrics)
    options = engine.Options(
        mode=args.mode, actuation_delay_s=args.actuation_delay, initial_replicas=args.initial_replicas
    )
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{out}: cannot create the output directory: {exc.strerror or exc}") from None

    show = not args.quiet and sys.stderr.isatty()
    bar: Any = None
    try:
        if show:
            from tqdm import tqdm  # noqa: PLC0415 - only for a terminal

            replay = engine.stream(compiled, trace, options, progress=lambda k: bar.update(k))  # noqa: PLW0108 - bar is set below
            bar = tqdm(total=replay.evaluations, unit="eval", file=sys.stderr, leave=False, mininterval=0.2)
        else:
            replay = engine.stream(compiled, trace, options)
        counts = report.Tally(replay, flap_window_s=flap_window_s)
        # The plot keeps a few points per pixel column, gathered as the evaluations pass.
        columns = None if args.no_plot else plot.Columns(replay, evaluations=replay.evaluations, start=replay.start)
        try:
            writer = report.DecisionWriter(out / "decisions.jsonl", replay.target)
        except OSError as exc:
            raise UsageError(f"{out}: cannot write the results: {exc.strerror or exc}") from None
        # Each evaluation goes to the writers as it is made; none is kept.
        with writer:
            add_line, add_count = writer.add, counts.add
            if replay.bulk is not None:
                # The bulk path (engine._bulk): the same evaluations, decided and written a block at a time.
                split = not show and _exact_halves(replay, args)
                _in_bulk(replay, replay.bulk, writer, counts, columns, out, split=split)
            elif columns is None:
                for step in replay.steps:
                    add_line(step)
                    add_count(step)
            else:
                add_column = columns.add
                for step in replay.steps:
                    add_line(step)
                    add_count(step)
                    add_column(step)
    except engine.EvaluationError as exc:
        when = report.rfc3339(exc.time)
        raise UsageError(
            f"evaluation at {when} failed inside the decision core ({exc}); this is a bug, not your input: "
            "please report it with the policy and trace"
        ) from None
    except OSError as exc:
        raise UsageError(f"{out}: cannot write the results: {exc.strerror or exc}") from None
    finally:
        if bar is not None:
            bar.close()

    summary = counts.summary(inputs=trace.files)
    try:
        report.write_summary(summary, out / "summary.json")
        if columns is not None:
            columns.finish()
            plot.plot(columns, out / plot.FILE_NAME)
    except OSError as exc:
        raise UsageError(f"{out}: cannot write the results: {exc.strerror or exc}") from None
    if not args.quiet:
        report.print_table(counts, summary, sys.stdout)
        written = ["decisions.jsonl", "summary.json"] + ([] if args.no_plot else [plot.FILE_NAME])
        print(f"\nwritten to {out}/: {', '.join(written)}")
    return 0

