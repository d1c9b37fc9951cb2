"""What the lab e2e tests of day 2 read on their lab's nodes and how master1 gets the new bundle (no
tests here): ssh through the site's ssh_config, `kubectl get nodes` as JSON, a node's Ready
condition, a run's changed total, and the new bundle on a second "stick"."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from tests._support.lab_ssh import root_sh

ADMIN = "kubectl --kubeconfig /etc/kubernetes/admin.conf"
NEW_STICK = "/srv/appliance-new-stick"  # where master1 sees the new bundle


def ssh(
    site_dir: Path, node: str, command: str, timeout: int = 120, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """`command` as root on `node` through the site's ssh_config; `stdin` fed to it."""
    return root_sh(site_dir, node, command, timeout, stdin)


def nodes(site_dir: Path) -> dict[str, dict[str, Any]]:
    res = ssh(site_dir, "master1", f"{ADMIN} get nodes -o json")
    assert res.returncode == 0, res.stderr
    return {n["metadata"]["name"]: n for n in json.loads(res.stdout)["items"]}


def ready(node: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"]["conditions"])


def changed(run: Any) -> int:
    return sum(r["changed"] for r in run.recap.values())


def put_on_new_stick(layout: Any, bundle: Path, node: str = "master1") -> str:
    """The new bundle's files, linked into `node`'s root filesystem at NEW_STICK (returned)."""
    stick = layout.node_root(node) / NEW_STICK.lstrip("/")
    shutil.rmtree(stick, ignore_errors=True)
    stick.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-al", str(bundle), str(stick)], check=True)
    return NEW_STICK
