"""container_runtime's probe of the running containerd, run by a real bash with `systemctl`,
`ctr` and `journalctl` answering as they do on a node whose CRI plugin failed (seen on the lab's
16-node bench: "failed to create fsnotify watcher: too many open files"), and the assert's line
rendered by Ansible's own templating: the failure carries containerd's own reason."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

ROLE = Path(__file__).resolve().parents[2] / "roles" / "container_runtime"
TASKS = yaml.safe_load((ROLE / "tasks" / "0020-containerd.yml").read_text())
PROBE = next(
    t for t in TASKS if t["name"] == "Containerd | Ask the running daemon (CRI plugin, configuration loaded)"
)
ASSERT = next(
    t
    for t in TASKS
    if t["name"] == "Containerd | The daemon runs the written configuration with its CRI plugin"
)
REASON = (
    'failed to load plugin io.containerd.grpc.v1.cri error="failed to create CRI service: failed to create '
    'fsnotify watcher: too many open files" type=io.containerd.grpc.v1'
)


def _template(text: object, variables: dict[str, object]) -> object:
    return Templar(loader=DataLoader(), variables=variables).template(trust_as_template(text))


def _shims(bin_dir: Path, cri: str, journal: str) -> None:
    answers = {
        "systemctl": f"echo {os.getpid()}",
        "ctr": f"printf 'TYPE ID PLATFORMS STATUS\\nio.containerd.grpc.v1 cri linux/amd64 {cri}\\n'",
        "journalctl": f"printf '%s\\n' 'starting containerd' {journal}",
    }
    bin_dir.mkdir()
    for name, body in answers.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)


@pytest.mark.parametrize(
    ("cri", "journal", "says"),
    [
        ("error", f"'{REASON}' 'containerd successfully booted'", REASON),
        ("error", "'nothing about the plugin'", "journalctl -u containerd says why"),
    ],
)
def test_a_cri_plugin_that_did_not_load_is_named_with_containerds_reason(
    tmp_path: Path, cri: str, journal: str, says: str
) -> None:
    config = tmp_path / "config.toml"
    config.write_text("")
    os.utime(config, (0, 0))  # written long before the daemon started
    variables: dict[str, object] = {
        "container_runtime_containerd_config_file": str(config),
        "container_runtime_containerd_socket": "/run/containerd/containerd.sock",
        "inventory_hostname": "worker8",
    }
    script = _template(PROBE["ansible.builtin.shell"]["cmd"], variables)
    _shims(tmp_path / "bin", cri, journal)
    r = subprocess.run(["/bin/bash", "-c", str(script)], capture_output=True, text=True, timeout=30,
                       env={"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin"})  # fmt: skip
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    probe = {"stdout_lines": lines}
    seen = _template(ASSERT["vars"]["__seen"], variables | {"container_runtime_containerd_probe": probe})
    assert isinstance(seen, dict) and seen["cri"] == "error"
    message = _template(ASSERT["ansible.builtin.assert"]["fail_msg"], variables | {"__seen": seen})
    assert message == f"containerd on worker8: its CRI plugin did not load (status error): {says}"


def test_a_healthy_daemon_says_no_more(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text("")
    os.utime(config, (0, 0))
    script = _template(PROBE["ansible.builtin.shell"]["cmd"],
                       {"container_runtime_containerd_config_file": str(config),
                        "container_runtime_containerd_socket": "/run/containerd/containerd.sock"})  # fmt: skip
    _shims(tmp_path / "bin", "ok", f"'{REASON}'")
    r = subprocess.run(["/bin/bash", "-c", str(script)], capture_output=True, text=True, timeout=30,
                       env={"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin"})  # fmt: skip
    assert r.returncode == 0 and [ln.split("=", 1)[0] for ln in r.stdout.splitlines()] == [
        "started",
        "config",
        "cri",
    ]
