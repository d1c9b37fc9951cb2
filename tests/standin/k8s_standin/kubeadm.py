"""kubeadm init and the helpers the other kubeadm commands share."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

import yaml

from .apiserver import BUILTIN_RESOURCES, res_path
from .client import ApiClient, ApiError, Credentials, Unreachable, cluster_info_kubeconfig, load_kubeconfig
from .config import InitConfig, control_plane_images, load_init_config
from .files import (
    K8S,
    KUBELET_CONFIG_CM,
    KUBELET_DIR,
    MANIFESTS,
    PKI,
    apiserver_unit,
    client_kubeconfig,
    control_plane_manifests,
    first_ip,
    kubeadm_flags_env,
    kubelet_config_doc,
    write_pki,
)
from .flags import parse_flags
from .pki import join_command, token_secret_object
from .preflight import INIT, PULL, Ctx, parse_ignore, root_check, run_checks, select
from .util import (
    APISERVER_UNIT,
    DOCKERSHIM_REMOVED,
    Fail,
    format_duration,
    group_of,
    hp,
    now,
    parse_duration,
    read_text,
    self_path,
    systemctl,
    write_file,
)

# --------------------------------------------------------------------------- kubeadm commands

INIT_FLAGS = {
    "config": "str", "ignore-preflight-errors": "list", "kubernetes-version": "str", "pod-network-cidr": "str",
    "service-cidr": "str", "service-dns-domain": "str", "apiserver-advertise-address": "str",
    "apiserver-bind-port": "str", "apiserver-cert-extra-sans": "str", "token": "str", "token-ttl": "str",
    "node-name": "str", "cri-socket": "str", "image-repository": "str", "upload-certs": "bool",
    "skip-phases": "list", "control-plane-endpoint": "str", "certificate-key": "str", "skip-token-print": "bool",
    "skip-certificate-key-print": "bool", "dry-run": "bool", "v": "str", "feature-gates": "str",
    "cert-dir": "str", "patches": "str", "rootfs": "str",
}  # fmt: skip
INIT_MIXABLE = {"config", "ignore-preflight-errors", "skip-phases", "dry-run", "upload-certs", "certificate-key",
                "skip-token-print", "skip-certificate-key-print", "v", "patches", "rootfs"}  # fmt: skip


def admin_client(kubeconfig_path: str = f"{K8S}/admin.conf", timeout: float = 10) -> ApiClient:
    if not os.path.exists(hp(kubeconfig_path)):
        raise Fail(f"failed to load admin kubeconfig: open {kubeconfig_path}: no such file or directory")
    return ApiClient(Credentials.from_kubeconfig(load_kubeconfig(hp(kubeconfig_path))), timeout=timeout)


def wait_for(pred: Callable[[], bool], timeout: float, interval: float = 0.5) -> bool:
    end = now() + timeout
    while True:
        try:
            if pred():
                return True
        except (Unreachable, ApiError, OSError):
            pass
        if now() >= end:
            return False
        time.sleep(interval)


def kubelet_healthy() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 10248), timeout=2) as s:
            s.sendall(b"GET /healthz HTTP/1.0\r\nHost: localhost\r\n\r\n")
            return b"200" in s.recv(64)
    except OSError:
        return False


KUBELET_TROUBLE = """
	Unfortunately, an error has occurred:
		timed out waiting for the condition

	This error is likely caused by:
		- The kubelet is not running
		- The kubelet is unhealthy due to a misconfiguration of the node in some way (required cgroups disabled)

	If you are on a systemd-powered system, you can try to troubleshoot the error with the following commands:
		- 'systemctl status kubelet'
		- 'journalctl -xeu kubelet'

	Additionally, a control plane component may have crashed or exited when started by the container runtime.
	To troubleshoot, list all containers using your preferred container runtimes CLI.
