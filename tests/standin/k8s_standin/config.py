"""kubeadm's configuration: documents, flags, validation, the control-plane images."""

from __future__ import annotations

import copy
import ipaddress
import json
import os
import re
from typing import Any

import yaml

from .pki import TOKEN_RE, new_token
from .util import (
    COREDNS_VERSION,
    DEFAULT_IMAGE_REPOSITORY,
    DOCKERSHIM_REMOVED,
    ETCD_VERSION,
    KNOWN_CRI_SOCKETS,
    MIN_CONTROL_PLANE,
    PAUSE_VERSION,
    VERSION,
    Fail,
    group_of,
    hostname,
    hp,
    log_klog,
    parse_duration,
    read_text,
    run,
)

# --------------------------------------------------------------------------- kubeadm configuration

KUBEADM_GROUP = "kubeadm.k8s.io"
KUBEADM_VERSIONS = ("v1beta2", "v1beta3")
OLD_KUBEADM_APIS = {
    "kubeadm.k8s.io/v1alpha1": "v1.11",
    "kubeadm.k8s.io/v1alpha2": "v1.12",
    "kubeadm.k8s.io/v1alpha3": "v1.14",
    "kubeadm.k8s.io/v1beta1": "v1.15",
}
KNOWN_FIELDS = {
    "InitConfiguration": {"bootstrapTokens", "nodeRegistration", "localAPIEndpoint", "certificateKey",
                          "skipPhases", "patches"},
    "ClusterConfiguration": {"etcd", "networking", "kubernetesVersion", "controlPlaneEndpoint", "apiServer",
                             "controllerManager", "scheduler", "dns", "certificatesDir", "imageRepository",
                             "featureGates", "clusterName", "useHyperKubeImage"},
    "JoinConfiguration": {"nodeRegistration", "caCertPath", "discovery", "controlPlane", "skipPhases", "patches"},
}  # fmt: skip
COMPONENT_GROUPS = {
    "kubelet.config.k8s.io": "KubeletConfiguration",
    "kubeproxy.config.k8s.io": "KubeProxyConfiguration",
}
DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1123_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


def field_invalid(path: str, value: Any, msg: str) -> str:
    return f"{path}: Invalid value: {json.dumps(value)}: {msg}"


