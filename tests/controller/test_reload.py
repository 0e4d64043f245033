"""Policy hot reload: changes by content, bad files rejected with the last good version kept."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from autoscaler.controller.reload import PolicyStore, renewed
from tests.controller.policies import TGI_POLICY, tgi_policy


def test_the_shipped_tutorial_policy_loads(tmp_path: Path) -> None:
    (tmp_path / "tgi.yaml").write_text(TGI_POLICY)
    store = PolicyStore(tmp_path)
    result = store.reload()
    assert result.changed
    assert not result.rejected
    assert list(store.policies) == ["tgi-gemma"]


def test_unchanged_content_is_not_reloaded(tmp_path: Path) -> None:
    f = tmp_path / "tgi.yaml"
    f.write_text(tgi_policy())
    store = PolicyStore(tmp_path)
    store.reload()
    before = store.policies["tgi-gemma"]
    os.utime(f, (1, 1))  # a touched mtime alone is not a change
    assert not store.reload().changed
    assert store.policies["tgi-gemma"] is before


def test_a_changed_file_takes_effect(tmp_path: Path) -> None:
    f = tmp_path / "tgi.yaml"
    f.write_text(tgi_policy(max_replicas=3))
    store = PolicyStore(tmp_path)
    store.reload()
    f.write_text(tgi_policy(max_replicas=5))
    result = store.reload()
    assert result.loaded == (str(f),)
    assert store.policies["tgi-gemma"].policy.spec.max_replicas == 5


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        pytest.param("spec: [\n", "", id="broken-yaml"),
        pytest.param(tgi_policy().replace("maxReplicas: 3", "maxReplicas: 0"), "maxReplicas", id="invalid-field"),
        pytest.param(tgi_policy().replace("type: queue", "type: magic"), "", id="unknown-policy-type"),
    ],
)
def test_a_bad_change_is_rejected_and_the_last_good_stays(tmp_path: Path, bad: str, problem: str) -> None:
    f = tmp_path / "tgi.yaml"
    f.write_text(tgi_policy(max_replicas=3))
    store = PolicyStore(tmp_path)
    store.reload()
    good = store.policies["tgi-gemma"]
    f.write_text(bad)
    result = store.reload()
    assert [r.file for r in result.rejected] == [str(f)]
    rejection = result.rejected[0]
    assert problem in " ".join(rejection.problems)
    assert rejection.kept == (good,)
    assert "keeping the last good version" in rejection.message
    assert store.policies["tgi-gemma"] is good
    # The same bad content is reported once, not on every poll.
    assert not store.reload().rejected
    # Fixing the file brings the new version in.
    f.write_text(tgi_policy(max_replicas=2))
    assert store.reload().loaded == (str(f),)
    assert store.policies["tgi-gemma"].policy.spec.max_replicas == 2


def test_a_duplicate_policy_name_in_another_file_is_rejected(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(tgi_policy(target="one"))
    store = PolicyStore(tmp_path)
    store.reload()
    (tmp_path / "b.yaml").write_text(tgi_policy(target="two"))
    result = store.reload()
    assert [r.file for r in result.rejected] == [str(tmp_path / "b.yaml")]
    assert "already defined in another file" in result.rejected[0].problems[0]
    assert store.policies["tgi-gemma"].policy.spec.target.name == "one"


def test_removing_a_file_removes_its_policies(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(tgi_policy())
    store = PolicyStore(tmp_path)
    store.reload()
    (tmp_path / "a.yaml").unlink()
    assert store.reload().removed == (str(tmp_path / "a.yaml"),)
    assert store.policies == {}


def test_configmap_symlink_swap_is_seen(tmp_path: Path) -> None:
    """The kubelet's layout: name -> ..data/name, ..data -> ..<timestamp>; an update swaps ..data."""
    v1, v2 = tmp_path / "..2026_11_30_1", tmp_path / "..2026_11_30_2"
    v1.mkdir()
    v2.mkdir()
    (v1 / "tgi.yaml").write_text(tgi_policy(max_replicas=3))
    (v2 / "tgi.yaml").write_text(tgi_policy(max_replicas=4))
    (tmp_path / "..data").symlink_to(v1.name)
    (tmp_path / "tgi.yaml").symlink_to("..data/tgi.yaml")
    store = PolicyStore(tmp_path)
    store.reload()
    assert store.policies["tgi-gemma"].policy.spec.max_replicas == 3
    tmp = tmp_path / "..data_tmp"
    tmp.symlink_to(v2.name)
    tmp.rename(tmp_path / "..data")  # atomic swap, as the kubelet does
    assert store.reload().changed
    assert store.policies["tgi-gemma"].policy.spec.max_replicas == 4


def many(n: int, *, changed: dict[int, int] | None = None, capacity: frozenset[int] = frozenset()) -> str:
    """``n`` policies ``p0``… on targets ``t0``… (``changed``: their maxReplicas where not 3)."""
    return "---\n".join(tgi_policy(name=f"p{i}", target=f"t{i}", max_replicas=(changed or {}).get(i, 3),
                                   capacity=i in capacity) for i in range(n))


def test_a_reload_renews_only_the_policies_it_added_or_changed(tmp_path: Path) -> None:
    """A changed file keeps the compiled object of every policy defined as before (also one moved to another
    file), so ``renewed`` names only the policies added or changed: a reload of one edit among many no longer
    evaluates them all."""
    f = tmp_path / "many.yaml"
    f.write_text(many(6))
    store = PolicyStore(tmp_path)
    store.reload()
    before = dict(store.policies)
    f.write_text(many(6, changed={2: 5}))
    assert store.reload().changed
    assert renewed(before, store.policies) == ["p2"]
    assert all(store.policies[n] is before[n] for n in before if n != "p2")
    # Removed: nothing to evaluate. Moved to another file, the same definition: nothing either. Added: itself.
    before = dict(store.policies)
    f.write_text(many(4, changed={2: 5}))
    (tmp_path / "more.yaml").write_text(tgi_policy(name="p5", target="t5", capacity=False) + "---\n"
                                        + tgi_policy(name="p9", target="t9", capacity=False))
    assert store.reload().changed
    assert renewed(before, store.policies) == ["p9"]
    assert store.policies["p5"] is before["p5"]


def test_a_change_to_a_policy_with_capacity_renews_every_policy_with_capacity(tmp_path: Path) -> None:
    """Policies with a ``capacity`` block arbitrate together (a ClusterQueue's ledger, cohorts): one of them
    added, changed or removed renews them all, and none of the others."""
    f = tmp_path / "many.yaml"
    f.write_text(many(5, capacity=frozenset({1, 3})))
    store = PolicyStore(tmp_path)
    store.reload()
    before = dict(store.policies)
    f.write_text(many(5, changed={1: 5}, capacity=frozenset({1, 3})))
    store.reload()
    assert renewed(before, store.policies) == ["p1", "p3"]
    before = dict(store.policies)
    f.write_text(many(5, changed={1: 5, 4: 5}, capacity=frozenset({1, 3})))
    store.reload()
    assert renewed(before, store.policies) == ["p4"], "a policy without capacity changed: itself only"
    before = dict(store.policies)
    f.write_text(many(3, changed={1: 5}, capacity=frozenset({1})))  # p3 (with capacity) removed
    store.reload()
    assert renewed(before, store.policies) == ["p1"]
