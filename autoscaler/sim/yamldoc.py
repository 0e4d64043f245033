"""Validating the simulator's YAML files (cluster, profiles) with FILE:LINE:COL errors, as policies are.

The YAML is composed once to keep every node's position, converted to plain data, and validated by a
pydantic model; each validation error is reported at the position of the field it is about (or of the
nearest enclosing node when the field is missing).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)


class SimFileError(ValueError):
    """A file the simulator cannot use; ``str()`` is one ``FILE:LINE:COL: path: message`` line per problem."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


def _to_data(node: yaml.Node, positions: dict[tuple[str | int, ...], tuple[int, int]],
             path: tuple[str | int, ...]) -> Any:
    positions[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = yaml.safe_load(yaml.serialize(key_node))
            out[key] = _to_data(value_node, positions, (*path, key))
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_to_data(item, positions, (*path, i)) for i, item in enumerate(node.value)]
    # Scalars: let the safe loader resolve the tag (int, float, bool, null, str) exactly as it would.
    return yaml.safe_load(yaml.serialize(node))


def _locate(positions: dict[tuple[str | int, ...], tuple[int, int]], loc: Sequence[str | int]) -> tuple[int, int]:
    path = tuple(loc)
    while path not in positions and path:
        path = path[:-1]
    return positions.get(path, (1, 1))


def load_model(path: str | Path, model: type[M]) -> M:
    """Parse ``path`` (one YAML document) into ``model``; raise ``SimFileError`` listing every problem."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SimFileError([f"{p}:1:1: cannot read: {exc}"]) from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line, col = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
        raise SimFileError([f"{p}:{line}:{col}: not valid YAML: {getattr(exc, 'problem', exc)}"]) from None
    if node is None:
        raise SimFileError([f"{p}:1:1: the file is empty"])
    positions: dict[tuple[str | int, ...], tuple[int, int]] = {}
    data = _to_data(node, positions, ())
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = tuple(x for x in err["loc"] if isinstance(x, str | int))
            # Discriminated unions add the tag to the location; it is not a key in the file.
            line, col = _locate(positions, loc)
            where = ".".join(str(x) for x in loc) or "(document)"
            msg = err["msg"].removeprefix("Value error, ")
            problems.append(f"{p}:{line}:{col}: {where}: {msg}")
        raise SimFileError(problems) from None
