"""Unit tests for the pure parts of the kubeadm/kubelet/crictl stand-in and its API server (tests/standin)."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests._support.standin_cluster import put
from tests.standin.k8s_standin import preflight, util
from tests.standin.k8s_standin.apiserver import ApiServer
from tests.standin.k8s_standin.config import control_plane_images, load_init_config
from tests.standin.k8s_standin.containerd import cni_ready, containerd_config, crictl_fatal, pull_image
from tests.standin.k8s_standin.entry import main
from tests.standin.k8s_standin.join import validate_pins
from tests.standin.k8s_standin.kubeadm_ops import version_policy
from tests.standin.k8s_standin.kubelet import check_node_labels
from tests.standin.k8s_standin.pki import (
    TOKEN_RE,
    ca_cert_hash,
    join_command,
    jws_detached,
    make_ca,
    secret_data,
    token_expired,
    token_secret_object,
)
from tests.standin.k8s_standin.preflight import Check, parse_ignore, run_checks
from tests.standin.k8s_standin.serverside import table_rows
from tests.standin.k8s_standin.util import (
    STACK_HINT,
    Fail,
    format_duration,
    human_duration,
    parse_duration,
    rfc3339,
    tabwrite,
)


@pytest.fixture
def fake_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake node tree: STANDIN_ROOT is the test-only relocation of /proc, /etc/kubernetes ..."""
    monkeypatch.setattr(util, "ROOT", str(tmp_path))
    return tmp_path


# ---------------------------------------------------------------- versions, durations, tables


def test_durations_and_age() -> None:
    assert parse_duration("24h0m0s") == 86400
    assert parse_duration("1h30m") == 5400
    assert parse_duration("0") == 0
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration("1d")
    assert format_duration(240) == "4m0s"
    assert format_duration(86400) == "24h0m0s"
    assert [human_duration(x) for x in (5, 119, 125, 600, 3 * 3600 + 60, 9 * 3600, 3 * 86400)] == [
        "5s",
        "119s",
        "2m5s",
        "10m",
        "3h1m",
        "9h",
        "3d",
    ]


def test_tabwriter_matches_kubectl_padding() -> None:
    out = tabwrite([["NAME", "STATUS"], ["master", "Ready"]])
    assert out == "NAME     STATUS\nmaster   Ready\n"


def test_version_outputs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["/usr/bin/kubeadm", "version", "-o", "short"]) == 0
    assert main(["/usr/bin/kubelet", "--version"]) == 0
    assert main(["/usr/bin/crictl", "--version"]) == 0
    assert capsys.readouterr().out == "v1.23.17\nKubernetes v1.23.17\ncrictl version v1.23.0\n"


# ---------------------------------------------------------------- kubeadm configuration


INIT_CFG = """\
apiVersion: kubeadm.k8s.io/v1beta3
kind: InitConfiguration
localAPIEndpoint:
  advertiseAddress: 10.77.0.10
nodeRegistration:
  name: master
  criSocket: unix:///run/containerd/containerd.sock
---
apiVersion: kubeadm.k8s.io/v1beta3
kind: ClusterConfiguration
kubernetesVersion: v1.23.17
imageRepository: 10.77.0.10:5000
networking:
  podSubnet: 10.244.0.0/16
  serviceSubnet: 10.96.0.0/12
---
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
"""


def cfg_file(tmp_path: Path, text: str) -> str:
    p = tmp_path / "kubeadm-config.yaml"
    p.write_text(text)
    return str(p)


def test_config_loads_and_defaults(tmp_path: Path) -> None:
    cfg = load_init_config(cfg_file(tmp_path, INIT_CFG), {}, resolve_host=False)
    assert cfg.endpoint == "10.77.0.10:6443"
    assert cfg.node_name == "master"
    assert cfg.cluster["networking"]["dnsDomain"] == "cluster.local"
    assert cfg.kubelet == {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
                           "cgroupDriver": "systemd"}  # fmt: skip
    assert TOKEN_RE.match(cfg.init["bootstrapTokens"][0]["token"])
    assert cfg.init["nodeRegistration"]["taints"] == [
        {"effect": "NoSchedule", "key": "node-role.kubernetes.io/master"}
    ]


