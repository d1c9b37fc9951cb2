"""kubeadm's preflight checks (1.23 wording, order and severities)."""

from __future__ import annotations

import os
import re
import shutil
import socket
import sys
from collections.abc import Callable
from typing import Any

from .config import DNS1123, DNS1123_MSG, InitConfig, field_invalid, parse_version
from .containerd import crictl_info_probe, image_exists, pull_image
from .util import (
    MIN_CONTROL_PLANE,
    TOOLS_MANDATORY,
    TOOLS_OPTIONAL,
    VERSION,
    Fail,
    hp,
    read_text,
    run,
    systemctl,
)

# --------------------------------------------------------------------------- preflight

CheckResult = tuple[list[str], list[str]]  # (warnings, errors)


class Check:
    def __init__(self, name: str, fn: Callable[[], CheckResult]) -> None:
        self.name = name
        self.fn = fn


def check_file_content(path: str, content: str = "1") -> Check:
    def fn() -> CheckResult:
        try:
            with open(hp(path), "rb") as f:
                got = f.read(len(content))
        except OSError:
            return [], [f"{path} does not exist"]
        return ([], []) if got == content.encode() else ([], [f"{path} contents are not set to {content}"])

    return Check("FileContent-" + path.replace("/", "-"), fn)


def check_file_available(path: str) -> Check:
    return Check("FileAvailable-" + path.replace("/", "-"),
                 lambda: ([], [f"{path} already exists"] if os.path.lexists(hp(path)) else []))  # fmt: skip


def check_dir_available(path: str) -> Check:
    def fn() -> CheckResult:
        p = hp(path)
        if not os.path.exists(p):
            return [], []
        try:
            return [], [f"{path} is not empty"] if os.listdir(p) else []
        except OSError as e:
            return [], [f"unable to check if {path} is empty: {e}"]

    return Check("DirAvailable-" + path.replace("/", "-"), fn)


def port_in_use(port: int) -> bool:
    """net.Listen("tcp", ":port") with Go's SO_REUSEADDR."""
    for fam, addr in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
        try:
            s = socket.socket(fam, socket.SOCK_STREAM)
        except OSError:
            continue
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if fam == socket.AF_INET6:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            s.bind((addr, port))
            s.listen(1)
            return False
        except OSError as e:
            if e.errno in (98, 13):  # EADDRINUSE, EACCES
                return True
        finally:
            s.close()
    return False


def check_port(port: int) -> Check:
    return Check(f"Port-{port}", lambda: ([], [f"Port {port} is in use"] if port_in_use(port) else []))


def check_swap() -> Check:
    def fn() -> CheckResult:
        text = read_text(hp("/proc/swaps"))
        if text is None:
            return [], []
        lines = [ln for ln in text.split("\n") if ln != ""]
        return (
            ([], ["running with swap on is not supported. Please disable swap"])
            if len(lines) > 1
            else ([], [])
        )

    return Check("Swap", fn)


def check_in_path(tool: str, mandatory: bool) -> Check:
    def fn() -> CheckResult:
        if shutil.which(tool):
            return [], []
        msg = f"{tool} not found in system path"
        return ([], [msg]) if mandatory else ([msg], [])

    return Check(f"FileExisting-{tool.replace('/', '-')}", fn)


def num_cpu() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def mem_total_mb() -> int:
    m = re.search(r"MemTotal:\s+(\d+) kB", read_text(hp("/proc/meminfo")) or "")
    return int(m.group(1)) // 1024 if m else 0


def check_num_cpu(required: int = 2) -> Check:
    def fn() -> CheckResult:
        n = num_cpu()
        return [], [
            f"the number of available CPUs {n} is less than the required {required}"
        ] if n < required else []

    return Check("NumCPU", fn)


def check_mem(required: int = 1700) -> Check:
    def fn() -> CheckResult:
        mb = mem_total_mb()
        return [], [
            f"the system RAM ({mb} MB) is less than the minimum {required} MB"
        ] if mb < required else []

    return Check("Mem", fn)


def check_cri(sock: str) -> Check:
    def fn() -> CheckResult:
        rc, out = crictl_info_probe(sock)
        return (
            ([], [])
            if rc == 0
            else ([], [f"container runtime is not running: output: {out}, error: exit status {rc}"])
        )

    return Check("CRI", fn)


