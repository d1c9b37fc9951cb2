"""A pod's containers, run for real by the node's containerd and runc, as containerd's CRI plugin
runs them for the kubelet: a sandbox (pause) container per pod, in the pod's network namespace
(podnet.py made it) or the host's for hostNetwork, then the pod's init containers (each to its end:
pods.py) and app containers beside it in the same namespace; StopPodSandbox removes them all. Here
through `ctr run -d` in containerd's k8s.io namespace, not the CRI's gRPC API, so `ctr -n k8s.io
containers ls` and `crictl ps` (crictl.py) on a node list them.

Labels as a site's containers carry them: containerd's `io.cri-containerd.kind` = sandbox or
container (pkg/cri/server/helpers.go, containerKindLabel, as seen in excerpts of the code index that
name no tag) and the kubelet's `io.kubernetes.pod.name`, `.pod.namespace`, `.pod.uid` and
`io.kubernetes.container.name` (kubernetes pkg/kubelet/types/labels.go).

Limits: the lab's images are busybox stand-ins (bundles/profiles/lab.yml) whose entrypoint sleeps.
An app container whose program its image lacks (runc's `exec: "/opt/bin/flanneld": stat
/opt/bin/flanneld: no such file or directory`) is not run: the kubelet's stand-in emulates what it
must (pods.py), where a site's kubelet would report RunContainerError; for an init container that
error is the container's. Containers run in containerd's default cgroup (/k8s.io/<id>), not under
kubepods; hostPath and configMap volumes are mounted (volumes.py); env `value`s are set,
`valueFrom` is not; no probes, no resources; pods.py restarts an exited container by the pod's
restartPolicy, with no back-off. The record of a pod's containers is kept in
/run/k8s-standin/containers/<uid>, so a restarted kubelet finds them again; it goes with a reboot, as
the tasks do, while their container objects stay in containerd's store (no kubelet garbage
collection here).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import time

from .containerd import ctr
from .util import hp, write_file

NS = "k8s.io"
RECORD_DIR = "/run/k8s-standin/containers"  # pod uid -> [{id, kind, name, image, ...}], the sandbox first
KIND = "io.cri-containerd.kind"
_ABSENT = re.compile(
    r'exec: "[^"]*": (stat [^:]*: no such file or directory|executable file not found in \$PATH)'
)


class RunError(Exception):
    pass


def new_id() -> str:
    """containerd's CRI ids: 64 random hex digits."""
    return secrets.token_hex(32)


def record(uid: str) -> list[dict]:
    try:
        with open(hp(f"{RECORD_DIR}/{uid}"), encoding="utf-8") as f:
            data = json.load(f)
        return data if isinstance(data, list) else []
    except (OSError, ValueError):
        return []


def _save(uid: str, entries: list[dict]) -> None:
    os.makedirs(hp(RECORD_DIR), exist_ok=True)
    write_file(hp(f"{RECORD_DIR}/{uid}"), json.dumps(entries) + "\n", 0o600)


def recorded_uids() -> set[str]:
    with contextlib.suppress(OSError):
        return set(os.listdir(hp(RECORD_DIR)))
    return set()


def _labels(pod: dict, kind: str, name: str | None) -> list[str]:
    meta = pod["metadata"]
    labels = {KIND: kind, "io.kubernetes.pod.name": meta["name"],
              "io.kubernetes.pod.namespace": meta["namespace"], "io.kubernetes.pod.uid": meta["uid"]}  # fmt: skip
    if name is not None:
        labels["io.kubernetes.container.name"] = name
    return [a for k, v in labels.items() for a in ("--label", f"{k}={v}")]


def _netns_args(netns: str | None) -> list[str]:
    return ["--with-ns", f"network:{netns}"] if netns else ["--net-host"]


def run_sandbox(cri: str, pod: dict, sid: str, image: str, netns: str | None) -> None:
    """RunPodSandbox's pause container, with id SID (RunError: the runtime's own error)."""
    uid = pod["metadata"]["uid"]
    _remove(cri, sid)  # what an interrupted try left
    rc, out = ctr(cri, "-n", NS, "run", "-d", *_netns_args(netns), *_labels(pod, "sandbox", None), image, sid,
                  timeout=60)  # fmt: skip
    if rc != 0:
        _remove(cri, sid)
        raise RunError(out.strip().removeprefix("ctr: "))
    logs = os.path.dirname(os.path.dirname(log_path(pod, "-", 0)))
    meta = pod["metadata"]
    _save(uid, [{"id": sid, "kind": "sandbox", "name": "POD", "image": image, "logs": logs,
                 "pod": meta["name"], "namespace": meta["namespace"]}])  # fmt: skip


def log_path(pod: dict, name: str, attempt: int) -> str:
    """Where the kubelet keeps a container's output (kuberuntime's BuildContainerLogsDirectory):
    /var/log/pods/<namespace>_<pod>_<uid>/<container>/<attempt>.log; here ctr's plain file, not the
    CRI's timestamped lines."""
    meta = pod["metadata"]
    return f"/var/log/pods/{meta['namespace']}_{meta['name']}_{meta['uid']}/{name}/{attempt}.log"


