"""What kubeadm writes: kubelet config, static pod manifests, PKI, kubeconfigs."""

from __future__ import annotations

import ipaddress
import os
import tempfile
from typing import Any

import yaml

from .client import kubeconfig
from .config import InitConfig, control_plane_images
from .pki import _openssl, gen_key, make_ca, make_cert
from .util import (
    DOCKERSHIM_REMOVED,
    PAUSE_VERSION,
    VERSION,
    Fail,
    b64,
    hostname,
    hp,
    minor_of,
    read_text,
    run,
    write_file,
)

# --------------------------------------------------------------------------- kubeadm: files it writes

K8S = "/etc/kubernetes"
PKI = "/etc/kubernetes/pki"
MANIFESTS = "/etc/kubernetes/manifests"
KUBELET_DIR = "/var/lib/kubelet"
ETCD_MANIFEST = f"{MANIFESTS}/etcd.yaml"


def etcd_data_dir() -> str:
    """etcd's data dir on the host (unprefixed): the etcd manifest's --data-dir, through its
    volumeMount to that mount's hostPath, as etcd in its pod sees the host (kubeadm 1.23's
    getEtcdDataDir reads the hostPath too). Fail: no manifest, or one without a --data-dir."""
    text = read_text(hp(ETCD_MANIFEST))
    if text is None:
        raise Fail(f"open {ETCD_MANIFEST}: no such file or directory")
    try:
        spec = yaml.safe_load(text)["spec"]
        container = spec["containers"][0]
        data = next(a.split("=", 1)[1] for a in container["command"] if a.startswith("--data-dir="))
        vols = {v["name"]: v for v in spec.get("volumes") or []}
        for m in container.get("volumeMounts") or []:
            mp = m["mountPath"].rstrip("/")
            if (data == mp or data.startswith(mp + "/")) and "hostPath" in vols.get(m["name"], {}):
                data = vols[m["name"]]["hostPath"]["path"].rstrip("/") + data[len(mp) :]
                break
    except (yaml.YAMLError, KeyError, IndexError, TypeError, StopIteration, AttributeError) as e:
        raise Fail(f"static pod manifest {ETCD_MANIFEST} is invalid: no --data-dir ({e!r})") from e
    return data


def legacy_kubelet_config_cm(version: str) -> str:
    """kubelet-config-1.23: the ConfigMap name before UnversionedKubeletConfigMap (on from 1.24)."""
    major, minor = minor_of(version)
    return f"kubelet-config-{major}.{minor}"


# What this kubeadm writes (init, upgrade apply) and reads first (join, upgrade node).
KUBELET_CONFIG_CM = "kubelet-config" if DOCKERSHIM_REMOVED else legacy_kubelet_config_cm(VERSION)


def first_ip(cidr: str, n: int) -> str:
    net = ipaddress.ip_network(cidr.split(",")[0].strip(), strict=False)
    return str(net.network_address + n)


def kubelet_config_doc(cfg: InitConfig) -> dict:
    doc = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"cacheTTL": "0s", "enabled": True},
                           "x509": {"clientCAFile": f"{PKI}/ca.crt"}},
        "authorization": {"mode": "Webhook", "webhook": {"cacheAuthorizedTTL": "0s", "cacheUnauthorizedTTL": "0s"}},
        "cgroupDriver": "systemd",  # kubeadm >= 1.22 default
        "clusterDNS": [first_ip(cfg.cluster["networking"]["serviceSubnet"], 10)],
        "clusterDomain": cfg.cluster["networking"]["dnsDomain"],
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        "rotateCertificates": True,
        "staticPodPath": MANIFESTS,
        "resolvConf": "/etc/resolv.conf",
        "nodeStatusUpdateFrequency": "0s",
    }  # fmt: skip
    doc.update(cfg.kubelet or {})
    return doc


def kubeadm_flags_env(cri: str, repo: str, node: str, extra: dict[str, str]) -> str:
    flags = {}
    if "dockershim" not in cri:
        flags["container-runtime"] = "remote"
        flags["container-runtime-endpoint"] = cri
    flags["pod-infra-container-image"] = f"{repo}/pause:{PAUSE_VERSION}"
    if node != hostname():
        flags["hostname-override"] = node
    flags.update(extra or {})
    return 'KUBELET_KUBEADM_ARGS="' + " ".join(f"--{k}={v}" for k, v in flags.items()) + '"\n'


