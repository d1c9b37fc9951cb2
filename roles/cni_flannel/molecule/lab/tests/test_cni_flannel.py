"""cni_flannel on the lab: flannel applied with the site's pod CIDR, every node Ready."""

import json

import pytest
import yaml

KUBECTL = "kubectl --kubeconfig /etc/kubernetes/admin.conf"


@pytest.fixture
def site(host):
    v = host.ansible.get_variables()
    if "masters" not in v["group_names"]:
        pytest.skip("cni_flannel runs on the master")
    return v


def test_manifest_carries_the_pod_cidr_and_the_private_registry(host, site):
    manifest = host.file("/etc/kubernetes/addons/kube-flannel.yml")
    assert manifest.contains(f'"Network": "{site["appliance_pod_cidr"]}"')
    ds = next(d for d in yaml.safe_load_all(manifest.content_string) if d and d["kind"] == "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    images = [c["image"] for c in pod["initContainers"] + pod["containers"]]
    assert images and all(i.startswith(f"{site['appliance_registry_address']}/flannel/") for i in images), (
        images
    )


def test_flannel_daemonset_exists(host, site):
    ds = json.loads(host.check_output(f"{KUBECTL} -n kube-flannel get daemonset kube-flannel-ds -o json"))
    assert ds["metadata"]["name"] == "kube-flannel-ds"


def test_every_node_is_ready(host, site):
    nodes = json.loads(host.check_output(f"{KUBECTL} get nodes -o json"))["items"]
    assert {n["metadata"]["name"] for n in nodes} == {n["name"] for n in site["appliance_nodes"]}
    for n in nodes:
        ready = [c for c in n["status"]["conditions"] if c["type"] == "Ready"]
        assert ready and ready[0]["status"] == "True", n["metadata"]["name"]
