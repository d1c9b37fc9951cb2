#!/usr/bin/python3
"""Ask the running containerd, not its files, in one task: its CRI plugin must have loaded (a
config error or a kernel limit leaves containerd up with CRI "error"), and the daemon must have
started after its configuration was last written (else a restart was missed and it runs the old
configuration). Before this module the same took two tasks on every node (a bash probe and an
assert on its lines).

A plugin that did not load fails naming containerd's own reason: the journal's last line about
the CRI plugin that says fail or error (seen on the lab's 16-node bench: "failed to create
fsnotify watcher: too many open files"). Each command is an argv list. Reads only, so check
mode asks as a run does. Stdlib only, Python >= 3.8 (Ubuntu 20.04 nodes)."""

from __future__ import annotations

import os
import re
import time
from typing import Any

DOCUMENTATION = r"""
module: containerd_running
short_description: The running containerd loaded its CRI plugin and runs the configuration last written
options:
  config: {type: path, required: true, description: containerd's config.toml.}
  socket: {type: path, required: true, description: containerd's socket (ctr --address).}
  node: {type: str, required: true, description: This node's name (named in the failure).}
  retries: {type: int, default: 10, description: Times to ask again while containerd is not running.}
  delay: {type: int, default: 3, description: Seconds between two tries.}
"""

RETURN = r"""
started: {description: When the daemon's process started (epoch seconds)., type: float}
config_written: {description: The configuration's mtime (epoch seconds)., type: float}
cri: {description: "The CRI plugin's status as `ctr plugins ls` shows it (empty: not listed).", type: str}
"""

SLACK_S = 0.05  # the start time is computed to the clock tick (10 ms) from the boot time
WHY_CHARS = 400
JOURNAL_LINES = "500"


def started_at(pid: int) -> float:
    """The process's start, in epoch seconds: its start in clock ticks since boot (/proc/PID/stat
    field 22) plus the boot time (now minus /proc/uptime)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, counted from field 3
    with open("/proc/uptime", encoding="ascii") as f:
        boot = time.time() - float(f.read().split()[0])
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def main_pid(module: Any) -> int:
    rc, out, _ = module.run_command(["systemctl", "show", "-p", "MainPID", "--value", "containerd"])
    return int(out.strip() or 0) if rc == 0 and out.strip().isdigit() else 0


def cri_status(module: Any, socket: str) -> str:
    _, out, _ = module.run_command(["ctr", "--address", socket, "plugins", "ls"])
    for line in out.splitlines():
        cols = line.split()
        if len(cols) >= 4 and cols[0] == "io.containerd.grpc.v1" and cols[1] == "cri":
            return cols[3]
    return ""


def journal_reason(module: Any) -> str:
    """containerd's own last word on the CRI plugin this boot, or ''."""
    _, out, _ = module.run_command(
        ["journalctl", "-u", "containerd", "-b", "--no-pager", "-o", "cat", "-n", JOURNAL_LINES]
    )
    said = [
        ln
        for ln in out.splitlines()
        if "io.containerd.grpc.v1.cri" in ln and re.search("fail|error", ln, re.I)
    ]
    return said[-1][:WHY_CHARS] if said else ""


def converge(module: Any, sleep: Any = time.sleep) -> dict[str, Any]:
    p = module.params
    pid = main_pid(module)
    for _ in range(p["retries"]):
        if pid:
            break
        sleep(p["delay"])
        pid = main_pid(module)
    if not pid:
        module.fail_json(msg=f"containerd on {p['node']}: it is not running (systemctl show containerd: MainPID 0, "
                         f"asked {p['retries'] + 1} times): journalctl -u containerd says why")  # fmt: skip
    started, written = started_at(pid), os.stat(p["config"]).st_mtime
    cri = cri_status(module, p["socket"])
    seen = {"changed": False, "started": started, "config_written": written, "cri": cri}
    if cri != "ok":
        why = journal_reason(module) or "journalctl -u containerd says why"
        module.fail_json(msg=f"containerd on {p['node']}: its CRI plugin did not load (status {cri or 'missing'}): {why}",
                         **seen)  # fmt: skip
    if written > started + SLACK_S:
        module.fail_json(msg=f"containerd on {p['node']}: it started before {p['config']} was last written and runs an "
                         "older configuration: restart it (systemctl restart containerd)", **seen)  # fmt: skip
    return seen


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "config": {"type": "path", "required": True},
            "socket": {"type": "path", "required": True},
            "node": {"type": "str", "required": True},
            "retries": {"type": "int", "default": 10},
            "delay": {"type": "int", "default": 3},
        },
        supports_check_mode=True,
    )
    try:
        module.exit_json(**converge(module))
    except (OSError, ValueError, IndexError) as exc:
        module.fail_json(msg=f"containerd on {module.params['node']}: cannot ask the running daemon: {exc}")


if __name__ == "__main__":
    main()
