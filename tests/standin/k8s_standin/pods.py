"""The kubelet's pod work, as far as the lab goes.

For every pod bound to this node (the DaemonSet controller in controllers.py binds them): pull
the sandbox image and every init and app container image through containerd's CRI path (the
node's registry hosts dir, CA and credentials, as `crictl pull` does: containerd.pull_image),
then run the init steps that copy a key of a mounted ConfigMap to a host path (flannel's
install-cni writes /etc/cni/net.d/10-flannel.conflist that way, so a node's network becomes
ready only once flannel's image really pulled from the private registry), and report the pod's
status as the kubelet would (Running, or Pending with ErrImagePull / ImagePullBackOff naming the
image and containerd's reason).

Limits: no container is started; an init step that copies a file out of the image itself
(flannel's install-cni-plugin copying /flannel) is not emulated (the lab's images are busybox
stand-ins without that file); probes, restarts and resources are not modelled.
"""

from __future__ import annotations

import os
import re
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

from .client import ApiClient, ApiError
from .containerd import containerd_config, ctr, pull_image
from .util import hp, log_klog, rfc3339, write_file

BACKOFF_S = (10, 20, 40, 80, 160, 300)  # the kubelet's image pull back-off steps


def _images_present(endpoint: str) -> set[str]:
    rc, out = ctr(endpoint, "-n", "k8s.io", "images", "ls", "-q")
    return set(out.split()) if rc == 0 else set()


def _pull_reason(out: str) -> str:
    m = re.search(r'msg="(.*)"\s*$', out.strip())
    text = m.group(1).replace('\\"', '"') if m else out.strip().splitlines()[-1:]
    return str(text).removeprefix("pulling image: ")


