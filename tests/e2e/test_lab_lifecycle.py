"""The rehearsal lab's own lifecycle: up -> strict-host-key SSH -> isolation -> down -> nothing left."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance_cli import lab
from appliance_cli.lab import proc
from appliance_cli.lab.layout import LabLayout
from appliance_cli.lab.state import LabState

pytestmark = pytest.mark.e2e
LAB_NAME = "lab-lifecycle-test"
NODES = 2


@pytest.fixture(scope="module")
def layout(own_lab_cm) -> Iterator[LabLayout]:
    if os.geteuid() != 0:
        pytest.skip("the rehearsal lab needs root")
    with own_lab_cm(LAB_NAME) as layout:
        yield layout


def _ssh(layout: LabLayout, node: str, *cmd: str) -> str:
    config = layout.site_dir / "ssh_config"
    res = subprocess.run(
        ["ssh", "-F", str(config), "-o", "BatchMode=yes", node, *cmd],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert res.returncode == 0, f"ssh {node} {' '.join(cmd)}: {res.stderr}"
    return res.stdout


def test_lab_lifecycle(layout: LabLayout) -> None:
    steps: list[str] = []
    info = lab.up(nodes=NODES, progress=steps.append)
    assert [n.name for n in info.nodes] == ["master1", "worker1"]
    assert any("master1 up" in s for s in steps)

    # strict host key checking against the generated known_hosts; names and addresses match
    config = (layout.site_dir / "ssh_config").read_text()
    assert "StrictHostKeyChecking yes" in config and "StrictHostKeyChecking no" not in config
    for n in info.nodes:
        assert _ssh(layout, n.name, "hostname").strip() == n.name
        assert _ssh(layout, n.address, "hostname").strip() == n.name
    state = _ssh(layout, "master1", "systemctl", "is-system-running", "--wait").strip()
    assert state in ("running", "degraded"), state
    assert _ssh(layout, "worker1", "sudo", "-n", "id", "-u").strip() == "0"

    # the CLI's own ssh goes through the same config
    cli = subprocess.run(
        [sys.executable, "-m", "appliance_cli", "lab", "ssh", "worker1", "hostname"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert cli.stdout.strip() == "worker1", cli.stderr

    # status: every node running with sshd answering
    status = lab.status()
    assert [(s.name, s.running, s.ssh) for s in status] == [("master1", True, True), ("worker1", True, True)]

    # air-gapped: the lab bridge namespace has no uplink and no route out; nodes route only to it
    links = subprocess.run(
        ["ip", "-n", layout.netns, "-o", "link"], capture_output=True, text=True, check=True
    ).stdout
    names = sorted(line.split(":")[1].strip().split("@")[0] for line in links.splitlines())
    assert names == ["br0", "lo"] + [f"v-node{i}" for i in range(1, NODES + 1)]
    routes = subprocess.run(
        ["ip", "-n", layout.netns, "route"], capture_output=True, text=True, check=True
    ).stdout
    assert "default" not in routes
    node_routes = _ssh(layout, "master1", "ip", "route")
    for line in node_routes.splitlines():
        assert line.startswith(("10.77.0.0/24", "default via 10.77.0.1 ")), line
    # ...while the lab's own offline apt repo answers from a node
    fetch = "import urllib.request as u; print(u.urlopen('http://10.77.0.1:8080/Packages.gz').status)"
    assert _ssh(layout, "worker1", "python3", "-c", f'"{fetch}"').strip() == "200"
    # nodes have no upstream apt source
    assert (
        _ssh(layout, "worker1", "sh", "-c", "'cat /etc/apt/sources.list.d/*.sources 2>/dev/null; true'") == ""
    )

    # a second `up` notices the lab is up and leaves it alone
    again = lab.up(nodes=NODES)
    assert again.already_up

    # down: everything recorded is gone
    recorded = LabState.load(layout.state_file)
    assert recorded is not None
    pidfiles = list(layout.run_dir.glob("*.pid"))
    pids = [proc.read_pid(p) for p in pidfiles]
    assert len(pids) == 2 * NODES + 1  # supervisors, nspawns, http server
    lab.down()
    assert not [p for p in pids if proc.alive(p)]
    netns = Path("/run/netns")
    assert not [ns for ns in recorded.netns if (netns / ns).exists()]
    assert not [d for n in recorded.nodes for d in n.cgroups if Path(d).exists()]
    assert not list(Path("/sys/fs/cgroup/systemd").glob(f"{LAB_NAME}-*"))
    assert lab.status() == []
