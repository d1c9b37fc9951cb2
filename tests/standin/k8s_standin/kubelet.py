"""The kube-apiserver process stand-in and the kubelet."""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import hashlib
import http.client
import http.server
import json
import os
import re
import secrets
import signal
import socket
import sys
import threading
from collections.abc import Callable
from typing import Any

import yaml

from . import etcdpod, kubeletapi
from .apiserver import res_path, serve_api
from .client import ApiClient, ApiError, Credentials, Unreachable, load_kubeconfig
from .containerd import cni_ready, containerd_config, containerd_version, ctr, sock_path
from .etcdstore import EtcdClient
from .files import ETCD_MANIFEST, K8S, KUBELET_DIR, MANIFESTS
from .flags import parse_flags
from .pki import gen_key, make_csr
from .pods import PodWorker
from .preflight import mem_total_mb, num_cpu
from .util import (
    APISERVER_UNIT,
    DEFAULT_CRI_SOCKET,
    DOCKERSHIM_REMOVED,
    VERSION,
    Fail,
    b64,
    hostname,
    hp,
    log_klog,
    now,
    parse_duration,
    read_text,
    rfc3339,
    systemctl,
    write_file,
)

# --------------------------------------------------------------------------- kube-apiserver stand-in process

# What the API server unit was last started from (_start_static_pod): a restarted kubelet keeps it
STATIC_POD_RECORD = f"{KUBELET_DIR}/standin-static-pod.json"

APISERVER_FLAGS = {
    "advertise-address", "allow-privileged", "authorization-mode", "client-ca-file", "enable-admission-plugins",
    "disable-admission-plugins", "enable-bootstrap-token-auth", "etcd-cafile", "etcd-certfile", "etcd-keyfile",
    "etcd-servers", "kubelet-client-certificate", "kubelet-client-key", "kubelet-preferred-address-types",
    "proxy-client-cert-file", "proxy-client-key-file", "requestheader-allowed-names", "requestheader-client-ca-file",
    "requestheader-extra-headers-prefix", "requestheader-group-headers", "requestheader-username-headers",
    "secure-port", "bind-address", "service-account-issuer", "service-account-key-file",
    "service-account-signing-key-file", "service-cluster-ip-range", "tls-cert-file", "tls-private-key-file",
    "oidc-issuer-url", "oidc-client-id", "oidc-username-claim", "oidc-username-prefix", "oidc-groups-claim",
    "oidc-groups-prefix", "oidc-ca-file", "oidc-required-claim", "oidc-signing-algs", "audit-log-path",
    "audit-policy-file", "audit-log-maxage", "audit-log-maxbackup", "audit-log-maxsize", "feature-gates",
    "runtime-config", "service-node-port-range", "encryption-provider-config", "profiling", "anonymous-auth",
    "event-ttl", "default-not-ready-toleration-seconds", "default-unreachable-toleration-seconds", "v",
    "max-requests-inflight", "max-mutating-requests-inflight", "tls-cipher-suites", "tls-min-version",
    "service-account-lookup", "endpoint-reconciler-type", "insecure-port", "kubelet-certificate-authority",
}  # fmt: skip


BACKOFF_START, BACKOFF_MAX = 10.0, 300.0


def pod_command_flags(manifest_path: str, binary: str, known: set[str]) -> dict[str, str]:
    text = read_text(manifest_path)
    if text is None:
        raise Fail(f"open {manifest_path}: no such file or directory")
    try:
        pod = yaml.safe_load(text)
        cmd = pod["spec"]["containers"][0]["command"]
    except (yaml.YAMLError, KeyError, IndexError, TypeError) as e:
        raise Fail(f"static pod manifest {manifest_path} is invalid: {e}") from e
    if not cmd or os.path.basename(cmd[0]) != binary:
        raise Fail(f'exec: "{cmd[0] if cmd else ""}": executable file not found in $PATH')
    flags = {}
    for a in cmd[1:]:
        if not a.startswith("--"):
            raise Fail(f'Error: unknown command "{a}" for "{binary}"')
        k, _, v = a[2:].partition("=")
        if k not in known:
            raise Fail(f"Error: unknown flag: --{k}")
        flags[k] = v
    return flags


def image_version(manifest_path: str) -> str:
    """The Kubernetes version a static pod's image tag names (`...:v1.23.16`), else VERSION: the
    API server reports what the manifest it runs from says it is, as the real image would."""
    with contextlib.suppress(yaml.YAMLError, KeyError, IndexError, TypeError, AttributeError):
        image = yaml.safe_load(read_text(manifest_path) or "")["spec"]["containers"][0]["image"]
        m = re.search(r":(v1\.\d+\.\d+)$", image)
        if m:
            return m.group(1)
    return VERSION