def split_documents(text: str) -> list[dict]:
    """kubeadm's SplitYAMLDocuments + TypeMeta checks."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f"line {mark.line + 1}: " if mark else ""
        problem = getattr(e, "problem", None) or str(e)
        raise Fail(f"error converting YAML to JSON: yaml: {line}{problem}") from e
    errs, kinds = [], set()
    for d in docs:
        if not isinstance(d, dict):
            raise Fail("error unmarshaling JSON: while decoding JSON: json: cannot unmarshal string into Go value "
                       "of type struct { APIVersion string \"json:\\\"apiVersion,omitempty\\\"\"; Kind string "
                       "\"json:\\\"kind,omitempty\\\"\" }")  # fmt: skip
        if not d.get("apiVersion") or not d.get("kind"):
            errs.append(
                "invalid configuration: kind and apiVersion is mandatory information that needs to be specified"
            )
            continue
        if d["kind"] in kinds:
            errs.append(f'invalid configuration: kind "{d["kind"]}" is specified twice in YAML file')
            continue
        kinds.add(d["kind"])
    if errs:
        raise Fail("[" + ", ".join(errs) + "]" if len(errs) > 1 else errs[0])
    return docs


def classify_documents(docs: list[dict], wanted: tuple[str, ...]) -> dict[str, dict]:
    """documentMapTo*Configuration: version gate, strict-field warnings, ignored kinds."""
    found: dict[str, dict] = {}
    for d in docs:
        api, kind = d["apiVersion"], d["kind"]
        if api in OLD_KUBEADM_APIS:
            raise Fail(f'your configuration file uses an old API spec: "{api}". Please use kubeadm '
                       f"{OLD_KUBEADM_APIS[api]} instead and run 'kubeadm config migrate --old-config old.yaml "
                       "--new-config new.yaml', which will write the new, similar spec using a newer API version.")  # fmt: skip
        group, version = group_of(api)
        gvk = f'schema.GroupVersionKind{{Group:"{group}", Version:"{version}", Kind:"{kind}"}}'
        if group == KUBEADM_GROUP and version in KUBEADM_VERSIONS and kind in KNOWN_FIELDS:
            for f in sorted(set(d) - KNOWN_FIELDS[kind] - {"apiVersion", "kind"}):
                log_klog("W", "strict.go:55", f"error unmarshaling configuration {gvk}: error unmarshaling JSON: "
                         f'while decoding JSON: json: unknown field "{f}"')  # fmt: skip
            if kind in wanted:
                found[kind] = d
                continue
        elif COMPONENT_GROUPS.get(group) == kind and version in ("v1beta1", "v1alpha1"):
            found[kind] = d
            continue
        if group not in COMPONENT_GROUPS:
            log_klog("W", "utils.go:69", f"[config] WARNING: Ignored YAML document with GroupVersionKind "
                     f"{group}/{version}, Kind={kind}")  # fmt: skip
    return found


def parse_version(v: str) -> tuple[int, int, int] | None:
    m = re.match(r"^v?(\d+)\.(\d+)\.(\d+)(?:[-+].*)?$", v or "")
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def normalize_k8s_version(v: str) -> str:
    if v in ("", "stable", "stable-1", "latest", "stable-1.23"):
        if v:  # offline: real kubeadm falls back to its own version after failing to fetch the label
            log_klog("W", "version.go:104", f'could not fetch a Kubernetes version from the internet: unable to get '
                     f'URL "https://dl.k8s.io/release/{v}.txt": Get "https://dl.k8s.io/release/{v}.txt": dial tcp: '
                     "lookup dl.k8s.io: Temporary failure in name resolution")  # fmt: skip
            log_klog("W", "version.go:105", f"falling back to the local client version: {VERSION}")
        return VERSION
    pv = parse_version(v)
    if pv is None:
        raise Fail(
            f'version "{v}" doesn\'t match patterns for neither semantic version nor labels (stable, latest, ...)'
        )
    norm = "v" + v.lstrip("v")
    if pv < MIN_CONTROL_PLANE:
        raise Fail("this version of kubeadm only supports deploying clusters with the control plane version >= "
                   f"{'.'.join(map(str, MIN_CONTROL_PLANE))}. Current version: {norm}")  # fmt: skip
    return norm


def default_advertise_address() -> str:
    """ChooseHostInterface: the IPv4 address of the default-route interface."""
    for line in (read_text("/proc/net/route") or "").splitlines()[1:]:
        f = line.split()
        if len(f) > 2 and f[1] == "00000000":
            rc, out = run(["ip", "-4", "-o", "addr", "show", "dev", f[0]])
            m = re.search(r"inet (\d+\.\d+\.\d+\.\d+)/", out) if rc == 0 else None
            if m:
                return m.group(1)
    raise Fail("unable to select an IP from default routes.")


def detect_cri_socket() -> str:
    found = [sock for path, sock in KNOWN_CRI_SOCKETS.items() if os.path.exists(hp(path))]
    if len(found) > 1 and "/var/run/dockershim.sock" in found:
        return "/var/run/dockershim.sock"  # 1.23: docker + containerd -> dockershim wins
    if len(found) > 1:
        raise Fail(f"Found multiple CRI endpoints on the host. Please define which one do you wish to use by setting "
                   f"the 'criSocket' field in the kubeadm configuration file: {', '.join(found)}")  # fmt: skip
    return found[0] if found else "/var/run/dockershim.sock"


class InitConfig:
    """The merged, defaulted and validated Init+Cluster(+Kubelet) configuration."""

    def __init__(self) -> None:
        self.init: dict = {}
        self.cluster: dict = {}
        self.kubelet: dict | None = None
        self.kube_proxy: dict | None = None

    @property
    def version(self) -> str:
        return self.cluster["kubernetesVersion"]

    @property
    def repo(self) -> str:
        return self.cluster["imageRepository"]

    @property
    def node_name(self) -> str:
        return self.init["nodeRegistration"]["name"]

    @property
    def cri_socket(self) -> str:
        return self.init["nodeRegistration"]["criSocket"]

    @property
    def advertise(self) -> str:
        return self.init["localAPIEndpoint"]["advertiseAddress"]

    @property
    def port(self) -> int:
        return int(self.init["localAPIEndpoint"]["bindPort"])

    @property
    def endpoint(self) -> str:
        cpe = self.cluster.get("controlPlaneEndpoint") or ""
        if cpe:
            return cpe if re.search(r":\d+$", cpe) else f"{cpe}:{self.port}"
        host = f"[{self.advertise}]" if ":" in self.advertise else self.advertise
        return f"{host}:{self.port}"


# `kubeadm init` flags -> (ClusterConfiguration | InitConfiguration, field path), as kubeadm maps them.
INIT_FLAG_FIELDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "kubernetes-version": ("cluster", ("kubernetesVersion",)),
    "image-repository": ("cluster", ("imageRepository",)),
    "pod-network-cidr": ("cluster", ("networking", "podSubnet")),
    "service-cidr": ("cluster", ("networking", "serviceSubnet")),
    "service-dns-domain": ("cluster", ("networking", "dnsDomain")),
    "control-plane-endpoint": ("cluster", ("controlPlaneEndpoint",)),
    "apiserver-advertise-address": ("init", ("localAPIEndpoint", "advertiseAddress")),
    "apiserver-bind-port": ("init", ("localAPIEndpoint", "bindPort")),
    "node-name": ("init", ("nodeRegistration", "name")),
    "cri-socket": ("init", ("nodeRegistration", "criSocket")),
}


def load_init_config(path: str | None, flags: dict[str, Any], resolve_host: bool = True) -> InitConfig:
    cfg = InitConfig()
    if path:
        text = read_text(path)
        if text is None:
            raise Fail(f'unable to read config from "{path}" : open {path}: no such file or directory')
        docs = classify_documents(split_documents(text), ("InitConfiguration", "ClusterConfiguration"))
        cfg.init = copy.deepcopy(docs.get("InitConfiguration") or {})
        cfg.cluster = copy.deepcopy(docs.get("ClusterConfiguration") or {})
        cfg.kubelet = copy.deepcopy(docs.get("KubeletConfiguration"))
        cfg.kube_proxy = copy.deepcopy(docs.get("KubeProxyConfiguration"))
    c, i = cfg.cluster, cfg.init
    # flags (only without --config; mixing is refused by the caller)
    for flag, (doc, fields) in INIT_FLAG_FIELDS.items():
        if flags.get(flag):
            target = c if doc == "cluster" else i
            for key in fields[:-1]:
                target = target.setdefault(key, {})
            target[fields[-1]] = flags[flag]
    if flags.get("token") or flags.get("token-ttl"):
        bt = (i.get("bootstrapTokens") or [{}])[0]
        if flags.get("token"):
            bt["token"] = flags["token"]
        if flags.get("token-ttl"):
            bt["ttl"] = flags["token-ttl"]
        i["bootstrapTokens"] = [bt]
    # defaults (SetDefaults_*)
    c.setdefault("apiVersion", f"{KUBEADM_GROUP}/v1beta3")
    c.setdefault("kind", "ClusterConfiguration")
    c["kubernetesVersion"] = normalize_k8s_version(str(c.get("kubernetesVersion") or "stable-1"))
    c["imageRepository"] = c.get("imageRepository") or DEFAULT_IMAGE_REPOSITORY
    c.setdefault("certificatesDir", "/etc/kubernetes/pki")
    c.setdefault("clusterName", "kubernetes")
    c.setdefault("controlPlaneEndpoint", "")
    c["dns"] = c.get("dns") or {}
    c["apiServer"] = c.get("apiServer") or {}
    c["apiServer"].setdefault("timeoutForControlPlane", "4m0s")
    c["controllerManager"] = c.get("controllerManager") or {}
    c["scheduler"] = c.get("scheduler") or {}
    etcd = c.setdefault("etcd", {}) or {}
    c["etcd"] = etcd
    if "external" not in etcd:
        etcd["local"] = etcd.get("local") or {}
        etcd["local"].setdefault("dataDir", "/var/lib/etcd")
    net = c.setdefault("networking", {}) or {}
    c["networking"] = net
    net.setdefault("dnsDomain", "cluster.local")
    net.setdefault("serviceSubnet", "10.96.0.0/12")
    i.setdefault("apiVersion", f"{KUBEADM_GROUP}/v1beta3")
    i.setdefault("kind", "InitConfiguration")
    bts = i.get("bootstrapTokens") or [{}]
    for bt in bts:
        bt.setdefault("groups", ["system:bootstrappers:kubeadm:default-node-token"])
        bt.setdefault("ttl", "24h0m0s")
        bt.setdefault("usages", ["signing", "authentication"])
        bt.setdefault("token", new_token())
    i["bootstrapTokens"] = bts
    lep = i.setdefault("localAPIEndpoint", {}) or {}
    i["localAPIEndpoint"] = lep
    lep.setdefault("bindPort", 6443)
    nr = i.setdefault("nodeRegistration", {}) or {}
    i["nodeRegistration"] = nr
    nr.setdefault("imagePullPolicy", "IfNotPresent")
    if not nr.get("name"):
        nr["name"] = hostname()
    if "taints" not in nr:
        nr["taints"] = [{"effect": "NoSchedule", "key": "node-role.kubernetes.io/master"}]
        if DOCKERSHIM_REMOVED:  # 1.24 taints new control planes with both (KEP-2067 stage 2)
            nr["taints"].append({"effect": "NoSchedule", "key": "node-role.kubernetes.io/control-plane"})
    if not nr.get("criSocket"):
        nr["criSocket"] = detect_cri_socket()
    if not lep.get("advertiseAddress") and resolve_host:
        lep["advertiseAddress"] = default_advertise_address()
    validate_init_config(cfg)
    return cfg


def validate_init_config(cfg: InitConfig) -> None:
    errs: list[str] = []
    c, i = cfg.cluster, cfg.init
    net = c["networking"]
    errs += validate_networking(net, (c.get("controllerManager") or {}).get("extraArgs") or {})
    errs += validate_cert_sans((c.get("apiServer") or {}).get("certSANs") or [], "apiServer.certSANs")
    cpe = str(c.get("controlPlaneEndpoint") or "")
    if cpe and not valid_host_port(cpe):
        errs.append(field_invalid("controlPlaneEndpoint", cpe, "endpoint is not valid"))
    if not DNS1123.match(str(net["dnsDomain"])):
        errs.append(field_invalid("networking.dnsDomain", net["dnsDomain"], DNS1123_MSG))
    adv = i["localAPIEndpoint"].get("advertiseAddress")
    if adv is not None:
        try:
            ipaddress.ip_address(adv)
        except ValueError:
            errs.append(field_invalid("localAPIEndpoint.advertiseAddress", adv, "ip address is not valid"))
    try:
        port = int(i["localAPIEndpoint"]["bindPort"])
        if not 0 < port < 65536:
            raise ValueError
    except (TypeError, ValueError):
        errs.append(
            field_invalid(
                "localAPIEndpoint.bindPort", i["localAPIEndpoint"]["bindPort"], "port number is not valid"
            )
        )
    name = str(i["nodeRegistration"]["name"])
    if not DNS1123.match(name) or len(name) > 253:
        errs.append(field_invalid("nodeRegistration.name", name, DNS1123_MSG))
    errs += validate_cri_socket(str(i["nodeRegistration"]["criSocket"]), "nodeRegistration.criSocket")
    for n, bt in enumerate(i["bootstrapTokens"]):
        if not TOKEN_RE.match(str(bt.get("token", ""))):
            errs.append(field_invalid(f"bootstrapTokens[{n}].token", "", "the bootstrap token is invalid"))
        try:
            parse_duration(str(bt.get("ttl", "")))
        except ValueError:
            errs.append(field_invalid(f"bootstrapTokens[{n}].ttl", bt.get("ttl"), "invalid duration"))
    repo = str(c["imageRepository"])
    if not re.match(r"^[A-Za-z0-9.\-_:/\[\]]+$", repo) or repo.endswith("/"):
        errs.append(field_invalid("imageRepository", repo, "invalid image repository"))
    if errs:
        raise Fail(errs[0] if len(errs) == 1 else "[" + ", ".join(errs) + "]")


# kubeadm 1.23 constants (cmd/kubeadm/app/constants): the apiserver keeps the service range as a
# bitmap in etcd, and kube-controller-manager cuts the pod range into one node-cidr-mask per node.
MIN_ADDRESSES_SERVICE_SUBNET = 10
MIN_ADDRESSES_POD_SUBNET = 14
MAX_BITS_SERVICE_SUBNET = 20
POD_SUBNET_NODE_MASK_MAX_DIFF = 16
DEFAULT_NODE_MASK = {4: 24, 6: 64}


def _subnets(value: str, path: str, min_addresses: int, errs: list[str]) -> list[Any]:
    """ValidateIPNetFromString: one CIDR, or two of different families (dual stack)."""
    try:
        nets = [ipaddress.ip_network(part.strip(), strict=False) for part in value.split(",")]
    except ValueError:
        errs.append(field_invalid(path, value, "couldn't parse subnet"))
        return []
    if len(nets) > 2 or (len(nets) == 2 and nets[0].version == nets[1].version):
        errs.append(field_invalid(path, value, "expected one (IPv4 or IPv6) CIDR or two CIDRs from each "
                                  "family for dual-stack networking"))  # fmt: skip
    for n in nets:
        if n.num_addresses < min_addresses:
            errs.append(field_invalid(path, str(n), f"subnet with {n.num_addresses} address(es) is too small, "
                                      f"the minimum is {min_addresses}"))  # fmt: skip
    return nets


def validate_networking(net: dict, cm_args: dict) -> list[str]:
    """kubeadm's ValidateNetworking: subnet syntax and size, the service range small enough for
    the apiserver's allocator, the pod range cut into node-cidr-mask sized node ranges."""
    errs: list[str] = []
    svc = net.get("serviceSubnet")
    if svc:
        for n in _subnets(str(svc), "networking.serviceSubnet", MIN_ADDRESSES_SERVICE_SUBNET, errs):
            if n.max_prefixlen - n.prefixlen > MAX_BITS_SERVICE_SUBNET:
                errs.append(field_invalid("networking.serviceSubnet", str(n), (
                    f"specified service subnet is too large; for {n.max_prefixlen}-bit addresses, "
                    f"the mask must be >= {n.max_prefixlen - MAX_BITS_SERVICE_SUBNET}")))  # fmt: skip
    pod = net.get("podSubnet")
    if pod:
        nets = _subnets(str(pod), "networking.podSubnet", MIN_ADDRESSES_POD_SUBNET, errs)
        if str(cm_args.get("allocate-node-cidrs", "")) != "false":
            for n in nets:
                errs += _node_mask_problems(n, cm_args)
    return errs


