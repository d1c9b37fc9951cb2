"""The kubelet's pod work, as far as the lab goes.

For every pod bound to this node (the DaemonSet controller in controllers.py binds them): set up
its volumes first (kubelet.go syncPod waits for them before anything is pulled or started: a
missing ConfigMap is a FailedMount and nothing else happens), then pull
the sandbox image and every init and app container image through containerd's CRI path (the
node's registry hosts dir, CA and credentials, as `crictl pull` does: containerd.pull_image),
run the pod (below), and report the pod's
status as the kubelet would (Running, or Pending with ErrImagePull / ImagePullBackOff naming the
image and containerd's reason), and record the kubelet's image events on the pod (Pulling, Pulled,
Failed, BackOff; FailedCreatePodSandBox when the sandbox image fails).

Events, statuses and their wording, from kubernetes/kubernetes as stored in the index (none at
v1.23.17; the commit read is named): pkg/kubelet/images/image_manager.go at 00a3928b
(EnsureImageExists: `Pulling image %q`, `Successfully pulled image %q in %v`, `Container image %q
already present on machine`, `Failed to pull image %q: %v`, `Back-off pulling image %q`; the
status message is the pull's error itself, or the back-off line); pkg/kubelet/kuberuntime/
kuberuntime_container.go at fbba6b47 (startContainer: `Error: %v` of ErrImagePull /
ImagePullBackOff); pkg/kubelet/events/event.go at 00bdb3fa (the reasons); client-go's
tools/record (an event is `<pod>.<hex ns>`, an identical one counts up in place).

A pod off the host network gets its sandbox network first (podnet.py: a namespace, the node's CNI
config through the real plugins; FailedCreatePodSandBox with the plugin's error when that fails;
no sandbox while the node has no CNI config) and reports the address in status.podIP. flannel's
install-cni-plugin copies the real flannel CNI plugin out of its image; the kube-flannel container
is run as flannel.py's flanneld (subnet.env, host-gw routes).

Then the pod's containers run for real (runtime.py), with their hostPath and configMap volumes
(volumes.py): its pause container in that namespace, then its init containers one after the other,
each to its end (flannel's install-cni is busybox's own `cp` of the mounted ConfigMap's
cni-conf.json to /etc/cni/net.d, so a node's network becomes ready only once flannel's image really
pulled from the private registry and ran), then its app containers, whose exits are reported or
restarted by the pod's restartPolicy (Created/Started events: kuberuntime_container.go
startContainer, `Created container %s`, `Started container %s`).

Limits: an app container whose program the lab's stand-in image lacks is emulated (runtime.py:
flanneld); probes and resources are not modelled; a restart has no
back-off, and an init container that failed runs again after 10 s. The sandbox image is pulled
here, not by containerd's RunPodSandbox, so FailedCreatePodSandBox carries crictl's pull error, not
the sandbox call's.
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import podnet, runtime, volumes
from .client import ApiClient, ApiError
from .containerd import cni_ready, containerd_config, ctr, pull_image
from .flannel import Flanneld
from .util import log_klog, rfc3339

BACKOFF_S = (10, 20, 40, 80, 160, 300)  # the kubelet's image pull back-off steps
INIT_WAIT_S = 5  # one sync waits this long for an init container to end (the loop also sends heartbeats)
INIT_RETRY_S = 10  # an init container that failed runs again after this (the back-off's first step)


def go_duration(seconds: float) -> str:
    """Go's time.Duration String for what the stand-in measures: `523.40012ms`, `1.2034s`."""
    if seconds < 1:
        return f"{seconds * 1000:.6f}".rstrip("0").rstrip(".") + "ms"
    return f"{seconds:.9f}".rstrip("0").rstrip(".") + "s"


@dataclass
class Backoff:
    """A pod whose image pull failed: when it may pull again, how often it failed, and for which
    container; `told` once the back-off has been reported for this window."""

    due: float
    failures: int
    image: str
    container: dict | None
    init: bool
    told: bool = False


