"""The built wheel is the product: it carries the bundled data, the default policy and the LICENSE, and
``autoscaler simulate`` runs from it alone, outside the checkout.

The dependencies come from the test environment (installing matplotlib and grpcio again would take minutes);
``bench/wheel_install.py`` does the whole thing in a fresh virtual environment and is run by hand.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("src")
    # A copy: building in the checkout would leave build/ and *.egg-info behind.
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "autoscaler", src / "autoscaler", ignore=shutil.ignore_patterns("__pycache__"))
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(src)],
                   check=True, timeout=240)
    (built,) = dist.glob("*.whl")
    return built


@pytest.mark.timeout(300)
def test_the_wheel_carries_data_policy_and_license(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in ("autoscaler/data/sim/AzureLLMInferenceTrace_conv.csv", "autoscaler/data/sim/cluster.yaml",
                   "autoscaler/data/sim/profiles.yaml", "autoscaler/data/sim/recommended.yaml",
                   "autoscaler/data/sim/ATTRIBUTION.md", "autoscaler/data/replay/azure_conv_jetstream.csv",
                   "autoscaler/py.typed"):
        assert needed in names
    assert any(n.endswith("dist-info/licenses/LICENSE") or n.endswith("dist-info/LICENSE") for n in names)
    assert not any(n.startswith(("tests/", "bench/")) for n in names)


@pytest.mark.timeout(300)
def test_simulate_runs_from_the_installed_wheel(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
                   check=True, timeout=120)
    work = tmp_path / "elsewhere"  # not the checkout: policies/ and the repository's data are out of reach
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(target), "MPLBACKEND": "Agg"}
    where = subprocess.run([sys.executable, "-c", "import autoscaler; print(autoscaler.__file__)"],
                           cwd=work, env=env, capture_output=True, text=True, check=True)
    assert Path(where.stdout.strip()).is_relative_to(target), where.stdout
    script = target / "bin" / "autoscaler"
    assert script.is_file()
    run = subprocess.run([sys.executable, str(script), "simulate", "--duration", "600", "--baselines", "static-peak",
                          "--out", str(work / "out")],
                         check=False, cwd=work, env=env, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "AzureLLMInferenceTrace_conv" in run.stdout
    summary = json.loads((work / "out" / "summary.json").read_text())
    assert "recommended" in summary["policies"]
    assert (work / "out" / "timeline.png").stat().st_size > 10_000
