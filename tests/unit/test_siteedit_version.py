"""`appliance upgrade apply` records the version the cluster runs in the operator's appliance.yml:
one value changes, comments and everything else stay; a layout the edit cannot handle is refused."""

from __future__ import annotations

import os
import stat
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


def test_a_symlinked_site_file_stays_a_link_and_its_target_gets_the_edit(tmp_path):
    repo = tmp_path / "config-repo"
    repo.mkdir()
    real = repo / "appliance.yml"
    real.write_text("kubernetes:\n  version: v1.23.17  # pinned\n")
    real.chmod(0o640)
    link = tmp_path / "site" / "appliance.yml"
    link.parent.mkdir()
    link.symlink_to(real)
    siteedit.set_kubernetes_version_in_file(link, "v1.23.18")
    assert link.is_symlink() and link.readlink() == real
    assert real.read_text() == "kubernetes:\n  version: v1.23.18  # pinned\n"
    assert stat.S_IMODE(real.stat().st_mode) == 0o640
    assert sorted(p.name for p in repo.iterdir()) == ["appliance.yml"]  # no temporary left
    assert sorted(p.name for p in link.parent.iterdir()) == ["appliance.yml"]


def test_the_site_file_keeps_its_mode_and_is_fsynced_before_the_rename(tmp_path, monkeypatch):
    path = tmp_path / "appliance.yml"
    path.write_text("nodes:\n  - name: a\n")
    path.chmod(0o640)
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            synced.append(Path(f"/proc/self/fd/{fd}").read_text())
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    siteedit.set_kubernetes_version_in_file(path, "v1.24.1")
    assert synced == [path.read_text()] and "version: v1.24.1" in synced[0]
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another owner")
def test_the_site_file_keeps_its_owner(tmp_path):
    path = tmp_path / "appliance.yml"
    path.write_text("site:\n  name: x\n")
    os.chown(path, 4321, 4322)  # the operator's, edited by a root `appliance upgrade apply`
    siteedit.set_kubernetes_version_in_file(path, "v1.24.1")
    st = path.stat()
    assert (st.st_uid, st.st_gid) == (4321, 4322) and "v1.24.1" in path.read_text()
