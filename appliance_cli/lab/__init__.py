"""The rehearsal lab: Debian 12 nodes as systemd-nspawn containers on a private, air-gapped bridge.

Public API: up(), down(), status(), ssh_argv(), replace_node(), and LabLayout for where a lab lives."""

from appliance_cli.lab.layout import LabLayout
from appliance_cli.lab.lifecycle import LabInfo, NodeStatus, down, replace_node, ssh_argv, status, up

__all__ = ["LabInfo", "LabLayout", "NodeStatus", "down", "replace_node", "ssh_argv", "status", "up"]