def run_container(
    cri: str,
    pod: dict,
    c: dict,
    netns: str | None,
    mounts: list[tuple[str, str, bool]],
    attempt: int = 0,
    init: bool = False,
) -> str | None:
    """CreateContainer + StartContainer of container C (INIT: an init container): its id, or None
    when the lab's image lacks the program of an app container (see Limits); RunError: the
    runtime's own error (for an init container, a missing program too)."""
    uid, cid = pod["metadata"]["uid"], new_id()
    log = log_path(pod, c["name"], attempt)
    os.makedirs(os.path.dirname(hp(log)), mode=0o755, exist_ok=True)
    argv = ["-n", NS, "run", "-d", "--log-uri", f"file://{log}", *_netns_args(netns),
            *_labels(pod, "container", c["name"])]  # fmt: skip
    for e in c.get("env") or []:
        if isinstance(e.get("value"), str):
            argv += ["--env", f"{e['name']}={e['value']}"]
    for host, path, ro in mounts:
        argv += ["--mount", f"type=bind,src={host},dst={path},options=rbind:{'ro' if ro else 'rw'}"]
    if c.get("workingDir"):
        argv += ["--cwd", c["workingDir"]]
    command = [*(c.get("command") or []), *(c.get("args") or [])] if c.get("command") else []
    if not command and c.get("args"):  # the image's entrypoint with the pod's args
        command = [*image_entrypoint(cri, c["image"]), *c["args"]]
    rc, out = ctr(cri, *argv, c["image"], cid, *command, timeout=60)
    if rc != 0:
        _remove(cri, cid)
        if _ABSENT.search(out) and not init:
            with contextlib.suppress(OSError):
                os.remove(hp(log))
            return None
        raise RunError(out.strip().removeprefix("ctr: "))
    entry = {"id": cid, "kind": "container", "name": c["name"], "image": c["image"]}
    _save(uid, [*record(uid), {**entry, "init": True} if init else entry])
    return cid


def set_exit(uid: str, cid: str, code: int) -> None:
    """An init container's exit code, in the pod's record (the kubelet runs the next one on 0)."""
    _save(uid, [{**e, "exit": code, "ended": time.time()} if e["id"] == cid else e for e in record(uid)])


def image_entrypoint(cri: str, image: str) -> list[str]:
    """The image config's Entrypoint (its manifest, then its config, from containerd's content store)."""
    rc, out = ctr(cri, "-n", NS, "images", "ls")
    target = (
        next((ln.split()[2] for ln in out.splitlines()[1:] if ln.split()[:1] == [image]), "")
        if rc == 0
        else ""
    )
    try:
        manifest = json.loads(ctr(cri, "-n", NS, "content", "get", target)[1])
        config = json.loads(ctr(cri, "-n", NS, "content", "get", manifest["config"]["digest"])[1])
        return list(config["config"].get("Entrypoint") or [])
    except (ValueError, KeyError, TypeError):
        return []


def tasks(cri: str) -> dict[str, str] | None:
    """{container id: RUNNING | STOPPED | ...} of containerd's k8s.io tasks; None when it does not
    answer (as while it restarts: the containers run on in their shims)."""
    rc, out = ctr(cri, "-n", NS, "tasks", "ls", timeout=10)
    if rc != 0:
        return None
    return {f[0]: f[-1] for f in (ln.split() for ln in out.splitlines()[1:]) if len(f) >= 3}


def exit_code(cri: str, cid: str) -> int | None:
    """A stopped task's exit code, as `ctr tasks delete` reports it (it removes the task)."""
    rc, out = ctr(cri, "-n", NS, "tasks", "delete", cid, timeout=10)
    if rc != 0:
        return None
    m = re.search(r"exit with non-zero exit code (\d+)", out)
    return int(m[1]) if m else 0


def _remove(cri: str, cid: str) -> None:
    """StopContainer and RemoveContainer: SIGTERM, up to 2 s (a pod's grace period, shortened), then
    SIGKILL."""
    if ctr(cri, "-n", NS, "tasks", "kill", "-s", "SIGTERM", cid, timeout=10)[0] == 0:
        for _ in range(20):
            if (tasks(cri) or {}).get(cid) != "RUNNING":
                break
            time.sleep(0.1)
    ctr(cri, "-n", NS, "tasks", "kill", "-s", "SIGKILL", cid, timeout=10)
    ctr(cri, "-n", NS, "tasks", "delete", "-f", cid, timeout=10)
    ctr(cri, "-n", NS, "containers", "rm", cid, timeout=10)


def forget(cri: str, uid: str, cid: str) -> None:
    """One container of the pod removed, and from its record."""
    _remove(cri, cid)
    _save(uid, [e for e in record(uid) if e["id"] != cid])


def remove_pod(cri: str, uid: str, keep_logs: bool = False) -> None:
    """StopPodSandbox + RemovePodSandbox: the app containers, then the sandbox, then the record.
    KEEP_LOGS (a pod that ended): its logs stay for `kubectl logs`, recorded, until it is deleted."""
    logs = []
    for entry in reversed(record(uid)):
        if entry["id"]:
            _remove(cri, entry["id"])
        if entry.get("logs", "").startswith("/var/log/pods/"):  # the kubelet removes a pod's logs with it
            logs.append(entry["logs"])
    if keep_logs and logs:
        _save(uid, [{"id": "", "kind": "logs", "name": "", "logs": d} for d in logs])
        return
    for d in logs:
        shutil.rmtree(hp(d), ignore_errors=True)
    with contextlib.suppress(OSError):
        os.remove(hp(f"{RECORD_DIR}/{uid}"))


def remove_all(cri: str) -> None:
    """kubeadm reset's "Removing kubernetes-managed containers"."""
    for uid in recorded_uids():
        remove_pod(cri, uid)
