"""The controller config file: defaults, strictness and errors that name the field and the line."""

from __future__ import annotations

from pathlib import Path

import pytest

from autoscaler.controller.config import ConfigError, ControllerConfig, load_config
from autoscaler.core.sourcespec import PrometheusSourceSpec


def test_no_file_gives_the_defaults() -> None:
    cfg = load_config(None)
    assert cfg == ControllerConfig()
    assert cfg.mode == "act"
    assert cfg.leader_election.enabled
    assert (cfg.ports.metrics, cfg.ports.health) == (8080, 8081)


def test_a_full_file_loads(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(
        "apiVersion: autoscaler.dev/v1alpha1\nkind: ControllerConfig\nmode: dryRun\n"
        "defaultSource: {type: prometheus, url: 'http://frontend.gmp-system.svc:9090'}\n"
        "namespaces: [llm]\nleaderElection: {leaseName: x, leaseDurationSeconds: 30, renewDeadlineSeconds: 20}\n"
        "ports: {metrics: 9090, health: 9091}\nfastPollSeconds: 0.5\n"
    )
    cfg = load_config(f)
    assert cfg.mode == "dryRun"
    assert isinstance(cfg.default_source, PrometheusSourceSpec)
    assert cfg.namespaces == ["llm"]
    assert cfg.leader_election.lease_name == "x"
    assert cfg.fast_poll_seconds == 0.5


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("mode: act\nmdoe: dryRun\n", ":2:1: mdoe: unknown field 'mdoe'; did you mean 'mode'?",
                     id="unknown-field"),
        pytest.param("mode: wild\n", ":1:7: mode: 'wild' is not allowed; allowed: act, dryRun", id="bad-enum"),
        pytest.param(
            "ports:\n  metrics: 8080\n  health: 70000\n",
            ":3:11: ports.health: input should be less than or equal to 65535 (got 70000)", id="nested-field-line",
        ),
        pytest.param(
            "leaderElection:\n  leaseDurationSeconds: 5\n", ":2:3: leaderElection: need "
            "leaseDurationSeconds > renewDeadlineSeconds", id="lease-timing-order",
        ),
        pytest.param("- a\n- b\n", ":1:1: (yaml): expected a mapping (a ControllerConfig)", id="not-a-mapping"),
        pytest.param("mode: [\n", ":2:1: (yaml): expected the node content", id="bad-yaml"),
        pytest.param(
            "defaultSource: {type: graphite}\n", ":1:23: defaultSource.type: unknown defaultSource type 'graphite'",
            id="unknown-source-type",
        ),
        # Found by robust2's sweep (2026-12-07): the config's own loader said '(top): Value error, ...' for these
        # and took the last of a key written twice.
        pytest.param("fastPollSeconds: .nan\n", ":1:18: fastPollSeconds: should be a finite number, not nan",
                     id="nan"),
        pytest.param("fastPollSeconds: 1e400\n", ":1:18: fastPollSeconds: should be a finite number, not inf",
                     id="overflow"),
        pytest.param("fastPollSeconds: 1\nfastPollSeconds: 2\n",
                     ":2:1: fastPollSeconds: duplicate key 'fastPollSeconds' (first at line 1)", id="duplicate-key"),
        pytest.param("defaultSource: {type: prometheus, url: prom:9090}\n",
                     ":1:40: defaultSource.url: url must be an http:// or https:// URL", id="url-without-scheme"),
        # audit4's sweep (2026-12-08): taken, then every list and watch of that namespace (or the Lease) failed.
        pytest.param("namespaces: [llm, LLM]\n", ":1:19: namespaces[1]: string should match pattern",
                     id="namespace-not-a-dns-label"),
        pytest.param("leaderElection:\n  leaseName: My_Lease\n", ":2:14: leaderElection.leaseName: string should "
                     "match pattern", id="lease-name-not-a-dns-name"),
    ],
)
def test_errors_name_the_field_and_line(tmp_path: Path, text: str, expected: str) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(f)
    assert expected in str(err.value)
    assert str(err.value).startswith(str(f))


@pytest.mark.parametrize("text", ["", "# only a comment\n", "---\n...\n"])
def test_a_file_without_a_document_gives_the_defaults(tmp_path: Path, text: str) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(text)
    assert load_config(f) == ControllerConfig()


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "absent.yaml")


def test_slice_flavors_are_typed_and_validated() -> None:
    """Issue 14: blocks declared where the nodes cannot say where they sit (docs/tpu.md)."""
    from pydantic import ValidationError  # noqa: PLC0415

    cfg = ControllerConfig.model_validate(
        {"sliceFlavors": {"slice-rf": {"blockShape": "4x4x4", "blockLabel": "cloud.google.com/gke-nodepool"}}})
    assert cfg.slice_flavors["slice-rf"].host_shape == "2x2x1"
    with pytest.raises(ValidationError, match="does not tile"):
        ControllerConfig.model_validate(
            {"sliceFlavors": {"f": {"blockShape": "4x4x4", "hostShape": "3x1x1", "blockLabel": "b"}}})
    with pytest.raises(ValidationError, match="AxB or AxBxC"):
        ControllerConfig.model_validate({"sliceFlavors": {"f": {"blockShape": "big", "blockLabel": "b"}}})
