"""Bad input to every command, as a user gives it: a real process, one line on stderr, an exit code, no traceback,
within a time bound.

Each case runs ``python -m autoscaler.cli ...`` in a subprocess (the error boundary in ``autoscaler/cli.py``
and the interpreter's own exit path are part of what is tested) with a timeout: a case that hangs (a FIFO
read, a YAML bomb expanded, a simulation of 10^13 requests) fails the test instead of the suite. A case passes
when the process exits with the expected code, prints exactly one line on stderr starting with
``autoscaler <command>: `` and containing the expected fragment, and the word "Traceback" appears nowhere.

Fault-injection count (issue 12, input half): the cases below, listed by id in ``CASES``, plus the closed-stdout
case per command in ``test_a_closed_stdout_is_one_line``.
"""

from __future__ import annotations

import functools
import gzip
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "policies" / "recommended.yaml"
REPLAY_POLICY = ROOT / "autoscaler" / "data" / "replay" / "jetstream-backlog.yaml"
REPLAY_TRACE = ROOT / "autoscaler" / "data" / "replay" / "azure_conv_jetstream.csv"
#: Seconds a bad-input case may take; the slowest here take ~3 s (interpreter and imports) on a quiet machine.
TIME_BOUND_S = 60


@dataclass(frozen=True)
class Files:
    """The pathological inputs, made once per test in its tmp directory."""

    dir: Path
    fifo: Path
    bomb: Path
    existing: Path
    unreachable_kubeconfig: Path
    long_expression: Path
    infinite_target: Path


#: Bad files written as text (named by the cases as ``f.dir / NAME``).
BAD_TEXTS = {
    # A replica count no policy may hold (MAX_REPLICAS): it overflowed the bulk path's int64 columns.
    "huge-replicas.csv": "timestamp,backlog,slots_used,replicas\n1700000000,1,0.5,1e300\n1700000015,1,0.5,3\n",
    # A request trace in a layout not known by its names: read only with its columns named.
    "other-layout.csv": "t,model,prompt,completion\n5,ChatGPT,472,18\n",
    # 100,000 nested brackets in a JSON line / a query_range dump: Python's decoder raised RecursionError, an
    # internal error (robust3's sweep).
    "deep.jsonl": '{"timestamp": 0, "input_length": 10, "output_length": 10, "x": ' + "[" * 100_000 + "]" * 100_000
                  + "}\n",
    "deep/backlog.json": "[" * 100_000 + "]" * 100_000,
}
#: The bundled default cluster with one field changed (robust3's sweep): 10^9 training jobs ran out of memory
#: after a minute; a 0.01 s scrape interval never ended.
CLUSTER = ROOT / "autoscaler" / "data" / "sim" / "cluster.yaml"
BAD_CLUSTERS = {
    "training-1e9.yaml": ("count: 6", "count: 1000000000"),
    "scrape-tiny.yaml": ("scrapeIntervalSeconds: 5,", "scrapeIntervalSeconds: 0.01,"),
}


@functools.cache
def _gzip_bomb() -> bytes:
    """A gzip file of a trace decompressing to 72 MB (above the 64 MiB trace limit), 70 KB on disk: made once."""
    return gzip.compress(b"arrival_s,input_tokens,output_tokens\n" + b"0,1,1\n" * 12_000_000, compresslevel=1)


def _files(tmp: Path) -> Files:
    for name, text in BAD_TEXTS.items():
        (tmp / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp / name).write_text(text)
    for name, (old, new) in BAD_CLUSTERS.items():
        text = CLUSTER.read_text()
        assert old in text, old
        (tmp / name).write_text(text.replace(old, new))
    (tmp / "bomb.csv.gz").write_bytes(_gzip_bomb())
    (tmp / "trace.csv.gz").write_bytes(gzip.compress(REPLAY_TRACE.read_bytes()))
    fifo = tmp / "fifo.yaml"
    os.mkfifo(fifo)
    bomb = tmp / "bomb.yaml"
    lines, prev = ["a: &a [x,x,x,x,x,x,x,x,x,x]"], "a"
    for name in "bcdefghi":  # 10^9 nodes once expanded, 11 lines of text
        lines.append(f"{name}: &{name} [{','.join([f'*{prev}'] * 10)}]")
        prev = name
    bomb.write_text("\n".join([*lines, "spec: *i"]) + "\n")
    existing = tmp / "existing-file"
    existing.write_text("not a directory\n")
    kubeconfig = tmp / "kubeconfig"
    kubeconfig.write_text(  # port 1 on the loopback: refused at once, no network needed
        "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
        "clusters: [{name: x, cluster: {server: 'http://127.0.0.1:1'}}]\n"
        "users: [{name: x, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: x, user: x}}]\n"
    )
    text = POLICY.read_text()
    long_expression = tmp / "long-expression.yaml"
    long_expression.write_text(
        text.replace("      aggregate: sum\n", "      aggregate: sum\n    - name: total\n      expr: "
                     + "+".join(["queued"] * 2988) + "\n", 1)
    )
    infinite = tmp / "infinite.yaml"
    infinite.write_text(REPLAY_POLICY.read_text().replace("averageValue: 5}", "averageValue: .inf}", 1))
    return Files(tmp, fifo, bomb, existing, kubeconfig, long_expression, infinite)


