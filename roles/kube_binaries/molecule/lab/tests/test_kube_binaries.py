"""kube_binaries on the lab's nodes: the pinned release binaries and CNI plugins from the bundle."""

import pytest


@pytest.fixture
def site(host):
    return host.ansible.get_variables()


@pytest.mark.parametrize("tool", ["kubeadm", "kubelet", "kubectl", "crictl"])
def test_binaries_are_installed_executable(host, tool):
    f = host.file(f"/usr/bin/{tool}")
    assert f.is_file
    assert f.mode == 0o755


def test_kubeadm_reports_the_site_version(host, site):
    assert host.check_output("kubeadm version -o short") == site["appliance_kubernetes_version"]


@pytest.mark.parametrize("plugin", ["bridge", "loopback", "host-local", "portmap"])
def test_cni_plugins_unpacked(host, plugin):
    assert host.file(f"/opt/cni/bin/{plugin}").is_file
