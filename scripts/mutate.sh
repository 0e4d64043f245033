#!/usr/bin/env bash
# Mutation run on one module: does each test that guards a claim fail when the code it guards is broken?
#
#   scripts/mutate.sh MODULE.py TEST [TEST ...]
#   scripts/mutate.sh autoscaler/core/policies/hpa.py tests/core/test_hpa.py tests/core/test_engine_hpa_props.py
#
# mutmut (the `dev` extra: `pip install -e '.[dev]'`, or `pip install 'mutmut>=3.8,<3.9'`) breaks MODULE one
# small change at a time (a flipped comparison, a changed constant, a dropped argument) and runs, for each
# mutant, the TESTs (pytest paths or node ids) that reach the changed function. A mutant that no test notices
# "survived": either a test is missing, or the change does not alter behaviour (an equivalent mutant). The
# survivors are listed at the end; `mutmut show NAME` in the work directory prints one as a diff.
#
# The run happens in a throw-away copy of the tree (WORKDIR, default a fresh temp dir, kept so survivors can be
# inspected), never in the checkout. Env: JOBS (parallel mutants, default 1), BUDGET (seconds, default 1800),
# NICE (default 10), ONLY (space-separated mutant-name globs, e.g. 'autoscaler.core.engine.x__falling__mutmut_*':
# mutate only those functions; a method's name is written module.xǁClassǁmethod__mutmut_*). Targeted TESTs keep a run to minutes; the whole suite per mutant would take days.
# Scores measured with this script are in docs/testing.md, "Mutation testing".
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$#" -lt 2 ]; then
  sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
module=$1
shift
if [ ! -f "$module" ]; then
  echo "mutate.sh: $module: no such file (give a path under autoscaler/, e.g. autoscaler/core/engine.py)" >&2
  exit 2
fi
if ! python3 -c 'import mutmut' 2>/dev/null; then
  echo "mutate.sh: mutmut is not installed: pip install -e '.[dev]' (or pip install 'mutmut>=3.8,<3.9')" >&2
  exit 2
fi

workdir=${WORKDIR:-$(mktemp -d -t mutate.XXXXXX)}
mkdir -p "$workdir"
src=$PWD
# Copy only what the tests need; the copy's pyproject gets the mutmut section (the checkout's stays clean).
tar -C "$src" --exclude='__pycache__' --exclude='.venv' -cf - autoscaler tests bench pyproject.toml policies \
  | tar -C "$workdir" -xf -
{
  echo
  echo '[tool.mutmut]'
  echo 'source_paths = ["autoscaler"]'
  echo "only_mutate = [\"$module\"]"
  printf 'pytest_add_cli_args_test_selection = ['
  sep=''
  for t in "$@"; do printf '%s"%s"' "$sep" "$t"; sep=', '; done
  echo ']'
  # A traced first pass on a loaded machine can take minutes per property test: pytest's 120 s per-test
  # timeout would abort it; mutmut times each mutant out on its own (against the clean run's durations).
  echo 'pytest_add_cli_args = ["-p", "no:cacheprovider", "-q", "--timeout=900"]'
  # The checkout is not a git repository in the copy: compare nothing, mutate everything in MODULE.
  echo 'use_git_change_detection = false'
  # Some tests import the benchmarks' trace writers (bench/): copy them beside the mutated tree.
  echo 'also_copy = ["bench"]'
} >>"$workdir/pyproject.toml"

echo "== mutating $module in $workdir with tests: $*" >&2
cd "$workdir"
# mutmut puts its mutated copy (mutants/) first on sys.path; an editable install of the checkout stays behind it.
rc=0
set -f  # ONLY's globs are for mutmut, not the shell
PYTHONPATH='' nice -n "${NICE:-10}" timeout "${BUDGET:-1800}" \
  python3 -m mutmut run --max-children "${JOBS:-1}" ${ONLY:+$ONLY} >"$workdir/run.log" 2>&1 || rc=$?
set +f
tail -n 5 "$workdir/run.log" | tr '\r' '\n' | tail -n 3 >&2
if [ "$rc" -eq 124 ]; then
  echo "mutate.sh: stopped after BUDGET=${BUDGET:-1800} s; the counts below cover the mutants run so far" >&2
elif [ "$rc" -ne 0 ]; then
  echo "mutate.sh: mutmut exited $rc; see $workdir/run.log" >&2
  exit "$rc"
fi
python3 -m mutmut results --all true >"$workdir/results.txt" 2>&1 || python3 -m mutmut results >"$workdir/results.txt"
python3 - "$workdir/results.txt" "$module" <<'EOF'
import collections, sys
counts = collections.Counter()
survivors = []
for line in open(sys.argv[1]):
    name, sep, status = line.strip().rpartition(": ")
    if not sep:
        continue
    counts[status] += 1
    if status == "survived":
        survivors.append(name)
unchecked = counts.pop("not checked", 0)  # outside ONLY, or not reached within BUDGET
total = sum(counts.values())
killed = counts["killed"] + counts["timeout"]
print(f"{sys.argv[2]}: {total} mutants run, {killed} killed, {counts['survived']} survived, "
      f"{total - killed - counts['survived']} other ({dict(counts)}); {unchecked} not run")
if total:
    print(f"score {100 * killed / total:.1f} %")
for s in survivors:
    print("survived:", s)
EOF
echo "work directory: $workdir (cd there; python3 -m mutmut show NAME)" >&2
