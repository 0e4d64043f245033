"""Controller tests run against the HTTP emulator (``tests.kube``) with the real kubernetes_asyncio client."""

from collections.abc import AsyncIterator

import pytest

from tests.controller.helpers import TgiMetrics
from tests.kube.fixtures import kube, kube_client, kueue

__all__ = ["kube", "kube_client", "kueue", "tgi"]


@pytest.fixture
async def tgi() -> AsyncIterator[TgiMetrics]:
    """A stand-in TGI server (``/metrics``) on a free port; a test file may define its own."""
    server = TgiMetrics()
    await server.start()
    yield server
    await server.stop()
