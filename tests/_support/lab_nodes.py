"""Commands on the running lab's nodes, for e2e tests that break a node on purpose."""

from __future__ import annotations

import shlex
import subprocess


def run_as_root(node: str, command: str) -> str:
    """`command` through `sudo sh -c` on lab node `node` (the lab of $APPLIANCE_LAB_NAME);
    fails the test, naming node and command, when it fails."""
    from appliance_cli import lab

    r = subprocess.run(lab.ssh_argv(node, ["sudo", "sh", "-c", shlex.quote(command)]),
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0, f"{node}: {command}: {r.stderr[-500:]}"
    return r.stdout


def set_nfs_export_read_only(path: str, read_only: bool, master: str = "master1") -> None:
    """Rewrite the lab filer's ganesha export of `path` on `master` read-only (or back to
    read-write) and restart nfs-ganesha; returns once it answers again."""
    from appliance_cli.lab import filer

    run_as_root(master, filer.apply_config_script(path, read_only))
