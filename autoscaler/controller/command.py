"""The ``autoscaler run`` sub-command: the controller process.

``autoscaler run --policies DIR [--config FILE] [--kubeconfig FILE] [--once] [--dry-run]``

Long-running (the default), it starts, in this order: the JSON logs, /metrics + /healthz + /readyz, the
policy store (hot reload), the watches on targets and Workloads, leader election, and the loop; on SIGTERM
or SIGINT it stops the loop first (no half-started write), then releases the Lease so a standby takes over.
``--once`` does one observe → decide → act pass over every policy and exits: 0 when everything succeeded,
1 when a policy file was invalid or any observation or write failed. ``--once`` does not elect a leader: run
it where no controller is running (or with ``--dry-run``). ``--dry-run`` (also ``mode: dryRun``) decides,
logs and emits Events and metrics, and changes nothing.

Exit codes follow DESIGN.md: 1 bad input or a failed pass, 2 usage (argparse). No traceback reaches the user.
"""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "run",
        help="run the controller (in a cluster, or once)",
        description="Observe, decide with the policies in DIR, and scale targets / stop and resume training.",
    )
    parser.add_argument("--policies", required=True, metavar="DIR", help="directory of policy files")
    parser.add_argument("--config", metavar="FILE", help="controller config (YAML); defaults apply without it")
    parser.add_argument("--kubeconfig", metavar="FILE", help="default: $KUBECONFIG, else the in-cluster account")
    parser.add_argument("--once", action="store_true", help="one full pass, then exit (1 if anything failed)")
    parser.add_argument("--dry-run", action="store_true", help="shadow mode: decide and report, change nothing")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Imported here: the controller pulls in the Kubernetes client (~0.5 s), which no other command needs.
    from autoscaler.controller import runtime  # noqa: PLC0415

    return runtime.run_command(args)
