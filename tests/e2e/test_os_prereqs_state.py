"""testinfra: what os_prereqs leaves on every node. Runs unchanged against a real site."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.usefixtures("installs")

PACKAGES = ["conntrack", "socat", "ebtables", "ethtool", "iptables", "nfs-common", "chrony", "curl"]


def test_packages_installed(site, hosts):
    for name, host in hosts.items():
        missing = [p for p in PACKAGES if not host.package(p).is_installed]
        assert not missing, f"{name}: {missing}"


def test_apt_uses_only_the_offline_repository(site, hosts):
    for name, host in hosts.items():
        uris = set(host.check_output("apt-get indextargets --format '$(URI)'").split())
        assert uris, name
        expected = site.bundle.apt_repo_url or (
            f"http://{site.master.address}:{site.role_vars.get('bundle_repo_http_port', 8081)}/apt/"
        )  # the master's bundle repository (role bundle_repo's default port)
        assert all(u.startswith(expected) for u in uris), f"{name}: {uris}"


def test_kubernetes_sysctls_live_and_persisted(hosts):
    for name, host in hosts.items():
        assert host.sysctl("net.ipv4.ip_forward") == 1, name
        assert host.sysctl("net.bridge.bridge-nf-call-iptables") == 1, name
        assert host.sysctl("net.bridge.bridge-nf-call-ip6tables") == 1, name
        conf = host.file("/etc/sysctl.d/99-kubernetes.conf")
        assert conf.contains("net.bridge.bridge-nf-call-iptables = 1"), name


def test_modules_configured_for_boot(hosts):
    for name, host in hosts.items():
        f = host.file("/etc/modules-load.d/kubernetes.conf")
        assert f.contains("^overlay$") and f.contains("^br_netfilter$"), name


def test_swap_off_now_and_after_reboot(hosts):
    for name, host in hosts.items():
        assert len(host.file("/proc/swaps").content_string.strip().splitlines()) == 1, name
        active = [
            ln
            for ln in host.file("/etc/fstab").content_string.splitlines()
            if not ln.lstrip().startswith("#") and " swap " in ln
        ]
        assert not active, f"{name}: {active}"


def test_every_node_in_etc_hosts(site, hosts):
    for name, host in hosts.items():
        text = host.file("/etc/hosts").content_string
        for n in site.nodes:
            assert f"{n.address} {n.name}" in text, f"{name} lacks {n.name}"


def test_time_sync_running_and_workers_follow_master(site, hosts):
    for name, host in hosts.items():
        assert host.service("chrony").is_running, name
        conf = host.file("/etc/chrony/chrony.conf").content_string
        if name == site.master.name:
            assert "local stratum 10" in conf
        else:
            assert (
                f"server {site.network.ntp_servers[0] if site.network.ntp_servers else site.master.address}"
                in conf
            )
