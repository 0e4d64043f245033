"""Actuator tests use the emulator its fixtures (until the root conftest registers them as a plugin)."""

from tests.kube.fixtures import kube, kube_client, kueue

__all__ = ["kube", "kube_client", "kueue"]