def check_service(svc: str) -> Check:
    def fn() -> CheckResult:
        if not shutil.which("systemctl"):
            return ["no supported init system detected, skipping checking for services"], []
        _, out = systemctl("status", f"{svc}.service", "--no-pager")
        if "Loaded: not-found" in out or "could not be found" in out:
            return [f"{svc} service does not exist"], []
        rc, _ = systemctl("is-enabled", f"{svc}.service")
        return (
            ([f"{svc} service is not enabled, please run 'systemctl enable {svc}.service'"], [])
            if rc
            else ([], [])
        )

    return Check(f"Service-{svc.title()}", fn)


def check_hostname(node: str) -> Check:
    def fn() -> CheckResult:
        warns = [] if DNS1123.match(node) else [f'invalid node name format "{node}": {DNS1123_MSG}']
        try:
            socket.getaddrinfo(node, None)
        except OSError:
            warns += [f'hostname "{node}" could not be reached',
                      f'hostname "{node}": lookup {node} on 127.0.0.53:53: no such host']  # fmt: skip
        return warns, []

    return Check("Hostname", fn)


def check_kubelet_version(k8s_version: str) -> Check:
    def fn() -> CheckResult:
        rc, out = run(["kubelet", "--version"])
        if rc == 127:
            return [
                "couldn't get kubelet version: cannot execute 'kubelet --version': executable file not found in $PATH"
            ], []
        kv = parse_version(out.strip().rsplit(" ", 1)[-1])
        if kv is None:
            return [], [f"couldn't parse kubelet version: {out.strip()}"]
        if kv < MIN_CONTROL_PLANE:
            return [], [
                f'Kubelet version "v{".".join(map(str, kv))}" is lower than kubeadm can support. Please upgrade kubelet'
            ]
        cp = parse_version(k8s_version) if k8s_version else None
        if cp and kv[:2] > cp[:2]:
            return [], ["the kubelet version is higher than the control plane version. This is not a supported "
                        f'version skew and may lead to a malfunctional cluster. Kubelet version: "{out.strip().split()[-1]}" '
                        f'Control plane version: "{k8s_version}"']  # fmt: skip
        return [], []

    return Check("KubeletVersion", fn)


def check_k8s_version(k8s_version: str) -> Check:
    def fn() -> CheckResult:
        kv, mine = parse_version(k8s_version), parse_version(VERSION)
        if kv and mine and kv[:2] > mine[:2]:
            return ["Kubernetes version is greater than kubeadm version. Please consider to upgrade kubeadm. "
                    f"Kubernetes version: {k8s_version.lstrip('v')}. Kubeadm version: {mine[0]}.{mine[1]}.x"], []  # fmt: skip
        return [], []

    return Check("KubernetesVersion", fn)


def check_system_verification() -> Check:
    def fn() -> CheckResult:
        errs, warns = [], []
        rel = os.uname().release
        kv = tuple(int(x) for x in re.findall(r"\d+", rel)[:2])
        if kv < (3, 10):
            errs.append(
                f"kernel release {rel} is unsupported. Recommended LTS version from the 4.x series is 4.4."
            )
        cg = read_text(hp("/proc/cgroups")) or ""
        enabled = {
            ln.split()[0] for ln in cg.splitlines()[1:] if len(ln.split()) >= 4 and ln.split()[3] == "1"
        }
        missing = [
            c
            for c in ("cpu", "cpuacct", "cpuset", "devices", "freezer", "memory", "pids")
            if c not in enabled
        ]
        if cg and missing:
            errs.append(f"missing required cgroups: {' '.join(missing)}")
        configs = ["/proc/config.gz", f"/boot/config-{rel}", f"/lib/modules/{rel}/config"]
        if not any(os.path.exists(hp(p)) for p in configs):
            warns.append('failed to parse kernel config: unable to load kernel module: "configs", output: "modprobe: '
                         f'FATAL: Module configs not found in directory /lib/modules/{rel}\\n", err: exit status 1')  # fmt: skip
        return warns, errs

    return Check("SystemVerification", fn)


