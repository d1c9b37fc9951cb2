"""control_plane on the lab's master: kubeadm init done, the API answers with the master registered."""

import json

import pytest

KUBECTL = "kubectl --kubeconfig /etc/kubernetes/admin.conf"


@pytest.fixture
def site(host):
    v = host.ansible.get_variables()
    if "masters" not in v["group_names"]:
        pytest.skip("kubeadm init runs on the master")
    return v


def test_kubeadm_config_and_admin_kubeconfig(host, site):
    cfg = host.file("/etc/kubernetes/kubeadm-config.yaml")
    assert cfg.contains(f"kubernetesVersion: {site['appliance_kubernetes_version']}")
    assert cfg.contains(f"podSubnet: {site['appliance_pod_cidr']}")
    assert host.file("/etc/kubernetes/admin.conf").mode == 0o600


def test_the_api_lists_the_master(host, site):
    nodes = json.loads(host.check_output(f"{KUBECTL} get nodes -o json"))
    assert site["inventory_hostname"] in [n["metadata"]["name"] for n in nodes["items"]]


def test_kubelet_runs(host, site):
    assert host.service("kubelet").is_running
