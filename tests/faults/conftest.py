"""Fixtures of the fault suite: the emulated API server (``kube``, ``kube_client``, ``kueue``), ``world`` and a
stand-in TGI server (``tgi``)."""

from tests.controller.helpers import tgi
from tests.faults.harness import world
from tests.kube.fixtures import kube, kube_client, kueue

__all__ = ["kube", "kube_client", "kueue", "tgi", "world"]