def static_pod(name: str, image: str, command: list[str], host_paths: dict[str, str], port: int,
               annotations: dict[str, str] | None = None) -> dict:  # fmt: skip
    vols = [{"hostPath": {"path": p, "type": "DirectoryOrCreate"}, "name": n} for n, p in host_paths.items()]
    mounts = [{"mountPath": p, "name": n, "readOnly": True} for n, p in host_paths.items()]
    etcd = name == "etcd"
    probe = {"failureThreshold": 8, "httpGet": {"host": "127.0.0.1", "path": "/health" if etcd else "/healthz",
             "port": port, "scheme": "HTTP" if etcd else "HTTPS"},
             "initialDelaySeconds": 10, "periodSeconds": 10, "timeoutSeconds": 15}  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"annotations": annotations or {}, "creationTimestamp": None,
                     "labels": {"component": name, "tier": "control-plane"}, "name": name,
                     "namespace": "kube-system"},
        "spec": {"containers": [{"command": command, "image": image, "imagePullPolicy": "IfNotPresent",
                                 "livenessProbe": probe, "name": name, "resources": {"requests": {"cpu": "250m"}},
                                 "startupProbe": dict(probe, failureThreshold=24), "volumeMounts": mounts}],
                 "hostNetwork": True, "priorityClassName": "system-node-critical",
                 "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}}, "volumes": vols},
        "status": {},
    }  # fmt: skip


def flags_list(binary: str, defaults: dict[str, str], extra: dict[str, str] | None) -> list[str]:
    merged = dict(defaults)
    merged.update({k: str(v) for k, v in (extra or {}).items()})
    return [binary] + [f"--{k}={v}" for k, v in sorted(merged.items())]


def control_plane_manifests(cfg: InitConfig) -> dict[str, dict]:
    c, repo, tag = cfg.cluster, cfg.repo, cfg.version
    net = c["networking"]
    certs = {"ca-certs": "/etc/ssl/certs", "etc-ca-certificates": "/etc/ca-certificates", "k8s-certs": PKI,
             "usr-local-share-ca-certificates": "/usr/local/share/ca-certificates",
             "usr-share-ca-certificates": "/usr/share/ca-certificates"}  # fmt: skip
    api = {
        "advertise-address": cfg.advertise, "allow-privileged": "true", "authorization-mode": "Node,RBAC",
        "client-ca-file": f"{PKI}/ca.crt", "enable-admission-plugins": "NodeRestriction",
        "enable-bootstrap-token-auth": "true", "etcd-cafile": f"{PKI}/etcd/ca.crt",
        "etcd-certfile": f"{PKI}/apiserver-etcd-client.crt", "etcd-keyfile": f"{PKI}/apiserver-etcd-client.key",
        "etcd-servers": "https://127.0.0.1:2379",
        "kubelet-client-certificate": f"{PKI}/apiserver-kubelet-client.crt",
        "kubelet-client-key": f"{PKI}/apiserver-kubelet-client.key",
        "kubelet-preferred-address-types": "InternalIP,ExternalIP,Hostname",
        "proxy-client-cert-file": f"{PKI}/front-proxy-client.crt",
        "proxy-client-key-file": f"{PKI}/front-proxy-client.key",
        "requestheader-allowed-names": "front-proxy-client",
        "requestheader-client-ca-file": f"{PKI}/front-proxy-ca.crt",
        "requestheader-extra-headers-prefix": "X-Remote-Extra-", "requestheader-group-headers": "X-Remote-Group",
        "requestheader-username-headers": "X-Remote-User", "secure-port": str(cfg.port),
        "service-account-issuer": f"https://kubernetes.default.svc.{net['dnsDomain']}",
        "service-account-key-file": f"{PKI}/sa.pub", "service-account-signing-key-file": f"{PKI}/sa.key",
        "service-cluster-ip-range": net["serviceSubnet"], "tls-cert-file": f"{PKI}/apiserver.crt",
        "tls-private-key-file": f"{PKI}/apiserver.key",
    }  # fmt: skip
    cm = {
        "authentication-kubeconfig": f"{K8S}/controller-manager.conf",
        "authorization-kubeconfig": f"{K8S}/controller-manager.conf", "bind-address": "127.0.0.1",
        "client-ca-file": f"{PKI}/ca.crt", "cluster-name": c["clusterName"],
        "cluster-signing-cert-file": f"{PKI}/ca.crt", "cluster-signing-key-file": f"{PKI}/ca.key",
        "controllers": "*,bootstrapsigner,tokencleaner", "kubeconfig": f"{K8S}/controller-manager.conf",
        "leader-elect": "true", "requestheader-client-ca-file": f"{PKI}/front-proxy-ca.crt",
        "root-ca-file": f"{PKI}/ca.crt", "service-account-private-key-file": f"{PKI}/sa.key",
        "service-cluster-ip-range": net["serviceSubnet"], "use-service-account-credentials": "true",
    }  # fmt: skip
    if net.get("podSubnet"):
        cm.update({"allocate-node-cidrs": "true", "cluster-cidr": net["podSubnet"]})
    sched = {"authentication-kubeconfig": f"{K8S}/scheduler.conf",
             "authorization-kubeconfig": f"{K8S}/scheduler.conf", "bind-address": "127.0.0.1",
             "kubeconfig": f"{K8S}/scheduler.conf", "leader-elect": "true"}  # fmt: skip
    out = {
        "kube-apiserver": static_pod(
            "kube-apiserver", f"{repo}/kube-apiserver:{tag}",
            flags_list("kube-apiserver", api, c["apiServer"].get("extraArgs")), certs, cfg.port,
            {"kubeadm.kubernetes.io/kube-apiserver.advertise-address.endpoint": f"{cfg.advertise}:{cfg.port}"}),
        "kube-controller-manager": static_pod(
            "kube-controller-manager", f"{repo}/kube-controller-manager:{tag}",
            flags_list("kube-controller-manager", cm, c["controllerManager"].get("extraArgs")),
            dict(certs, kubeconfig=f"{K8S}/controller-manager.conf"), 10257),
        "kube-scheduler": static_pod(
            "kube-scheduler", f"{repo}/kube-scheduler:{tag}",
            flags_list("kube-scheduler", sched, c["scheduler"].get("extraArgs")),
            {"kubeconfig": f"{K8S}/scheduler.conf"}, 10259),
    }  # fmt: skip
    local = (c.get("etcd") or {}).get("local")
    if local is not None:
        img = next(i for i in control_plane_images(cfg) if "/etcd:" in i)
        adv = cfg.advertise
        etcd = {"advertise-client-urls": f"https://{adv}:2379", "cert-file": f"{PKI}/etcd/server.crt",
                "client-cert-auth": "true", "data-dir": local["dataDir"],
                "initial-advertise-peer-urls": f"https://{adv}:2380",
                "initial-cluster": f"{cfg.node_name}=https://{adv}:2380", "key-file": f"{PKI}/etcd/server.key",
                "listen-client-urls": f"https://127.0.0.1:2379,https://{adv}:2379",
                "listen-metrics-urls": "http://127.0.0.1:2381", "listen-peer-urls": f"https://{adv}:2380",
                "name": cfg.node_name, "peer-cert-file": f"{PKI}/etcd/peer.crt",
                "peer-client-cert-auth": "true", "peer-key-file": f"{PKI}/etcd/peer.key",
                "peer-trusted-ca-file": f"{PKI}/etcd/ca.crt", "snapshot-count": "10000",
                "trusted-ca-file": f"{PKI}/etcd/ca.crt"}  # fmt: skip
        out["etcd"] = static_pod("etcd", img, flags_list("etcd", etcd, local.get("extraArgs")),
                                 {"etcd-certs": f"{PKI}/etcd", "etcd-data": local["dataDir"]}, 2381,
                                 {"kubeadm.kubernetes.io/etcd.advertise-client-urls": f"https://{adv}:2379"})  # fmt: skip
    return out


