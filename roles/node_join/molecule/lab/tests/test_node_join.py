"""node_join on the lab's nodes: every worker joined under its inventory name."""

import json

import pytest

KUBECTL = "kubectl --kubeconfig /etc/kubernetes/admin.conf"


@pytest.fixture
def site(host):
    return host.ansible.get_variables()


def test_workers_hold_a_kubelet_kubeconfig_and_run_kubelet(host, site):
    if "workers" not in site["group_names"]:
        pytest.skip("only workers join")
    assert host.file("/etc/kubernetes/kubelet.conf").is_file
    assert host.service("kubelet").is_running


def test_the_api_lists_every_worker(host, site):
    if "masters" not in site["group_names"]:
        pytest.skip("asked on the master")
    names = [
        n["metadata"]["name"] for n in json.loads(host.check_output(f"{KUBECTL} get nodes -o json"))["items"]
    ]
    for worker in site["groups"]["workers"]:
        assert worker in names