def _images_present(endpoint: str) -> set[str]:
    rc, out = ctr(endpoint, "-n", "k8s.io", "images", "ls", "-q")
    return set(out.split()) if rc == 0 else set()


def _pull_reason(out: str) -> str:
    """The pull's error from crictl's fatal line: its msg unquoted, as containerd.crictl_fatal
    quoted it (JSON's escapes for Go's %q), without crictl's `pulling image: `; else the last line."""
    m = re.search(r'msg=("(?:[^"\\]|\\.)*"|\S*)\s*$', out.strip())
    if not m:
        return (out.strip().splitlines() or [""])[-1]
    text = json.loads(m[1]) if m[1].startswith('"') else m[1]
    return text.removeprefix("pulling image: ")


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
        self.backoff: dict[str, Backoff] = {}  # uid -> its failed pull
        self.events: dict[tuple[str, str, str, str], dict] = {}  # (uid, fieldPath, reason, message) -> event
        self.ips: dict[str, str] = {}  # uid -> pod IP, for pods on the pod network
        self.flanneld: tuple[str, Flanneld] | None = None  # (its pod's uid, the daemon) while it runs here
        self.restarts: dict[tuple[str, str], int] = {}  # (uid, container) -> restartCount
        self.exited: dict[tuple[str, str], int] = {}  # (uid, container) -> exit code, once its task stopped

    def sync(self) -> None:
        q = urllib.parse.quote(f"spec.nodeName={self.node}")
        pods = [
            p
            for p in self.client.get(f"/api/v1/pods?fieldSelector={q}")["items"]  # mirror pods: the static
            if "kubernetes.io/config.mirror" not in (p["metadata"].get("annotations") or {})
        ]  # pod runs them
        for p in [p for p in pods if p["metadata"].get("deletionTimestamp")]:  # stop it, confirm the delete
            pods.remove(p)
            self._stop_pod(p)
            try:
                self.client.call(
                    "DELETE", f"/api/v1/namespaces/{p['metadata']['namespace']}/pods/{p['metadata']['name']}"
                )
            except ApiError as e:
                if e.code != 404:
                    raise
        live = {p["metadata"]["uid"] for p in pods}
        # pods deleted while this kubelet was away
        for uid in (podnet.leftover_uids() | runtime.recorded_uids()) - live:
            self._stop_pod({"metadata": {"uid": uid, "namespace": "", "name": ""}, "spec": {}})
        self.running &= live
        self.restarts = {k: n for k, n in self.restarts.items() if k[0] in live}
        self.exited = {k: n for k, n in self.exited.items() if k[0] in live}
        self._check_containers([p for p in pods if p["metadata"]["uid"] in self.running])
        self.ips = {u: ip for u, ip in self.ips.items() if u in live}
        if self.flanneld and self.flanneld[0] not in live:  # flannel's pod is gone: its routes stay
            self.flanneld = None
        if self.flanneld:
            self.flanneld[1].sync()
        self.backoff = {u: b for u, b in self.backoff.items() if u in live}
        self.events = {k: e for k, e in self.events.items() if k[0] in live}
        for pod in pods:  # in back-off: said once per window, as the kubelet's next sync would
            b = self.backoff.get(pod["metadata"]["uid"])
            if b and not b.told and b.due > time.monotonic():
                b.told = True
                self._report(pod, self._backing_off(pod, b))
        ended = ("Succeeded", "Failed")  # final: a restarted kubelet does not run such a pod again
        todo = [p for p in pods if p["metadata"]["uid"] not in self.running
                and (p.get("status") or {}).get("phase") not in ended
                and self.backoff.get(p["metadata"]["uid"], Backoff(0.0, 0, "", None, False)).due <= time.monotonic()]  # fmt: skip
        if not todo:
            return
        have = self.present(self.cri)
        sandbox = containerd_config()["sandbox_image"]
        for pod in todo:
            self._report(pod, self.run_pod(pod, have, sandbox))

    def run_pod(self, pod: dict, have: set[str], sandbox: str) -> dict:
        spec, uid = pod["spec"], pod["metadata"]["uid"]
        inits, apps = spec.get("initContainers") or [], spec.get("containers") or []
        wanted: list[tuple[str, dict | None, bool]] = [
            (sandbox, None, False),
            *((c["image"], c, True) for c in inits),
            *((c["image"], c, False) for c in apps),
        ]
        try:  # kubelet.go syncPod: the pod's volumes are mounted (WaitForAttachAndMount) before any pull
            mounts = {c["name"]: volumes.mounts(self.client, pod, c) for c in (*inits, *apps)}
        except volumes.MountError as e:
            return self._mount_failed(pod, e)
        for image, c, init in wanted:
            if image in have:
                if c is not None:
                    self._event(
                        pod,
                        c,
                        init,
                        "Normal",
                        "Pulled",
                        f'Container image "{image}" already present on machine',
                    )
                continue
            if c is not None:
                self._event(pod, c, init, "Normal", "Pulling", f'Pulling image "{image}"')
            t0 = time.monotonic()
            rc, out = self.pull(self.cri, image)
            if rc != 0:
                return self._failed(pod, image, c, init, _pull_reason(out))
            have.add(image)
            if c is not None:
                took = go_duration(time.monotonic() - t0)
                self._event(
                    pod, c, init, "Normal", "Pulled", f'Successfully pulled image "{image}" in {took}'
                )
        ip = None
        if not spec.get("hostNetwork"):  # the sandbox and its network come before any container
            ready, why = cni_ready()
            if not ready:  # kubelet.go syncPod: no sandbox while the runtime's network is not ready
                return _status("Pending", pod, inits, apps, ("", why, ""))
            try:
                ip = self.ips.get(uid) or podnet.setup(pod)
            except podnet.NetError as e:
                self._event(pod, None, False, "Warning", "FailedCreatePodSandBox",
                            f"Failed to create pod sandbox: rpc error: code = Unknown desc = {e}")  # fmt: skip
                return _status("Pending", pod, inits, apps, ("", str(e), ""))
            self.ips[uid] = ip
        netns = None if spec.get("hostNetwork") else f"{podnet.NETNS_DIR}/{podnet.netns_name(uid)}"
        failed = self._start_containers(pod, sandbox, netns, ip, mounts)
        if failed:
            return failed
        self.running.add(uid)
        self.backoff.pop(uid, None)
        return self._pod_status(pod)

    def _start_containers(
        self, pod: dict, sandbox: str, netns: str | None, ip: str | None, mounts: dict[str, list]
    ) -> dict | None:
        """The pod's sandbox (unless it runs), its init steps, then each app container not running,
        each with MOUNTS[its name]: None, or the status of a pod whose sandbox or container could
        not start."""
        spec, uid = pod["spec"], pod["metadata"]["uid"]
        inits, apps = spec.get("initContainers") or [], spec.get("containers") or []
        have_tasks = runtime.tasks(self.cri) or {}
        mine = {e["name"]: e["id"] for e in runtime.record(uid)}
        if have_tasks.get(mine.get("POD", "")) != "RUNNING":
            runtime.remove_pod(self.cri, uid)  # a sandbox that died takes its containers with it
            mine = {}
            sid = (podnet.sandbox_id(uid) if netns else None) or runtime.new_id()
            try:
                runtime.run_sandbox(self.cri, pod, sid, sandbox, netns)
            except runtime.RunError as e:
                # containerd's sandbox_run.go: "failed to create containerd task: %w"
                why = f"failed to create containerd task: {e}"
                self._event(pod, None, False, "Warning", "FailedCreatePodSandBox",
                            f"Failed to create pod sandbox: rpc error: code = Unknown desc = {why}")  # fmt: skip
                return _status("Pending", pod, inits, apps, ("", why, ""))
        failed = self._run_inits(pod, netns, ip, mounts)
        if failed:
            return failed
        for c in apps:
            if have_tasks.get(mine.get(c["name"], "")) == "RUNNING" or (uid, c["name"]) in self.exited:
                continue
            if c["name"] in mine:  # its task ended: a new container takes its place
                runtime.forget(self.cri, uid, mine[c["name"]])
            try:
                cid = runtime.run_container(self.cri, pod, c, netns, mounts[c["name"]],
                                            self.restarts.get((uid, c["name"]), 0))  # fmt: skip
            except runtime.RunError as e:  # kuberuntime_container.go startContainer: "Error: %v"
                why = f"failed to create containerd task: {e}"
                self._event(pod, c, False, "Warning", "Failed", f"Error: {why}")
                return _status("Pending", pod, inits, apps, ("RunContainerError", why, c["image"]), ip)
            if cid is None:  # the lab's image lacks the program: emulated (runtime.py's Limits)
                self.emulate_app(pod, c)
            else:
                self._event(pod, c, False, "Normal", "Created", f"Created container {c['name']}")
                self._event(pod, c, False, "Normal", "Started", f"Started container {c['name']}")
        return None

    def _run_inits(
        self, pod: dict, netns: str | None, ip: str | None, mounts: dict[str, list]
    ) -> dict | None:
        """The pod's init containers, in order, each run to its end before the next, once per
        sandbox (kuberuntime_manager.go computePodActions: the next init container only after the
        one before it exited 0): None once all have, else the pod's status while one runs or after
        one failed. A failed one runs again after INIT_RETRY_S (restartPolicy Never: the pod fails)."""
        uid, inits = pod["metadata"]["uid"], pod["spec"].get("initContainers") or []
        for i, c in enumerate(inits):
            entry = next((e for e in runtime.record(uid) if e.get("init") and e["name"] == c["name"]), None)
            if entry is not None and entry.get("exit") == 0:
                continue
            if entry is not None and "exit" not in entry:  # started by an earlier sync
                code = self._wait_exit(entry["id"], 0)
                if code is None:
                    return self._initializing(pod, i, {"running": {"startedAt": rfc3339()}}, ip)
                runtime.set_exit(uid, entry["id"], code)
                if code == 0:
                    continue
                entry = dict(entry, exit=code, ended=time.time())
            if entry is not None and entry["exit"] != 0:
                terminated = {"terminated": {"exitCode": entry["exit"], "reason": "Error"}}
                if pod["spec"].get("restartPolicy") == "Never":
                    return self._initializing(pod, i, terminated, ip, phase="Failed")
                if time.time() - entry["ended"] < INIT_RETRY_S:
                    return self._initializing(pod, i, terminated, ip)
                runtime.forget(self.cri, uid, entry["id"])
                self.restarts[(uid, c["name"])] = self.restarts.get((uid, c["name"]), 0) + 1
            try:
                cid = runtime.run_container(self.cri, pod, c, netns, mounts[c["name"]],
                                            self.restarts.get((uid, c["name"]), 0), init=True)  # fmt: skip
            except runtime.RunError as e:  # kuberuntime_container.go startContainer: "Error: %v"
                why = f"failed to create containerd task: {e}"
                self._event(pod, c, True, "Warning", "Failed", f"Error: {why}")
                spec = pod["spec"]
                return _status("Pending", pod, inits, spec.get("containers") or [],
                               ("RunContainerError", why, c["image"]), ip)  # fmt: skip
            self._event(pod, c, True, "Normal", "Created", f"Created container {c['name']}")
            self._event(pod, c, True, "Normal", "Started", f"Started container {c['name']}")
            code = self._wait_exit(cid, INIT_WAIT_S)
            if code is None:
                return self._initializing(pod, i, {"running": {"startedAt": rfc3339()}}, ip)
            runtime.set_exit(uid, cid, code)
            if code != 0:  # reported as failed; the next sync runs it again once INIT_RETRY_S passed
                never = pod["spec"].get("restartPolicy") == "Never"
                terminated = {"terminated": {"exitCode": code, "reason": "Error"}}
                return self._initializing(pod, i, terminated, ip, phase="Failed" if never else "Pending")
        return None

    def _wait_exit(self, cid: str, seconds: float) -> int | None:
        """The exit code of container CID's task once it stopped, waiting up to SECONDS; None while
        it still runs."""
        end = time.monotonic() + seconds
        while True:
            have = runtime.tasks(self.cri)  # None: containerd does not answer now
            state = None if have is None else have.get(cid, "GONE")
            if state == "STOPPED":
                code = runtime.exit_code(self.cri, cid)
                return 255 if code is None else code
            if state == "GONE":  # its task went without an exit this kubelet saw (a reboot)
                return 255
            if time.monotonic() >= end:
                return None
            time.sleep(0.1)

    def _initializing(
        self, pod: dict, index: int, state: dict, ip: str | None, phase: str = "Pending"
    ) -> dict:
        """The status of a pod at init container INDEX (in STATE): the ones before it Completed, the
        ones after it and every app container waiting in PodInitializing, as kubectl's Init:N/M,
        Init:Error and the like are read from."""
        uid, spec = pod["metadata"]["uid"], pod["spec"]
        inits, apps = spec.get("initContainers") or [], spec.get("containers") or []
        status = _status(phase, pod, inits, apps, None, ip)
        for j, s in enumerate(status["initContainerStatuses"]):
            s["restartCount"] = self.restarts.get((uid, s["name"]), 0)
            if j == index:
                s["state"] = state
            elif j > index:
                s["state"] = {"waiting": {"reason": "PodInitializing"}}
        for s in status["containerStatuses"]:
            s["state"], s["ready"] = {"waiting": {"reason": "PodInitializing"}}, False
        return status

    def _mount_failed(self, pod: dict, e: volumes.MountError) -> dict:
        """A volume that could not be set up: the kubelet's FailedMount event, every container waits
        in ContainerCreating, and the next sync tries again."""
        self._event(pod, None, False, "Warning", "FailedMount", str(e))
        spec = pod["spec"]
        return _status("Pending", pod, spec.get("initContainers") or [], spec.get("containers") or [],
                       ("", str(e), ""))  # fmt: skip

    def _check_containers(self, pods: list[dict]) -> None:
        """A running pod whose sandbox died is run again; an app container whose task stopped is
        started again (restartPolicy Always, or OnFailure with a non-zero exit) or reported
        terminated, the pod Succeeded or Failed once every app container has ended."""
        if not pods:
            return
        have = runtime.tasks(self.cri)
        if have is None:  # containerd does not answer (a restart): look again next sync
            return
        for pod in pods:
            uid, spec = pod["metadata"]["uid"], pod["spec"]
            mine = {e["name"]: e["id"] for e in runtime.record(uid)}
            if not mine:
                continue
            if have.get(mine.get("POD", "")) != "RUNNING":
                self.running.discard(uid)
                continue
            policy, changed = spec.get("restartPolicy", "Always"), False
            for c in spec.get("containers") or []:
                key, cid = (uid, c["name"]), mine.get(c["name"])
                if not cid or key in self.exited or have.get(cid) != "STOPPED":
                    continue
                code = runtime.exit_code(self.cri, cid)
                code = 255 if code is None else code
                changed = True
                if policy == "Always" or (policy == "OnFailure" and code != 0):
                    self.restarts[key] = self.restarts.get(key, 0) + 1
                    self.running.discard(uid)  # run_pod starts it again
                else:
                    self.exited[key] = code
            if changed and uid in self.running:
                status = self._pod_status(pod)
                self._report(pod, status)
                if status["phase"] in ("Succeeded", "Failed"):
                    # the kubelet stops an ended pod's sandbox and network; its status and logs stay
                    runtime.remove_pod(self.cri, uid, keep_logs=True)
                    if uid in podnet.leftover_uids():
                        podnet.teardown(pod)

    def _pod_status(self, pod: dict) -> dict:
        """The status of a pod whose containers run or ended (run_pod's, with their exits)."""
        uid, spec = pod["metadata"]["uid"], pod["spec"]
        apps = spec.get("containers") or []
        codes = {c["name"]: self.exited[(uid, c["name"])] for c in apps if (uid, c["name"]) in self.exited}
        phase = "Running"
        if len(codes) == len(apps):
            phase = "Succeeded" if not any(codes.values()) else "Failed"
        return _status(phase, pod, spec.get("initContainers") or [], apps, None, self.ips.get(uid),
                       exits=codes, restarts={n: k for (u, n), k in self.restarts.items() if u == uid})  # fmt: skip

    def _stop_pod(self, pod: dict) -> None:
        uid = pod["metadata"]["uid"]
        runtime.remove_pod(self.cri, uid)  # the containers, then the sandbox's network
        volumes.remove_pod_dir(uid)
        self.ips.pop(uid, None)
        if uid in podnet.leftover_uids():
            sid = podnet.sandbox_id(uid)
            err = podnet.teardown(pod)
            if err:  # the stand-in's words; the next sync tries again (leftover_uids)
                log_klog("E", "standin-podnet", f'"Failed to stop sandbox" podSandboxID="{sid}" err="{err}"')

    def _failed(self, pod: dict, image: str, c: dict | None, init: bool, reason: str) -> dict:
        uid = pod["metadata"]["uid"]
        failures = (self.backoff[uid].failures if uid in self.backoff else 0) + 1
        due = time.monotonic() + BACKOFF_S[min(failures, len(BACKOFF_S)) - 1]
        self.backoff[uid] = Backoff(due, failures, image, c, init)
        message = f'Failed to pull image "{image}": {reason}'
        quoted = message.replace("\\", "\\\\").replace('"', '\\"')  # klog quotes a value as Go's %q
        log_klog(
            "E",
            "pod_workers.go:951",
            f'"Error syncing pod, skipping" err="{quoted}" pod="{pod["metadata"]["namespace"]}/{pod["metadata"]["name"]}"',
        )
        if c is None:  # the sandbox: containerd's RunPodSandbox pulls it (kuberuntime_sandbox.go)
            self._event(
                pod,
                None,
                False,
                "Warning",
                "FailedCreatePodSandBox",
                f"Failed to create pod sandbox: {reason}",
            )
        else:
            self._event(pod, c, init, "Warning", "Failed", message)
            self._event(pod, c, init, "Warning", "Failed", "Error: ErrImagePull")
        spec = pod["spec"]
        return _status(
            "Pending", pod, spec.get("initContainers") or [], spec.get("containers") or [],
            ("ErrImagePull", reason, image),
        )  # fmt: skip

    def _backing_off(self, pod: dict, b: Backoff) -> dict:
        message = f'Back-off pulling image "{b.image}"'
        if b.container is not None:
            self._event(pod, b.container, b.init, "Normal", "BackOff", message)
            self._event(pod, b.container, b.init, "Warning", "Failed", "Error: ImagePullBackOff")
        spec = pod["spec"]
        return _status(
            "Pending", pod, spec.get("initContainers") or [], spec.get("containers") or [],
            ("ImagePullBackOff", message, b.image),
        )  # fmt: skip

    def _event(self, pod: dict, c: dict | None, init: bool, kind: str, reason: str, message: str) -> None:
        """One event on the pod (on its container when C), as client-go's recorder posts it; the
        same event again counts up in place. A rejected event is dropped, as the recorder does."""
        meta, stamp = pod["metadata"], rfc3339()
        field = f"spec.{'initContainers' if init else 'containers'}{{{c['name']}}}" if c is not None else ""
        key = (meta["uid"], field, reason, message)
        base = f"/api/v1/namespaces/{meta['namespace']}/events"
        before = self.events.get(key)
        if before is not None:
            event = dict(before, count=before["count"] + 1, lastTimestamp=stamp)
            event["metadata"] = {k: v for k, v in before["metadata"].items() if k in ("name", "namespace")}
            method, path = "PUT", f"{base}/{before['metadata']['name']}"
        else:
            ref = {"kind": "Pod", "namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"],
                   "apiVersion": "v1", "resourceVersion": meta.get("resourceVersion", "")}  # fmt: skip
            if field:
                ref["fieldPath"] = field
            event = {
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"name": f"{meta['name']}.{time.time_ns():x}", "namespace": meta["namespace"]},
                "involvedObject": ref, "reason": reason, "message": message,
                "source": {"component": "kubelet", "host": self.node},
                "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1, "type": kind,
                "eventTime": None, "reportingComponent": "", "reportingInstance": "",
            }  # fmt: skip
            method, path = "POST", base
        try:
            self.client.call(method, path, event)
        except ApiError as e:
            log_klog(
                "E", "event.go:267", f'"Server rejected event (will not retry!)" err="{e}" event="{reason}"'
            )
            return
        self.events[key] = event

    def _report(self, pod: dict, status: dict) -> None:
        meta = pod["metadata"]
        path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status"
        meta.pop("resourceVersion", None)
        try:
            self.client.call("PUT", path, dict(pod, status=status))
        except ApiError as e:  # the pod was replaced or deleted meanwhile: the next sync sees it
            if e.code != 404:
                raise

    # ---- emulated programs ----------------------------------------------------------------------
    def emulate_app(self, pod: dict, c: dict) -> None:
        """flannel's daemon (`/opt/bin/flanneld`), run here while its pod runs (flannel.py)."""
        argv = [*(c.get("command") or []), *(c.get("args") or [])]
        if not argv or argv[0] != "/opt/bin/flanneld" or self.flanneld:
            return
        net_conf = self._configmap_value(pod, self._resolve(pod, c, "/etc/kube-flannel/net-conf.json"))
        if net_conf:
            self.flanneld = (pod["metadata"]["uid"], Flanneld(self.client, self.node, net_conf, argv[1:]))
            self.flanneld[1].sync()

    def _configmap_value(self, pod: dict, src: tuple[str, str, str] | None) -> str | None:
        """The key of a ConfigMap in the pod's namespace that SRC (from _resolve) names, if it names one."""
        if src is None or src[0] != "configMap":
            return None
        cm = self.client.get(f"/api/v1/namespaces/{pod['metadata']['namespace']}/configmaps/{src[1]}")
        return (cm.get("data") or {}).get(src[2])

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
    phase: str,
    pod: dict,
    inits: list[dict],
    apps: list[dict],
    waiting: tuple[str, str, str] | None,
    ip: str | None = None,
    exits: dict[str, int] | None = None,
    restarts: dict[str, int] | None = None,
) -> dict:
    """The pod's status; WAITING is (reason, message, image), with an empty image for a sandbox
    that could not be made (every container waits as ContainerCreating); EXITS: the exit codes of
    app containers that ended, RESTARTS: how often each was started again."""
    now = rfc3339()
    exits, restarts = exits or {}, restarts or {}

    def one(c: dict, init: bool) -> dict:
        if waiting and not waiting[2]:
            state: dict[str, Any] = {"waiting": {"reason": "ContainerCreating"}}
        elif waiting and c["image"] == waiting[2]:
            state = {"waiting": {"reason": waiting[0], "message": waiting[1]}}
        elif waiting:
            state = {"waiting": {"reason": "PodInitializing" if not init else "Waiting"}}
        elif init or c["name"] in exits:
            code = 0 if init else exits[c["name"]]
            state = {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                                    "startedAt": now, "finishedAt": now}}  # fmt: skip
        else:
            state = {"running": {"startedAt": now}}
        return {"name": c["name"], "image": c["image"], "ready": "running" in state and not init,
                "restartCount": restarts.get(c["name"], 0), "state": state}  # fmt: skip

    ready = "True" if phase == "Running" else "False"
    net = {"podIP": ip, "podIPs": [{"ip": ip}]} if ip else {}
    return {
        **net,
        "phase": phase,
        "conditions": [{"type": t, "status": ready, "lastTransitionTime": now}
                       for t in ("Initialized", "Ready", "ContainersReady")] +
                      [{"type": "PodScheduled", "status": "True", "lastTransitionTime": now}],
        "initContainerStatuses": [one(c, True) for c in inits],
        "containerStatuses": [one(c, False) for c in apps],
        "startTime": now,
    }  # fmt: skip
