"""The ``autoscaler`` command: one sub-command per capability, each defined beside the code it drives."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING

from autoscaler import __version__

if TYPE_CHECKING:
    from autoscaler.core.sourcespec import SourceSpec
    from autoscaler.sources.command import PodLookup, ReplicaLookup

#: Every sub-command and the module that defines it, in the order `autoscaler --help` lists them. A command's
#: module is imported only when that command is named (or when none is, for the overall help): start-up then
#: costs one command's imports, and `validate`, `replay` and `simulate` never load an HTTP or Kubernetes
#: client (tests/test_startup.py checks it).
COMMANDS: dict[str, str] = {
    "observe": "autoscaler.sources.command",
    "record": "autoscaler.sources.command",
    "replay": "autoscaler.replay.command",
    "run": "autoscaler.controller.command",
    "simulate": "autoscaler.sim.command",
    "validate": "autoscaler.policyfile.command",
}


def cluster_lookups(kubeconfig: str | None) -> AbstractAsyncContextManager[tuple[ReplicaLookup, PodLookup]]:
    """``observe``'s replica and pod lookups against a cluster, with the controller's target classes."""
    # Imported here: it pulls in the Kubernetes client (~0.5 s), which observe needs only against a cluster.
    from autoscaler.controller import lookups  # noqa: PLC0415

    return lookups.cluster_lookups(kubeconfig)


def config_default_source(path: str) -> SourceSpec | None:
    """``observe --config`` / ``record --config``: the controller config's ``defaultSource``, as ``run`` reads it."""
    from autoscaler.controller import config  # noqa: PLC0415 - light (YAML and models), only with --config
    from autoscaler.sources import command as sources_command  # noqa: PLC0415 - observe and record only

    try:
        return config.load_config(path).default_source
    except config.ConfigError as exc:
        raise sources_command.UsageError(f"--config {exc}") from None


def _named(argv: Sequence[str]) -> str | None:
    """The sub-command ``argv`` names: its first word that is not an option (no top-level option takes a value)."""
    first = next((a for a in argv if not a.startswith("-")), None)
    return first if first in COMMANDS else None


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="autoscaler",
        description="Autoscaling and preemption for LLM serving and training on shared accelerators.",
    )
    parser.add_argument("--version", action="version", version=f"autoscaler {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    named = _named(sys.argv[1:] if argv is None else argv)
    done: set[str] = set()
    for name, module_name in COMMANDS.items():
        if (named is not None and name != named) or module_name in done:
            continue
        done.add(module_name)
        module = importlib.import_module(module_name)
        if module_name == "autoscaler.sources.command":
            # observe (replicas from the cluster, defaultSource from --config), record
            module.register(sub, cluster=cluster_lookups, config=config_default_source)
        else:
            module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
