"""What the API server does with a custom resource's body against its CRD's structural schema: it **prunes**
fields the schema does not declare (silently, or with a warning: apiextensions-apiserver ``pkg/apiserver/schema/
pruning``), then **validates** what is left (422 ``Invalid``). ``as_json_schema`` turns the OpenAPI v3.0 schema
into JSON Schema for ``jsonschema``; ``prune`` drops what the server would drop."""

from __future__ import annotations

from typing import Any


def as_json_schema(node: Any, *, closed: bool = True) -> Any:
    """OpenAPI v3.0 (``nullable``, boolean ``exclusiveMinimum``) as JSON Schema. ``closed``: objects with
    ``properties`` accept no other field (pruning plus kubectl's strict validation); the server itself prunes first
    (``prune``) and validates with ``closed=False``."""
    if isinstance(node, list):
        return [as_json_schema(v, closed=closed) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: as_json_schema(v, closed=closed) for k, v in node.items() if not k.startswith("x-kubernetes")}
    if out.pop("nullable", False) and "type" in out:
        out["type"] = [out["type"], "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    for bound, limit in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if out.get(bound) is True:
            out[bound] = out.pop(limit)
        elif out.get(bound) is False:
            out.pop(bound)
    if closed and "properties" in out:
        out["additionalProperties"] = False
    return out


def prune(value: Any, node: dict[str, Any], *, root: bool = True) -> Any:
    """``value`` without the fields ``node`` (a structural schema) does not declare. At the root, ``apiVersion``,
    ``kind`` and ``metadata`` are kept (the server handles them itself)."""
    if node.get("x-kubernetes-preserve-unknown-fields"):
        return value
    if isinstance(value, dict):
        props = node.get("properties")
        extra = node.get("additionalProperties")
        out: dict[str, Any] = {}
        for key, item in value.items():
            if root and key in ("apiVersion", "kind", "metadata"):
                out[key] = item
            elif props is not None and key in props:
                out[key] = prune(item, props[key], root=False)
            elif isinstance(extra, dict):
                out[key] = prune(item, extra, root=False)
            # else pruned: an object schema without properties keeps nothing (unless it preserves unknown fields)
        return out
    if isinstance(value, list) and isinstance(node.get("items"), dict):
        return [prune(item, node["items"], root=False) for item in value]
    return value


def dropped(value: Any, kept: Any, path: str = "") -> list[str]:
    """The dotted paths of the fields ``prune`` dropped from ``value`` (``kept`` is its result), as the server names
    them in its ``unknown field "spec.foo"`` warnings (list items as ``[i]``)."""
    out: list[str] = []
    if isinstance(value, dict) and isinstance(kept, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else key
            out.extend(dropped(item, kept[key], where) if key in kept else [where])
    elif isinstance(value, list) and isinstance(kept, list):
        for i, (item, left) in enumerate(zip(value, kept, strict=False)):
            out.extend(dropped(item, left, f"{path}[{i}]"))
    return out
