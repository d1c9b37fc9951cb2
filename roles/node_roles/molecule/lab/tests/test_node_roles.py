"""node_roles on the lab: each node's labels from the site config, read back from the API."""

import json

import pytest

KUBECTL = "kubectl --kubeconfig /etc/kubernetes/admin.conf"


@pytest.fixture
def site(host):
    v = host.ansible.get_variables()
    if "masters" not in v["group_names"]:
        pytest.skip("node_roles runs on the master, against every node")
    return v


def test_every_node_carries_its_role_and_hardware_labels(host, site):
    for node in site["appliance_nodes"]:
        labels = json.loads(host.check_output(f"{KUBECTL} get node {node['name']} -o json"))["metadata"][
            "labels"
        ]
        assert labels.get("run.ai/type") == node["hardware_class"], node["name"]
        for role in node["roles"]:
            if role != "master":
                # the keys Run:ai reads: runai-system, runai-gpu-worker, runai-cpu-worker (K1)
                key = role if role.startswith("runai-") else f"runai-{role}"
                assert labels.get(f"node-role.kubernetes.io/{key}") == "true", (node["name"], role)