def test_image_list_custom_repo_and_default_coredns_rule(tmp_path: Path) -> None:
    cfg = load_init_config(cfg_file(tmp_path, INIT_CFG), {}, resolve_host=False)
    assert control_plane_images(cfg) == [
        "10.77.0.10:5000/kube-apiserver:v1.23.17",
        "10.77.0.10:5000/kube-controller-manager:v1.23.17",
        "10.77.0.10:5000/kube-scheduler:v1.23.17",
        "10.77.0.10:5000/kube-proxy:v1.23.17",
        "10.77.0.10:5000/pause:3.6",
        "10.77.0.10:5000/etcd:3.5.6-0",
        "10.77.0.10:5000/coredns:v1.8.6",
    ]
    default = load_init_config(None, {"kubernetes-version": "v1.23.17"}, resolve_host=False)
    assert control_plane_images(default)[-1] == "registry.k8s.io/coredns/coredns:v1.8.6"


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("10.244.0.0/16", "10.244.0.0/33"), 'networking.podSubnet: Invalid value: "10.244.0.0/33": couldn\'t parse subnet'),
        (("advertiseAddress: 10.77.0.10", "advertiseAddress: master"),
         'localAPIEndpoint.advertiseAddress: Invalid value: "master": ip address is not valid'),
        (("name: master", "name: Master_1"), 'nodeRegistration.name: Invalid value: "Master_1": a lowercase RFC 1123'),
        (("criSocket: unix:///run", "criSocket: tcp:///run"), 'URL scheme "tcp" is not supported'),
        (("kubernetesVersion: v1.23.17", "kubernetesVersion: v1.21.0"),
         "only supports deploying clusters with the control plane version >= 1.22.0. Current version: v1.21.0"),
        (("kubernetesVersion: v1.23.17", "kubernetesVersion: banana"), 'version "banana" doesn\'t match patterns'),
        (("kubeadm.k8s.io/v1beta3\nkind: Init", "kubeadm.k8s.io/v1beta1\nkind: Init"),
         'your configuration file uses an old API spec: "kubeadm.k8s.io/v1beta1"'),
        (("kind: InitConfiguration\n", "kind: InitConfiguration\nfoo: [\n"), "error converting YAML to JSON: yaml: line"),
        (("kind: ClusterConfiguration\n", "\n"), "kind and apiVersion is mandatory information"),
        # kubeadm's networking rules: the service range must fit the apiserver's allocator ...
        (("serviceSubnet: 10.96.0.0/12", "serviceSubnet: 10.0.0.0/8"),
         'networking.serviceSubnet: Invalid value: "10.0.0.0/8": specified service subnet is too large; '
         "for 32-bit addresses, the mask must be >= 12"),
        (("serviceSubnet: 10.96.0.0/12", "serviceSubnet: 10.96.0.0/29"),
         'networking.serviceSubnet: Invalid value: "10.96.0.0/29": subnet with 8 address(es) is too small, '
         "the minimum is 10"),
        # ... and the pod range must hold node ranges of the controller-manager's node mask (/24)
        (("podSubnet: 10.244.0.0/16", "podSubnet: 10.244.0.0/25"),
         'networking.podSubnet: Invalid value: "10.244.0.0/25": the size of pod subnet with mask 25 is smaller '
         "than the size of node subnet with mask 24"),
        (("podSubnet: 10.244.0.0/16", "podSubnet: 10.0.0.0/7"),
         'networking.podSubnet: Invalid value: "10.0.0.0/7": pod subnet mask (7) and node-mask (24) difference '
         "is greater than 16"),
        (("podSubnet: 10.244.0.0/16", "podSubnet: 10.244.0.0/16,10.245.0.0/16"),
         "expected one (IPv4 or IPv6) CIDR or two CIDRs from each family for dual-stack networking"),
        (("imageRepository: 10.77.0.10:5000", "imageRepository: 10.77.0.10:5000\napiServer:\n  certSANs: [master, 'QCT S5SP']"),
         'apiServer.certSANs: Invalid value: "QCT S5SP": altname is not a valid IP address, DNS label or a DNS label'),
        (("imageRepository: 10.77.0.10:5000", "imageRepository: 10.77.0.10:5000\ncontrolPlaneEndpoint: 10.77.0.10:70000"),
         'controlPlaneEndpoint: Invalid value: "10.77.0.10:70000": endpoint is not valid'),
    ],
)  # fmt: skip
def test_config_validation_errors(tmp_path: Path, edit: tuple[str, str], message: str) -> None:
    assert edit[0] in INIT_CFG
    with pytest.raises(Fail) as e:
        load_init_config(cfg_file(tmp_path, INIT_CFG.replace(edit[0], edit[1], 1)), {}, resolve_host=False)
    assert message in e.value.message


def test_valid_networking_sans_and_endpoints_pass(tmp_path: Path) -> None:
    text = INIT_CFG.replace("podSubnet: 10.244.0.0/16", "podSubnet: 10.244.0.0/24").replace(
        "imageRepository: 10.77.0.10:5000",
        "imageRepository: 10.77.0.10:5000\ncontrolPlaneEndpoint: api.site.local:6443\n"
        "apiServer:\n  certSANs: [10.77.0.10, master, '*.apps.site.local', 'fd00::1']",
    )
    cfg = load_init_config(cfg_file(tmp_path, text), {}, resolve_host=False)
    assert cfg.endpoint == "api.site.local:6443"


