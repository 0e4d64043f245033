"""Pytest fixtures for the emulated API server: ``kube`` (a running ``Emulator`` on 127.0.0.1, free port)
and ``kube_client`` (a ``kubernetes_asyncio`` ``ApiClient`` pointed at it).

Register as a plugin (``pytest_plugins = ["tests.kube.fixtures"]``) or import the fixtures by name.
At teardown, ``kube`` fails the test if strict mode saw a write nobody declared with ``expect_write``, or if a
write carried a field the server drops (``Emulator.warnings``: its ``unknown field`` Warning headers).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from kubernetes_asyncio import client

from tests.kube.emulator import Emulator
from tests.kube.kueue import Kueue

__all__ = ["kube", "kube_client", "kueue"]


@pytest.fixture
async def kube() -> AsyncIterator[Emulator]:
    emulator = Emulator()
    await emulator.start()
    try:
        yield emulator
    finally:
        await emulator.stop()
    if emulator.violations:
        pytest.fail(
            "strict mode: unexpected writes to the API server:\n  " + "\n  ".join(emulator.violations),
            pytrace=False,
        )
    if emulator.warnings:
        pytest.fail(
            "a write carried fields the API server drops (its Warning headers; a test that means it clears "
            "kube.warnings):\n  " + "\n  ".join(emulator.warnings),
            pytrace=False,
        )


@pytest.fixture
async def kube_client(kube: Emulator) -> AsyncIterator[client.ApiClient]:
    configuration = client.Configuration(host=kube.url)
    api = client.ApiClient(configuration)
    try:
        yield api
    finally:
        await api.close()


@pytest.fixture
def kueue(kube: Emulator) -> Kueue:
    return Kueue(kube)
