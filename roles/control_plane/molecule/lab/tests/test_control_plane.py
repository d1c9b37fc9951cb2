"""control_plane on the lab's master: kubeadm init done, the API answers with the master registered."""

import json

import pytest
import yaml

KUBECTL = "kubectl --kubeconfig /etc/kubernetes/admin.conf"


@pytest.fixture
def site(host):
    v = host.ansible.get_variables()
    if "masters" not in v["group_names"]:
        pytest.skip("kubeadm init runs on the master")
    return v


def test_kubeadm_config_and_admin_kubeconfig(host, site):
    docs = yaml.safe_load_all(host.file("/etc/kubernetes/kubeadm-config.yaml").content_string)
    cluster = next(d for d in docs if d["kind"] == "ClusterConfiguration")
    assert cluster["kubernetesVersion"] == site["appliance_kubernetes_version"]
    assert cluster["networking"]["podSubnet"] == site["appliance_pod_cidr"]
    assert cluster["imageRepository"] == site["appliance_registry_address"]
    assert host.file("/etc/kubernetes/admin.conf").mode == 0o600


def test_the_api_lists_the_master(host, site):
    nodes = json.loads(host.check_output(f"{KUBECTL} get nodes -o json"))
    assert site["inventory_hostname"] in [n["metadata"]["name"] for n in nodes["items"]]


def test_kubelet_runs(host, site):
    assert host.service("kubelet").is_running
