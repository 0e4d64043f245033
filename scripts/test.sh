#!/usr/bin/env bash
# Installs everything the tests need (Python packages, Debian's prometheus) and runs every check CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v prometheus >/dev/null 2>&1; then
  echo "== installing Debian's prometheus (the tests start a real server)"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi
if ! command -v kubectl >/dev/null 2>&1; then
  echo "note: kubectl not found; the kustomize rendering tests will be skipped" >&2
fi

echo "== installing the package and its test dependencies"
python3 -m pip install -q --disable-pip-version-check -e '.[test]'

echo "== ruff";          python3 -m ruff check autoscaler tests bench
echo "== mypy --strict"; python3 -m mypy
echo "== import-linter"; lint-imports
echo "== schema drift";  python3 -m autoscaler.policyfile.schema --check policies/schema.json
echo "== validate the shipped policies"; python3 -m autoscaler.cli validate policies/
echo "== pytest";        python3 -m pytest -q -p no:cacheprovider "$@"