def test_unknown_kind_and_field_are_warnings_like_kubeadm(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = INIT_CFG + "---\napiVersion: kubeadm.k8s.io/v1beta3\nkind: Banana\n"
    text = text.replace("imageRepository:", "bogusField: 1\nimageRepository:")
    load_init_config(cfg_file(tmp_path, text), {}, resolve_host=False)
    err = capsys.readouterr().err
    assert "Ignored YAML document with GroupVersionKind kubeadm.k8s.io/v1beta3, Kind=Banana" in err
    assert 'json: unknown field "bogusField"' in err


def test_init_refuses_mixing_config_and_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(
        [
            "/usr/bin/kubeadm",
            "init",
            "--config",
            cfg_file(tmp_path, INIT_CFG),
            "--pod-network-cidr=10.0.0.0/8",
        ]
    )
    assert rc == 1
    err = capsys.readouterr().err
    assert err == "can not mix '--config' with arguments [pod-network-cidr]\n" + STACK_HINT + "\n"


# ---------------------------------------------------------------- preflight against a fake node tree


def pick(stage: str, ctx: preflight.Ctx, names: list[str]) -> list[Check]:
    """Checks of the table by name, in the order given (each must be in the stage)."""
    by_name = {c.name: c for c in preflight.select(stage, ctx)}
    return [by_name[n] for n in names]


def test_preflight_table_order_is_kubeadms() -> None:
    """RunInitNodeChecks / RunJoinNodeChecks + addCommonChecks (1.23), in that order."""
    common = [
        "CRI",
        "FileExisting-crictl",
        "FileContent--proc-sys-net-bridge-bridge-nf-call-iptables",
        "FileContent--proc-sys-net-ipv4-ip_forward",
        "Swap",
        "FileExisting-conntrack",
        "FileExisting-ip",
        "FileExisting-iptables",
        "FileExisting-mount",
        "FileExisting-nsenter",
        "FileExisting-ebtables",
        "FileExisting-ethtool",
        "FileExisting-socat",
        "FileExisting-tc",
        "FileExisting-touch",
        "SystemVerification",
        "Hostname",
        "KubeletVersion",
        "Service-Kubelet",
        "Port-10250",
    ]
    init = preflight.select(preflight.INIT, preflight.Ctx(port=6443, etcd_dir="/var/lib/etcd"))
    assert [c.name for c in init] == [
        "NumCPU",
        "Mem",
        "KubernetesVersion",
        "Firewalld",
        "Port-6443",
        "Port-10259",
        "Port-10257",
        "FileAvailable--etc-kubernetes-manifests-kube-apiserver.yaml",
        "FileAvailable--etc-kubernetes-manifests-kube-controller-manager.yaml",
        "FileAvailable--etc-kubernetes-manifests-kube-scheduler.yaml",
        "FileAvailable--etc-kubernetes-manifests-etcd.yaml",
        *common,
        "Port-2379",
        "Port-2380",
        "DirAvailable--var-lib-etcd",
    ]
    join = preflight.select(preflight.JOIN, preflight.Ctx(cri="unix:///var/run/dockershim.sock"))
    assert [c.name for c in join] == [
        "FileAvailable--etc-kubernetes-kubelet.conf",
        "FileAvailable--etc-kubernetes-bootstrap-kubelet.conf",
        *(n for n in common if n != "FileExisting-crictl"),
        "FileAvailable--etc-kubernetes-pki-ca.crt",
    ]
    assert [c.name for c in preflight.select(preflight.ROOT)] == ["IsPrivilegedUser"]
    pull = preflight.select(preflight.PULL, preflight.Ctx(images=("a:1", "b:2")))
    assert [c.name for c in pull] == ["ImagePull", "ImagePull"]  # one per image, as kubeadm's errors


def test_preflight_wording(fake_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    put(fake_root, "/proc/swaps", "Filename\tType\tSize\tUsed\tPriority\n/swapfile file 1024 0 -2\n")
    put(fake_root, "/proc/sys/net/ipv4/ip_forward", "0\n")  # bridge-nf-call-iptables absent: no br_netfilter
    put(fake_root, "/etc/kubernetes/kubelet.conf", "x")
    monkeypatch.setattr(shutil, "which", lambda t: None if t in ("conntrack", "socat") else f"/usr/bin/{t}")
    names = [
        "FileContent--proc-sys-net-bridge-bridge-nf-call-iptables",
        "FileContent--proc-sys-net-ipv4-ip_forward",
        "Swap",
        "FileExisting-conntrack",
        "FileExisting-socat",
        "FileAvailable--etc-kubernetes-kubelet.conf",
    ]
    checks = pick(preflight.JOIN, preflight.Ctx(node="w1"), names)
    checks.append(
        Check("CRI", lambda: ([], ["container runtime is not running: output: boom\n, error: exit status 1"]))
    )  # fmt: skip
    warn = io.StringIO()
    with pytest.raises(Fail) as e:
        run_checks(checks, set(), warn)
    assert warn.getvalue() == "\t[WARNING FileExisting-socat]: socat not found in system path\n"
    assert e.value.message == (
        "[preflight] Some fatal errors occurred:\n"
        "\t[ERROR FileContent--proc-sys-net-bridge-bridge-nf-call-iptables]: "
        "/proc/sys/net/bridge/bridge-nf-call-iptables does not exist\n"
        "\t[ERROR FileContent--proc-sys-net-ipv4-ip_forward]: /proc/sys/net/ipv4/ip_forward contents are not set to 1\n"
        "\t[ERROR Swap]: running with swap on is not supported. Please disable swap\n"
        "\t[ERROR FileExisting-conntrack]: conntrack not found in system path\n"
        "\t[ERROR FileAvailable--etc-kubernetes-kubelet.conf]: /etc/kubernetes/kubelet.conf already exists\n"
        "\t[ERROR CRI]: container runtime is not running: output: boom\n, error: exit status 1\n"
        "[preflight] If you know what you are doing, you can make a check non-fatal with "
        "`--ignore-preflight-errors=...`"
    )
    # names are matched case-insensitively; "all" demotes everything to warnings
    warn = io.StringIO()
    run_checks(checks, parse_ignore(["Swap,FileContent--proc-sys-net-ipv4-ip_forward", "all"][1:]), warn)
    assert "[WARNING Swap]" in warn.getvalue()
    ignore = parse_ignore(["swap", "FileExisting-conntrack,CRI"])
    assert ignore == {"swap", "fileexisting-conntrack", "cri"}
    with pytest.raises(Fail, match="don't specify individual checks if 'all' is used"):
        parse_ignore(["all,Swap"])


def test_preflight_clean_node_passes(fake_root: Path) -> None:
    put(fake_root, "/proc/swaps", "Filename\tType\tSize\tUsed\tPriority\n")
    put(fake_root, "/proc/sys/net/ipv4/ip_forward", "1\n")
    put(fake_root, "/proc/sys/net/bridge/bridge-nf-call-iptables", "1\n")
    (fake_root / "var/lib/etcd").mkdir(parents=True)
    names = [
        "FileContent--proc-sys-net-ipv4-ip_forward",
        "Swap",
        "FileContent--proc-sys-net-bridge-bridge-nf-call-iptables",
        "DirAvailable--var-lib-etcd",
    ]
    checks = pick(preflight.INIT, preflight.Ctx(etcd_dir="/var/lib/etcd"), names)  # fmt: skip
    run_checks(checks, set(), io.StringIO())
    (fake_root / "var/lib/etcd/member").mkdir()
    with pytest.raises(Fail, match=r"\[ERROR DirAvailable--var-lib-etcd\]: /var/lib/etcd is not empty"):
        run_checks(checks, set(), io.StringIO())


def test_port_check_detects_a_listener() -> None:
    import socket

    s = socket.socket()
    s.bind(("0.0.0.0", 0))
    s.listen(1)
    try:
        port = s.getsockname()[1]
        [check] = pick(preflight.INIT, preflight.Ctx(port=port), [f"Port-{port}"])
        assert check.fn() == ([], [f"Port {port} is in use"])
    finally:
        s.close()


def test_cni_and_containerd_config(fake_root: Path) -> None:
    put(fake_root, "/etc/containerd/config.toml", """version = 2
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "10.77.0.10:5000/pause:3.6"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
    SystemdCgroup = true
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "/etc/containerd/certs.d"
""")  # fmt: skip
    cfg = containerd_config()
    assert cfg["systemd_cgroup"] is True and cfg["config_path"] == "/etc/containerd/certs.d"
    assert cni_ready() == (False, "Network plugin returns error: cni plugin not initialized")
    put(fake_root, "/etc/cni/net.d/10-flannel.conflist", '{"name": "cbr0", "plugins": [{"type": "flannel"}]}')
    assert cni_ready() == (True, "")


def test_pull_credentials_follow_the_endpoint_not_the_name(fake_root: Path, monkeypatch) -> None:
    """containerd's CRI looks registry.configs.<host>.auth up by the host a request goes to: for a
    name whose hosts.toml sends pulls to a mirror, the mirror's credentials (researcher registry)."""
    from tests.standin.k8s_standin import containerd

    put(fake_root, "/etc/containerd/config.toml", """version = 2
[plugins."io.containerd.grpc.v1.cri".registry]
  config_path = "/etc/containerd/certs.d"
  [plugins."io.containerd.grpc.v1.cri".registry.configs."master1:5000".auth]
    username = "appliance"
    password = "p0"
  [plugins."io.containerd.grpc.v1.cri".registry.configs."master1:5002".auth]
    username = "appliance-nodes"
    password = "p2"
""")  # fmt: skip
    put(fake_root, "/etc/containerd/certs.d/master1:5000/hosts.toml", 'server = "https://master1:5000"\n'
        '[host."https://master1:5000"]\n  capabilities = ["pull", "resolve"]\n')  # fmt: skip
    put(fake_root, "/etc/containerd/certs.d/master1:5001/hosts.toml", 'server = "https://master1:5002"\n'
        '[host."https://master1:5002"]\n  capabilities = ["pull", "resolve"]\n')  # fmt: skip
    assert containerd.registry_endpoints("/etc/containerd/certs.d", "master1:5001") == ["master1:5002"]
    assert containerd.registry_endpoints("/etc/containerd/certs.d", "other:1") == ["other:1"]
    ran: list[tuple[str, ...]] = []
    monkeypatch.setattr(containerd, "ctr", lambda ep, *a, timeout=30: (ran.append(a), (0, ""))[1])
    assert (
        containerd.pull_image("unix:///run/containerd/containerd.sock", "master1:5001/research/demo:1")[0]
        == 0
    )
    assert containerd.pull_image("unix:///run/containerd/containerd.sock", "master1:5000/pause:3.6")[0] == 0
    assert ran[0][-2:] == ("appliance-nodes:p2", "master1:5001/research/demo:1")
    assert ran[1][-2:] == ("appliance:p0", "master1:5000/pause:3.6")


# ---------------------------------------------------------------- join command, CA hash, tokens


def test_ca_hash_matches_openssl_pipeline(tmp_path: Path) -> None:
    crt, key = tmp_path / "ca.crt", tmp_path / "ca.key"
    make_ca(str(crt), str(key), "kubernetes")
    pub = subprocess.run(
        ["openssl", "x509", "-in", str(crt), "-pubkey", "-noout"], capture_output=True, check=True
    )
    der = subprocess.run(["openssl", "pkey", "-pubin", "-outform", "DER"], input=pub.stdout, capture_output=True,
                         check=True)  # fmt: skip
    want = "sha256:" + hashlib.sha256(der.stdout).hexdigest()
    assert ca_cert_hash(crt.read_text()) == want
    cmd = join_command("10.77.0.10:6443", "abcdef.0123456789abcdef", crt.read_text(), one_line=True)
    assert (
        cmd
        == f"kubeadm join 10.77.0.10:6443 --token abcdef.0123456789abcdef --discovery-token-ca-cert-hash {want} "
    )
    multi = join_command("10.77.0.10:6443", "abcdef.0123456789abcdef", crt.read_text(), one_line=False)
    assert (
        multi
        == f"kubeadm join 10.77.0.10:6443 --token abcdef.0123456789abcdef \\\n\t--discovery-token-ca-cert-hash {want} "
    )


def test_token_secret_ttl_and_jws() -> None:
    sec = token_secret_object("abcdef.0123456789abcdef", 2.0)
    assert sec["metadata"]["name"] == "bootstrap-token-abcdef"
    assert secret_data(sec)["token-secret"] == "0123456789abcdef"
    assert not token_expired(sec)
    assert token_expired(sec, at=time.time() + 3)
    assert not token_expired(token_secret_object("abcdef.0123456789abcdef", 0), at=time.time() + 1e9)
    sig = jws_detached("content", "abcdef", "0123456789abcdef")
    header, empty, _mac = sig.split(".")
    assert empty == ""
    assert base64.urlsafe_b64decode(header + "==") == b'{"alg":"HS256","kid":"abcdef"}'
    assert sig != jws_detached("content", "abcdef", "0123456789abcdeX")


@pytest.mark.parametrize(
    ("pin", "message"),
    [
        ("sha256:abcd", "expected a 32 byte SHA-256 hash, found 2 bytes"),
        ("md5:" + "a" * 64, 'unknown hash format "md5"'),
        ("abc", 'invalid hash, expected "format:hex-value"'),
        ("sha256:" + "z" * 64, "could not decode SHA-256 from hex"),
    ],
)
def test_ca_pin_validation(pin: str, message: str) -> None:
    with pytest.raises(Fail, match=message):
        validate_pins([pin])


def test_upgrade_version_skew_rules() -> None:
    with pytest.raises(Fail, match="kubeadm can upgrade only 1 minor version at a time"):
        version_policy("v1.22.5", "v1.24.0", force=True)
    # a minor above kubeadm's own (1.23) is refused whatever the flags: kubeadm 1.24 must do it
    with pytest.raises(
        Fail, match=r"at least one minor release higher than the kubeadm minor release \(24 > 23\)"
    ):
        version_policy("v1.23.17", "v1.24.0", force=True)
    with pytest.raises(Fail, match="Can be bypassed if you pass the --force flag"):
        version_policy("v1.23.16", "v1.23.18", force=False)  # a patch above kubeadm's
    assert version_policy("v1.23.16", "v1.23.18", force=True)
    assert version_policy("v1.22.17", "v1.23.17", force=False) == []


# ---------------------------------------------------------------- the API server's tables, node lifecycle


NODES = {
    "apiVersion": "v1",
    "kind": "List",
    "items": [
        {"metadata": {"name": "master", "labels": {"node-role.kubernetes.io/master": "", "a": "b"}},
         "status": {"conditions": [{"type": "Ready", "status": "True"}]}},
        {"metadata": {"name": "w1", "labels": {}}, "status": {"conditions": [{"type": "Ready", "status": "False"}]}},
    ],
}  # fmt: skip


def test_node_table() -> None:
    header, rows = table_rows("Node", NODES["items"], wide=False)
    assert header == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert rows[0][:3] == ["master", "Ready", "master"] and rows[1][:3] == ["w1", "NotReady", "<none>"]


def test_lifecycle_marks_silent_node_unknown_and_taints() -> None:
    old = rfc3339(time.time() - 60)
    node = {"metadata": {"name": "w1"}, "spec": {"unschedulable": True},
            "status": {"conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": old}]}}  # fmt: skip
    out = ApiServer.lifecycle(node)
    assert out["status"]["conditions"][0]["status"] == "Unknown"
    assert out["status"]["conditions"][0]["reason"] == "NodeStatusUnknown"
    keys = {(t["key"], t["effect"]) for t in out["spec"]["taints"]}
    assert ("node.kubernetes.io/unreachable", "NoExecute") in keys
    assert ("node.kubernetes.io/unschedulable", "NoSchedule") in keys


