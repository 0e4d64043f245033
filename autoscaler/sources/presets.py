"""Translating catalog presets into what each source sends: PromQL selectors and label matchers.

The presets themselves (names, spellings, kinds, how pods combine, label layouts, where each is
unavailable) are the one catalog, ``autoscaler.core.catalog``; this module re-exports its lookups for the
sources and adds the PromQL pieces:

- ``selector``: every spelling as its own exact-name selector joined with ``or`` (Google Managed Prometheus
  matches metric names exactly), always with the target's namespace (in the label the preset's layout names:
  ``exported_namespace`` for the TPU device plugin) and, when known, ``cluster`` matcher, so two applications
  with the same metric never mix;
- ``matchers``: those label matchers, with the signal's own labels.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from autoscaler.core.catalog import PRESETS, Combine, Preset, PresetError, get

__all__ = [
    "PRESETS", "PROCESS_LABEL", "Aggregate", "Preset", "PresetError", "copy_wins", "get", "matchers",
    "one_per_process", "process_copy_key", "quote", "selector",
]

Aggregate = Combine

#: The label prometheus-client's multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``) adds to a gauge whose
#: ``multiprocess_mode`` is ``all`` (the default) or ``liveall``: one copy of the series per process, labelled
#: with its pid (prometheus_client/multiprocess.py, ``_read_metrics``; counters and histograms are summed over
#: the processes instead, without the label). vLLM runs one process per API server (``--api-server-count``);
#: its ``vllm:kv_cache_usage_perc`` had no mode (vllm/v1/metrics/loggers.py at 0.10; later releases set
#: ``mostrecent``, which drops the label), and its scheduler sends each step's stats to one front end only
#: (vllm/v1/core/sched/scheduler.py, ``update_from_output``: "Return stats to only one of the front-ends"). So
#: the copies are the same gauge as each process last saw it, and the exposition carries no time to tell the
#: newest: they are read as one series, their largest (``one_per_process``), never summed (a queue would count
#: once per process) or averaged (a stale idle copy would halve a full cache).
PROCESS_LABEL = "pid"


def one_per_process(by: str) -> str:
    """PromQL keeping one series per label set but ``pid`` (the copies of a multiprocess gauge): their largest.
    A selector without the label passes unchanged (each group is one series)."""
    return f"max without ({PROCESS_LABEL}) ({by})"


def process_copy_key(labels: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """A series' labels less ``pid``: the copies of one multiprocess gauge share it (the sources that read
    series themselves, pods and Cloud Monitoring, group the copies by it, as ``one_per_process`` does in PromQL)."""
    return tuple(sorted((k, v) for k, v in labels.items() if k != PROCESS_LABEL))


def copy_wins(value: float, kept: float) -> bool:
    """Whether a copy's ``value`` replaces the ``kept`` largest so far, as PromQL's ``max`` picks (a NaN copy loses
    to any number)."""
    return value > kept or (math.isnan(kept) and not math.isnan(value))


_LABEL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def quote(value: str) -> str:
    """A PromQL string literal (double-quoted, backslash and quote escaped)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def matchers(
    labels: dict[str, str],
    *,
    namespace: str | None,
    cluster: str | None,
    regex: dict[str, str] | None = None,
    namespace_label: str = "namespace",
) -> list[str]:
    """Label matchers: the signal's labels plus the mandatory namespace/cluster scoping.

    ``namespace_label`` is the label holding the workload's namespace (``exported_namespace`` for series the
    TPU device plugin exports from ``kube-system``). A value given in ``labels`` wins over the defaults (a
    user may pin another namespace on purpose).
    """
    merged: dict[str, str] = {}
    if cluster is not None:
        merged["cluster"] = cluster
    if namespace is not None:
        merged[namespace_label] = namespace
    merged.update(labels)
    out = []
    for key, value in sorted(merged.items()):
        if not _LABEL_NAME.match(key):
            raise PresetError(f"label name {key!r} is not a valid Prometheus label name")
        out.append(f"{key}={quote(value)}")
    for key, pattern in sorted((regex or {}).items()):
        out.append(f"{key}=~{quote(pattern)}")
    return out


def selector(
    names: tuple[str, ...], label_matchers: list[str], *, wrap: str = "", range_s: float | None = None
) -> str:
    """Every spelling as its own exact-name selector, joined with ``or``; ``wrap`` applies a function to each.

    Exact names, not ``{__name__=~"a|b"}``: Google Managed Prometheus only matches metric names exactly
    (its PromQL-differences page). ``timestamp()`` goes on each selector, since over any other expression it
    returns the evaluation time instead of the sample time.
    """
    body = "{" + ", ".join(label_matchers) + "}"
    if range_s is not None:
        body += f"[{range_s:g}s]"  # a range selector, for rate()
    parts = [f"{wrap}({name}{body})" if wrap else f"{name}{body}" for name in names]
    return parts[0] if len(parts) == 1 else " or ".join(parts)
