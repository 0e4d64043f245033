"""The `autoscaler simulate` sub-command (being written)."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser("simulate", help="(being written)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    print("autoscaler simulate: not available yet")
    return 2