def test_kubelet_refuses_reserved_node_labels() -> None:
    assert check_node_labels({"node-role.kubernetes.io/worker": ""}) is not None
    assert check_node_labels({"node.kubernetes.io/worker": "", "nvidia.com/gpu": "1"}) is None


def test_kubelet_without_config_crash_loops(fake_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(
        [
            "/usr/bin/kubelet",
            "--config=/var/lib/kubelet/config.yaml",
            "--kubeconfig=/etc/kubernetes/kubelet.conf",
        ]
    )
    assert rc == 1
    assert "failed to load kubelet config file" in capsys.readouterr().err


PLUGINS_OK = """TYPE                            ID       PLATFORMS      STATUS
io.containerd.content.v1        content  -              ok
io.containerd.grpc.v1           cri      linux/amd64    ok
"""


@pytest.mark.parametrize(
    ("cri_status", "rc"), [("ok", 0), ("error", 1)], ids=["cri-loaded", "cri-failed-to-load"]
)
def test_crictl_info_asks_the_running_daemon_for_its_cri_plugin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cri_status: str, rc: int
) -> None:
    """containerd answering `ctr version` is not enough: kubeadm's CRI check fails as crictl does
    when the daemon's cri plugin did not load (a bad config.toml section, say)."""
    from tests.standin.k8s_standin.containerd import crictl_info_probe

    bindir = tmp_path / "bin"
    bindir.mkdir()
    ctr = bindir / "ctr"  # answers as a running containerd 1.6 does
    ctr.write_text(
        "#!/bin/sh\n"
        'case "$*" in\n'
        '  *" version"*) printf "Client:\\n  Version:  1.6.20\\n\\nServer:\\n  Version:  1.6.20\\n" ;;\n'
        f"  *\" plugins ls\"*) printf '%s' '{PLUGINS_OK.replace('cri      linux/amd64    ok', 'cri      linux/amd64    ' + cri_status)}' ;;\n"
        "esac\n"
    )
    ctr.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setattr(util, "ROOT", str(tmp_path))
    got_rc, out = crictl_info_probe("unix:///run/containerd/containerd.sock")
    assert got_rc == rc, out
    if rc:
        assert "unknown service runtime.v1alpha2.RuntimeService" in out
    else:
        assert json.loads(out)["status"]["conditions"][0] == {
            "type": "RuntimeReady",
            "status": True,
            "reason": "",
            "message": "",
        }


