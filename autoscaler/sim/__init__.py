"""Closed-loop simulation of request traces: serving replicas, the metric pipeline, Kueue and training, scored against baselines and an oracle."""
