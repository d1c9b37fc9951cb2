import re
from pathlib import Path

import pytest

from appliance_cli.errors import UsageError
from appliance_cli.lab.layout import LabLayout, node_name


def test_default_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("APPLIANCE_LAB_NAME", "APPLIANCE_LAB_DIR", "APPLIANCE_CACHE_DIR"):
        monkeypatch.delenv(var, raising=False)
    lay = LabLayout.default()
    assert lay.name == "lab"
    assert lay.dir == Path("/var/lib/appliance/labs/lab")
    assert lay.cache_dir == Path("/var/lib/appliance/cache")
    assert lay.site_dir == lay.dir / "site"
    assert lay.nodes_dir == lay.dir / "nodes"
    assert lay.logs_dir == lay.dir / "logs"


def test_env_overrides(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("APPLIANCE_LAB_NAME", "rehearsal-2")
    monkeypatch.setenv("APPLIANCE_LAB_DIR", str(tmp_path / "l"))
    monkeypatch.setenv("APPLIANCE_CACHE_DIR", str(tmp_path / "c"))
    lay = LabLayout.default()
    assert (lay.name, lay.dir, lay.cache_dir) == ("rehearsal-2", tmp_path / "l", tmp_path / "c")


def test_two_labs_share_nothing_on_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("APPLIANCE_LAB_DIR", raising=False)
    monkeypatch.setenv("APPLIANCE_LAB_NAME", "a")
    a = LabLayout.default()
    monkeypatch.setenv("APPLIANCE_LAB_NAME", "b")
    b = LabLayout.default()
    assert a.dir != b.dir
    assert a.netns != b.netns
    assert a.node_netns(1) != b.node_netns(1)
    assert a.cgroup_name("master1") != b.cgroup_name("master1")
    assert a.machine_name("master1") != b.machine_name("master1")
    # addresses repeat: they live in each lab's own namespaces
    assert a.node_address(1) == b.node_address(1)


def test_addresses_and_names() -> None:
    lay = LabLayout("x", Path("/tmp/x"), Path("/tmp/c"))
    assert lay.netns == "x-net"
    assert lay.bridge_address == "10.77.0.1"
    assert [lay.node_address(i) for i in (1, 2, 5)] == ["10.77.0.11", "10.77.0.12", "10.77.0.15"]
    assert [node_name(i) for i in (1, 2, 3, 6)] == ["master1", "worker1", "worker2", "worker5"]
    assert lay.apt_repo_url == "http://10.77.0.1:8080/"
    with pytest.raises(ValueError, match=r"node index 0 outside 1\.\.32"):
        lay.node_address(0)


@pytest.mark.parametrize("bad", ["Lab", "lab_1", "-lab", "a" * 40, "lab/x"])
def test_invalid_lab_name(monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    monkeypatch.setenv("APPLIANCE_LAB_NAME", bad)
    with pytest.raises(UsageError, match=rf"APPLIANCE_LAB_NAME '{re.escape(bad)}' is not a valid lab name"):
        LabLayout.default()