def test_crictl_images_json_groups_ctrs_refs_by_target_as_a_list_images_response() -> None:
    """`ctr -n k8s.io images ls` as a lab node printed it (one line per ref: the tag, the CRI's
    sha256 ID ref, a digest ref) becomes one Image record with the fields cri-tools v1.23.0 prints."""
    from tests.standin.k8s_standin.crictl import _image_records

    digest = "sha256:0ff1293cc9e766c81f02e8f81976ea263a84d81dae457305de12d61e893bb8ae"
    cfg = "sha256:0f8c24388352437fa02d8057e5cc90c5cf5429cb51aa1afabd4440026a15584a"
    kind = "application/vnd.oci.image.manifest.v1+json"
    tail = "1013.0 KiB linux/amd64 io.cri-containerd.image=managed"
    listing = "\n".join([
        "REF TYPE DIGEST SIZE PLATFORMS LABELS",
        f"master1:5000/projecthami/hami:v2.4.1 {kind} {digest} {tail}",
        f"{cfg} {kind} {digest} {tail}",
        f"master1:5000/projecthami/hami@{digest} {kind} {digest} {tail}",
        f"master1:5000/pause:3.6 {kind} sha256:{'d' * 64} 1.5 MiB linux/amd64 io.cri-containerd.image=managed",
    ])  # fmt: skip
    pause, hami = _image_records(listing)  # sorted by their first tag, as crictl's imageByRef
    assert hami == {
        "id": cfg,
        "repoTags": ["master1:5000/projecthami/hami:v2.4.1"],
        "repoDigests": [f"master1:5000/projecthami/hami@{digest}"],
        "size": str(1013 * 1024),
        "uid": None,
        "username": "",
        "spec": None,
    }
    assert (pause["repoTags"], pause["size"]) == (["master1:5000/pause:3.6"], str(int(1.5 * 2**20)))


