"""``autoscaler record``: save a policy's signals from Prometheus (or GMP) over a time range, one
``query_range`` body per signal, the input ``autoscaler replay`` reads. The engine is
``sources.command.run_record``; as for ``observe``, this module hands it the controller's own observer
(``controller.lookups.observing``), whose plan (the target's pods, the requests the loop sends) it records.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from autoscaler.commands.observe import config_default_source


def register(sub: Any) -> None:
    record = sub.add_parser(
        "record",
        help="Save a policy's signals from Prometheus over a time range, for `autoscaler replay`.",
        description="Query Prometheus (or GMP) for each signal of the policy over a time range and save "
        "one query_range response body per signal as <signal>.json in --out.",
    )
    record.add_argument("--policy", required=True, help="Policy file.")
    record.add_argument("--config", metavar="FILE", help="Controller config (YAML): its defaultSource, as for run.")
    record.add_argument("--start", required=True, help="RFC 3339, unix seconds, 'now' or relative like -1h.")
    record.add_argument("--end", default="now", help="Same forms as --start (default now).")
    record.add_argument("--step", default=None, help="Resolution, seconds or 15s/1m (default: evaluation period).")
    record.add_argument("--out", required=True, help="Directory to write <signal>.json files into.")
    record.add_argument(
        "--kubeconfig",
        default=None,
        metavar="FILE",
        help="Read the target and its pods from this cluster, as run does (default: $KUBECONFIG, the in-cluster "
        "service account or ~/.kube/config when present; without one, pods are selected by their name pattern).",
    )
    # Let `--start -1h` work: argparse takes only plain negative numbers as values, and would read `-1h`
    # as an unknown option. No option of this parser looks like a relative time, so nothing is shadowed.
    record._negative_number_matcher = re.compile(r"^-\d+(\.\d+)?(ms|s|m|h|d|w)?$")
    record.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Imported here: the sources load the HTTP clients, the controller's observer the Kubernetes client.
    from autoscaler.controller import lookups  # noqa: PLC0415
    from autoscaler.sources import command  # noqa: PLC0415

    args.observing, args.config_source = lookups.observing, config_default_source
    return command.run_record(args)
