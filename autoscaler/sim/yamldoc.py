"""The simulator's YAML files (cluster, profiles), read as policy files are: the same loader, the same limits.

``load_model`` is ``policyfile.loader.load_model`` (regular files only, 256 KiB, 50 levels, 100,000 nodes
counting alias expansions, FILE:LINE:COL for every problem) with the problems raised as ``SimFileError``, the
error the simulator's callers handle. A YAML bomb given as ``--cluster`` is refused as quickly as by
``validate``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel

from autoscaler.policyfile import loader

M = TypeVar("M", bound=BaseModel)


class SimFileError(ValueError):
    """A file the simulator cannot use; ``str()`` is one ``FILE:LINE:COL: path: message`` line per problem."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


def load_model(path: str | Path, model: type[M]) -> M:
    """Parse ``path`` (one YAML document) into ``model``; raise ``SimFileError`` listing every problem."""
    try:
        return loader.load_model(path, model)
    except loader.PolicyFileError as exc:
        raise SimFileError([str(p) for p in exc.problems]) from None