def _fake_node_tools(tmp_path: Path, current: str, starts: dict[str, list[str]]) -> Path:
    """ctr, systemctl and journalctl as a node with the stand-in API server unit answers them:
    STARTS maps each InvocationID (oldest first) to the lines its process wrote."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    records = "".join(
        json.dumps({"_SYSTEMD_INVOCATION_ID": inv}) + "\n" for inv, lines in starts.items() for _ in lines
    )
    cases = "".join(f"  *_SYSTEMD_INVOCATION_ID={inv}*) printf '%s' '{''.join(ln + chr(10) for ln in lines)}' ;;\n"
                    for inv, lines in starts.items())  # fmt: skip
    tools = {
        "ctr": "#!/bin/sh\nprintf 'Client:\\n  Version:  1.6.20\\n\\nServer:\\n  Version:  1.6.20\\n'\n",
        "systemctl": f'#!/bin/sh\ncase "$*" in\n  *is-active*) exit 3 ;;\n  *InvocationID*) echo {current} ;;\nesac\n',
        "journalctl": f"#!/bin/sh\ncase \"$*\" in\n  *\"-o json\"*) printf '%s' '{records}' ;;\n{cases}esac\n",
    }
    for name, text in tools.items():
        (bindir / name).write_text(text)
        (bindir / name).chmod(0o755)
    unit = tmp_path / "etc/systemd/system" / util.APISERVER_UNIT
    unit.parent.mkdir(parents=True)
    unit.write_text("[Service]\n")
    return bindir


def test_crictl_lists_the_api_servers_last_two_starts_newest_first_with_their_own_logs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A restarted API server is a new container: `ps -a` lists the current start and the one
    before it (the kubelet keeps one dead container), newest first; `logs ID` is that start's."""
    from tests.standin.k8s_standin.crictl import crictl_main

    old, prev, cur = "a" * 32, "b" * 32, "c" * 32
    refusal = 'E1127 19:00:00.000000  4242 run.go:74] "command failed" err="half a pair"'
    bindir = _fake_node_tools(tmp_path, cur, {old: ["old start"], prev: [refusal]})
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setattr(util, "ROOT", str(tmp_path))
    ep = ["-r", "unix:///run/containerd/containerd.sock"]
    assert crictl_main([*ep, "ps", "-a", "--name", "^kube-apiserver$", "-q"]) == 0
    assert capsys.readouterr().out.split() == [cur, prev]  # the current start has written nothing yet
    assert crictl_main([*ep, "logs", "--tail", "20", prev]) == 0
    assert capsys.readouterr().err == refusal + "\n"
    assert crictl_main([*ep, "logs", "--tail", "20", cur]) == 0
    assert capsys.readouterr().err == ""
    assert crictl_main([*ep, "logs", old]) == 1  # older than the one dead container kept
    assert "not supported" in capsys.readouterr().err
    assert crictl_main([*ep, "ps", "--name", "^kube-apiserver$", "-q"]) == 0  # not running: only with -a
    assert capsys.readouterr().out == ""


