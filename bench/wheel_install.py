"""The wheel in a clean virtual environment: build it, install it with its dependencies into a fresh venv (no
system site-packages), and run ``autoscaler simulate`` from a directory outside the checkout.

Run: ``python -m bench.wheel_install`` from the project root (needs the package index or a wheel cache for the
dependencies). Prints the wheel size, the install time and size, and the simulate run's time.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        src = t / "src"
        src.mkdir()
        for name in ("pyproject.toml", "README.md", "LICENSE"):
            shutil.copy(ROOT / name, src / name)
        shutil.copytree(ROOT / "autoscaler", src / "autoscaler", ignore=shutil.ignore_patterns("__pycache__"))
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(t / "dist"), str(src)],
                       check=True)
        (wheel,) = (t / "dist").glob("*.whl")
        print(f"wheel {wheel.name}: {wheel.stat().st_size / 1e6:.2f} MB")
        venv = t / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        start = time.monotonic()
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(wheel)], check=True)
        print(f"install with dependencies: {time.monotonic() - start:.1f} s, venv {_size(venv) / 1e6:.0f} MB")
        work = t / "elsewhere"
        work.mkdir()
        start = time.monotonic()
        run = subprocess.run([str(venv / "bin" / "autoscaler"), "simulate", "--out", str(work / "out")],
                             check=False, cwd=work, capture_output=True, text=True)
        print(run.stdout, end="")
        if run.returncode != 0:
            print(run.stderr, file=sys.stderr)
            return 1
        print(f"autoscaler simulate from the wheel: {time.monotonic() - start:.1f} s wall")
    return 0


if __name__ == "__main__":
    sys.exit(main())
