"""``autoscaler observe``: what the controller would see now, per target: each signal's value, age, source and
state, and the decision the policy would take. Changes nothing.

The engine is ``sources.command.run_observe``; this module gives it what lives above the sources: the
controller's own observer (``controller.lookups.observing``: the loop's ``PolicyObserver``, so observe builds
the very ``Observation`` run builds) and the controller config's ``defaultSource`` (``--config``).
"""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING, Any

from autoscaler.replay.command import replica_count

if TYPE_CHECKING:
    from autoscaler.core.sourcespec import SourceSpec


def register(sub: Any) -> None:
    observe = sub.add_parser(
        "observe",
        help="Show what the controller would see now: signal values, ages, sources and the decision.",
        description="Read every signal of the policies through their sources, as the controller does, "
        "and print per target each value, its age, its source and the decision (nothing is changed).",
    )
    observe.add_argument("--policy", required=True, help="Policy file (YAML, one or more ScalingPolicy documents).")
    observe.add_argument(
        "--config",
        metavar="FILE",
        help="Controller config (YAML), as for `autoscaler run`: its defaultSource serves signals naming none.",
    )
    observe.add_argument("--once", action="store_true", help="Read once and exit (default: every evaluation period).")
    observe.add_argument("--json", action="store_true", help="Print JSON (one document per refresh).")
    observe.add_argument(
        "--replicas",
        type=replica_count,
        default=None,
        metavar="N",
        help="Current replica count outside a cluster (default: read from the cluster when credentials "
        "are found, else unknown, so no decision).",
    )
    observe.add_argument(
        "--kubeconfig",
        default=None,
        metavar="FILE",
        help="Read replicas and pods from this cluster (default: $KUBECONFIG, the in-cluster service "
        "account or ~/.kube/config when present).",
    )
    observe.add_argument(
        "--deadline", type=_deadline, default=5.0, metavar="S",
        help="Per-tick deadline for all sources (default 5 s).",
    )
    observe.set_defaults(func=run)


def _deadline(text: str) -> float:
    """``--deadline``: seconds, finite and > 0 (NaN waited on the API server's own 10 s instead)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"{text!r}: the deadline is a finite number of seconds > 0")
    return value


def run(args: argparse.Namespace) -> int:
    # Imported here: the sources load the HTTP clients, the controller's observer the Kubernetes client.
    from autoscaler.controller import lookups  # noqa: PLC0415
    from autoscaler.sources import command  # noqa: PLC0415

    args.observing, args.config_source = lookups.observing, config_default_source
    return command.run_observe(args)


def config_default_source(path: str) -> SourceSpec | None:
    """``--config``: the controller config's ``defaultSource``, as ``run`` reads it."""
    from autoscaler.controller import config  # noqa: PLC0415 - see run
    from autoscaler.sources import command  # noqa: PLC0415 - see run

    try:
        return config.load_config(path).default_source
    except config.ConfigError as exc:
        raise command.UsageError(f"--config {exc}") from None
