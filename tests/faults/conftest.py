"""Fixtures of the fault suite: the emulated API server (``kube``, ``kube_client``, ``kueue``) and ``world``."""

from tests.faults.harness import world
from tests.kube.fixtures import kube, kube_client, kueue

__all__ = ["kube", "kube_client", "kueue", "world"]
