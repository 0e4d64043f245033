"""The ``kube`` fixture fails a test that made a write strict mode did not expect, even if the test passed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

INNER = '''
from kubernetes_asyncio import client

from tests.kube import objects
from tests.kube.fixtures import kube, kube_client

__all__ = ["kube", "kube_client"]


async def test_swallows_the_error(kube, kube_client):
    kube.add(objects.deployment())
    kube.strict = True
    try:
        await client.AppsV1Api(kube_client).patch_namespaced_deployment_scale(
            "tgi-gemma-deployment", "llm", {"spec": {"replicas": 2}}
        )
    except Exception:
        pass  # code under test that hides the failed write must not hide it from the test


async def test_expected_write(kube, kube_client):
    kube.add(objects.deployment())
    kube.strict = True
    kube.expect_write("PATCH", "/apis/apps/v1/namespaces/llm/deployments/*/scale")
    await client.AppsV1Api(kube_client).patch_namespaced_deployment_scale(
        "tgi-gemma-deployment", "llm", {"spec": {"replicas": 2}}
    )
'''


def test_an_unexpected_write_fails_the_test(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    inner = tmp_path / "test_inner.py"
    inner.write_text(INNER)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(root),
         "-c", str(root / "pyproject.toml"), str(inner)],
        cwd=root, capture_output=True, text=True, timeout=60, check=False,
    )
    out = result.stdout
    assert result.returncode == 1, out
    assert "2 passed, 1 error" in out, out  # the call passed; the teardown reports the write
    assert "ERROR at teardown of test_swallows_the_error" in out
    assert "unexpected writes to the API server" in out
    assert "PATCH /apis/apps/v1/namespaces/llm/deployments/tgi-gemma-deployment/scale" in out
