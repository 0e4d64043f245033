"""The in-cluster controller: observe → decide (core) → act on Deployments, LeaderWorkerSets, HPAs and Kueue Workloads.

It holds no decision logic of its own: every decision comes from ``autoscaler.core``.
"""
