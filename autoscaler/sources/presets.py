"""Signal presets: the real metric names of LLM servers, with their quirks, for every source that can serve them.

A preset is a name (``vllm.waiting``) that stands for a server metric, the spellings it goes by and how
per-pod values combine into one value per target. It is pure data plus small translators:

- ``selector``: PromQL selecting every spelling (vLLM's ``vllm:`` names turn into ``vllm_`` when
  prometheus-client serves OpenMetrics to Prometheus 2.42; tests/sources shows it), always with the target's
  ``namespace`` and, when known, ``cluster`` matcher, so two applications with the same metric never mix;
- ``matches``: whether a scraped exposition sample is one of the preset's metrics (pods source);
- ``cloud_monitoring``: the Cloud Monitoring metric types that serve it, when any.

Queue-like presets sum over a target's pods, ratio-like presets average them, unless the signal says
``aggregate:``. For a LeaderWorkerSet, presets read the leader of each group unless ``workers`` is set
(per-host metrics such as TPU memory live on every host of the slice).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Aggregate = Literal["sum", "avg", "max", "min"]


@dataclass(frozen=True)
class Preset:
    """One known server metric (or ratio of two)."""

    name: str
    description: str
    #: Exposition names, in every spelling a server or a pipeline produces.
    metrics: tuple[str, ...]
    kind: Literal["queue", "ratio"]
    #: For ratio presets computed from two metrics (used / total): the denominator's spellings.
    denominator: tuple[str, ...] = ()
    #: LeaderWorkerSet: read every host of a group, not only its leader.
    workers: bool = False
    #: Cloud Monitoring metric types (numerator, optional denominator) serving this preset, if any.
    cloud_monitoring: tuple[str, ...] = ()

    @property
    def default_aggregate(self) -> Aggregate:
        return "sum" if self.kind == "queue" else "avg"

    @property
    def sources(self) -> tuple[str, ...]:
        """Source types that can serve this preset."""
        base = ("prometheus", "gmp", "pods")
        return (*base, "cloud-monitoring") if self.cloud_monitoring else base

    def matches(self, name: str) -> bool:
        """Whether an exposition sample name is this preset's numerator metric."""
        return name in self.metrics

    def matches_denominator(self, name: str) -> bool:
        return name in self.denominator


def _vllm(suffix: str) -> tuple[str, str]:
    # vLLM registers `vllm:<x>`; OpenMetrics negotiation with Prometheus 2.42 stores it as `vllm_<x>`.
    return (f"vllm:{suffix}", f"vllm_{suffix}")


#: Every preset, by name. Must equal ``autoscaler.core.spec.KNOWN_PRESETS`` (a test checks it).
PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset(
            "jetstream.prefill_backlog",
            "JetStream prefill queue length (latency-oriented scaling on TPU).",
            ("jetstream_prefill_backlog_size",),
            "queue",
        ),
        Preset(
            "jetstream.slots_used",
            "JetStream share of decode slots in use, a 0-1 fraction despite the name (throughput).",
            ("jetstream_slots_used_percentage",),
            "ratio",
        ),
        Preset(
            "vllm.waiting",
            "vLLM requests waiting to be scheduled.",
            _vllm("num_requests_waiting"),
            "queue",
        ),
        Preset(
            "vllm.running",
            "vLLM requests being processed.",
            _vllm("num_requests_running"),
            "queue",
        ),
        Preset(
            "vllm.kv_cache_usage",
            "vLLM KV-cache usage, 0-1 (V1 kv_cache_usage_perc, older gpu_cache_usage_perc).",
            (*_vllm("kv_cache_usage_perc"), *_vllm("gpu_cache_usage_perc")),
            "ratio",
        ),
        Preset(
            "tgi.queue_size",
            "Text Generation Inference requests waiting in the queue.",
            ("tgi_queue_size",),
            "queue",
        ),
        Preset(
            "tpu.memory_used_ratio",
            "TPU high-bandwidth memory used / total per host (Google's JetStream guide); every host of a slice.",
            ("memory_used", "kubernetes_io:container_accelerator_memory_used"),
            "ratio",
            denominator=("memory_total", "kubernetes_io:container_accelerator_memory_total"),
            workers=True,
            cloud_monitoring=(
                "kubernetes.io/container/accelerator/memory_used",
                "kubernetes.io/container/accelerator/memory_total",
            ),
        ),
    )
}


class PresetError(ValueError):
    """An unknown preset, or a preset asked of a source that cannot serve it."""


def get(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise PresetError(f"unknown preset {name!r}; known: {', '.join(sorted(PRESETS))}") from None


_LABEL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def quote(value: str) -> str:
    """A PromQL string literal (double-quoted, backslash and quote escaped)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def matchers(
    labels: dict[str, str], *, namespace: str | None, cluster: str | None, regex: dict[str, str] | None = None
) -> list[str]:
    """Label matchers: the signal's labels plus the mandatory namespace/cluster scoping.

    A value given in ``labels`` wins over the defaults (a user may pin another namespace on purpose).
    """
    merged: dict[str, str] = {}
    if cluster is not None:
        merged["cluster"] = cluster
    if namespace is not None:
        merged["namespace"] = namespace
    merged.update(labels)
    out = []
    for key, value in sorted(merged.items()):
        if not _LABEL_NAME.match(key):
            raise PresetError(f"label name {key!r} is not a valid Prometheus label name")
        out.append(f"{key}={quote(value)}")
    for key, pattern in sorted((regex or {}).items()):
        out.append(f"{key}=~{quote(pattern)}")
    return out


def selector(names: tuple[str, ...], label_matchers: list[str], *, wrap: str = "") -> str:
    """Every spelling as its own exact-name selector, joined with ``or``; ``wrap`` applies a function to each.

    Exact names, not ``{__name__=~"a|b"}``: Google Managed Prometheus only matches metric names exactly
    (its PromQL-differences page). ``timestamp()`` goes on each selector, since over any other expression it
    returns the evaluation time instead of the sample time.
    """
    body = "{" + ", ".join(label_matchers) + "}"
    parts = [f"{wrap}({name}{body})" if wrap else f"{name}{body}" for name in names]
    return parts[0] if len(parts) == 1 else " or ".join(parts)