def apiserver_unit(self_path: str) -> str:
    return (
        "# TEST-ONLY (tests/standin): plays the kube-apiserver static pod; the kubelet stand-in starts,\n"
        "# restarts and stops it from /etc/kubernetes/manifests/kube-apiserver.yaml.\n"
        "# After containerd: at shutdown it stops first, and stops etcd's container (etcdpod.stop) while\n"
        "# containerd still answers; stopped beside it, each of those ctr calls waited out its 2 s\n"
        "# connect timeout, and a node took 12 s to power off.\n"
        "[Unit]\nDescription=kube-apiserver stand-in (TEST ONLY)\nAfter=containerd.service\n\n"
        f"[Service]\nExecStart={self_path} __standin-apiserver {MANIFESTS}/kube-apiserver.yaml\n"
        "Restart=on-failure\nRestartSec=2\n"
    )


def _is_ip(s: str) -> bool:
    try:
        ipaddress.ip_address(s.strip("[]"))
        return True
    except ValueError:
        return False


def _ca(pki: str, base: str, cn: str, out: Any) -> tuple[str, str]:
    """kubeadm's certs phase for a CA: one on disk (a master rebuilt from a backup's PKI) is used,
    not made again. Wording: cmd/kubeadm/app/cmd/phases/init/certs.go (runCAPhase), as kubeadm
    1.20 and 1.25 print it in their init logs; the file at v1.23.17 itself is not stored here."""
    crt, key = f"{pki}/{base}.crt", f"{pki}/{base}.key"
    if os.path.exists(crt) and os.path.exists(key):
        out.write(f"[certs] Using existing {base} certificate authority\n")
    else:
        out.write(f'[certs] Generating "{base}" certificate and key\n')
        make_ca(crt, key, cn)
    return crt, key


