"""Parsing `kubectl get nodes -o json` into the status table's rows; status exit codes."""

from __future__ import annotations

import socket
from pathlib import Path

import yaml

from appliance_cli.cli import ui
from appliance_cli.cli.main import main
from appliance_cli.core.cluster import parse_nodes
from appliance_cli.core.remote import ssh_argv
from appliance_cli.core.siteconfig import load_site
from tests._support.paths import EXAMPLE

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
    assert argv[-2:] == ["ubuntu@192.168.10.11", "sudo -n -- cat /etc/kubernetes/admin.conf"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _loopback_site(tmp_path: Path) -> Path:
    """The example site moved onto loopback, with SSH on a port where nothing listens."""
    data = yaml.safe_load(EXAMPLE.read_text())
    data["network"]["node_cidr"] = "127.0.0.0/24"
    data["ssh"]["port"] = _free_port()
    for i, node in enumerate(data["nodes"], start=1):
        node["address"] = f"127.0.0.{i}"
    (tmp_path / "appliance.yml").write_text(yaml.safe_dump(data))
    return tmp_path


def test_status_of_a_master_that_refuses_ssh_is_unreachable_exit_7(tmp_path: Path, capsys) -> None:
    site = _loopback_site(tmp_path)
    assert main(["status", str(site)]) == 7
    err = capsys.readouterr().err
    assert "master1 (127.0.0.1): SSH cannot connect" in err and "Connection refused" in err


def test_lab_status_of_a_lab_that_is_not_up_exit_7(monkeypatch, capsys) -> None:
    monkeypatch.setenv("APPLIANCE_LAB_NAME", "notup")
    assert main(["lab", "status"]) == 7
    assert "lab 'notup' is not up" in capsys.readouterr().err


def test_counts_read_as_english() -> None:
    assert (ui.count(1, "node"), ui.count(4, "node"), ui.count(0, "node")) == ("1 node", "4 nodes", "0 nodes")
