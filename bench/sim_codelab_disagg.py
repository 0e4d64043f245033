"""Issue 14's figures for the ``disaggregated`` policy: ``bench.sim_codelab`` (the TPU7x codelab cluster, every
baseline, the two-pool oracle) run with the shipped ``policies/tpu7x-disaggregated.yaml``.

Run: ``python -m bench.sim_codelab_disagg``. Two edits make the example simulable, and nothing else changes:
its targets go back to the codelab's namespace (the file says ``llm-d-pd-joint`` only to validate beside the
per-pool example), and its decode time-per-output-token signal is dropped (the simulated server exports no
per-token latency histogram; the catalog says so).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from bench import sim_codelab

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "policies" / "tpu7x-disaggregated.yaml"


def simulated_policy() -> dict[str, Any]:
    """The shipped example as the simulator can run it (see the module docstring)."""
    text = EXAMPLE.read_text().replace("llm-d-pd-joint", "llm-d-pd-disaggregation")
    doc: dict[str, Any] = yaml.safe_load(text)
    doc["spec"]["signals"] = [s for s in doc["spec"]["signals"] if s["name"] != "tpot"]
    del doc["spec"]["policy"]["decode"]["signals"]["timePerOutputToken"]
    return doc


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "qwen-pd.yaml"
        path.write_text(yaml.safe_dump(simulated_policy(), sort_keys=False))
        return sim_codelab.main([str(path)])


if __name__ == "__main__":
    sys.exit(main())