def _leaf(pki: str, base: str, ca: tuple[str, str], cn: str, out: Any, **kw: Any) -> bool:
    """kubeadm's certs phase for a certificate: one on disk is used when its CA signed it
    (runCertPhase: "Using existing %s certificate and key on disk", as kubeadm 1.20 and 1.25 print
    it; else "[certs] certificate %s not signed by CA certificate %s", read only in a copy of that
    file in another project: not verified upstream). -> whether it was made here."""
    crt, key = f"{pki}/{base}.crt", f"{pki}/{base}.key"
    if os.path.exists(crt) and os.path.exists(key):
        rc, err = run(["openssl", "verify", "-CAfile", ca[0], crt])
        if rc != 0:
            cab = os.path.basename(ca[0])[: -len(".crt")]
            if "/etcd/" in ca[0]:
                cab = "etcd/" + cab
            raise Fail(f"[certs] certificate {base} not signed by CA certificate {cab}: {err.strip()}")
        out.write(f"[certs] Using existing {base} certificate and key on disk\n")
        return False
    out.write(f'[certs] Generating "{base}" certificate and key\n')
    make_cert(crt, key, ca[0], ca[1], cn, **kw)
    return True


def write_pki(cfg: InitConfig, out: Any) -> None:
    pki = hp(PKI)
    os.makedirs(pki, exist_ok=True)
    out.write(f'[certs] Using certificateDir folder "{PKI}"\n')
    ca = _ca(pki, "ca", "kubernetes", out)
    svc_ip = first_ip(cfg.cluster["networking"]["serviceSubnet"], 1)
    dom = cfg.cluster["networking"]["dnsDomain"]
    sans_extra = cfg.cluster["apiServer"].get("certSANs") or []
    dns = ["kubernetes", "kubernetes.default", "kubernetes.default.svc", f"kubernetes.default.svc.{dom}",
           cfg.node_name, *sans_extra]  # fmt: skip
    ips = [svc_ip, cfg.advertise]
    cpe = (cfg.cluster.get("controlPlaneEndpoint") or "").rsplit(":", 1)[0]
    if cpe:
        (ips if _is_ip(cpe) else dns).append(cpe)
    sans = [f"IP:{x}" if _is_ip(x) else f"DNS:{x}" for x in dns + ips]
    if _leaf(pki, "apiserver", ca, "kube-apiserver", out, server=True, client=False, sans=sans):
        out.write(
            f"[certs] apiserver serving cert is signed for DNS names [{' '.join(dns)}] and IPs [{' '.join(ips)}]\n"
        )
    _leaf(pki, "apiserver-kubelet-client", ca, "kube-apiserver-kubelet-client", out, orgs=["system:masters"])
    fp = _ca(pki, "front-proxy-ca", "front-proxy-ca", out)
    _leaf(pki, "front-proxy-client", fp, "front-proxy-client", out)
    if (cfg.cluster.get("etcd") or {}).get("local") is not None:
        ec = _ca(pki, "etcd/ca", "etcd-ca", out)
        esans = ["DNS:localhost", f"DNS:{cfg.node_name}", f"IP:{cfg.advertise}", "IP:127.0.0.1", "IP:::1"]
        for n in ("server", "peer"):
            if _leaf(pki, f"etcd/{n}", ec, cfg.node_name, out, server=True, sans=esans):
                out.write(f"[certs] etcd/{n} serving cert is signed for DNS names [{cfg.node_name} localhost] and "
                          f"IPs [{cfg.advertise} 127.0.0.1 ::1]\n")  # fmt: skip
        _leaf(pki, "etcd/healthcheck-client", ec, "kube-etcd-healthcheck-client", out)
        _leaf(pki, "apiserver-etcd-client", ec, "kube-apiserver-etcd-client", out)
    # cmd/kubeadm/app/phases/certs/certs.go CreateServiceAccountKeyAndPublicKeyFiles: a key on
    # disk is trusted as it is, so the tokens a restored etcd holds stay valid.
    if os.path.exists(f"{pki}/sa.key"):
        out.write('[certs] Using the existing "sa" key\n')
        return
    out.write('[certs] Generating "sa" key and public key\n')
    gen_key(f"{pki}/sa.key")
    write_file(f"{pki}/sa.pub", _openssl(["pkey", "-in", f"{pki}/sa.key", "-pubout"]))


def client_kubeconfig(cfg: InitConfig, user: str, orgs: list[str]) -> str:
    pki = hp(PKI)
    with tempfile.TemporaryDirectory() as td:
        make_cert(f"{td}/c.crt", f"{td}/c.key", f"{pki}/ca.crt", f"{pki}/ca.key", user, orgs)
        cred = {"client-certificate-data": b64(read_text(f"{td}/c.crt") or ""),
                "client-key-data": b64(read_text(f"{td}/c.key") or "")}  # fmt: skip
    return kubeconfig(
        f"https://{cfg.endpoint}", read_text(f"{pki}/ca.crt") or "", user, cred, cfg.cluster["clusterName"]
    )
