"""``autoscaler validate`` end to end: paths and directories, output formats, checks across files, and the
loader API the controller and the simulator use."""

from __future__ import annotations

import json
from pathlib import Path

import pydantic
import pytest

from autoscaler import cli
from autoscaler.policyfile import loader
from tests.policyfile.texts import BASE, edit, policy


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_summary_counts_files_and_policies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "a.yaml", policy("a", "web-a"))
    write(tmp_path / "sub" / "b.yml", policy("b", "web-b") + "---\n" + policy("c", "web-c"))
    write(tmp_path / "notes.txt", "not a policy")
    assert cli.main(["validate", str(tmp_path)]) == 0
    assert capsys.readouterr().out == "2 files, 3 policies: ok\n"


def test_quiet_prints_nothing_on_success(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "a.yaml", BASE)
    assert cli.main(["validate", "--quiet", str(tmp_path)]) == 0
    assert capsys.readouterr() == ("", "")


def test_quiet_still_prints_problems(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path / "a.yaml", edit("  minReplicas: 1", "  minReplicas: 9"))
    assert cli.main(["validate", "-q", str(path)]) == 1
    assert capsys.readouterr().out == (
        f"{path}:9:16: spec.minReplicas: minReplicas (9) is greater than maxReplicas (4)\n"
    )


def test_json_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = write(tmp_path / "good.yaml", policy("good", "web-good"))
    bad = write(tmp_path / "bad.yaml", edit("    type: queue", "    type: hpq"))
    assert cli.main(["validate", "--format", "json", str(good), str(bad)]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False
    assert report["files"] == [str(good), str(bad)]
    assert report["policies"] == [
        {"name": "good", "target": "Deployment/default/web-good", "file": str(good), "line": 1}
    ]
    [problem] = report["problems"]
    assert {k: problem[k] for k in ("file", "line", "column", "path")} == {
        "file": str(bad), "line": 15, "column": 11, "path": "spec.policy.type",
    }
    assert "did you mean 'hpa'?" in problem["message"]


def test_json_format_on_success(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "a.yaml", BASE)
    assert cli.main(["validate", "--format=json", str(tmp_path)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["ok"], report["problems"], len(report["policies"])) == (True, [], 1)


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        pytest.param(
            {"a.yaml": policy("same", "web-a"), "b.yaml": policy("same", "web-b")},
            ["b.yaml:4:9: metadata.name: policy name 'same' is already used at a.yaml:1"],
            id="same-name-in-two-files",
        ),
        pytest.param(
            {"a.yaml": policy("one", "web"), "b.yaml": policy("two", "web")},
            ["b.yaml:7:5: spec.target: Deployment/default/web is already scaled by policy 'one' (a.yaml:1); "
             "one policy per scale target"],
            id="same-target-in-two-files",
        ),
        pytest.param(
            {"a.yaml": policy("one", "web") + "---\n" + policy("two", "web")},
            ["a.yaml:26:5: spec.target: Deployment/default/web is already scaled by policy 'one' (a.yaml:1); "
             "one policy per scale target"],
            id="same-target-in-one-file",
        ),
    ],
)
def test_one_owner_per_name_and_target(
    files: dict[str, str], expected: list[str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    for name, text in files.items():
        write(tmp_path / name, text)
    assert cli.main(["validate", *files]) == 1
    assert capsys.readouterr().out.splitlines() == expected


def test_same_name_in_other_namespaces_is_two_targets(tmp_path: Path) -> None:
    write(tmp_path / "a.yaml", policy("a", "web", "team-a"))
    write(tmp_path / "b.yaml", policy("b", "web", "team-b"))
    assert len(loader.load_paths([tmp_path])) == 2


def test_a_file_named_twice_is_read_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path / "a.yaml", BASE)
    assert cli.main(["validate", str(path), str(tmp_path)]) == 0
    assert capsys.readouterr().out == "1 file, 1 policy: ok\n"


def test_configmap_volume_layout_is_read_once(tmp_path: Path) -> None:
    # A ConfigMap volume holds each key as a symlink to ..data/<key>, ..data linking to a timestamped dir.
    write(tmp_path / "..2026_11_30_09_00_00.1" / "web.yaml", BASE)
    (tmp_path / "..data").symlink_to("..2026_11_30_09_00_00.1")
    (tmp_path / "web.yaml").symlink_to("..data/web.yaml")
    loaded = loader.load_paths([tmp_path])
    assert [(lp.policy.metadata.name, Path(lp.file).name) for lp in loaded] == [("web", "web.yaml")]


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        pytest.param(lambda d: d / "missing.yaml", "missing.yaml:1:1: (file): no such file or directory",
                     id="missing-path"),
        pytest.param(lambda d: (d / "empty").mkdir() or d / "empty",
                     "empty:1:1: (file): no *.yaml or *.yml files in this directory", id="directory-without-yaml"),
    ],
)
def test_path_problems(
    make: object, expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    assert callable(make)
    path = make(Path("."))
    assert cli.main(["validate", str(path)]) == 1
    assert capsys.readouterr().out.splitlines() == [expected]


def test_dangling_symlink_is_a_problem_not_a_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # What a ConfigMap volume briefly shows while the kubelet swaps ..data during an update.
    link = tmp_path / "dangling.yaml"
    link.symlink_to(tmp_path / "nowhere.yaml")
    assert cli.main(["validate", str(link)]) == 1
    assert capsys.readouterr().out == f"{link}:1:1: (file): no such file or directory\n"


def test_usage_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["validate"])
    assert exc.value.code == 2
    assert "PATH" in capsys.readouterr().err


