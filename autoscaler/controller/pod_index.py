"""Which kept target views a pod watch event may touch, without walking every view of its namespace.

``PolicyObserver.pod_changed`` drops the kept views a pod event touches: a view is touched when its read listed
the pod, or when the pod's labels match the target's pod selector (``targets.PodsRead.touched_by``). Judged on
every view of the namespace, that is O(policies) per pod event: at 5,000 targets in one namespace every
rollout, readiness flip and relabelling walks 5,000 views. ``PodIndex`` keeps, per namespace, each view under:

1. the names of the pods its read listed (a pod relabelled out of the selector is found by its name);
2. one ``matchLabels`` pair of its selector, ``(key, value)``: a pod matches the selector only if its labels
   carry every such pair, so only the views under one of the pod's own pairs can match (the pair chosen is the
   one with the fewest views when the view is added: as ``targets._pivot_keys`` groups pod lists by key);
3. for a selector without ``matchLabels`` (empty: every pod; ``matchExpressions`` only), a per-namespace list
   that every pod event of the namespace looks at.

``candidates`` is a superset of the touched views: the caller still judges each with ``touched_by``, so the
answer is the same as the walk's (``tests/controller/test_pod_index.py`` checks that against the walk). A
view is added when kept (``PolicyObserver._keep``) and removed when it is replaced or a pod event drops it; an
entry left behind by a view dropped otherwise (a target's event, a failed read) is only a candidate that
``touched_by``'s caller finds gone, until the policy's next kept view replaces it (one set of entries per
policy at most).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple, TypeVar

from autoscaler.controller.targets import PodsRead


class _Entry(NamedTuple):
    """Where one policy's view is indexed (to take it out again)."""

    read: PodsRead
    #: The ``(key, value)`` pair it is filed under, or None: in the namespace's unkeyed list.
    pair: tuple[str, str] | None


@dataclass
class _Namespace:
    by_pod: dict[str, set[str]] = field(default_factory=dict)
    by_pair: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    unkeyed: set[str] = field(default_factory=set)


@dataclass
class PodIndex:
    """Kept views (by policy name) by what a pod event could touch them through (see the module docstring)."""

    _namespaces: dict[str, _Namespace] = field(default_factory=dict)
    _entries: dict[str, _Entry] = field(default_factory=dict)

    def add(self, name: str, read: PodsRead | None) -> None:
        """File ``name``'s newly kept view, read from ``read`` (None: no pod listed, nothing can touch it)."""
        entry = self._entries.get(name)
        if entry is not None:
            if entry.read == read:
                return  # the same pods and selector as the view it replaces: filed as it is
            self.remove(name)
        if read is None:
            return
        ns = self._namespaces.setdefault(read.namespace, _Namespace())
        for pod in read.names:
            ns.by_pod.setdefault(pod, set()).add(name)
        labels = (read.selector or {}).get("matchLabels") or {}
        pair: tuple[str, str] | None = None
        if labels:
            pair = min(((str(k), str(v)) for k, v in labels.items()),
                       key=lambda kv: (len(ns.by_pair.get(kv, ())), kv))
            ns.by_pair.setdefault(pair, set()).add(name)
        else:
            ns.unkeyed.add(name)
        self._entries[name] = _Entry(read, pair)

    def remove(self, name: str) -> None:
        """Take ``name``'s view out (replaced, or dropped by a pod event)."""
        entry = self._entries.pop(name, None)
        if entry is None:
            return
        ns = self._namespaces[entry.read.namespace]
        for pod in entry.read.names:
            _discard(ns.by_pod, pod, name)
        if entry.pair is None:
            ns.unkeyed.discard(name)
        else:
            _discard(ns.by_pair, entry.pair, name)
        if not (ns.by_pod or ns.by_pair or ns.unkeyed):
            del self._namespaces[entry.read.namespace]

    def candidates(self, namespace: str, pod: str, labels: dict[str, str]) -> Iterator[str]:
        """The policies whose view a pod event (``pod``, its ``labels`` now) may touch; a name may come twice."""
        ns = self._namespaces.get(namespace)
        if ns is None:
            return
        yield from ns.by_pod.get(pod, ())
        if ns.by_pair:
            for pair in labels.items():
                yield from ns.by_pair.get(pair, ())
        yield from ns.unkeyed


K = TypeVar("K")


def _discard(index: dict[K, set[str]], key: K, name: str) -> None:
    names = index.get(key)
    if names is not None:
        names.discard(name)
        if not names:
            del index[key]
