"""The etcd static pod, run for real: the manifest's image through the node's containerd (`ctr run
-d`, runc), with the host's network, the manifest's hostPath volumes bind-mounted at their mountPaths
and the manifest's command, as the kubelet would run its one container. The lab's etcd image
carries the official etcd 3.5.1 build (bundles/profiles/lab.yml), so this is a real etcd.

The API server unit (kubelet.apiserver_main) starts it and stops it: a rewritten etcd manifest (a
restore's new data dir) restarts that unit, so etcd restarts with it, as the kubelet would
restart the etcd pod. Not as real: no pod sandbox (no pause container, no CNI: etcd is
hostNetwork anyway), no liveness probe, no resource limits; the container ID is fixed (crictl.py
lists it as the `etcd` container).
"""

from __future__ import annotations

import time

import yaml

from .containerd import ctr, image_exists, pull_image
from .util import Fail, read_text

ETCD_CONTAINER = "e7cd5a7e11a9c0de"
LOG = "/var/log/standin-etcd.log"  # etcd's output (the kubelet would keep it under /var/log/pods)
ENDPOINT = "unix:///run/containerd/containerd.sock"
NS = "k8s.io"


def etcd_spec(manifest: str) -> tuple[str, list[str], list[tuple[str, str]]]:
    """(image, command, [(hostPath, mountPath)]) of the etcd static pod manifest (Fail: invalid)."""
    try:
        spec = yaml.safe_load(read_text(manifest) or "")["spec"]
        c = spec["containers"][0]
        vols = {v["name"]: v["hostPath"]["path"] for v in spec.get("volumes") or [] if "hostPath" in v}
        mounts = [(vols[m["name"]], m["mountPath"]) for m in c.get("volumeMounts") or [] if m["name"] in vols]
        image, command = c["image"], [*c.get("command", []), *c.get("args", [])]
    except (yaml.YAMLError, KeyError, IndexError, TypeError) as e:
        raise Fail(f"static pod manifest {manifest} is invalid: {e!r}") from e
    if not (isinstance(image, str) and command and all(isinstance(a, str) for a in command)):
        raise Fail(f"static pod manifest {manifest} is invalid: no image or command")
    return image, command, mounts


def remove_leftover() -> None:
    """A container a killed run left (ctr run --rm removes it only when it sees the task exit)."""
    ctr(ENDPOINT, "-n", NS, "tasks", "kill", "-s", "SIGKILL", ETCD_CONTAINER, timeout=10)
    for _ in range(50):
        rc, _ = ctr(ENDPOINT, "-n", NS, "tasks", "delete", "-f", ETCD_CONTAINER, timeout=10)
        if (
            rc == 0
            or ETCD_CONTAINER not in ctr(ENDPOINT, "-n", NS, "tasks", "ls", "-q", timeout=10)[1].split()
        ):
            break
        time.sleep(0.1)
    ctr(ENDPOINT, "-n", NS, "containers", "rm", ETCD_CONTAINER, timeout=10)


def start(manifest: str) -> None:
    """Pull the image when containerd lacks it, then start it detached (`ctr run -d`), as the kubelet
    runs a container through the CRI: the container lives in its shim, not in this process, so a
    restart of containerd (an upgrade of its package) leaves it running. Its output goes to LOG."""
    image, command, mounts = etcd_spec(manifest)
    if not image_exists(ENDPOINT, image):
        rc, out = pull_image(ENDPOINT, image)
        if rc != 0:
            raise Fail(out.strip())
    remove_leftover()
    argv = ["-n", NS, "run", "-d", "--net-host", "--log-uri", f"file://{LOG}"]
    for host, path in mounts:
        argv += ["--mount", f"type=bind,src={host},dst={path},options=rbind:rw"]
    rc, out = ctr(ENDPOINT, *argv, image, ETCD_CONTAINER, *command, timeout=60)
    if rc != 0:
        raise Fail(f"etcd's container did not start: {out.strip()}")


def state() -> str:
    """etcd's task: "running", "gone" (exited, or no task), or "unknown" (containerd does not answer,
    as while it restarts: the container runs on in its shim)."""
    rc, out = ctr(ENDPOINT, "-n", NS, "tasks", "ls", timeout=10)
    if rc != 0:
        return "unknown"
    mine = [ln.split() for ln in out.splitlines() if ln.split()[:1] == [ETCD_CONTAINER]]
    return "running" if mine and mine[0][-1] == "RUNNING" else "gone"


def running() -> bool:
    """etcd's task runs in containerd."""
    return state() == "running"


def stop() -> None:
    """SIGTERM to etcd, as the kubelet stops a container, up to 15 s; then SIGKILL, and the container
    removed."""
    ctr(ENDPOINT, "-n", NS, "tasks", "kill", "-s", "SIGTERM", ETCD_CONTAINER, timeout=10)
    for _ in range(150):
        if state() != "running":
            break
        time.sleep(0.1)
    remove_leftover()
