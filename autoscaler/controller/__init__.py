"""The in-cluster controller: observe → decide (core) → act on Deployments, LeaderWorkerSets, HPAs and Kueue Workloads."""
