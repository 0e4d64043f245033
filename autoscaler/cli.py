"""The ``autoscaler`` command: one sub-command per capability, each defined beside the code it drives."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager

from autoscaler import __version__
from autoscaler.controller import command as run_command
from autoscaler.core.sourcespec import SourceSpec
from autoscaler.policyfile import command as validate_command
from autoscaler.replay import command as replay_command
from autoscaler.sim import command as simulate_command
from autoscaler.sources import command as sources_command
from autoscaler.sources.command import PodLookup, ReplicaLookup


def cluster_lookups(kubeconfig: str | None) -> AbstractAsyncContextManager[tuple[ReplicaLookup, PodLookup]]:
    """``observe``'s replica and pod lookups against a cluster, with the controller's target classes."""
    # Imported here: it pulls in the Kubernetes client (~0.5 s), which observe needs only against a cluster.
    from autoscaler.controller import lookups  # noqa: PLC0415

    return lookups.cluster_lookups(kubeconfig)


def config_default_source(path: str) -> SourceSpec | None:
    """``observe --config`` / ``record --config``: the controller config's ``defaultSource``, as ``run`` reads it."""
    from autoscaler.controller import config  # noqa: PLC0415 - light (YAML and models), only with --config

    try:
        return config.load_config(path).default_source
    except config.ConfigError as exc:
        raise sources_command.UsageError(f"--config {exc}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="autoscaler",
        description="Autoscaling and preemption for LLM serving and training on shared accelerators.",
    )
    parser.add_argument("--version", action="version", version=f"autoscaler {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # Explicit and sorted: the order `autoscaler --help` lists them in.
    # observe (replicas from the cluster, defaultSource from --config), record
    sources_command.register(sub, cluster=cluster_lookups, config=config_default_source)
    replay_command.register(sub)
    run_command.register(sub)
    simulate_command.register(sub)
    validate_command.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