@dataclass(frozen=True)
class Case:
    command: str
    args: Callable[[Files], list[str]]
    code: int
    fragment: str
    env: dict[str, str] | None = None


CASES = [
    # validate
    pytest.param(Case("validate", lambda f: [str(f.fifo)], 1, "problem"), id="validate-fifo"),
    pytest.param(Case("validate", lambda f: ["/dev/zero"], 1, "problem"), id="validate-device"),
    pytest.param(Case("validate", lambda f: [str(f.bomb)], 1, "problem"), id="validate-yaml-bomb"),
    pytest.param(Case("validate", lambda f: [str(f.long_expression)], 1, "problem"), id="validate-2988-terms"),
    pytest.param(Case("validate", lambda f: ["--format", "xml", str(POLICY)], 2, "invalid choice"),
                 id="validate-usage"),
    # replay
    pytest.param(Case("replay", lambda f: ["--policy", str(REPLAY_POLICY), "--metrics", str(f.fifo), "--no-plot",
                                           "--out", str(f.dir / "o")], 1, "FIFO"), id="replay-fifo-metrics"),
    pytest.param(Case("replay", lambda f: ["--policy", str(f.fifo), "--metrics", str(REPLAY_TRACE), "--no-plot",
                                           "--out", str(f.dir / "o")], 1, "FIFO"), id="replay-fifo-policy"),
    pytest.param(Case("replay", lambda f: ["--policy", str(f.infinite_target), "--metrics", str(REPLAY_TRACE),
                                           "--no-plot", "--out", str(f.dir / "o")], 1, "finite number"),
                 id="replay-infinite-target"),
    pytest.param(Case("replay", lambda f: ["--policy", str(f.long_expression), "--metrics", str(REPLAY_TRACE),
                                           "--no-plot", "--out", str(f.dir / "o")], 1, "limit is"),
                 id="replay-2988-terms"),
    pytest.param(Case("replay", lambda f: ["--policy", str(REPLAY_POLICY), "--metrics", str(REPLAY_TRACE),
                                           "--no-plot", "--out", str(f.existing)], 1, "output directory"),
                 id="replay-out-is-a-file"),
    pytest.param(Case("replay", lambda f: ["--policy", str(REPLAY_POLICY), "--metrics",
                                           str(f.dir / "huge-replicas.csv"), "--no-plot", "--out", str(f.dir / "o")], 1,
                      "huge-replicas.csv:2: column 'replicas': '1e300' is more replicas than a policy may have"),
                 id="replay-replicas-1e300"),
    pytest.param(Case("replay", lambda f: ["--policy", str(REPLAY_POLICY), "--metrics", "/dev/zero", "--no-plot",
                                           "--out", str(f.dir / "o")], 1, "character device"), id="replay-device"),
    pytest.param(Case("replay", lambda f: ["--policy", str(REPLAY_POLICY), "--metrics", str(f.dir / "deep"),
                                           "--no-plot", "--out", str(f.dir / "o")], 1,
                      "backlog.json: nested too deeply for a query_range dump"), id="replay-json-nested-deeply"),
    pytest.param(Case("replay", lambda f: ["--policy", str(REPLAY_POLICY), "--metrics", str(f.dir / "trace.csv.gz"),
                                           "--no-plot", "--out", str(f.dir / "o")], 1,
                      "trace.csv.gz: gzip-compressed; decompress it first"), id="replay-gzip-csv"),
    # simulate
    pytest.param(Case("simulate", lambda f: ["--rate-scale", "inf", "--no-plot", "--out", str(f.dir / "o")], 2,
                      "finite"), id="simulate-rate-scale-inf"),
    pytest.param(Case("simulate", lambda f: ["--rate-scale", "1e9", "--no-plot", "--out", str(f.dir / "o")], 1,
                      "at most 1,000,000"), id="simulate-rate-scale-1e9"),
    pytest.param(Case("simulate", lambda f: ["--cluster", str(f.bomb), "--no-plot", "--out", str(f.dir / "o")], 1,
                      "YAML bomb"), id="simulate-cluster-yaml-bomb"),
    pytest.param(Case("simulate", lambda f: ["--cluster", str(f.fifo), "--no-plot", "--out", str(f.dir / "o")], 1,
                      "FIFO"), id="simulate-cluster-fifo"),
    pytest.param(Case("simulate", lambda f: ["--requests", "/dev/zero", "--no-plot", "--out", str(f.dir / "o")], 1,
                      "character device"), id="simulate-requests-device"),
    pytest.param(Case("simulate", lambda f: ["--requests", str(f.dir / "other-layout.csv"), "--no-plot", "--out",
                                             str(f.dir / "o")], 1, "other-layout.csv:1: unknown header"),
                 id="simulate-requests-other-layout"),
    pytest.param(Case("simulate", lambda f: ["--requests", str(f.dir / "other-layout.csv"), "--requests-columns",
                                             "t,prompt,Input", "--no-plot", "--out", str(f.dir / "o")],
                      1, "no column 'Input' in the header"), id="simulate-requests-columns-missing"),
    pytest.param(Case("simulate", lambda f: ["--requests-columns", "Timestamp,Request tokens", "--no-plot", "--out",
                                             str(f.dir / "o")], 2, "expected three column names"),
                 id="simulate-requests-columns-two-names"),
    pytest.param(Case("simulate", lambda f: ["--requests", str(f.dir / "deep.jsonl"), "--no-plot", "--out",
                                             str(f.dir / "o")], 1, "deep.jsonl:1: bad row"),
                 id="simulate-jsonl-nested-deeply"),
    pytest.param(Case("simulate", lambda f: ["--requests", str(f.dir / "bomb.csv.gz"), "--no-plot", "--out",
                                             str(f.dir / "o")], 1, "larger than the 64 MiB limit"),
                 id="simulate-requests-gzip-bomb"),
    pytest.param(Case("simulate", lambda f: ["--requests-columns", "TIMESTAMP,ContextTokens,ContextTokens",
                                             "--no-plot", "--out", str(f.dir / "o")], 2,
                      "names the column 'ContextTokens' twice"), id="simulate-requests-columns-twice"),
    pytest.param(Case("simulate", lambda f: ["--cluster", str(f.dir / "training-1e9.yaml"), "--no-plot", "--out",
                                             str(f.dir / "o")], 1, "1,000,000,000 training jobs in all"),
                 id="simulate-cluster-training-1e9"),
    pytest.param(Case("simulate", lambda f: ["--cluster", str(f.dir / "scrape-tiny.yaml"), "--no-plot", "--out",
                                             str(f.dir / "o")], 1, "scrapeIntervalSeconds: input should be greater "
                                             "than or equal to 1"), id="simulate-cluster-scrape-tiny"),
    # 10^8 ready replicas at the start ran for ever.
    pytest.param(Case("simulate", lambda f: ["--initial-replicas", "100000000", "--no-plot", "--out", str(f.dir / "o")],
                      1, "--initial-replicas 100000000 is more than pool tgi-gemma's maxReplicas (8"),
                 id="simulate-initial-replicas-over-max"),
    pytest.param(Case("simulate", lambda f: ["--policy", str(f.long_expression), "--no-plot", "--out",
                                             str(f.dir / "o")], 1, "limit is"), id="simulate-2988-terms"),
    # observe
    pytest.param(Case("observe", lambda f: ["--policy", str(POLICY), "--once", "--kubeconfig",
                                            str(f.unreachable_kubeconfig)], 1, "cannot reach the API server"),
                 id="observe-unreachable-cluster"),
    pytest.param(Case("observe", lambda f: ["--policy", str(POLICY), "--once", "--kubeconfig", str(f.fifo)], 1,
                      "FIFO"), id="observe-fifo-kubeconfig"),
    pytest.param(Case("observe", lambda f: ["--policy", str(f.fifo), "--once", "--replicas", "1"], 1, "FIFO"),
                 id="observe-fifo-policy"),
    pytest.param(Case("observe", lambda f: ["--policy", str(f.long_expression), "--once", "--replicas", "1"], 1,
                      "limit is"), id="observe-2988-terms"),
    pytest.param(Case("observe", lambda f: ["--policy", str(POLICY), "--once", "--replicas", "1", "--deadline",
                                            "nan"], 2, "finite number of seconds > 0"), id="observe-deadline-nan"),
    pytest.param(Case("observe", lambda f: ["--policy", str(POLICY), "--once", "--replicas", "-1"], 2,
                      "a replica count is ≥ 0"), id="observe-replicas-negative"),
    pytest.param(Case("observe", lambda f: ["--policy", str(POLICY), "--once"], 1, "no such file",
                      env={"KUBECONFIG": "/nonexistent/kubeconfig"}), id="observe-kubeconfig-env-missing"),
    # record
    pytest.param(Case("record", lambda f: ["--policy", str(POLICY), "--start", "-1h", "--out", str(f.existing)], 1,
                      "not a directory"), id="record-out-existing-file"),
    pytest.param(Case("record", lambda f: ["--policy", str(POLICY), "--start", "yesterday", "--out",
                                           str(f.dir / "o")], 1, "not a time"), id="record-bad-start"),
    # run
    pytest.param(Case("run", lambda f: ["--policies", str(ROOT / "policies"), "--config", str(f.fifo), "--once"], 1,
                      "FIFO"), id="run-fifo-config"),
    pytest.param(Case("run", lambda f: ["--policies", str(ROOT / "policies"), "--config", str(f.bomb), "--once"], 1,
                      "YAML bomb"), id="run-yaml-bomb-config"),
    pytest.param(Case("run", lambda f: ["--policies", str(f.existing), "--once"], 1, "not a directory"),
                 id="run-policies-not-a-directory"),
    pytest.param(Case("run", lambda f: ["--policies", str(ROOT / "policies"), "--once"], 1, "no such file",
                      env={"KUBECONFIG": "/nonexistent/kubeconfig"}), id="run-kubeconfig-env-missing"),
    pytest.param(Case("run", lambda f: ["--policies", str(ROOT / "policies"), "--kubeconfig", str(f.fifo), "--once"],
                      1, "FIFO"), id="run-fifo-kubeconfig"),
]


