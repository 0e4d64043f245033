"""Cluster and profile files: the bundled ones load; mistakes are reported at FILE:LINE:COL."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from autoscaler.sim import cluster as cluster_mod
from autoscaler.sim import profiles
from autoscaler.sim.yamldoc import SimFileError

GOOD = """\
apiVersion: autoscaler.dev/v1alpha1
kind: SimulatedCluster
metadata:
  name: small
spec:
  quota: {clusterQueue: q, resource: nvidia.com/gpu, nominal: 8}
  pools:
    - name: p
      target: {name: d}
      profile: tgi-gemma2-9b-2xl4
      maxReplicas: 4
  metricPipelines:
    default: {scrapeIntervalSeconds: 5}
"""


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "cluster.yaml"
    p.write_text(text)
    return p


@pytest.mark.parametrize("name", [pytest.param("cluster.yaml", id="l4"), pytest.param("cluster-tpu.yaml", id="tpu")])
def test_bundled_clusters_load(name: str) -> None:
    c = cluster_mod.load(cluster_mod.bundled(name))
    pool = c.spec.pools[0]
    assert c.profile(pool).server in ("tgi", "jetstream")
    assert c.pipeline_for("hpa").worst_case_s == pytest.approx(85.0)
    assert c.pipeline_for("recommended").scrape_interval_seconds == 5


def test_bundled_profiles_state_their_assumptions() -> None:
    profs = profiles.load(cluster_mod.bundled("profiles.yaml"))
    assert {p.server for p in profs.values()} == {"tgi", "jetstream", "vllm"}
    for prof in profs.values():
        assert prof.assumptions, "every profile states its assumptions"
        assert prof.cold_start.total > 0


def test_minimal_cluster_defaults(tmp_path: Path) -> None:
    c = cluster_mod.load(_write(tmp_path, GOOD))
    assert c.chips_per_replica(c.spec.pools[0]) == 2
    assert c.spec.slo.ttft_seconds == 2.0


@pytest.mark.parametrize(
    ("old", "new", "where", "fragment"),
    [
        pytest.param("nominal: 8", "nominal: 8, extra: 1", "6:", "spec.quota.extra", id="unknown-field"),
        pytest.param("maxReplicas: 4", "maxReplicas: many", "11:20", "spec.pools[0].maxReplicas", id="bad-type"),
        pytest.param("    default: {scrapeIntervalSeconds: 5}", "    fast: {scrapeIntervalSeconds: 5}", "6:3",
                     "needs a 'default' pipeline", id="no-default-pipeline"),
        pytest.param("      maxReplicas: 4", "      maxReplicas: 4\n      minReplicas: 9", "8:7", "greater than",
                     id="min-over-max"),
        pytest.param("      maxReplicas: 4", "      maxReplicas: 4\n      initialReplicas: 100000000", "8:7",
                     "initialReplicas (100000000) is greater than maxReplicas (4)", id="initial-over-max"),
    ],
)
def test_problems_point_at_the_line(tmp_path: Path, old: str, new: str, where: str, fragment: str) -> None:
    p = _write(tmp_path, GOOD.replace(old, new))
    with pytest.raises(SimFileError) as err:
        cluster_mod.load(p)
    text = str(err.value)
    assert f"{p}:{where}" in text
    assert fragment in text


def test_unknown_profile(tmp_path: Path) -> None:
    p = _write(tmp_path, GOOD.replace("tgi-gemma2-9b-2xl4", "nope"))
    line = next(i for i, text in enumerate(p.read_text().splitlines(), start=1) if "nope" in text)
    with pytest.raises(SimFileError, match=rf"cluster.yaml:{line}:\d+: spec.pools\[0\].profile: unknown profile "
                                           "'nope'"):
        cluster_mod.load(p)


def test_not_yaml(tmp_path: Path) -> None:
    with pytest.raises(SimFileError, match=r"cluster.yaml:\d+:\d+: \(yaml\): "):
        cluster_mod.load(_write(tmp_path, "spec: [unclosed\n"))


@pytest.mark.parametrize(
    ("profiles_text", "fragment"),
    [
        pytest.param(
            None, r"'nothere.yaml' \(relative to the cluster file\): .*nothere.yaml:1:1: \(file\): no such file",
            id="missing",
        ),
        pytest.param("", r"nothere.yaml:1:1: \(yaml\): expected one document", id="empty"),
        pytest.param("profiles: [unclosed\n", r"nothere.yaml:\d+:\d+: \(yaml\): ", id="not-yaml"),
    ],
)
def test_a_bad_profiles_file_names_the_cluster_field_that_names_it(
    tmp_path: Path, profiles_text: str | None, fragment: str
) -> None:
    """The profiles file's problem comes after the cluster file's ``spec.profilesFile`` line: the user sees
    which file asked for it and where (it used to say only ``nothere.yaml:1:1: (file): no such file``)."""
    if profiles_text is not None:
        (tmp_path / "nothere.yaml").write_text(profiles_text)
    p = _write(tmp_path, GOOD.replace("  quota:", "  profilesFile: nothere.yaml\n  quota:"))
    with pytest.raises(SimFileError) as err:
        cluster_mod.load(p)
    assert len(err.value.problems) == 1
    assert err.value.problems[0].startswith(f"{p}:6:17: spec.profilesFile: "), err.value.problems
    assert re.search(fragment, err.value.problems[0]), err.value.problems


def test_a_prefill_rate_below_ten_tokens_a_second_is_refused(tmp_path: Path) -> None:
    """1e-3 tokens/s made the oracle's lower bound walk millions of replica levels: simulate never ended."""
    text = cluster_mod.bundled("profiles.yaml").read_text()
    slow = tmp_path / "profiles.yaml"
    slow.write_text(re.sub(r"prefillTokensPerSecond: \d+", "prefillTokensPerSecond: 1e-3", text, count=1))
    with pytest.raises(SimFileError, match=r"prefillTokensPerSecond: input should be greater than or equal to 10"):
        profiles.load(slow)