ETCD_WAIT_S = 60.0  # how long the API server waits for etcd at start before it gives up


def _etcd_client(f: dict[str, str], etcd_gone: Callable[[], bool], stop: threading.Event) -> EtcdClient:
    """The API server's connection to etcd (--etcd-servers over TLS with --etcd-certfile/keyfile), once
    etcd answers. As kube-apiserver, it waits for its storage, logging grpc's warning (on grpc-go's
    default backoff, 1 s x1.6), and gives up after a minute."""
    for k in ("etcd-cafile", "etcd-certfile", "etcd-keyfile"):
        if not f.get(k) or not os.path.exists(hp(f[k])):
            raise Fail(f"open {f.get(k, '')}: no such file or directory")
    client = EtcdClient(
        f.get("etcd-servers", ""), hp(f["etcd-cafile"]), hp(f["etcd-certfile"]), hp(f["etcd-keyfile"])
    )
    # tried every 0.2 s (a local etcd just started answers within a second or two); grpc's warning
    # logged on its own schedule, at the first failure and then after 1 s, 1.6 s, ... (at most 10 s)
    end, backoff, warn_at = now() + ETCD_WAIT_S, 1.0, 0.0
    while True:
        try:
            client.ping()
            return client
        except Fail as e:
            if now() >= warn_at:
                # grpc's clientconn.go: "grpc: addrConn.createTransport failed to connect to %v. Err:
                # %v. Reconnecting..." (%v: resolver.Address as grpc 1.40, kube 1.23's, prints it)
                addr = f"{client.host}:{client.port}"
                log_klog("W", "clientconn.go:1331", f"[core] grpc: addrConn.createTransport failed to connect to "
                         f"{{{addr} {client.host} <nil> 0 <nil>}}. Err: connection error: desc = \"transport: "
                         f'Error while dialing {e.message.removeprefix("etcdserver: ")}". Reconnecting...')  # fmt: skip
                sys.stderr.flush()
                warn_at, backoff = now() + backoff, min(backoff * 1.6, 10.0)
            if stop.is_set() or now() >= end or etcd_gone():
                raise Fail("context deadline exceeded") from e
        if stop.wait(0.2):
            raise Fail("context deadline exceeded")


def apiserver_main(argv: list[str]) -> int:
    manifest = argv[0] if argv else hp(f"{MANIFESTS}/kube-apiserver.yaml")
    etcd_started = False
    try:
        f = pod_command_flags(manifest, "kube-apiserver", APISERVER_FLAGS)
        if f.get("oidc-issuer-url") or f.get("oidc-client-id"):
            if not (f.get("oidc-issuer-url") and f.get("oidc-client-id")):
                raise Fail("Error: [oidc-issuer-url and oidc-client-id should be specified together]")
            if not f["oidc-issuer-url"].startswith("https://"):
                raise Fail(f"Error: invalid authentication config: 'oidc-issuer-url' (\"{f['oidc-issuer-url']}\") has "
                           "invalid scheme (\"http\"), require 'https'")  # fmt: skip
            if f.get("oidc-ca-file") and not os.path.exists(hp(f["oidc-ca-file"])):
                raise Fail(f"Error: invalid authentication config: failed to read the oidc-ca-file: open "
                           f"{f['oidc-ca-file']}: no such file or directory")  # fmt: skip
        for k in ("tls-cert-file", "tls-private-key-file", "client-ca-file"):
            if not f.get(k) or not os.path.exists(hp(f[k])):
                raise Fail(f"Error: open {f.get(k, '')}: no such file or directory")
        cidr = ""
        with contextlib.suppress(Fail):
            cm = pod_command_flags(hp(f"{MANIFESTS}/kube-controller-manager.yaml"), "kube-controller-manager",
                                   _any_flag())  # fmt: skip
            if cm.get("allocate-node-cidrs") == "true":
                cidr = cm.get("cluster-cidr", "")
        ca = hp(f["client-ca-file"])
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        # local etcd: its static pod, run for real (etcdpod.py); without its manifest (held away by a
        # restore, or external etcd) the API server waits for --etcd-servers all the same
        if os.path.exists(hp(ETCD_MANIFEST)):
            etcd_started = True
            etcdpod.start(hp(ETCD_MANIFEST))
        client = _etcd_client(f, lambda: etcd_started and etcdpod.state() == "gone", stop)
        srv, _ = serve_api(client, hp(f["tls-cert-file"]), hp(f["tls-private-key-file"]), ca,
                           os.path.join(os.path.dirname(ca), "ca.key"), f.get("bind-address", "0.0.0.0"),
                           int(f.get("secure-port", "6443")), cidr, image_version(manifest),
                           _kubelet_client(f))  # fmt: skip
    except Fail as e:
        log_klog("E", "run.go:74", f'"command failed" err="{e.message}"')
        if etcd_started:
            etcdpod.stop()
        return 1
    except OSError as e:
        log_klog("E", "run.go:74", f'"command failed" err="failed to listen on 0.0.0.0:6443: {e.strerror}"')
        if etcd_started:
            etcdpod.stop()
        return 1
    log_klog("I", "secure_serving.go:266", f"Serving securely on [::]:{srv.server_address[1]}")
    while not stop.wait(2.0):
        # etcd's container exited: this unit ends too, and the kubelet starts it again ("unknown":
        # containerd restarting, the container runs on in its shim)
        if etcd_started and etcdpod.state() == "gone":
            log_klog("E", "run.go:74", '"command failed" err="etcd exited"')
            srv.shutdown()
            etcdpod.stop()
            return 1
    srv.shutdown()
    if etcd_started:
        etcdpod.stop()
    return 0


