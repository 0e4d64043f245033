#!/usr/bin/env bash
# The main job on a fresh machine: makes .venv (scripts/venv.sh), installs the package into it and runs
# `autoscaler simulate` on the bundled default. Arguments go to `autoscaler simulate` (see --help).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/venv.sh
. scripts/venv.sh
echo "== installing the package into .venv" >&2
python -m pip install -q --disable-pip-version-check -e .
exec autoscaler simulate "$@"
