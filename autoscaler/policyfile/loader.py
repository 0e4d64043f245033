"""Loading policy files (stub: the full loader with file/line/column errors is being written).

API (stable): ``load_file(path) -> list[ScalingPolicy]`` and ``load_paths(paths) -> list[LoadedPolicy]``,
raising ``PolicyFileError`` whose ``problems`` are ``Problem(file, line, column, path, message)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from autoscaler.core.spec import ScalingPolicy


@dataclass(frozen=True)
class Problem:
    file: str
    line: int
    column: int
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}: {self.path}: {self.message}"


class PolicyFileError(Exception):
    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("\n".join(str(p) for p in problems))
        self.problems = problems


@dataclass(frozen=True)
class LoadedPolicy:
    policy: ScalingPolicy
    file: str
    line: int


def load_file(path: str | Path) -> list[ScalingPolicy]:
    return [lp.policy for lp in load_paths([path])]


def load_paths(paths: list[str | Path]) -> list[LoadedPolicy]:
    out: list[LoadedPolicy] = []
    for p in paths:
        for doc in yaml.safe_load_all(Path(p).read_text()):
            if doc:
                out.append(LoadedPolicy(ScalingPolicy.model_validate(doc), str(p), 1))
    return out