"""


def kubelet_check_messages(out: Any) -> None:
    out.write("[kubelet-check] It seems like the kubelet isn't running or healthy.\n")
    out.write("[kubelet-check] The HTTP call equal to 'curl -sSL http://localhost:10248/healthz' failed with error: "
              'Get "http://localhost:10248/healthz": dial tcp [::1]:10248: connect: connection refused.\n')  # fmt: skip


def phase(name: str, fn: Callable[[], None]) -> None:
    try:
        fn()
    except Fail as e:
        raise Fail(f"error execution phase {name}: {e.message}", e.code) from e
    except (Unreachable, ApiError) as e:
        raise Fail(
            f"error execution phase {name}: {getattr(e, 'message', None) or getattr(e, 'reason', e)}"
        ) from e


def post_obj(client: ApiClient, obj: dict) -> None:
    g, v = group_of(obj["apiVersion"])
    plural = next(r[3] for r in BUILTIN_RESOURCES if r[0] == g and r[2] == obj["kind"])
    client.call("POST", res_path(g, v, plural, obj["metadata"].get("namespace")), obj)


def dump(doc: Any) -> str:
    return yaml.safe_dump(doc, default_flow_style=False)


def _init_node(cfg: InitConfig, nr: dict, ignore: set[str], skip: set[str], out: TextIO) -> None:
    def preflight() -> None:
        out.write("[preflight] Running pre-flight checks\n")
        out.flush()
        root_check(ignore)
        run_checks(select(INIT, Ctx.for_init(cfg)), ignore)
        out.write("[preflight] Pulling images required for setting up a Kubernetes cluster\n")
        out.write(
            "[preflight] This might take a minute or two, depending on the speed of your internet connection\n"
        )
        out.write(
            "[preflight] You can also perform this action in beforehand using 'kubeadm config images pull'\n"
        )
        out.flush()
        run_checks(select(PULL, Ctx.for_init(cfg, control_plane_images(cfg))), ignore)

    if "preflight" not in skip:
        phase("preflight", preflight)
    phase("certs", lambda: write_pki(cfg, out))

    def kubeconfigs() -> None:
        out.write(f'[kubeconfig] Using kubeconfig folder "{K8S}"\n')
        for fname, user, orgs in (("admin.conf", "kubernetes-admin", ["system:masters"]),
                                  ("kubelet.conf", f"system:node:{cfg.node_name}", ["system:nodes"]),
                                  ("controller-manager.conf", "system:kube-controller-manager", []),
                                  ("scheduler.conf", "system:kube-scheduler", [])):  # fmt: skip
            out.write(f'[kubeconfig] Writing "{fname}" kubeconfig file\n')
            write_file(hp(f"{K8S}/{fname}"), client_kubeconfig(cfg, user, orgs), 0o600)

    phase("kubeconfig", kubeconfigs)

    def kubelet_start() -> None:
        systemctl("stop", "kubelet")  # like TryStopKubelet: no race while the files change
        env = kubeadm_flags_env(cfg.cri_socket, cfg.repo, cfg.node_name, nr.get("kubeletExtraArgs") or {})
        out.write(
            f'[kubelet-start] Writing kubelet environment file with flags to file "{KUBELET_DIR}/kubeadm-flags.env"\n'
        )
        write_file(hp(f"{KUBELET_DIR}/kubeadm-flags.env"), env)
        out.write(f'[kubelet-start] Writing kubelet configuration to file "{KUBELET_DIR}/config.yaml"\n')
        write_file(hp(f"{KUBELET_DIR}/config.yaml"), dump(kubelet_config_doc(cfg)))
        out.write("[kubelet-start] Starting the kubelet\n")
        rc, msg = systemctl("restart", "kubelet")
        if rc:
            out.write(f"[kubelet-start] WARNING: unable to start the kubelet service: [{msg.strip()}]\n"
                      "[kubelet-start] Please ensure kubelet is reloaded and running manually.\n")  # fmt: skip

    phase("kubelet-start", kubelet_start)

    def control_plane() -> None:
        write_file(hp(f"/etc/systemd/system/{APISERVER_UNIT}"), apiserver_unit(self_path()))
        systemctl("daemon-reload")
        out.write(f'[control-plane] Using manifest folder "{MANIFESTS}"\n')
        pods = control_plane_manifests(cfg)
        for n in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
            out.write(f'[control-plane] Creating static Pod manifest for "{n}"\n')
            write_file(hp(f"{MANIFESTS}/{n}.yaml"), dump(pods[n]), 0o600)
        if "etcd" in pods:
            out.write(f'[etcd] Creating static Pod manifest for local etcd in "{MANIFESTS}"\n')
            write_file(hp(f"{MANIFESTS}/etcd.yaml"), dump(pods["etcd"]), 0o600)
            os.makedirs(hp(cfg.cluster["etcd"]["local"]["dataDir"] + "/member"), mode=0o700, exist_ok=True)

    phase("control-plane", control_plane)


def _init_wait_and_upload(cfg: InitConfig, client: ApiClient, out: TextIO) -> None:
    def wait_control_plane() -> None:
        limit = parse_duration(cfg.cluster["apiServer"]["timeoutForControlPlane"])
        out.write(f'[wait-control-plane] Waiting for the kubelet to boot up the control plane as static Pods from '
                  f'directory "{MANIFESTS}". This can take up to {format_duration(limit)}\n')  # fmt: skip
        out.flush()
        start, warned = now(), False
        while now() - start < limit:
            try:
                if client.raw("GET", "/healthz")[0] == 200:
                    out.write(
                        f"[apiclient] All control plane components are healthy after {now() - start:.6f} seconds\n"
                    )
                    return
            except Unreachable:
                pass
            if not warned and now() - start > 40:
                warned = True
                out.write("[kubelet-check] Initial timeout of 40s passed.\n")
                if not kubelet_healthy():
                    kubelet_check_messages(out)
                out.flush()
            time.sleep(0.5)
        out.write(KUBELET_TROUBLE)
        raise Fail("couldn't initialize a Kubernetes cluster")

    phase("wait-control-plane", wait_control_plane)

    def upload_config() -> None:
        out.write(
            '[upload-config] Storing the configuration used in ConfigMap "kubeadm-config" in the "kube-system" Namespace\n'
        )
        post_obj(client, {"apiVersion": "v1", "kind": "ConfigMap",
                          "metadata": {"name": "kubeadm-config", "namespace": "kube-system"},
                          "data": {"ClusterConfiguration": dump(cfg.cluster)}})  # fmt: skip
        out.write(f'[kubelet] Creating a ConfigMap "{KUBELET_CONFIG_CM}" in namespace kube-system with the '
                  "configuration for the kubelets in the cluster\n")  # fmt: skip
        if not DOCKERSHIM_REMOVED:  # 1.24: the unversioned name, no note
            out.write(f'NOTE: The "{KUBELET_CONFIG_CM}" naming of the kubelet ConfigMap is deprecated. Once the '
                      "UnversionedKubeletConfigMap feature gate graduates to Beta the default name will become just "
                      '"kubelet-config". Kubeadm upgrade will handle this transition transparently.\n')  # fmt: skip
        post_obj(client, {"apiVersion": "v1", "kind": "ConfigMap",
                          "metadata": {"name": KUBELET_CONFIG_CM, "namespace": "kube-system"},
                          "data": {"kubelet": dump(kubelet_config_doc(cfg))}})  # fmt: skip
        out.write("[upload-certs] Skipping phase. Please see --upload-certs\n")

    phase("upload-config", upload_config)


def _init_mark_control_plane(cfg: InitConfig, nr: dict, client: ApiClient, out: TextIO) -> None:
    def mark_control_plane() -> None:
        labels = [
            "node-role.kubernetes.io/control-plane",
            "node.kubernetes.io/exclude-from-external-load-balancers",
        ]
        if not DOCKERSHIM_REMOVED:  # 1.24 (KEP-2067 stage 2) no longer writes the "master" label
            labels.insert(0, "node-role.kubernetes.io/master")
        taints = nr["taints"] or []
        shown = " ".join(f"{x}(deprecated)" if x.endswith("/master") else x for x in labels)
        out.write(f"[mark-control-plane] Marking the node {cfg.node_name} as control-plane by adding the labels: "
                  f"[{shown}]\n")  # fmt: skip
        if taints:
            ts = " ".join(
                f"{t['key']}{'=' + t['value'] if t.get('value') else ''}:{t['effect']}" for t in taints
            )
            out.write(
                f"[mark-control-plane] Marking the node {cfg.node_name} as control-plane by adding the taints [{ts}]\n"
            )
        out.flush()
        path = res_path("", "v1", "nodes", name=cfg.node_name)

        def patch() -> bool:  # the kubelet registers the Node; kubeadm only patches it
            node = client.get(path)
            md = node["metadata"]
            md.setdefault("labels", {}).update({k: "" for k in labels})
            md.setdefault("annotations", {})["kubeadm.alpha.kubernetes.io/cri-socket"] = cfg.cri_socket
            have = node.setdefault("spec", {}).setdefault("taints", [])
            for t in taints:
                if not any(h["key"] == t["key"] and h["effect"] == t["effect"] for h in have):
                    have.append(t)
            client.call("PUT", path, node)
            return True

        if not wait_for(patch, 120, 0.5):
            raise Fail("timed out waiting for the condition")

    phase("mark-control-plane", mark_control_plane)


def _init_tokens_and_addons(
    cfg: InitConfig, client: ApiClient, tokens: list[str], skip: set[str], out: TextIO
) -> None:
    def bootstrap_token() -> None:
        out.write(f"[bootstrap-token] Using token: {tokens[0]}\n")
        out.write("[bootstrap-token] Configuring bootstrap tokens, cluster-info ConfigMap, RBAC Roles\n")
        for bt in cfg.init["bootstrapTokens"]:
            post_obj(client, token_secret_object(bt["token"], parse_duration(str(bt["ttl"])),
                                                 bt.get("description", ""), ",".join(bt["groups"])))  # fmt: skip
        for line in ("allow Node Bootstrap tokens to get nodes",
                     "allow Node Bootstrap tokens to post CSRs in order for nodes to get long term certificate credentials",
                     "allow the csrapprover controller automatically approve CSRs from a Node Bootstrap Token",
                     "allow certificate rotation for all node client certificates in the cluster"):  # fmt: skip
            out.write(f"[bootstrap-token] configured RBAC rules to {line}\n")
        out.write('[bootstrap-token] Creating the "cluster-info" ConfigMap in the "kube-public" namespace\n')
        ca = read_text(hp(f"{PKI}/ca.crt")) or ""
        post_obj(client, {"apiVersion": "v1", "kind": "ConfigMap",
                          "metadata": {"name": "cluster-info", "namespace": "kube-public"},
                          "data": {"kubeconfig": cluster_info_kubeconfig(f"https://{cfg.endpoint}", ca)}})  # fmt: skip

    phase("bootstrap-token", bootstrap_token)
    out.write(
        f'[kubelet-finalize] Updating "{K8S}/kubelet.conf" to point to a rotatable kubelet client certificate and key\n'
    )

    def addons() -> None:
        for obj in addon_objects(cfg):
            with contextlib.suppress(ApiError):
                post_obj(client, obj)
        if "addon/coredns" not in skip:
            out.write("[addons] Applied essential addon: CoreDNS\n")
        if "addon/kube-proxy" not in skip:
            out.write("[addons] Applied essential addon: kube-proxy\n")

    phase("addons", addons)


def cmd_kubeadm_init(argv: list[str]) -> int:
    flags, _ = parse_flags(argv, INIT_FLAGS)
    if flags.get("config"):
        mixed = sorted(k for k in flags if k not in INIT_MIXABLE)
        if mixed:
            raise Fail(f"can not mix '--config' with arguments [{' '.join(mixed)}]")
    cfg = load_init_config(flags.get("config"), flags)
    nr = cfg.init["nodeRegistration"]
    ignore = parse_ignore(flags.get("ignore-preflight-errors", []), nr.get("ignorePreflightErrors"))
    skip = {s for v in flags.get("skip-phases", []) for s in v.split(",")} | set(
        cfg.init.get("skipPhases") or []
    )
    out = sys.stdout
    out.write(f"[init] Using Kubernetes version: {cfg.version}\n")

    _init_node(cfg, nr, ignore, skip, out)
    client = admin_client()

    _init_wait_and_upload(cfg, client, out)

    _init_mark_control_plane(cfg, nr, client, out)
    tokens = [bt["token"] for bt in cfg.init["bootstrapTokens"]]

    _init_tokens_and_addons(cfg, client, tokens, skip, out)
    out.write(INIT_SUCCESS)
    if not flags.get("skip-token-print"):
        out.write(join_command(cfg.endpoint, tokens[0], read_text(hp(f"{PKI}/ca.crt")) or "", False) + "\n")
    return 0


INIT_SUCCESS = """
Your Kubernetes control-plane has initialized successfully!

