"""Pods pinned to nodes (spec.nodeName) for the e2e tests of the pod network, run through the
master's kubectl with the admin kubeconfig, so the same helper works on a real site: each pod runs
the site's sandbox image (containerd's `sandbox_image`, in the private registry everywhere)."""

from __future__ import annotations

import json
import shlex
import time
import tomllib
from typing import Any

KUBECTL = ["kubectl", "--kubeconfig", "/etc/kubernetes/admin.conf"]


def start(master: Any, names: dict[str, str]) -> None:
    """One pod per node: NAMES maps a node to its pod's name, in namespace default."""
    toml = tomllib.loads(master.file("/etc/containerd/config.toml").content_string)
    sandbox = toml["plugins"]["io.containerd.grpc.v1.cri"]["sandbox_image"]
    for node, pod in names.items():
        spec = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod, "namespace": "default"},
                "spec": {"nodeName": node, "tolerations": [{"operator": "Exists"}],
                         "containers": [{"name": "pause", "image": sandbox}]}}  # fmt: skip
        master.check_output(
            f"echo {shlex.quote(json.dumps(spec))} | {shlex.join([*KUBECTL, 'apply', '-f', '-'])}"
        )


def addresses(master: Any, names: dict[str, str], timeout: float = 120) -> dict[str, str]:
    """{node: pod IP} of the pods that run with an address, once all do or TIMEOUT passed."""
    deadline, ips = time.monotonic() + timeout, {}
    while True:
        items = json.loads(
            master.check_output(shlex.join([*KUBECTL, "get", "pods", "-n", "default", "-o", "json"]))
        )
        ips = {p["spec"]["nodeName"]: p["status"]["podIP"] for p in items["items"]
               if p["metadata"]["name"] in names.values() and p.get("status", {}).get("phase") == "Running"
               and p["status"].get("podIP")}  # fmt: skip
        if len(ips) == len(names) or time.monotonic() > deadline:
            return ips
        time.sleep(2)


def delete(master: Any, names: dict[str, str]) -> None:
    master.check_output(shlex.join([*KUBECTL, "delete", "pod", "-n", "default", "--ignore-not-found",
                                    "--wait=true", "--timeout=60s", *names.values()]))  # fmt: skip


def events(master: Any, pod: str) -> str:
    """The pod's events as `kubectl describe` shows them: what to say when it did not run."""
    out = master.run(shlex.join([*KUBECTL, "describe", "pod", "-n", "default", pod]))
    return out.stdout[out.stdout.find("Events:") :] if "Events:" in out.stdout else out.stdout + out.stderr
