"""Fixtures of the simulator tests: the two Azure traces (bundled with the package) and small clusters."""

from __future__ import annotations

from pathlib import Path

import pytest

from autoscaler.sim import cluster as cluster_mod

ROOT = Path(__file__).resolve().parents[2]
# Bundled byte-identical copies of the shared traces (autoscaler/data/sim/ATTRIBUTION.md): a plain clone runs them.
CONV = cluster_mod.bundled("AzureLLMInferenceTrace_conv.csv")
CODE = cluster_mod.bundled("AzureLLMInferenceTrace_code.csv")
TPU_CLUSTER = cluster_mod.bundled("cluster-tpu.yaml")


def shared_trace(path: Path) -> Path:
    if not path.is_file():
        pytest.fail(f"bundled trace {path} is missing: reinstall the package or restore autoscaler/data/sim")
    return path


@pytest.fixture
def default_cluster() -> cluster_mod.Cluster:
    return cluster_mod.load()
