"""Commands on the running lab's nodes, for e2e tests that break a node on purpose."""

from __future__ import annotations

import shlex
import subprocess
import time


def run_as_root(node: str, command: str) -> str:
    """`command` through `sudo sh -c` on lab node `node` (the lab of $APPLIANCE_LAB_NAME);
    fails the test, naming node and command, when it fails."""
    from appliance_cli import lab

    r = subprocess.run(lab.ssh_argv(node, ["sudo", "sh", "-c", shlex.quote(command)]),
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0, f"{node}: {command}: {r.stderr[-500:]}"
    return r.stdout


def wait_booted(ready: bool = True, timeout: float = 240.0) -> tuple[bool, str]:
    """A lab booted from its disks (a snapshot restored or just saved, with Kubernetes on it): its
    API server answers soon, but each kubelet reports Ready only once it posted its status again,
    as after a reboot. Waits for that (with `ready` false, before the pod network, when every node
    is NotReady by design: for the API server's answer only). -> (reached, the nodes' last answer)."""
    from appliance_cli import lab

    query = ["sudo", "kubectl", "--kubeconfig", "/etc/kubernetes/admin.conf", "get", "nodes", "-o",
             'jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status} {end}']  # fmt: skip
    end, seen = time.monotonic() + timeout, ""
    while time.monotonic() < end:
        # ssh hands the node's shell one string: the query quoted for it
        r = subprocess.run(lab.ssh_argv("master1", [shlex.join(query)]), capture_output=True, text=True,
                           stdin=subprocess.DEVNULL)  # fmt: skip
        seen = r.stdout.strip() or r.stderr.strip()
        if r.returncode == 0 and seen and (not ready or all(x.endswith("=True") for x in seen.split())):
            return True, seen
        time.sleep(2)
    return False, seen


def set_nfs_export_read_only(path: str, read_only: bool, master: str = "master1") -> None:
    """Rewrite the lab filer's ganesha export of `path` on `master` read-only (or back to
    read-write) and restart nfs-ganesha; returns once it answers again."""
    from appliance_cli.lab import filer

    run_as_root(master, filer.apply_config_script(path, read_only))
