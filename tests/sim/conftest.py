"""Fixtures of the simulator tests: the shared traces (skipped when ../shared is absent) and small clusters."""

from __future__ import annotations

from pathlib import Path

import pytest

from autoscaler.sim import cluster as cluster_mod

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "traces"
CONV = SHARED / "AzureLLMInferenceTrace_conv.csv"
CODE = SHARED / "AzureLLMInferenceTrace_code.csv"
TPU_CLUSTER = cluster_mod.bundled("cluster-tpu.yaml")


def shared_trace(path: Path) -> Path:
    if not path.is_file():
        pytest.skip(f"shared trace {path} is absent (it exists in CI at ../shared/traces from the project root)")
    return path


@pytest.fixture
def default_cluster() -> cluster_mod.Cluster:
    return cluster_mod.load()
