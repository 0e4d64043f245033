"""Controller tests run against the HTTP emulator (``tests.kube``) with the real kubernetes_asyncio client."""

from tests.controller.helpers import tgi
from tests.kube.fixtures import kube, kube_client, kueue

__all__ = ["kube", "kube_client", "kueue", "tgi"]