def _env(extra: dict[str, str] | None) -> dict[str, str]:
    env = {"PYTHONPATH": str(ROOT), "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/nonexistent"}
    return {**env, **(extra or {})}


def _check_one_line(stderr: str, command: str, fragment: str) -> None:
    assert "Traceback" not in stderr, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith(f"autoscaler {command}: "), lines[0]
    assert fragment in lines[0], lines[0]


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_one_line_and_an_exit_code(case: Case, tmp_path: Path) -> None:
    files = _files(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "autoscaler.cli", case.command, *case.args(files)],
        capture_output=True, text=True, timeout=TIME_BOUND_S, cwd=tmp_path, env=_env(case.env), check=False,
    )
    assert proc.returncode == case.code, proc.stderr
    if case.command == "validate" and case.code == 1:
        # validate's product is its problem list (stdout); stderr holds its one-line count.
        assert "Traceback" not in proc.stdout
    _check_one_line(proc.stderr, case.command, case.fragment)


CLOSED_STDOUT = [
    pytest.param("validate", lambda f: ["--format", "json", str(ROOT / "policies")], id="validate"),
    pytest.param("replay", lambda f: ["--example", "--no-plot", "--out", str(f.dir / "o")], id="replay"),
    pytest.param("simulate", lambda f: ["--duration", "300", "--baselines", "none", "--no-plot", "--out",
                                        str(f.dir / "o")], id="simulate"),
    pytest.param("observe", lambda f: ["--policy", str(POLICY), "--once", "--replicas", "1"], id="observe"),
    pytest.param("record", lambda f: ["--policy", str(POLICY), "--start", "-1h", "--out", str(f.dir / "o")],
                 id="record"),
]


@pytest.mark.parametrize(("command", "args"), CLOSED_STDOUT)
def test_a_closed_stdout_is_one_line(command: str, args: Callable[[Files], list[str]], tmp_path: Path) -> None:
    # `autoscaler ... | head -1`: the reader is gone before the command writes. Closing the pipe before the child
    # has imported anything makes the first write fail, every time.
    files = _files(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "autoscaler.cli", command, *args(files)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=_env(None),
    )
    assert proc.stdout is not None
    proc.stdout.close()
    try:
        _, stderr = proc.communicate(timeout=TIME_BOUND_S)
    finally:
        proc.kill()
    assert proc.returncode == 1, stderr
    _check_one_line(stderr, command, "broken pipe")


def test_help_into_a_closed_pipe() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "autoscaler.cli", "--help"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(None),
    )
    assert proc.stdout is not None
    proc.stdout.close()
    _, stderr = proc.communicate(timeout=TIME_BOUND_S)
    assert "Traceback" not in stderr
    assert stderr.startswith("autoscaler: output closed early")