def test_control_plane_names_the_last_line_of_the_newest_api_server_container_that_logged(
    tmp_path: Path,
) -> None:
    """The role's own script (roles/control_plane/tasks/apiserver-down.yml), run against a crictl whose
    newest kube-apiserver container was just started and has logged nothing: the refusal comes from
    the one before it, not "(none)"."""
    import yaml

    tasks = yaml.safe_load(
        (Path(__file__).parents[2] / "roles/control_plane/tasks/apiserver-down.yml").read_text()
    )
    script = next(t for t in tasks if t["name"] == "Control plane | Read why the API server does not answer")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "crictl").write_text(
        '#!/bin/sh\ncase "$1" in\n  ps) printf "new\\nold\\n" ;;\n'
        '  logs) [ "$4" = old ] && printf "I0 started\\nE1 refused: half a pair\\n\\n" >&2 ;;\nesac\nexit 0\n'
    )
    (bindir / "crictl").chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}
    out = subprocess.run(["bash", "-c", script["ansible.builtin.shell"]["cmd"]], env=env, capture_output=True,
                         text=True, check=True)  # fmt: skip
    assert out.stdout == "E1 refused: half a pair\n"
    (bindir / "crictl").write_text("#!/bin/sh\nexit 0\n")  # no container at all
    out = subprocess.run(["bash", "-c", script["ansible.builtin.shell"]["cmd"]], env=env, capture_output=True,
                         text=True, check=True)  # fmt: skip
    assert out.stdout.startswith("the kubelet started no kube-apiserver container")


def test_control_plane_names_the_etcd_an_api_server_cannot_reach_and_whether_it_runs(tmp_path: Path) -> None:
    """The same script when the API server's last lines are grpc's warnings about its etcd (1.23's
    form of the address, and the later `{Addr: ...}` one): which etcd, and whether etcd's container
    runs, on a line of its own."""
    import yaml

    tasks = yaml.safe_load(
        (Path(__file__).parents[2] / "roles/control_plane/tasks/apiserver-down.yml").read_text()
    )
    script = next(t for t in tasks if t["name"] == "Control plane | Read why the API server does not answer")
    old = ("W1130 12:00:00.000000 1 clientconn.go:1331] [core] grpc: addrConn.createTransport failed to connect to "
           '{127.0.0.1:2379 127.0.0.1 <nil> 0 <nil>}. Err: connection error: desc = \\"transport: Error while dialing '
           'dial tcp 127.0.0.1:2379: connect: connection refused\\". Reconnecting...')  # fmt: skip
    new = ('W0914 20:21:08.834540 1 logging.go:55] [core] [Channel #2 SubChannel #4]grpc: addrConn.createTransport '
           'failed to connect to {Addr: \\"10.0.0.5:2379\\", ServerName: \\"10.0.0.5:2379\\", }. Err: ...')  # fmt: skip
    bindir = tmp_path / "bin"
    bindir.mkdir()
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}
    for line, etcd_ps, want in (
        (
            old,
            "",
            "it cannot reach etcd at 127.0.0.1:2379: no etcd container runs (crictl ps -a --name etcd)",
        ),
        (new, "e7cd\\n", "it cannot reach etcd at 10.0.0.5:2379: etcd's container runs"),
    ):
        (bindir / "crictl").write_text(
            '#!/bin/sh\ncase "$*" in\n  *kube-apiserver*) printf "a1\\n" ;;\n'
            f'  *etcd*) printf "{etcd_ps}" ;;\n  logs*) printf "I0 started\\n{line}\\n" >&2 ;;\nesac\nexit 0\n'
        )
        (bindir / "crictl").chmod(0o755)
        out = subprocess.run(["bash", "-c", script["ansible.builtin.shell"]["cmd"]], env=env, capture_output=True,
                             text=True, check=True)  # fmt: skip
        assert out.stdout.splitlines()[1:] == [want], out.stdout
        assert "addrConn.createTransport failed to connect to" in out.stdout.splitlines()[0]


