from pathlib import Path

import pytest
import yaml

from appliance_cli.core.siteconfig import load_site, parse_site
from appliance_cli.errors import LabError
from appliance_cli.lab import sitegen
from appliance_cli.lab.layout import LabLayout
from appliance_cli.lab.node import LabNode


@pytest.fixture
def layout(tmp_path: Path) -> LabLayout:
    return LabLayout("t1", tmp_path / "lab", tmp_path / "cache")


@pytest.mark.parametrize("count", [1, 2, 4, 6])
def test_site_data_validates(layout: LabLayout, count: int) -> None:
    data = sitegen.site_data(layout, count)
    cfg = parse_site(data)
    assert [n.name for n in cfg.nodes][:2] == ["master1", "worker1"][:count]
    assert len(cfg.nodes) == count
    assert cfg.ssh.private_key == "id_ed25519"
    assert cfg.ssh.known_hosts == "known_hosts"
    assert cfg.ssh.proxy_command == "ip netns exec t1-net nc %h %p"


@pytest.mark.parametrize("count, quotas", [(1, [0, 0, 0, 0]), (2, [1, 1, 1, 1]), (4, [4, 2, 2, 4])])
def test_the_labs_quotas_sum_to_its_gpus_and_nothing_warns(layout: LabLayout, count: int, quotas) -> None:
    """Scaled to a smaller lab, the template's quotas (4, 2, 2, 4 of 12) still sum to its GPUs:
    the remainders go to the largest fractions (2 nodes: 1.33, 0.67, 0.67, 1.33 of 4)."""
    from appliance_cli.core.siteconfig import site_gpus, site_warnings

    cfg = parse_site(sitegen.site_data(layout, count))
    assert [p.gpus for p in cfg.scheduler.projects] == quotas
    assert sum(quotas) == site_gpus(cfg)
    assert site_warnings(cfg) == []


def test_extra_nodes_are_cpu_workers(layout: LabLayout) -> None:
    cfg = parse_site(sitegen.site_data(layout, 6))
    extra = cfg.nodes[4:]
    assert [(n.name, n.address, n.hardware_class, n.roles) for n in extra] == [
        ("worker4", "10.77.0.15", "CPU", ["cpu-worker"]),
        ("worker5", "10.77.0.16", "CPU", ["cpu-worker"]),
    ]


def test_template_mismatch_is_a_lab_error(layout: LabLayout) -> None:
    template = yaml.safe_load(sitegen.template_path().read_text())
    template["nodes"][1]["address"] = "10.77.0.99"
    with pytest.raises(LabError, match="worker1"):
        sitegen.site_data(layout, 2, template)


def test_write_site_loads_back(layout: LabLayout) -> None:
    sitegen.write_site(layout, 3)
    cfg = load_site(layout.site_dir)
    assert [n.name for n in cfg.nodes] == ["master1", "worker1", "worker2"]
    assert cfg.resolve(cfg.ssh.private_key) == layout.site_dir.resolve() / "id_ed25519"


def test_known_hosts_lists_name_and_address() -> None:
    text = sitegen.render_known_hosts(
        [
            ("master1", "10.77.0.11", ["ssh-ed25519 AAAA1", "ssh-rsa BBBB1"]),
            ("worker1", "10.77.0.12", ["ssh-ed25519 C"]),
        ]
    )
    assert text.splitlines() == [
        "master1,10.77.0.11 ssh-ed25519 AAAA1",
        "master1,10.77.0.11 ssh-rsa BBBB1",
        "worker1,10.77.0.12 ssh-ed25519 C",
    ]


def test_ssh_config_verifies_host_keys(layout: LabLayout) -> None:
    nodes = [LabNode(1, "master1", "10.77.0.11"), LabNode(2, "worker1", "10.77.0.12")]
    text = sitegen.render_ssh_config(layout, nodes)
    site = layout.site_dir.resolve()
    assert "Host master1 10.77.0.11\n  HostName 10.77.0.11\n  User debian\n" in text
    assert f"IdentityFile {site / 'id_ed25519'}" in text
    assert f"UserKnownHostsFile {site / 'known_hosts'}" in text
    assert "ProxyCommand ip netns exec t1-net nc %h %p" in text
    assert text.count("StrictHostKeyChecking yes") == 2
    assert "StrictHostKeyChecking no" not in text