class _any_flag(set):
    def __contains__(self, item: object) -> bool:
        return True


# --------------------------------------------------------------------------- kubelet

MIRROR_RECHECK_S = 10.0  # a deleted mirror pod is posted again within this

KUBELET_FLAGS = {
    "bootstrap-kubeconfig": "str", "kubeconfig": "str", "config": "str", "container-runtime": "str",
    "container-runtime-endpoint": "str", "image-service-endpoint": "str", "pod-infra-container-image": "str",
    "node-ip": "str", "hostname-override": "str", "node-labels": "str", "register-node": "bool",
    "register-with-taints": "str", "cgroup-driver": "str", "network-plugin": "str", "cni-bin-dir": "str",
    "cni-conf-dir": "str", "resolv-conf": "str", "fail-swap-on": "bool", "v": "str", "root-dir": "str",
    "cert-dir": "str", "provider-id": "str", "cloud-provider": "str", "runtime-request-timeout": "str",
    "max-pods": "str", "feature-gates": "str", "logtostderr": "bool", "version": "bool",
    # dockershim's, accepted (and ignored) by 1.23 only
    "experimental-dockershim-root-directory": "str", "docker-endpoint": "str", "image-pull-progress-deadline": "str",
    "cni-cache-dir": "str", "network-plugin-mtu": "str",
}  # fmt: skip
ALLOWED_NODE_LABELS = {
    "beta.kubernetes.io/arch", "beta.kubernetes.io/instance-type", "beta.kubernetes.io/os",
    "failure-domain.beta.kubernetes.io/region", "failure-domain.beta.kubernetes.io/zone", "kubernetes.io/arch",
    "kubernetes.io/hostname", "kubernetes.io/os", "node.kubernetes.io/instance-type", "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone",
}  # fmt: skip


# Removed from the kubelet with dockershim in 1.24 (kubernetes#106907): an unknown flag from then on.
DOCKERSHIM_FLAGS = ("experimental-dockershim-root-directory", "docker-endpoint", "image-pull-progress-deadline",
                    "network-plugin", "cni-conf-dir", "cni-bin-dir", "cni-cache-dir", "network-plugin-mtu")  # fmt: skip


def kubelet_flags() -> dict[str, str]:
    if not DOCKERSHIM_REMOVED:
        return KUBELET_FLAGS
    return {k: v for k, v in KUBELET_FLAGS.items() if k not in DOCKERSHIM_FLAGS}


def validate_runtime_flags(flags: dict[str, Any]) -> str | None:
    """1.24's ValidateKubeletFlags: `remote` is the only runtime left, and it needs an endpoint
    (no dockershim default)."""
    if not DOCKERSHIM_REMOVED:
        return None
    runtime = flags.get("container-runtime", "remote")
    if runtime != "remote":
        return f'failed to validate kubelet flags: unsupported CRI runtime: "{runtime}", only "remote" is currently supported'
    if not flags.get("container-runtime-endpoint"):
        return ("failed to validate kubelet flags: the container runtime endpoint address was not specified or empty, "
                "use --container-runtime-endpoint to set")  # fmt: skip
    return None


def kubelet_fail(msg: str) -> int:
    log_klog("E", "run.go:74", f'"command failed" err="{msg}"')
    return 1


def check_node_labels(labels: dict[str, str]) -> str | None:
    bad = []
    for k in labels:
        ns = k.split("/")[0] if "/" in k else ""
        if not (
            ns == "kubernetes.io" or ns.endswith(".kubernetes.io") or ns == "k8s.io" or ns.endswith(".k8s.io")
        ):
            continue
        if k in ALLOWED_NODE_LABELS or ns in ("kubelet.kubernetes.io", "node.kubernetes.io") or \
                ns.endswith((".kubelet.kubernetes.io", ".node.kubernetes.io")):  # fmt: skip
            continue
        bad.append(k)
    if not bad:
        return None
    return (f"failed to validate kubelet flags: unknown 'kubernetes.io' or 'k8s.io' labels specified with "
            f"--node-labels: [{' '.join(sorted(bad))}]\n--node-labels in the 'kubernetes.io' namespace must begin with "
            "an allowed prefix (kubelet.kubernetes.io, node.kubernetes.io) or be in the specifically allowed set "
            f"({', '.join(sorted(ALLOWED_NODE_LABELS))})")  # fmt: skip


