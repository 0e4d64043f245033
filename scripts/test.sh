#!/usr/bin/env bash
# Every check CI runs, in a virtual environment inside the checkout (.venv, created when missing): installs
# the package with its test extras (and Debian's prometheus: the tests start a real server), then runs ruff,
# mypy --strict, import-linter, the schema and CRD drift checks, `autoscaler validate policies/` and pytest.
# Needs Python >= 3.11 (Debian 12's python3). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/venv.sh
. scripts/venv.sh

if ! command -v prometheus >/dev/null 2>&1; then
  echo "== installing Debian's prometheus (the tests start a real server)"
  apt_install prometheus
fi
if ! command -v kubectl >/dev/null 2>&1; then
  echo "note: kubectl not found; the kustomize rendering tests will be skipped" >&2
fi

echo "== installing the package and its test dependencies into .venv"
python -m pip install -q --disable-pip-version-check -e '.[test]'

echo "== ruff";          python -m ruff check autoscaler tests bench scripts
echo "== mypy --strict"; python -m mypy
echo "== import-linter"; lint-imports
echo "== schema drift";  python -m autoscaler.policyfile.schema --check policies/schema.json
echo "== CRD drift";     python -m autoscaler.policyfile.crd --check deploy/base/crd.yaml
echo "== deploy/ policy copies drift"; python scripts/sync_deploy.py --check
echo "== validate the shipped policies"; python -m autoscaler.cli validate policies/
echo "== pytest";        python -m pytest -q -p no:cacheprovider "$@"