To start using your cluster, you need to run the following as a regular user:

  mkdir -p $HOME/.kube
  sudo cp -i /etc/kubernetes/admin.conf $HOME/.kube/config
  sudo chown $(id -u):$(id -g) $HOME/.kube/config

Alternatively, if you are the root user, you can run:

  export KUBECONFIG=/etc/kubernetes/admin.conf

You should now deploy a pod network to the cluster.
Run "kubectl apply -f [podnetwork].yaml" with one of the options listed at:
  https://kubernetes.io/docs/concepts/cluster-administration/addons/

Then you can join any number of worker nodes by running the following on each as root:

"""


def addon_objects(cfg: InitConfig) -> list[dict]:
    """CoreDNS and kube-proxy as API objects (nothing runs them: no pods in the stand-in)."""
    dns_img = control_plane_images(cfg)[-1]
    proxy_img = f"{cfg.repo}/kube-proxy:{cfg.version}"
    ks = {"namespace": "kube-system"}
    net = cfg.cluster["networking"]
    dns_lbl = {"k8s-app": "kube-dns"}
    proxy_cfg = cfg.kube_proxy or {"apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
                                   "clusterCIDR": net.get("podSubnet", ""), "mode": ""}  # fmt: skip
    corefile = (f".:53 {{\n    errors\n    health\n    kubernetes {net['dnsDomain']} in-addr.arpa ip6.arpa {{\n"
                "       pods insecure\n       fallthrough in-addr.arpa ip6.arpa\n    }\n    forward . /etc/resolv.conf\n"
                "    cache 30\n    loop\n    reload\n    loadbalance\n}\n")  # fmt: skip
    ports = [{"name": "dns", "port": 53, "protocol": "UDP"}, {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
             {"name": "metrics", "port": 9153, "protocol": "TCP"}]  # fmt: skip
    dns_tpl = {"metadata": {"labels": dns_lbl},
               "spec": {"containers": [{"name": "coredns", "image": dns_img}], "serviceAccountName": "coredns",
                        "priorityClassName": "system-cluster-critical",
                        "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"},
                                        {"effect": "NoSchedule", "key": "node-role.kubernetes.io/master"}]}}  # fmt: skip
    proxy_tpl = {"metadata": {"labels": {"k8s-app": "kube-proxy"}},
                 "spec": {"containers": [{"name": "kube-proxy", "image": proxy_img}], "hostNetwork": True,
                          "tolerations": [{"operator": "Exists"}], "serviceAccountName": "kube-proxy",
                          "nodeSelector": {"kubernetes.io/os": "linux"}}}  # fmt: skip
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "coredns", **ks}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "coredns", **ks}, "data": {"Corefile": corefile}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "coredns", "labels": dns_lbl, **ks},
         "spec": {"replicas": 2, "selector": {"matchLabels": dns_lbl}, "template": dns_tpl}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "kube-dns", "labels": dns_lbl, **ks},
         "spec": {"clusterIP": first_ip(net["serviceSubnet"], 10), "selector": dns_lbl, "ports": ports,
                  "type": "ClusterIP"}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "kube-proxy", **ks}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kube-proxy", **ks},
         "data": {"config.conf": dump(proxy_cfg)}},
        {"apiVersion": "apps/v1", "kind": "DaemonSet",
         "metadata": {"name": "kube-proxy", "labels": {"k8s-app": "kube-proxy"}, **ks},
         "spec": {"selector": {"matchLabels": {"k8s-app": "kube-proxy"}}, "template": proxy_tpl}},
    ]  # fmt: skip