def kv_list(s: str) -> dict[str, str]:
    return dict(p.split("=", 1) if "=" in p else (p, "") for p in s.split(",") if p)


class Kubelet:
    def __init__(self, flags: dict[str, Any], cfg: dict) -> None:
        self.flags = flags
        self.cfg = cfg
        self.node = (flags.get("hostname-override") or hostname()).lower()
        self.cri = flags.get("container-runtime-endpoint") or DEFAULT_CRI_SOCKET
        self.kubeconfig = hp(flags.get("kubeconfig", f"{K8S}/kubelet.conf"))
        self.client: ApiClient | None = None
        self.registered = False
        self.static_mtime: float | None = None
        self.etcd_mtime: float | None = None  # etcd's manifest as last started (the store's place)
        self.static_pod: dict | None = None  # the manifest the running apiserver started from
        self.static_hash = ""
        self.static_started = ""
        self.static_restarts = -1
        # CrashLoopBackOff: a container that keeps exiting is started again after 10 s, 20 s, ...
        # 5 min; a changed manifest is a new pod, started at once with the back-off reset
        self.static_backoff = BACKOFF_START
        self.static_next_start = 0.0
        self.mirror_checked: tuple[str, float] | None = None  # (hash, when) last posted or seen
        self.transitions: dict[str, tuple[str, str]] = {}

    def tls_bootstrap(self) -> None:
        boot = Credentials.from_kubeconfig(load_kubeconfig(hp(self.flags["bootstrap-kubeconfig"])))
        pki = hp(f"{KUBELET_DIR}/pki")
        key = f"{pki}/kubelet-client.key.tmp"
        gen_key(key, ec=True)
        csr = make_csr(key, f"system:node:{self.node}", ["system:nodes"])
        obj = {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
               "metadata": {"name": f"csr-{secrets.token_hex(3)}"},
               "spec": {"request": b64(csr), "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
                        "usages": ["digital signature", "key encipherment", "client auth"]}}  # fmt: skip
        client = ApiClient(boot)
        res = client.call("POST", res_path("certificates.k8s.io", "v1", "certificatesigningrequests"), obj)
        cert = base64.b64decode(res["status"]["certificate"]).decode()
        stamp = dt.datetime.now().strftime("%Y-%m-%d-%H-%M-%S")
        pem = f"{pki}/kubelet-client-{stamp}.pem"
        write_file(pem, cert + (read_text(key) or ""), 0o600)
        os.remove(key)
        cur = f"{pki}/kubelet-client-current.pem"
        with contextlib.suppress(OSError):
            os.remove(cur)
        os.symlink(pem, cur)
        doc = {"apiVersion": "v1", "kind": "Config", "preferences": {}, "current-context": "default-context",
               "clusters": [{"name": "default-cluster", "cluster": {"certificate-authority-data": b64(boot.ca_pem or ""),
                                                                    "server": boot.server}}],
               "contexts": [{"name": "default-context", "context": {"cluster": "default-cluster", "namespace": "default",
                                                                    "user": "default-auth"}}],
               "users": [{"name": "default-auth", "user": {"client-certificate": f"{KUBELET_DIR}/pki/kubelet-client-current.pem",
                                                            "client-key": f"{KUBELET_DIR}/pki/kubelet-client-current.pem"}}]}  # fmt: skip
        write_file(self.kubeconfig, yaml.safe_dump(doc, default_flow_style=False), 0o600)
        log_klog(
            "I",
            "certificate_manager.go:270",
            "kubernetes.io/kube-apiserver-client-kubelet: Certificate issued",
        )

    def conditions(self) -> tuple[list[dict], str]:
        """(conditions, containerRuntimeVersion) from the real node state."""
        rc, out = ctr(self.cri, "version", timeout=10)
        runtime_ok = rc == 0 and "Server:" in out
        net_ok, net_msg = cni_ready()
        ccfg = containerd_config()
        kubelet_driver = self.cfg.get("cgroupDriver", "cgroupfs")
        swap = len([ln for ln in (read_text(hp("/proc/swaps")) or "").split("\n") if ln]) > 1
        reasons = []
        if not runtime_ok:
            reasons.append("container runtime is down")
        if not net_ok:
            reasons.append(
                f"container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:{net_msg}"
            )
        if kubelet_driver != "systemd" or ccfg["systemd_cgroup"] is not True:
            reasons.append(f'standin: cgroup driver mismatch or not systemd (kubelet "{kubelet_driver}", containerd '
                           f'SystemdCgroup={str(ccfg["systemd_cgroup"]).lower()}): pods would fail to start')  # fmt: skip
        if swap and self.cfg.get("failSwapOn", True) is False:
            reasons.append("standin: swap is on")
        ts = rfc3339()
        spec = [
            ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            ("Ready", "False" if reasons else "True", "KubeletNotReady" if reasons else "KubeletReady",
             ", ".join(reasons) if reasons else "kubelet is posting ready status"),
        ]  # fmt: skip
        conds = []
        for typ, st, reason, msg in spec:
            prev = self.transitions.get(typ)
            if prev is None or prev[0] != st:
                self.transitions[typ] = (st, ts)
            conds.append({"type": typ, "status": st, "reason": reason, "message": msg,
                          "lastHeartbeatTime": ts, "lastTransitionTime": self.transitions[typ][1]})  # fmt: skip
        return conds, f"containerd://{containerd_version(out)}" if runtime_ok else "containerd://unknown"

    def addresses(self) -> list[dict]:
        ip = self.flags.get("node-ip")
        if not ip and self.client is not None:
            with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.connect((self.client.host, self.client.port))
                ip = s.getsockname()[0]
        out = [{"type": "InternalIP", "address": ip}] if ip else []
        return [*out, {"type": "Hostname", "address": self.node}]

    def status(self) -> dict:
        conds, rt = self.conditions()
        mem_ki = mem_total_mb() * 1024
        m = re.search(r"MemTotal:\s+(\d+) kB", read_text(hp("/proc/meminfo")) or "")
        if m:
            mem_ki = int(m.group(1))
        st = os.statvfs(hp(KUBELET_DIR)) if os.path.isdir(hp(KUBELET_DIR)) else None
        eph = f"{st.f_blocks * st.f_frsize // 1024}Ki" if st else "0"
        cap = {"cpu": str(num_cpu()), "memory": f"{mem_ki}Ki", "pods": str(self.cfg.get("maxPods", 110)),
               "ephemeral-storage": eph, "hugepages-1Gi": "0", "hugepages-2Mi": "0"}  # fmt: skip
        alloc = dict(cap, memory=f"{max(mem_ki - 102400, 0)}Ki")
        osr = read_text("/etc/os-release") or ""
        pretty = re.search(r'^PRETTY_NAME="?([^"\n]*)', osr, re.M)
        return {
            "conditions": conds, "addresses": self.addresses(), "capacity": cap, "allocatable": alloc,
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"kubeletVersion": VERSION, "kubeProxyVersion": VERSION, "containerRuntimeVersion": rt,
                         "osImage": pretty.group(1) if pretty else "Linux", "kernelVersion": os.uname().release,
                         "operatingSystem": "linux", "architecture": "amd64",
                         "machineID": (read_text("/etc/machine-id") or "").strip(),
                         "systemUUID": (read_text("/sys/class/dmi/id/product_uuid") or "").strip(),
                         "bootID": (read_text("/proc/sys/kernel/random/boot_id") or "").strip()},
        }  # fmt: skip

    def register(self) -> None:
        assert self.client is not None
        labels = {"beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                  "kubernetes.io/hostname": self.node, "kubernetes.io/os": "linux"}  # fmt: skip
        labels.update(kv_list(self.flags.get("node-labels", "")))
        taints = []
        for t in [t for t in self.flags.get("register-with-taints", "").split(",") if t]:
            kv, _, eff = t.partition(":")
            k, _, v = kv.partition("=")
            taints.append({"key": k, "effect": eff, **({"value": v} if v else {})})
        node = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": self.node, "labels": labels,
                             "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                                             "volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
                "spec": {"taints": taints} if taints else {}, "status": self.status()}  # fmt: skip
        try:
            self.client.call("POST", res_path("", "v1", "nodes"), node)
            log_klog("I", "kubelet_node_status.go:76", f'"Successfully registered node" node="{self.node}"')
        except ApiError as e:
            if e.code != 409:
                raise
        self.registered = True

    def heartbeat(self) -> None:
        assert self.client is not None
        path = res_path("", "v1", "nodes", name=self.node)
        try:
            node = self.client.get(path)
        except ApiError as e:
            log_klog(
                "E",
                "kubelet_node_status.go:460",
                f'"Error updating node status, will retry" err="error getting node \\"{self.node}\\": {e.message}"',
            )
            return
        node["status"] = self.status()
        node["metadata"].pop("resourceVersion", None)
        self.client.call("PUT", path + "/status", node)

    def sync_static_pods(self) -> None:
        """The apiserver static pod: its manifest drives the stand-in unit like the kubelet drives a pod."""
        manifest = self._manifest("kube-apiserver.yaml")
        if not os.path.exists(hp(f"/etc/systemd/system/{APISERVER_UNIT}")):
            return
        try:
            mtime: float | None = os.stat(manifest).st_mtime
        except OSError:
            mtime = None
        active = systemctl("is-active", "--quiet", APISERVER_UNIT)[0] == 0
        # etcd runs inside the API server unit (its store): a rewritten etcd manifest (a restore's
        # new data dir) restarts it, as the kubelet restarts the etcd pod
        etcd = self._etcd_mtime()
        if mtime is None:
            if active:
                systemctl("stop", APISERVER_UNIT)
        elif self.static_mtime is None and active and self._adopt_static_pod(manifest):
            # a kubelet (re)start finds the API server running from this very manifest (and etcd's):
            # as the real kubelet, whose sync keeps a container whose spec hash is the pod's, it
            # keeps it. Before, each kubelet restart restarted the API server, which no real node
            # does (kube_upgrade's scenario then met "connection refused" right after one).
            mtime = self.static_mtime
        elif mtime != self.static_mtime or etcd != self.etcd_mtime:
            if self.static_mtime is not None:
                log_klog(
                    "I",
                    "kubelet.go:2103",
                    '"SyncLoop UPDATE" source="file" pods=[kube-system/kube-apiserver]',
                )
            self.static_backoff = BACKOFF_START
            mtime = self._start_static_pod(manifest)
        elif not active:
            if now() < self.static_next_start:
                return
            self.static_backoff = min(self.static_backoff * 2, BACKOFF_MAX)
            mtime = self._start_static_pod(manifest)
        self.static_mtime, self.etcd_mtime = mtime, etcd

    def _manifest(self, name: str) -> str:
        """Static pod manifest NAME's path on this node: under the config's staticPodPath."""
        return os.path.join(hp(self.cfg.get("staticPodPath", MANIFESTS)), name)

    def _etcd_mtime(self) -> float | None:
        try:
            return os.stat(self._manifest("etcd.yaml")).st_mtime
        except OSError:
            return None

    def _start_static_pod(self, manifest: str) -> float | None:
        # the file as read now, with its own mtime: one rewritten since the caller's stat (a restore
        # racing this loop) is what starts, and is not restarted again on the next pass
        mtime = self._load_static_pod(manifest)
        systemctl("restart", APISERVER_UNIT)
        self.static_next_start = now() + self.static_backoff
        # what runs, as the real kubelet labels a container with its pod's spec hash: the unit's
        # InvocationID (crictl's container ID for it) with the manifests' digests
        write_file(hp(STATIC_POD_RECORD), json.dumps(self._static_identity()) + "\n")
        return mtime

    def _static_identity(self) -> dict[str, str]:
        """The running API server unit's InvocationID and the digests of the two manifests now."""
        _, invocation = systemctl("show", "-p", "InvocationID", "--value", APISERVER_UNIT)
        digests = {
            name: hashlib.sha256((read_text(self._manifest(name)) or "").encode()).hexdigest()
            for name in ("kube-apiserver.yaml", "etcd.yaml")
        }
        return {"invocation": invocation.strip(), **digests}

    def _adopt_static_pod(self, manifest: str) -> bool:
        """The running unit is the one this kubelet's predecessor started from the manifests as they
        are now: take it over (its mirror pod from the manifest) and return True."""
        try:
            record = json.loads(read_text(hp(STATIC_POD_RECORD)) or "null")
        except ValueError:
            return False
        if not isinstance(record, dict) or not record.get("invocation") or record != self._static_identity():
            return False
        self.static_mtime = self._load_static_pod(manifest)
        self.etcd_mtime = self._etcd_mtime()
        return True

    def _load_static_pod(self, manifest: str) -> float | None:
        """What the unit is about to start from: the mirror pod's spec (the real kubelet posts the
        static pod it runs, with its hash, as the mirror pod). Returns the mtime of what was read."""
        try:
            mtime: float | None = os.stat(manifest).st_mtime
        except OSError:
            mtime = None
        text = read_text(manifest) or ""
        try:
            pod = yaml.safe_load(text)
        except yaml.YAMLError:
            pod = None
        self.static_pod = pod if isinstance(pod, dict) and isinstance(pod.get("spec"), dict) else None
        self.static_hash = hashlib.sha256(text.encode()).hexdigest()[:32]
        self.static_started = rfc3339()
        self.static_restarts += 1
        return mtime

    def mirror_pod(self, ready: bool) -> dict | None:
        """kube-system/<name>-<node>: the static pod as the API sees it (kubectl get pods -n
        kube-system kube-apiserver-<node> -o yaml shows the command the running apiserver has)."""
        pod = self.static_pod
        if pod is None:
            return None
        meta = pod.get("metadata") or {}
        name = f"{meta.get('name', 'kube-apiserver')}-{self.node}"
        spec = dict(pod["spec"], nodeName=self.node)
        annotations = dict(meta.get("annotations") or {})
        annotations.update({"kubernetes.io/config.hash": self.static_hash,
                            "kubernetes.io/config.mirror": self.static_hash,
                            "kubernetes.io/config.seen": self.static_started,
                            "kubernetes.io/config.source": "file"})  # fmt: skip
        ts = rfc3339()
        cond = "True" if ready else "False"
        first = (spec.get("containers") or [{}])[0]
        status = {
            "phase": "Running",
            "conditions": [{"type": t, "status": cond if t in ("Ready", "ContainersReady") else "True",
                            "lastProbeTime": None, "lastTransitionTime": ts}
                           for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
            "containerStatuses": [{"name": first.get("name", "kube-apiserver"), "image": first.get("image", ""),
                                   "imageID": "", "containerID": f"standin://{APISERVER_UNIT}",
                                   "ready": ready, "started": True, "restartCount": max(self.static_restarts, 0),
                                   "state": {"running": {"startedAt": self.static_started}}}],
            "hostIP": next((a["address"] for a in self.addresses() if a["type"] == "InternalIP"), ""),
            "qosClass": "Burstable",
            "startTime": self.static_started,
        }  # fmt: skip
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": meta.get("namespace") or "kube-system",
                         "labels": dict(meta.get("labels") or {}), "annotations": annotations},
            "spec": spec,
            "status": status,
        }  # fmt: skip

    def sync_mirror_pod(self) -> None:
        """Post the mirror pod once the apiserver it describes answers (the kubelet reaches the API
        through it); a changed manifest replaces it (new hash), as the real kubelet does."""
        assert self.client is not None
        last = self.mirror_checked
        if self.static_pod is None or (
            last and last[0] == self.static_hash and now() - last[1] < MIRROR_RECHECK_S
        ):
            return
        want = self.mirror_pod(ready=True)
        if want is None or systemctl("is-active", "--quiet", APISERVER_UNIT)[0] != 0:
            return
        md = want["metadata"]
        path = res_path("", "v1", "pods", md["namespace"], md["name"])
        try:
            cur: dict | None = self.client.get(path)
        except ApiError as e:
            if e.code != 404:
                raise
            cur = None
        same = cur is not None and (cur["metadata"].get("annotations") or {}).get("kubernetes.io/config.hash") \
            == self.static_hash  # fmt: skip
        if not same:
            if cur is not None:
                self.client.call("DELETE", path)
            self.client.call("POST", res_path("", "v1", "pods", md["namespace"]), want)
            log_klog(
                "I",
                "mirror_client.go:86",
                f'"Creating a mirror pod for static pod" pod="{md["namespace"]}/{md["name"]}"',
            )
        self.mirror_checked = (self.static_hash, now())


