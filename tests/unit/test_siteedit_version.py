"""`appliance upgrade apply` records the version the cluster runs in the operator's appliance.yml:
one value changes, comments and everything else stay; a layout the edit cannot handle is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from appliance_cli.core import siteedit
from appliance_cli.errors import ConfigError

EXAMPLE = Path(__file__).resolve().parents[2] / "inventories" / "example" / "appliance.yml"


def test_the_version_line_changes_and_nothing_else():
    text = EXAMPLE.read_text()
    out = siteedit.set_kubernetes_version(text, "v1.23.18")
    changed = [(a, b) for a, b in zip(text.splitlines(), out.splitlines(), strict=True) if a != b]
    assert len(changed) == 1
    before, after = changed[0]
    assert before.replace("v1.23.17", "v1.23.18") == after  # its comment kept
    assert yaml.safe_load(out)["kubernetes"]["version"] == "v1.23.18"


def test_a_missing_line_or_block_is_added():
    assert yaml.safe_load(
        siteedit.set_kubernetes_version("kubernetes:\n  pod_cidr: 10.0.0.0/16\n", "v1.24.1")
    ) == {"kubernetes": {"version": "v1.24.1", "pod_cidr": "10.0.0.0/16"}}
    assert yaml.safe_load(siteedit.set_kubernetes_version("site:\n  name: x", "v1.24.1")) == {
        "site": {"name": "x"},
        "kubernetes": {"version": "v1.24.1"},
    }


def test_a_flow_style_block_is_refused_and_nothing_written(tmp_path):
    path = tmp_path / "appliance.yml"
    path.write_text("kubernetes: {version: v1.23.17}\n")
    with pytest.raises(ConfigError) as e:
        siteedit.set_kubernetes_version_in_file(path, "v1.23.18")
    assert "kubernetes.version" in str(e.value.problems if hasattr(e.value, "problems") else e.value)
    assert path.read_text() == "kubernetes: {version: v1.23.17}\n"
