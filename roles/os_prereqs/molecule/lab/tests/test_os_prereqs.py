"""os_prereqs on the lab's nodes: apt on the bundle only, the tools kubeadm checks for, swap off,
every node in /etc/hosts."""

import pytest


@pytest.fixture
def site(host):
    return host.ansible.get_variables()


def test_apt_points_at_the_bundle_only(host):
    offline = host.file("/etc/apt/sources.list.d/appliance-offline.list")
    # read with the bundle's own key alone (issue 28), never [trusted=yes]
    assert offline.contains(r"^deb \[signed-by=/etc/apt/keyrings/appliance-offline.asc\] http://")
    assert not offline.contains("trusted=yes")
    assert host.file("/etc/apt/keyrings/appliance-offline.asc").contains("BEGIN PGP PUBLIC KEY BLOCK")
    others = host.check_output("ls /etc/apt/sources.list.d/").split()
    assert others == ["appliance-offline.list"]
    assert not host.file("/etc/apt/sources.list").exists


@pytest.mark.parametrize("pkg", ["conntrack", "socat", "ebtables", "ethtool", "iptables", "chrony", "curl"])
def test_packages_from_the_bundle_are_installed(host, pkg):
    assert host.package(pkg).is_installed


def test_swap_is_off(host):
    assert host.check_output("swapon --show --noheadings") == ""


def test_every_node_is_in_etc_hosts(host, site):
    hosts = host.file("/etc/hosts").content_string
    for node in site["appliance_nodes"]:
        assert any(line.split()[:2] == [node["address"], node["name"]] for line in hosts.splitlines()), node