def test_load_paths_raises_with_problems(tmp_path: Path) -> None:
    path = write(tmp_path / "a.yaml", edit("  maxReplicas: 4", "  maxReplicas: 0"))
    with pytest.raises(loader.PolicyFileError) as exc:
        loader.load_paths([path])
    [problem] = exc.value.problems
    assert (problem.file, problem.line, problem.column, problem.path) == (str(path), 10, 16, "spec.maxReplicas")
    assert str(exc.value) == str(problem)


def test_load_file_returns_models_and_lines(tmp_path: Path) -> None:
    path = write(tmp_path / "a.yaml", "# header\n" + policy("a", "web-a") + "---\n" + policy("b", "web-b"))
    assert [p.metadata.name for p in loader.load_file(path)] == ["a", "b"]
    assert [lp.line for lp in loader.load_paths([path])] == [2, 21]


def test_a_file_with_problems_yields_no_policies(tmp_path: Path) -> None:
    # Acting on half a file would apply a policy whose neighbour the user believes is in force.
    write(tmp_path / "a.yaml", policy("a", "web-a") + "---\n" + edit("  maxReplicas: 4", "  maxReplicas: x"))
    result = loader.collect([tmp_path])
    assert (result.policies, len(result.problems)) == ([], 1)


def test_owner_conflicts_over_separately_loaded_files(tmp_path: Path) -> None:
    # What a caller that loads file by file (the controller's reload) runs over the union.
    a = loader.load_paths([write(tmp_path / "a.yaml", policy("one", "web"))])
    b = loader.load_paths([write(tmp_path / "b.yaml", policy("two", "web"))])
    assert loader.owner_conflicts(a + b) == [
        loader.Problem(str(tmp_path / "b.yaml"), 1, 1, "spec.target",
                       f"Deployment/default/web is already scaled by policy 'one' ({tmp_path / 'a.yaml'}:1); "
                       "one policy per scale target")
    ]
    assert loader.owner_conflicts(a) == []


class Pool(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    name: str
    chips: int = pydantic.Field(gt=0)


class Cluster(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    pools: list[Pool]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("pools:\n  - name: a\n    chips: 0\n", ["c.yaml:3:12: pools[0].chips: "], id="bad-value"),
        pytest.param("pools:\n  - name: a\n    chps: 4\n",
                     ["c.yaml:2:5: pools[0].chips: missing", "c.yaml:3:5: pools[0].chps: unknown field"],
                     id="misspelt-field"),
        pytest.param("pools: []\n---\npools: []\n", ["c.yaml:3:1: (yaml): expected one document"],
                     id="two-documents"),
        pytest.param("- a\n", ["c.yaml:1:1: (yaml): expected a mapping (a Cluster)"], id="a-list"),
        pytest.param("", ["c.yaml:1:1: (yaml): expected one document (a Cluster), found 0"], id="empty"),
    ],
)
def test_load_model_reports_positions(
    text: str, expected: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "c.yaml", text)
    with pytest.raises(loader.PolicyFileError) as exc:
        loader.load_model("c.yaml", Cluster)
    lines = [str(p) for p in exc.value.problems]
    assert len(lines) == len(expected), lines
    assert all(line.startswith(prefix) for line, prefix in zip(lines, expected, strict=True)), lines


def test_load_model_returns_the_model(tmp_path: Path) -> None:
    path = write(tmp_path / "c.yaml", "pools:\n  - {name: a, chips: 4}\n")
    assert loader.load_model(path, Cluster) == Cluster(pools=[Pool(name="a", chips=4)])
    with pytest.raises(loader.PolicyFileError, match="did you mean 'chips'"):
        loader.load_model(write(tmp_path / "d.yaml", "pools:\n  - {name: a, chip: 4}\n"), Cluster)


def test_every_target_of_a_policy_with_several_targets_has_one_owner(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import yaml  # noqa: PLC0415 - only this test writes a generated document

    from tests.core.test_disaggregated import policy_doc  # noqa: PLC0415 - the one disaggregated fixture

    # A single-target policy first on the prefill LWS, then the joint policy naming it in a variant: the problem
    # points at the variant's target line.
    single = policy("prefill-alone", "prefill", "llm").replace("kind: Deployment", "kind: LeaderWorkerSet")
    write(tmp_path / "a.yaml", single)
    write(tmp_path / "b.yaml", yaml.safe_dump(policy_doc(), sort_keys=False))
    assert cli.main(["validate", str(tmp_path)]) == 1
    err = capsys.readouterr().out
    assert "LeaderWorkerSet/llm/prefill is already scaled by policy 'prefill-alone'" in err
    lines = (tmp_path / "b.yaml").read_text().splitlines()
    row = int(err.split("b.yaml:")[1].split(":")[0])
    # As for spec.target, the position is the target's first field, under the variant's `target:`.
    assert lines[row - 2].strip() == "target:"
    assert "name: prefill" in lines[row]
    assert "variants" in "".join(lines[row - 6:row])


def test_a_file_linked_under_another_name_is_read_once(tmp_path: Path) -> None:
    """Two names for one file (a link beside it, as ConfigMap volumes make) are one file, not two policies that
    clash over their name and target."""
    write(tmp_path / "a.yaml", BASE)
    (tmp_path / "b.yaml").symlink_to("a.yaml")
    assert [Path(lp.file).name for lp in loader.load_paths([tmp_path])] == ["a.yaml"]
