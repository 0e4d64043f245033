"""The cost of one pod watch event to the controller's kept target views (``PolicyObserver.pod_changed``).

A pod event drops the kept views it touches (its read listed the pod, or the target's selector matches the pod's
labels). ``--views`` targets in one namespace, each a Deployment-like selector (``app: app-<i>``) with
``--pods`` pods listed, are kept through the observer's own path (``_keep``), then pod events are timed one by one
(process CPU, ``time.process_time``):

- **touching one**: a pod of one target changes (a readiness flip, an annotation): its one view is dropped (and
  kept again, untimed, before the next event);
- **touching none**: a pod no target selects changes (a training Job's pod in the same namespace);

and, per view, keeping every view the first time and again (a re-read with the same pods): what the index costs
where views are kept (one sample each: the mean over the views).

Run: ``python -m bench.pod_event [--views 5000] [--events 2000] [--pods 2]``. It uses only what both the walk over
every view and the index (``controller.pod_index``) offer, so the same file times either tree (put the tree on
``PYTHONPATH``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

from autoscaler.controller.observer import PolicyObserver
from autoscaler.controller.targets import PodsRead, TargetView
from autoscaler.core.model import ReplicaStatus

NAMESPACE = "bg"


def keep(observer: PolicyObserver, i: int, pods: int) -> None:
    """Keep the view of target ``i`` as a read of its ``pods`` pods leaves it."""
    read = PodsRead(NAMESPACE, {"matchLabels": {"app": f"app-{i:05d}"}},
                    frozenset(f"app-{i:05d}-{j}" for j in range(pods)))
    observer._keep(f"bg-{i:05d}", observer._seq, time.monotonic(), TargetView(ReplicaStatus(spec=1, ready=1), (), read))


def pod(name: str, app: str) -> dict[str, Any]:
    return {"metadata": {"namespace": NAMESPACE, "name": name,
                         "labels": {"app": app, "pod-template-hash": "5d4f8b9c7"}}}


def run(views: int, events: int, pods: int) -> dict[str, list[float]]:
    observer = PolicyObserver(targets=None, training=None, source=None)  # type: ignore[arg-type]
    out: dict[str, list[float]] = {"touching one": [], "touching none": [], "keeping a view": [],
                                   "keeping it again": []}
    # What the index costs where views are kept: the first read of every target, then a re-read (the same pods).
    for again in ("keeping a view", "keeping it again"):
        t = time.process_time()
        for i in range(views):
            keep(observer, i, pods)
        out[again].append((time.process_time() - t) / views)
    names = {f"bg-{i:05d}" for i in range(views)}  # the loop's policies_in_namespace (a set)
    for k in range(events):
        i = (k * 7919) % views
        t = time.process_time()
        dropped = observer.pod_changed(names, pod(f"app-{i:05d}-0", f"app-{i:05d}"))
        out["touching one"].append(time.process_time() - t)
        assert dropped == [f"bg-{i:05d}"], dropped
        keep(observer, i, pods)
        t = time.process_time()
        dropped = observer.pod_changed(names, pod(f"finetune-{k}", "finetune-job"))
        out["touching none"].append(time.process_time() - t)
        assert dropped == [], dropped
    assert len(observer.views) == views
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--views", type=int, default=5000)
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--pods", type=int, default=2, help="pods listed per target view")
    args = parser.parse_args()
    load0 = os.getloadavg()[0]
    results = run(args.views, args.events, args.pods)
    print(f"{args.views} kept views in one namespace, {args.pods} pods each, {args.events} events of each kind; "
          f"load average {load0:.1f} -> {os.getloadavg()[0]:.1f}", file=sys.stderr)
    print(f"{'per pod event or kept view':26} {'median us':>10} {'mean us':>10} {'p90 us':>10}")
    for name, values in results.items():
        ordered = sorted(values)
        print(f"{name:26} {1e6 * statistics.median(values):10.1f} {1e6 * statistics.fmean(values):10.1f} "
              f"{1e6 * ordered[int(0.9 * (len(ordered) - 1))]:10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