def _node_mask_problems(n: Any, cm_args: dict) -> list[str]:
    flag = f"node-cidr-mask-size-ipv{n.version}"
    try:
        node_mask = int(cm_args.get(flag, DEFAULT_NODE_MASK[n.version]))
    except ValueError:
        return [field_invalid("networking.podSubnet", str(n), f"could not parse the value of the "
                              f"kube-controller-manager flag {flag} as an integer")]  # fmt: skip
    if n.prefixlen > node_mask:
        return [field_invalid("networking.podSubnet", str(n), f"the size of pod subnet with mask {n.prefixlen} "
                              f"is smaller than the size of node subnet with mask {node_mask}")]  # fmt: skip
    if node_mask - n.prefixlen > POD_SUBNET_NODE_MASK_MAX_DIFF:
        return [field_invalid("networking.podSubnet", str(n), f"pod subnet mask ({n.prefixlen}) and node-mask "
                              f"({node_mask}) difference is greater than {POD_SUBNET_NODE_MASK_MAX_DIFF}")]  # fmt: skip
    return []


def _is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def validate_cert_sans(sans: list, path: str) -> list[str]:
    """ValidateCertSANs: an IP, a DNS-1123 subdomain, or '*.' and one."""
    errs = []
    for san in map(str, sans):
        wildcard = san.startswith("*.") and DNS1123.match(san[2:])
        if not (DNS1123.match(san) and len(san) <= 253) and not wildcard and not _is_ip(san):
            errs.append(field_invalid(path, san, "altname is not a valid IP address, DNS label or a DNS label "
                                      f"with subdomain wildcards: {DNS1123_MSG}"))  # fmt: skip
    return errs