def check_firewalld(ports: list[int]) -> Check:
    def fn() -> CheckResult:
        rc, _ = systemctl("is-active", "firewalld") if shutil.which("systemctl") else (1, "")
        if rc == 0:
            plist = " ".join(map(str, ports))
            return [
                f"firewalld is active, please ensure ports [{plist}] are open or your cluster may not function correctly"
            ], []
        return [], []

    return Check("Firewalld", fn)


def common_checks(k8s_version: str, node: str, cri: str) -> list[Check]:
    """preflight.addCommonChecks (1.23, Linux, containerd)."""
    checks = [check_cri(cri)]
    if "dockershim" not in cri:
        checks.append(check_in_path("crictl", True))
    checks += [
        check_file_content("/proc/sys/net/bridge/bridge-nf-call-iptables"),
        check_file_content("/proc/sys/net/ipv4/ip_forward"),
        check_swap(),
    ]
    checks += [check_in_path(t, True) for t in TOOLS_MANDATORY]
    checks += [check_in_path(t, False) for t in TOOLS_OPTIONAL]
    checks += [
        check_system_verification(),
        check_hostname(node),
        check_kubelet_version(k8s_version),
        check_service("kubelet"),
        check_port(10250),
    ]
    return checks


def init_checks(cfg: InitConfig) -> list[Check]:
    md = "/etc/kubernetes/manifests"
    names = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd")
    checks = [
        check_num_cpu(),
        check_mem(),
        check_k8s_version(cfg.version),
        check_firewalld([cfg.port, 10250]),
        check_port(cfg.port),
        check_port(10259),
        check_port(10257),
        *(check_file_available(f"{md}/{n}.yaml") for n in names),
    ]
    checks += common_checks(cfg.version, cfg.node_name, cfg.cri_socket)
    local = (cfg.cluster.get("etcd") or {}).get("local")
    if local is not None:
        checks += [
            check_port(2379),
            check_port(2380),
            check_dir_available(local.get("dataDir", "/var/lib/etcd")),
        ]
    return checks


def join_checks(node: str, cri: str) -> list[Check]:
    checks = [check_file_available("/etc/kubernetes/kubelet.conf"),
              check_file_available("/etc/kubernetes/bootstrap-kubelet.conf")]  # fmt: skip
    checks += common_checks("", node, cri)
    checks.append(check_file_available("/etc/kubernetes/pki/ca.crt"))
    return checks


def parse_ignore(values: list[str], from_config: list[str] | None = None) -> set[str]:
    out = {v.strip().lower() for val in values for v in val.split(",") if v.strip()}
    out |= {v.lower() for v in from_config or []}
    if "all" in out and len(out) > 1:
        raise Fail(
            field_invalid(
                "ignore-preflight-errors",
                ",".join(sorted(out)),
                "don't specify individual checks if 'all' is used",
            )
        )
    return out


def run_checks(checks: list[Check], ignore: set[str], warn_out: Any = None) -> None:
    """preflight.RunChecks: warnings to stderr as they come, errors collected into one failure."""
    warn_out = warn_out or sys.stderr
    errbuf = ""
    for c in checks:
        warns, errs = c.fn()
        if "all" in ignore or c.name.lower() in ignore:
            warns, errs = warns + errs, []
        for w in warns:
            warn_out.write(f"\t[WARNING {c.name}]: {w}\n")
        for e in errs:
            errbuf += f"\t[ERROR {c.name}]: {e}\n"
    if errbuf:
        raise Fail(
            "[preflight] Some fatal errors occurred:\n" + errbuf
            + "[preflight] If you know what you are doing, you can make a check non-fatal with "
            "`--ignore-preflight-errors=...`"
        )  # fmt: skip


def root_check(ignore: set[str]) -> None:
    ok = os.geteuid() == 0
    run_checks(
        [Check("IsPrivilegedUser", lambda: ([], [] if ok else ["user is not running as root"]))], ignore
    )


def check_image_pull(endpoint: str, images: list[str]) -> Check:
    def fn() -> CheckResult:
        errs = []
        for img in images:
            if image_exists(endpoint, img):
                continue
            rc, out = pull_image(endpoint, img)
            if rc:
                errs.append(f"failed to pull image {img}: output: {out}, error: exit status 1")
        return [], errs

    return Check("ImagePull", fn)