def test_init_certs_keep_the_pki_a_rebuilt_master_brings(fake_root: Path, tmp_path: Path) -> None:
    """kubeadm init on a master whose /etc/kubernetes/pki came back from a backup: every CA, every
    certificate its CA signed and the sa key are used as they are (the workers' certificates and
    the restored tokens stay valid); a certificate another CA signed is refused."""
    from tests.standin.k8s_standin.files import PKI, write_pki

    cfg = load_init_config(cfg_file(tmp_path, INIT_CFG), {}, resolve_host=False)
    first = io.StringIO()
    write_pki(cfg, first)
    assert '[certs] Generating "ca" certificate and key' in first.getvalue()
    pki = fake_root / PKI.lstrip("/")
    before = {p: p.read_bytes() for p in pki.rglob("*") if p.is_file()}
    assert len(before) == 22, sorted(before)  # 10 certificates with their keys, sa.key and sa.pub
    (pki / "apiserver.crt").unlink()  # one leaf lost: made again, under the same CA
    again = io.StringIO()
    write_pki(cfg, again)
    text = again.getvalue()
    for line in ("[certs] Using existing ca certificate authority",
                 "[certs] Using existing front-proxy-ca certificate authority",
                 "[certs] Using existing etcd/ca certificate authority",
                 "[certs] Using existing etcd/server certificate and key on disk",
                 "[certs] Using existing apiserver-etcd-client certificate and key on disk",
                 '[certs] Generating "apiserver" certificate and key',
                 '[certs] Using the existing "sa" key'):  # fmt: skip
        assert line in text, text
    assert 'Generating "etcd/ca"' not in text and 'Generating "sa"' not in text
    after = {p: p.read_bytes() for p in pki.rglob("*") if p.is_file()}
    assert {p for p in after if after[p] != before.get(p)} == {pki / "apiserver.crt"}
    shutil.copy(pki / "front-proxy-client.crt", pki / "apiserver-kubelet-client.crt")  # another CA's
    with pytest.raises(Fail, match=r"certificate apiserver-kubelet-client not signed by CA certificate ca"):
        write_pki(cfg, io.StringIO())


def test_crictls_fatal_line_quotes_its_msg_as_logrus_does() -> None:
    """logrus' text formatter: a value of only [A-Za-z0-9-._/@^+] is bare, any other is %q-quoted,
    its own quotes escaped."""
    assert crictl_fatal("plain-word").split(" ", 1)[1] == "level=fatal msg=plain-word\n"
    line = crictl_fatal('no such image "x:1" present')
    assert line.split(" ", 1)[1] == 'level=fatal msg="no such image \\"x:1\\" present"\n'


def test_a_failed_pull_reads_as_containerds_cri_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """ctr's `ctr: ` prefix goes, and a registry's 404 keeps NotFound, as the CRI plugin returns it."""
    ref = "master1:5000/nvidia/k8s-device-plugin:v0.16.2-ubi8"
    monkeypatch.setattr("tests.standin.k8s_standin.containerd.containerd_config",
                        lambda: {"config_path": "", "auth": {}})  # fmt: skip
    last = {"out": f'ctr: failed to resolve reference "{ref}": {ref}: not found\n'}
    monkeypatch.setattr("tests.standin.k8s_standin.containerd.ctr", lambda *a, **k: (1, last["out"]))
    rc, line = pull_image("unix:///run/containerd/containerd.sock", ref)
    assert rc == 1
    assert line.split(" ", 1)[1] == (
        'level=fatal msg="pulling image: rpc error: code = NotFound desc = failed to pull and unpack image '
        f'\\"{ref}\\": failed to resolve reference \\"{ref}\\": {ref}: not found"\n'
    )
    last["out"] = "ctr: dial tcp 10.77.0.11:5000: connect: connection refused\n"
    assert "code = Unknown desc" in pull_image("unix:///x.sock", ref)[1]


def test_the_kubelet_reads_back_the_pull_error_crictl_fatal_quoted() -> None:
    """pods._pull_reason is crictl_fatal's inverse (quotes and backslashes unescaped, crictl's
    `pulling image: ` gone); output that is no logrus line gives its last line, as text."""
    from tests.standin.k8s_standin.pods import _pull_reason

    error = 'rpc error: code = NotFound desc = failed to pull and unpack image "r/x:1": C:\\path: not found'
    assert _pull_reason(crictl_fatal(f"pulling image: {error}")) == error
    assert _pull_reason(crictl_fatal("plain-word")) == "plain-word"
    assert _pull_reason("first line\nctr: connection refused\n") == "ctr: connection refused"
    assert _pull_reason("") == ""


def test_pod_table_status_reads_init_containers_then_app_containers_as_print_pod_does() -> None:
    """kubectl get pods' STATUS and READY from the server's printPod: a failed init container is
    Init:Error (no reason: Init:ExitCode:N), one running Init:I/N, a waiting app container its
    reason; only running, ready app containers count as ready."""
    from tests.standin.k8s_standin.serverside import _pod_cells

    def pod(inits: list[dict], apps: list[dict], phase: str = "Pending") -> dict:
        return {"metadata": {"name": "p"},
                "spec": {"initContainers": [{"name": f"i{n}"} for n in range(len(inits))],
                         "containers": [{"name": f"c{n}"} for n in range(len(apps))]},
                "status": {"phase": phase, "initContainerStatuses": inits, "containerStatuses": apps}}  # fmt: skip

    done = {"state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
    waiting = {"state": {"waiting": {"reason": "PodInitializing"}}}
    failed = {"state": {"terminated": {"exitCode": 3, "reason": "Error"}}, "restartCount": 2}
    assert _pod_cells(pod([done, failed], [waiting]))[0][1:4] == ["0/1", "Init:Error", "2"]
    assert _pod_cells(pod([{"state": {"terminated": {"exitCode": 3}}}], [waiting]))[0][2] == "Init:ExitCode:3"
    assert _pod_cells(pod([done, {"state": {"running": {}}}], [waiting]))[0][2] == "Init:1/2"
    creating = {"state": {"waiting": {"reason": "ContainerCreating"}}}
    assert _pod_cells(pod([], [creating]))[0][2] == "ContainerCreating"
    running = {"state": {"running": {}}, "ready": True, "restartCount": 1}
    assert _pod_cells(pod([done], [running], "Running"))[0][1:4] == ["1/1", "Running", "1"]