def _serve_text(port: int, bind: str, code: int, body: bytes) -> http.server.ThreadingHTTPServer:
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    srv = http.server.ThreadingHTTPServer((bind, port), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def _kubelet_client(f: dict[str, str]) -> tuple[str, str] | None:
    """The API server's client certificate to the kubelets, when both files are there."""
    crt, key = hp(f.get("kubelet-client-certificate", "")), hp(f.get("kubelet-client-key", ""))
    return (crt, key) if os.path.isfile(crt) and os.path.isfile(key) else None


def _kubelet_loop(kl: Kubelet, flags: dict[str, Any], cfg: dict[str, Any]) -> None:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    period = parse_duration(str(cfg.get("nodeStatusUpdateFrequency") or "10s")) or 10.0
    next_hb = next_pods = 0.0
    worker: PodWorker | None = None
    while not stop.is_set():
        kl.sync_static_pods()
        try:
            if kl.client is None:
                kl.client = ApiClient(Credentials.from_kubeconfig(load_kubeconfig(kl.kubeconfig)))
            if flags.get("register-node", True) and not kl.registered:
                # kubelet's syncNodeStatus (pkg/kubelet/kubelet_node_status.go, kubernetes/kubernetes):
                # registerWithAPIServer, then updateNodeStatus in the same call. A node registered
                # before (a reboot) posts its status at once, not a period later.
                kl.register()
                kl.heartbeat()
                next_hb = now() + period
            elif kl.registered and now() >= next_hb:
                kl.heartbeat()
                next_hb = now() + period
            if kl.registered:
                kl.sync_mirror_pod()
            if kl.registered and now() >= next_pods:  # the pods bound here: pull, init, report
                worker = worker or PodWorker(kl.client, kl.node, kl.cri)
                worker.sync()
                next_pods = now() + 2.0
        except Unreachable as e:
            log_klog("E", "kubelet_node_status.go:92", f'"Unable to register node with API server" err="Post '
                     f'\\"{kl.client.creds.server if kl.client else ""}/api/v1/nodes\\": {e.reason}" node="{kl.node}"')  # fmt: skip
        except (ApiError, Fail) as e:
            log_klog("E", "kubelet.go:2424", f'"Error getting node" err="{getattr(e, "message", e)}"')
        stop.wait(1.0)


def kubelet_main(argv: list[str]) -> int:
    try:
        flags, _ = parse_flags(argv, kubelet_flags())
    except Fail as e:
        sys.stderr.write(f"Error: failed to parse kubelet flag: {e.message}\n")
        return 1
    if flags.get("version"):
        print(f"Kubernetes {VERSION}")
        return 0
    bad_runtime = validate_runtime_flags(flags)
    if bad_runtime:
        return kubelet_fail(bad_runtime)
    cfg_path = flags.get("config", "")
    text = read_text(hp(cfg_path)) if cfg_path else ""
    if cfg_path and text is None:
        return kubelet_fail(f"failed to load kubelet config file, error: failed to load Kubelet config file {cfg_path}, "
                            f'error failed to read kubelet config file \\"{cfg_path}\\", error: open {cfg_path}: no such '
                            f"file or directory, path: {cfg_path}")  # fmt: skip
    try:
        cfg = yaml.safe_load(text or "") or {}
    except yaml.YAMLError as e:
        return kubelet_fail(f"failed to load kubelet config file, error: {e}, path: {cfg_path}")
    if cfg and (
        cfg.get("kind") != "KubeletConfiguration" or cfg.get("apiVersion") != "kubelet.config.k8s.io/v1beta1"
    ):
        return kubelet_fail(f"failed to load kubelet config file, error: failed to decode: no kind \\\"{cfg.get('kind')}\\\" "
                            f"is registered for version \\\"{cfg.get('apiVersion')}\\\", path: {cfg_path}")  # fmt: skip
    if "fail-swap-on" in flags:
        cfg["failSwapOn"] = flags["fail-swap-on"]
    if flags.get("cgroup-driver"):
        cfg["cgroupDriver"] = flags["cgroup-driver"]
    bad = check_node_labels(kv_list(flags.get("node-labels", "")))
    if bad:
        return kubelet_fail(bad)
    swaps = [ln for ln in (read_text(hp("/proc/swaps")) or "").split("\n") if ln]
    if len(swaps) > 1 and cfg.get("failSwapOn", True):
        return kubelet_fail(f"failed to run Kubelet: running with swap on is not supported, please disable swap! or set "
                            f"--fail-swap-on flag to false. /proc/swaps contained: {swaps}")  # fmt: skip
    kl = Kubelet(flags, cfg)
    if not os.path.exists(kl.kubeconfig):
        bk = flags.get("bootstrap-kubeconfig")
        if not bk or not os.path.exists(hp(bk)):
            return kubelet_fail(
                f"failed to run Kubelet: unable to load bootstrap kubeconfig: stat {bk}: no such file or directory"
            )
        try:
            kl.tls_bootstrap()
        except (ApiError, Unreachable, Fail) as e:
            return kubelet_fail(f"failed to run Kubelet: unable to load bootstrap kubeconfig: cannot create certificate "
                                f"signing request: {getattr(e, 'message', None) or getattr(e, 'reason', e)}")  # fmt: skip
    rc, out = ctr(kl.cri, "version", timeout=10)
    if rc != 0 or "Server:" not in out:
        path = sock_path(kl.cri)
        return kubelet_fail(f'failed to run Kubelet: unable to determine runtime API version: rpc error: code = '
                            f'Unavailable desc = connection error: desc = \\"transport: Error while dialing dial unix '
                            f'{path}: connect: no such file or directory\\"')  # fmt: skip
    try:
        cert, key = kubeletapi.serving_cert(hp(flags.get("cert-dir") or f"{KUBELET_DIR}/pki"), hostname())
        client_ca = hp(((cfg.get("authentication") or {}).get("x509") or {}).get("clientCAFile") or "")
        servers = [_serve_text(int(cfg.get("healthzPort", 10248)), cfg.get("healthzBindAddress", "127.0.0.1"), 200, b"ok"),
                   kubeletapi.serve(cert, key, client_ca)]  # fmt: skip
    except OSError as e:
        return kubelet_fail(
            f"failed to listen on 0.0.0.0:10250: listen tcp 0.0.0.0:10250: bind: {e.strerror}"
        )
    _kubelet_loop(kl, flags, cfg)
    for s in servers:
        s.shutdown()
    return 0
