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
        pytest.param("mode: act\nmdoe: dryRun\n", ":2: mdoe: Extra inputs are not permitted", id="unknown-field"),
        pytest.param("mode: wild\n", ":1: mode: Input should be 'act' or 'dryRun'", id="bad-enum"),
        pytest.param(
            "ports:\n  metrics: 8080\n  health: 70000\n", ":3: ports.health: Input should be less than or equal",
            id="nested-field-line",
        ),
        pytest.param(
            "leaderElection:\n  leaseDurationSeconds: 5\n", ":2: leaderElection: Value error, need "
            "leaseDurationSeconds > renewDeadlineSeconds", id="lease-timing-order",
        ),
        pytest.param("- a\n- b\n", ":1: the config must be a mapping, got list", id="not-a-mapping"),
        pytest.param("mode: [\n", ": not valid YAML", id="bad-yaml"),
        pytest.param(
            "defaultSource: {type: graphite}\n", ":1: defaultSource: Input tag 'graphite' found using 'type'",
            id="unknown-source-type",
        ),
    ],
)
def test_errors_name_the_field_and_line(tmp_path: Path, text: str, expected: str) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(f)
    assert expected in str(err.value)
    assert str(err.value).startswith(str(f))


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
