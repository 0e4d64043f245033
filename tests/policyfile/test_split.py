"""``loader.check`` (what ``autoscaler validate`` runs) splits many files over a forked child: its result must be
the one a single process gives, problems in the same order, and the one ``collect`` gives."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from autoscaler import forked
from autoscaler.policyfile import loader
from tests.policyfile.test_validate_cases import CASES
from tests.policyfile.texts import policy

ROOT = Path(__file__).resolve().parents[2]


def fill(directory: Path) -> None:
    """Bad files of every validate case, valid ones, and clashes whose two sides fall in different halves."""
    texts: list[str | bytes] = []
    for case in CASES:
        content = case.values[0]
        assert isinstance(content, str | bytes)
        texts.append(content)
        texts.append(policy(f"ok-{len(texts)}", f"app-{len(texts)}"))
    half = len(texts) // 2
    texts[1] = policy("same-name", "first-half")
    texts[half + 1] = policy("same-name", "second-half")  # a name used in both halves
    texts[3] = policy("owner", "shared")
    texts[half + 3] = policy("thief", "shared")  # a target scaled from both halves
    for i, text in enumerate(texts):
        path = directory / f"p-{i:03d}.yaml"
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
    for name in ("tpu7x-disaggregated.yaml", "tpu7x-disaggregated-variants.yaml", "recommended.yaml"):
        shutil.copy(ROOT / "policies" / name, directory / f"z-{name}")  # several targets each, clashing


def claims(result: loader.CheckResult) -> list[tuple[str, str, tuple[str, ...], str, int]]:
    return [(c.name, c.target, c.targets, c.file, c.line) for c in result.policies]


def test_split_check_equals_one_process_and_collect(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fill(tmp_path)
    monkeypatch.setattr(loader, "SPLIT_FROM_FILES", 2)
    monkeypatch.setattr(forked, "cores", lambda: 2)
    answers: list[bool] = []
    real_result = forked.Child.result

    def spied(self: forked.Child) -> Any:
        answer = real_result(self)
        answers.append(answer is not None)
        return answer

    monkeypatch.setattr(forked.Child, "result", spied)
    split = loader.check([tmp_path])
    assert answers == [True], "the child must have checked its half"
    alone = loader.check([tmp_path], split=False)
    assert split == alone
    collected = loader.collect([tmp_path])
    assert split.problems == collected.problems
    assert split.files == collected.files
    assert [(c.name, c.file, c.line) for c in split.policies] == [
        (lp.policy.metadata.name, lp.file, lp.line) for lp in collected.policies
    ]
    assert [c.target for c in split.policies] == [lp.policy.spec.target.ref().key for lp in collected.policies]
    # The clashes across the halves are found, at the later policy.
    messages = [p.message for p in split.problems]
    assert any("policy name 'same-name' is already used" in m for m in messages)
    assert any("is already scaled by policy 'owner'" in m for m in messages)
    assert len(split.problems) > len(CASES)


def test_a_child_that_dies_leaves_its_half_to_this_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fill(tmp_path)
    monkeypatch.setattr(loader, "SPLIT_FROM_FILES", 2)
    monkeypatch.setattr(forked, "cores", lambda: 2)
    expected = loader.check([tmp_path], split=False)

    class Dying(forked.Child):
        def __init__(self, work: Any, *args: Any) -> None:
            super().__init__(os._exit, 3)  # dies at once, answering nothing

    monkeypatch.setattr(forked, "Child", Dying)
    assert loader.check([tmp_path]) == expected


def test_few_files_are_not_split(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fill(tmp_path)
    forks: list[object] = []
    monkeypatch.setattr(forked, "Child", lambda *a: forks.append(a))
    monkeypatch.setattr(loader, "SPLIT_FROM_FILES", len(os.listdir(tmp_path)) + 1)
    loader.check([tmp_path])
    assert forks == []
