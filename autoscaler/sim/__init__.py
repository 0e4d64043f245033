"""Closed-loop simulation of request traces.

Models serving replicas, the metric pipeline, Kueue and training, and scores policies against baselines and a
perfect-foresight oracle. Policies decide through ``autoscaler.core``, exactly as in the cluster.
"""
