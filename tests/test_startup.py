"""Start-up: the offline commands load no HTTP or Kubernetes client, and `--help` loads no policy models.

A structural check, not a timing one (start-up time is a figure in bench/startup.py): each case runs the
command line in a fresh interpreter and lists the top-level packages it imported. Importing the Kubernetes
client alone costs about half a second, pydantic and the policy models most of the rest.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: Network clients: none of these has anything to do in a command that contacts nothing.
NETWORK = {"aiohttp", "kubernetes_asyncio", "requests", "urllib3", "httpx", "grpc", "google", "prometheus_api_client"}
#: What only running a policy needs, never printing a command's help.
MODELS = {"pydantic", "pydantic_core", "yaml", "numpy", "matplotlib"}

_SCRIPT = """
import json, sys
from autoscaler import cli
try:
    cli.main(json.loads(sys.argv[1]))
except SystemExit:
    pass
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules})))
"""


def _imported(argv: list[str], cwd: Path) -> set[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, json.dumps(argv)], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=100, check=True,
    )
    modules = json.loads(done.stdout.strip().splitlines()[-1])
    assert "autoscaler" in modules, done.stderr
    return set(modules)


@pytest.mark.parametrize("command", ["validate", "replay", "simulate", "run", "observe", "record"])
def test_help_loads_no_network_client_and_no_policy_models(command: str, tmp_path: Path) -> None:
    loaded = _imported([command, "--help"], tmp_path)
    heavy = sorted(loaded & (NETWORK | MODELS))
    assert not heavy, f"autoscaler {command} --help imported {heavy}"


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["validate", str(ROOT / "policies")], id="validate"),
        pytest.param(["replay", "--example", "--no-plot", "-q", "--out", "out"], id="replay"),
        pytest.param(
            ["simulate", "--duration", "300", "--baselines", "none", "--no-plot", "--out", "out"], id="simulate"
        ),
    ],
)
def test_offline_commands_load_no_network_client(argv: list[str], tmp_path: Path) -> None:
    loaded = _imported(argv, tmp_path)
    assert "pydantic" in loaded, "the command did not get as far as loading its policy"
    assert not loaded & NETWORK, f"autoscaler {argv[0]} imported {sorted(loaded & NETWORK)}"
