"""Parsing `kubectl get nodes -o json` into the status table's rows."""

from __future__ import annotations

from appliance_cli.core.cluster import parse_nodes
from appliance_cli.core.remote import ssh_argv
from appliance_cli.core.siteconfig import load_site
from tests.unit.test_siteconfig import EXAMPLE

NODES = {
    "items": [
        {
            "metadata": {
                "name": "master1",
                "labels": {
                    "node-role.kubernetes.io/control-plane": "",
                    "node-role.kubernetes.io/runai-system": "true",
                    "run.ai/type": "S5SP",
                },
            },
            "spec": {"taints": [{"key": "node-role.kubernetes.io/master", "effect": "NoSchedule"}]},
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "nodeInfo": {"kubeletVersion": "v1.23.17", "containerRuntimeVersion": "containerd://1.6.20"},
            },
        },
        {
            "metadata": {"name": "gpu1", "labels": {"node-role.kubernetes.io/gpu-worker": "true"}},
            "spec": {"unschedulable": True},
            "status": {"conditions": [{"type": "Ready", "status": "False"}], "nodeInfo": {}},
        },
    ]
}


def test_parse_nodes():
    m, g = parse_nodes(NODES)
    assert (m.name, m.ready, m.roles, m.version, m.node_group) == (
        "master1",
        "Ready",
        "control-plane,runai-system",
        "v1.23.17",
        "S5SP",
    )
    assert m.taints == "node-role.kubernetes.io/master=:NoSchedule" and m.schedulable
    assert (g.ready, g.roles, g.schedulable, g.version) == ("NotReady", "gpu-worker", False, "?")


def test_ssh_argv_verifies_host_keys_and_uses_sudo():
    cfg = load_site(EXAMPLE)
    argv = ssh_argv(cfg, cfg.master, ["cat", "/etc/kubernetes/admin.conf"])
    assert "StrictHostKeyChecking=yes" in argv and "StrictHostKeyChecking=no" not in " ".join(argv)
    assert argv[-2:] == ["ubuntu@192.168.10.11", "sudo -n cat /etc/kubernetes/admin.conf"]
