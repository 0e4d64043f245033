"""Closed-loop simulation of request traces.

Models serving replicas, the metric pipeline, Kueue and training, and scores policies against baselines and a
perfect-foresight oracle. Policies decide through ``autoscaler.core``, exactly as in the cluster.
"""

#: The baselines ``autoscaler simulate`` scores policies against (``baselines`` builds them). Here, not in
#: ``baselines``, so that the command line lists them without importing the policy models.
BASELINES = ("static-peak", "hpa", "hpa-tuned", "keda", "kueue-only", "oracle")