def valid_host_port(endpoint: str) -> bool:
    """kubeadmutil.ParseHostPort: HOST or HOST:PORT, HOST an IP ([v6] with a port) or a DNS subdomain."""
    host, port = endpoint, None
    m = re.match(r"^\[([^\]]+)\](?::(.*))?$", endpoint)
    if m:
        host, port = m.group(1), m.group(2)
    elif endpoint.count(":") == 1:
        host, port = endpoint.split(":")
    if port is not None and not (port.isdigit() and 0 < int(port) < 65536):
        return False
    return _is_ip(host) or bool(DNS1123.match(host) and len(host) <= 253)


def validate_cri_socket(sock: str, path: str) -> list[str]:
    if sock.startswith("unix://"):
        return [] if os.path.isabs(sock[7:]) else [field_invalid(path, sock, "path is not absolute")]
    if "://" in sock:
        return [field_invalid(path, sock, f'URL scheme "{sock.split("://")[0]}" is not supported')]
    return [] if os.path.isabs(sock) else [field_invalid(path, sock, "path is not absolute")]


def control_plane_images(cfg: InitConfig) -> list[str]:
    """kubeadm images.GetControlPlaneImages for 1.23 (order as `config images list` prints)."""
    c = cfg.cluster
    repo, tag = c["imageRepository"], cfg.version.replace("+", "_")
    imgs = [
        f"{repo}/{n}:{tag}"
        for n in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy")
    ]
    imgs.append(f"{repo}/pause:{PAUSE_VERSION}")
    local = (c.get("etcd") or {}).get("local")
    if local is not None:
        imgs.append(f"{local.get('imageRepository') or repo}/etcd:{local.get('imageTag') or ETCD_VERSION}")
    dns = c.get("dns") or {}
    dns_repo = dns.get("imageRepository") or repo
    if dns_repo == DEFAULT_IMAGE_REPOSITORY:  # the official image moved to <default>/coredns/coredns
        dns_repo += "/coredns"
    imgs.append(f"{dns_repo}/coredns:{dns.get('imageTag') or COREDNS_VERSION}")
    return imgs
