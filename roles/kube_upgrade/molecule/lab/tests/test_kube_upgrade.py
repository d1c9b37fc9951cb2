"""kube_upgrade on the lab installed at v1.23.16, upgraded to the lab bundle's v1.23.17 (testinfra on
the master): every node's kubelet and the cluster at the target, Ready and schedulable; the state
on the master names the target, every node done and the etcd snapshot taken first (0600);
containerd is the new bundle's on every node."""

import json

import yaml

OLD, NEW = "v1.23.16", "v1.23.17"
OLD_CONTAINERD = "1.6.20~ds1-1+deb12u2"  # the old bundle's (tests/_support/upgrade_bundles.py)
KUBECTL = "kubectl --kubeconfig /etc/kubernetes/admin.conf"
STATE = "/var/lib/appliance/upgrade/state.json"


def _nodes(host):
    return {
        n["metadata"]["name"]: n
        for n in json.loads(host.check_output(f"{KUBECTL} get nodes -o json"))["items"]
    }


def test_every_kubelet_runs_the_target_ready_and_schedulable(host):
    nodes = _nodes(host)
    assert set(nodes) == {"master1", "worker1"}, sorted(nodes)
    assert {n: d["status"]["nodeInfo"]["kubeletVersion"] for n, d in nodes.items()} == dict.fromkeys(
        nodes, NEW
    )
    for name, node in nodes.items():
        ready = [c["status"] for c in node["status"]["conditions"] if c["type"] == "Ready"]
        assert ready == ["True"], (name, node["status"]["conditions"])
        assert not node["spec"].get("unschedulable"), name


def test_the_cluster_configuration_is_at_the_target(host):
    cm = json.loads(host.check_output(f"{KUBECTL} -n kube-system get cm kubeadm-config -o json"))
    assert yaml.safe_load(cm["data"]["ClusterConfiguration"])["kubernetesVersion"] == NEW
    assert host.check_output("kubelet --version") == f"Kubernetes {NEW}"


def test_the_state_names_the_target_every_node_and_the_snapshot_taken_first(host):
    doc = json.loads(host.check_output(f"cat {STATE}"))
    state = doc["kube_upgrade"]  # its own key; chart_upgrade has another (module_utils/resumable_state.py)
    assert (
        doc["schema"] == 1 and state["target"] == NEW and sorted(state["done"]) == ["master1", "worker1"]
    ), state
    assert state.get("draining", "") == "", state
    snap = host.file(state["snapshot"])
    assert state["snapshot"].startswith(f"/var/lib/appliance/etcd-snapshots/etcd-before-{NEW}-"), state
    assert snap.is_file and snap.mode == 0o600 and snap.user == "root" and snap.size > 1000


def test_containerd_moved_to_the_new_bundles_build(host):
    version = host.check_output("dpkg-query -W -f='${Version}' containerd")
    assert version and version != OLD_CONTAINERD, version