class PodWorker:
    def __init__(
        self,
        client: ApiClient,
        node: str,
        cri: str,
        pull: Callable[[str, str], tuple[int, str]] = pull_image,
        present: Callable[[str], set[str]] = _images_present,
    ) -> None:
        self.client, self.node, self.cri = client, node, cri
        self.pull, self.present = pull, present
        self.running: set[str] = set()  # pod uids whose images are all pulled
        self.backoff: dict[str, tuple[float, int]] = {}  # uid -> (next try, failures)

    def sync(self) -> None:
        q = urllib.parse.quote(f"spec.nodeName={self.node}")
        pods = [
            p
            for p in self.client.get(f"/api/v1/pods?fieldSelector={q}")["items"]  # mirror pods: the static
            if "kubernetes.io/config.mirror" not in (p["metadata"].get("annotations") or {})
        ]  # pod runs them
        for p in [p for p in pods if p["metadata"].get("deletionTimestamp")]:  # stop it, confirm the delete
            pods.remove(p)
            try:
                self.client.call(
                    "DELETE", f"/api/v1/namespaces/{p['metadata']['namespace']}/pods/{p['metadata']['name']}"
                )
            except ApiError as e:
                if e.code != 404:
                    raise
        live = {p["metadata"]["uid"] for p in pods}
        self.running &= live
        todo = [p for p in pods if p["metadata"]["uid"] not in self.running
                and self.backoff.get(p["metadata"]["uid"], (0.0, 0))[0] <= time.monotonic()]  # fmt: skip
        if not todo:
            return
        have = self.present(self.cri)
        sandbox = containerd_config()["sandbox_image"]
        for pod in todo:
            self._report(pod, self.run_pod(pod, have, sandbox))

    def run_pod(self, pod: dict, have: set[str], sandbox: str) -> dict:
        spec, uid = pod["spec"], pod["metadata"]["uid"]
        inits, apps = spec.get("initContainers") or [], spec.get("containers") or []
        for image in [sandbox, *(c["image"] for c in inits + apps)]:
            if image in have:
                continue
            rc, out = self.pull(self.cri, image)
            if rc != 0:
                return self._failed(pod, image, _pull_reason(out))
            have.add(image)
        for c in inits:
            self.emulate_init(pod, c)
        self.running.add(uid)
        self.backoff.pop(uid, None)
        return _status("Running", pod, inits, apps, None)

    def _failed(self, pod: dict, image: str, reason: str) -> dict:
        uid = pod["metadata"]["uid"]
        failures = self.backoff.get(uid, (0.0, 0))[1] + 1
        self.backoff[uid] = (time.monotonic() + BACKOFF_S[min(failures, len(BACKOFF_S)) - 1], failures)
        message = f'Failed to pull image "{image}": {reason}'
        log_klog(
            "E",
            "pod_workers.go:951",
            f'"Error syncing pod, skipping" err="{message}" pod="{pod["metadata"]["namespace"]}/{pod["metadata"]["name"]}"',
        )
        waiting = ("ErrImagePull" if failures == 1 else "ImagePullBackOff", message, image)
        spec = pod["spec"]
        return _status(
            "Pending", pod, spec.get("initContainers") or [], spec.get("containers") or [], waiting
        )

    def _report(self, pod: dict, status: dict) -> None:
        meta = pod["metadata"]
        path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status"
        meta.pop("resourceVersion", None)
        try:
            self.client.call("PUT", path, dict(pod, status=status))
        except ApiError as e:  # the pod was replaced or deleted meanwhile: the next sync sees it
            if e.code != 404:
                raise

    # ---- init steps -----------------------------------------------------------------------------
    def emulate_init(self, pod: dict, c: dict) -> None:
        """`cp [-f] SRC DST` where SRC is a mounted ConfigMap key and DST a hostPath: do it."""
        argv = [*(c.get("command") or []), *(c.get("args") or [])]
        if not argv or argv[0] not in ("cp", "/bin/cp"):
            return
        files = [a for a in argv[1:] if not a.startswith("-")]
        if len(files) != 2:
            return
        src, dst = (self._resolve(pod, c, path) for path in files)
        if src is None or dst is None or src[0] != "configMap" or dst[0] != "hostPath":
            return
        cm_name, key = src[1], src[2]
        ns = pod["metadata"]["namespace"]
        cm = self.client.get(f"/api/v1/namespaces/{ns}/configmaps/{cm_name}")
        data = (cm.get("data") or {}).get(key)
        if data is None:
            return
        target = hp(dst[1])
        os.makedirs(os.path.dirname(target), exist_ok=True)
        write_file(target, data, 0o644)

    @staticmethod
    def _resolve(pod: dict, c: dict, path: str) -> tuple[str, str, str] | None:
        """(kind, name-or-host-path, key) of the volume holding `path` inside container c."""
        mounts = sorted(c.get("volumeMounts") or [], key=lambda m: -len(m.get("mountPath", "")))
        volumes = {v["name"]: v for v in pod["spec"].get("volumes") or []}
        for m in mounts:
            base = m.get("mountPath", "").rstrip("/")
            if path != base and not path.startswith(base + "/"):
                continue
            rel = path[len(base) :].lstrip("/")
            v = volumes.get(m.get("name", ""), {})
            if v.get("configMap"):
                items = {i.get("path"): i.get("key") for i in v["configMap"].get("items") or []}
                return "configMap", v["configMap"].get("name", ""), items.get(rel, rel)
            if v.get("hostPath"):
                return (
                    "hostPath",
                    os.path.join(v["hostPath"]["path"], rel) if rel else v["hostPath"]["path"],
                    "",
                )
            return None
        return None


def _status(
    phase: str, pod: dict, inits: list[dict], apps: list[dict], waiting: tuple[str, str, str] | None
) -> dict:
    now = rfc3339()

    def one(c: dict, init: bool) -> dict:
        if waiting and c["image"] == waiting[2]:
            state: dict[str, Any] = {"waiting": {"reason": waiting[0], "message": waiting[1]}}
        elif waiting:
            state = {"waiting": {"reason": "PodInitializing" if not init else "Waiting"}}
        elif init:
            state = {
                "terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}
            }
        else:
            state = {"running": {"startedAt": now}}
        return {"name": c["name"], "image": c["image"], "ready": phase == "Running" and not init,
                "restartCount": 0, "state": state}  # fmt: skip

    ready = "True" if phase == "Running" else "False"
    return {
        "phase": phase,
        "conditions": [{"type": t, "status": ready, "lastTransitionTime": now}
                       for t in ("Initialized", "Ready", "ContainersReady")] +
                      [{"type": "PodScheduled", "status": "True", "lastTransitionTime": now}],
        "initContainerStatuses": [one(c, True) for c in inits],
        "containerStatuses": [one(c, False) for c in apps],
        "startTime": now,
    }  # fmt: skip
