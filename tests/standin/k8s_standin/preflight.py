"""kubeadm's preflight checks (1.23 wording, order and severities)."""

from __future__ import annotations

import os
import re
import shutil
import socket
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
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
# kubeadm 1.23's checks as ONE table (cmd/kubeadm/app/preflight/checks.go): RunInitNodeChecks,
# RunJoinNodeChecks and addCommonChecks in their order, each row naming the check, what it reads
# on the node (probe), when it fails (predicate), kubeadm's words then (formatted with `arg` and
# `got`, what the probe read), error or warning, and the stages it runs in.

CheckResult = tuple[list[str], list[str]]  # (warnings, errors)
ERROR, WARNING = "error", "warning"
ROOT, INIT, JOIN, PULL = "root", "init", "join", "pull"  # PULL: init's image pull, after the others
BOTH = frozenset({INIT, JOIN})


class Check:
    def __init__(self, name: str, fn: Callable[[], CheckResult]) -> None:
        self.name = name
        self.fn = fn


@dataclass(frozen=True)
class Ctx:
    """What the checks of one kubeadm run depend on."""

    version: str = ""  # kubernetesVersion (init); "" on join
    node: str = ""
    cri: str = ""
    port: int = 6443  # the API server's bind port (init)
    etcd_dir: str | None = None  # local etcd's dataDir (init), None without local etcd
    images: tuple[str, ...] = ()  # what init pulls

    @classmethod
    def for_init(cls, cfg: InitConfig, images: list[str] | None = None) -> Ctx:
        local = (cfg.cluster.get("etcd") or {}).get("local")
        etcd_dir = local.get("dataDir", "/var/lib/etcd") if local is not None else None
        return cls(cfg.version, cfg.node_name, cfg.cri_socket, cfg.port, etcd_dir, tuple(images or ()))


@dataclass(frozen=True)
class Says:
    """One way a check fails: the predicate on what the probe read, kubeadm's words, severity."""

    when: Callable[[Any], bool]
    text: str
    level: str = ERROR


@dataclass(frozen=True)
class Row:
    name: str  # kubeadm's check name: {arg}, or {slug} (the argument with "/" as "-")
    probe: Callable[[Any], Any]  # reads the node for one argument
    says: tuple[Says, ...]
    stages: frozenset[str]
    args: Callable[[Ctx], Iterable[Any]] = lambda ctx: (None,)  # one check per argument; none: skipped

    def check(self, arg: Any) -> Check:
        def fn() -> CheckResult:
            got, out = self.probe(arg), ([], [])
            for s in self.says:
                if s.when(got):
                    out[s.level == ERROR].append(s.text.format(arg=arg, got=got))
            return out

        return Check(self.name.format(arg=arg, slug=str(arg).replace("/", "-")), fn)


# --- probes: what each check reads on the node ---------------------------------------------


def read_prefix(path: str, n: int = 1) -> bytes | None:
    try:
        with open(hp(path), "rb") as f:
            return f.read(n)
    except OSError:
        return None


def dir_state(path: str) -> dict[str, str]:
    p = hp(path)
    if not os.path.exists(p):
        return {"state": "absent"}
    try:
        return {"state": "not empty" if os.listdir(p) else "empty"}
    except OSError as e:
        return {"state": "error", "error": str(e)}


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


def swap_on(_: Any) -> bool:
    text = read_text(hp("/proc/swaps"))
    return text is not None and len([ln for ln in text.split("\n") if ln != ""]) > 1


def num_cpu() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def mem_total_mb() -> int:
    m = re.search(r"MemTotal:\s+(\d+) kB", read_text(hp("/proc/meminfo")) or "")
    return int(m.group(1)) // 1024 if m else 0


def service_state(svc: str) -> str:
    if not shutil.which("systemctl"):
        return "no init"
    _, out = systemctl("status", f"{svc}.service", "--no-pager")
    if "Loaded: not-found" in out or "could not be found" in out:
        return "absent"
    return "disabled" if systemctl("is-enabled", f"{svc}.service")[0] else "enabled"


def node_name_state(node: str) -> dict[str, bool]:
    try:
        socket.getaddrinfo(node, None)
        resolves = True
    except OSError:
        resolves = False
    return {"valid": bool(DNS1123.match(node)), "resolves": resolves}


def kubelet_version(k8s_version: str) -> dict[str, Any]:
    rc, out = run(["kubelet", "--version"])
    kv = parse_version(out.strip().rsplit(" ", 1)[-1]) if rc != 127 else None
    cp = parse_version(k8s_version) if k8s_version else None
    return {"missing": rc == 127, "out": out.strip(), "kv": kv, "cp": cp, "cp_text": k8s_version,
            "kv_text": "v" + ".".join(map(str, kv)) if kv else "", "last": (out.strip().split() or [""])[-1]}  # fmt: skip


def k8s_version_skew(k8s_version: str) -> dict[str, Any]:
    kv, mine = parse_version(k8s_version), parse_version(VERSION)
    newer = bool(kv and mine and kv[:2] > mine[:2])
    return {"newer": newer, "v": k8s_version.lstrip("v"), "mine": f"{mine[0]}.{mine[1]}" if mine else ""}


def system_state(_: Any) -> dict[str, Any]:
    rel = os.uname().release
    kv = tuple(int(x) for x in re.findall(r"\d+", rel)[:2])
    cg = read_text(hp("/proc/cgroups")) or ""
    enabled = {ln.split()[0] for ln in cg.splitlines()[1:] if len(ln.split()) >= 4 and ln.split()[3] == "1"}
    wanted = ("cpu", "cpuacct", "cpuset", "devices", "freezer", "memory", "pids")
    missing = [c for c in wanted if c not in enabled] if cg else []
    configs = ["/proc/config.gz", f"/boot/config-{rel}", f"/lib/modules/{rel}/config"]
    return {"rel": rel, "old": kv < (3, 10), "missing": " ".join(missing),
            "config": any(os.path.exists(hp(p)) for p in configs)}  # fmt: skip


def firewalld_active(_: Any) -> bool:
    return shutil.which("systemctl") is not None and systemctl("is-active", "firewalld")[0] == 0


def pull_state(spec: tuple[str, str]) -> str | None:
    """None when the image is there or pulled, else the pull's output."""
    endpoint, img = spec
    if image_exists(endpoint, img):
        return None
    rc, out = pull_image(endpoint, img)
    return out if rc else None


# --- the table -------------------------------------------------------------------------------


def _files(*paths: str) -> Callable[[Ctx], Iterable[str]]:
    return lambda ctx: paths


_MANIFESTS = tuple(f"/etc/kubernetes/manifests/{n}.yaml"
                   for n in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd"))  # fmt: skip
_BRIDGE, _FORWARD = "/proc/sys/net/bridge/bridge-nf-call-iptables", "/proc/sys/net/ipv4/ip_forward"
_NOT_IN_PATH = "{arg} not found in system path"
_FILE_AVAILABLE = (Says(lambda got: got, "{arg} already exists"),)
_PORT = (Says(lambda got: got, "Port {arg} is in use"),)
_KUBELET = "the kubelet version is higher than the control plane version. This is not a supported version skew and may lead to a malfunctional cluster. Kubelet version: \"{got[last]}\" Control plane version: \"{got[cp_text]}\""  # fmt: skip
_MODPROBE = 'failed to parse kernel config: unable to load kernel module: "configs", output: "modprobe: FATAL: Module configs not found in directory /lib/modules/{got[rel]}\\n", err: exit status 1'  # fmt: skip

TABLE: tuple[Row, ...] = (
    Row("IsPrivilegedUser", lambda _: os.geteuid() == 0,
        (Says(lambda root: not root, "user is not running as root"),), frozenset({ROOT})),
    Row("NumCPU", lambda _: num_cpu(),
        (Says(lambda n: n < 2, "the number of available CPUs {got} is less than the required 2"),), frozenset({INIT})),
    Row("Mem", lambda _: mem_total_mb(),
        (Says(lambda mb: mb < 1700, "the system RAM ({got} MB) is less than the minimum 1700 MB"),), frozenset({INIT})),
    Row("KubernetesVersion", k8s_version_skew,
        (Says(lambda g: g["newer"], "Kubernetes version is greater than kubeadm version. Please consider to upgrade "
              "kubeadm. Kubernetes version: {got[v]}. Kubeadm version: {got[mine]}.x", WARNING),),
        frozenset({INIT}), lambda ctx: (ctx.version,)),
    Row("Firewalld", firewalld_active,
        (Says(lambda on: on, "firewalld is active, please ensure ports [{arg}] are open or your cluster may not "
              "function correctly", WARNING),),
        frozenset({INIT}), lambda ctx: (f"{ctx.port} 10250",)),
    Row("Port-{arg}", port_in_use, _PORT, frozenset({INIT}), lambda ctx: (ctx.port, 10259, 10257)),
    Row("FileAvailable-{slug}", lambda p: os.path.lexists(hp(p)), _FILE_AVAILABLE, frozenset({INIT}),
        _files(*_MANIFESTS)),
    Row("FileAvailable-{slug}", lambda p: os.path.lexists(hp(p)), _FILE_AVAILABLE, frozenset({JOIN}),
        _files("/etc/kubernetes/kubelet.conf", "/etc/kubernetes/bootstrap-kubelet.conf")),
    # addCommonChecks
    Row("CRI", crictl_info_probe,
        (Says(lambda got: got[0] != 0, "container runtime is not running: output: {got[1]}, error: exit status "
              "{got[0]}"),), BOTH, lambda ctx: (ctx.cri,)),
    Row("FileExisting-{slug}", shutil.which, (Says(lambda got: not got, _NOT_IN_PATH),), BOTH,
        lambda ctx: () if "dockershim" in ctx.cri else ("crictl",)),
    Row("FileContent-{slug}", read_prefix,
        (Says(lambda got: got is None, "{arg} does not exist"),
         Says(lambda got: got not in (None, b"1"), "{arg} contents are not set to 1")), BOTH, _files(_BRIDGE, _FORWARD)),
    Row("Swap", swap_on, (Says(lambda on: on, "running with swap on is not supported. Please disable swap"),), BOTH),
    Row("FileExisting-{slug}", shutil.which, (Says(lambda got: not got, _NOT_IN_PATH),), BOTH,
        _files(*TOOLS_MANDATORY)),
    Row("FileExisting-{slug}", shutil.which, (Says(lambda got: not got, _NOT_IN_PATH, WARNING),), BOTH,
        _files(*TOOLS_OPTIONAL)),  # warnings in 1.23, as in the real code
    Row("SystemVerification", system_state,
        (Says(lambda g: g["old"], "kernel release {got[rel]} is unsupported. Recommended LTS version from the 4.x "
              "series is 4.4."),
         Says(lambda g: g["missing"], "missing required cgroups: {got[missing]}"),
         Says(lambda g: not g["config"], _MODPROBE, WARNING)), BOTH),
    Row("Hostname", node_name_state,
        (Says(lambda g: not g["valid"], f'invalid node name format "{{arg}}": {DNS1123_MSG}', WARNING),
         Says(lambda g: not g["resolves"], 'hostname "{arg}" could not be reached', WARNING),
         Says(lambda g: not g["resolves"], 'hostname "{arg}": lookup {arg} on 127.0.0.53:53: no such host', WARNING)),
        BOTH, lambda ctx: (ctx.node,)),
    Row("KubeletVersion", kubelet_version,
        (Says(lambda g: g["missing"], "couldn't get kubelet version: cannot execute 'kubelet --version': executable "
              "file not found in $PATH", WARNING),
         Says(lambda g: not g["missing"] and g["kv"] is None, "couldn't parse kubelet version: {got[out]}"),
         Says(lambda g: g["kv"] is not None and g["kv"] < MIN_CONTROL_PLANE,
              'Kubelet version "{got[kv_text]}" is lower than kubeadm can support. Please upgrade kubelet'),
         Says(lambda g: g["kv"] is not None and g["kv"] >= MIN_CONTROL_PLANE and bool(g["cp"])
              and g["kv"][:2] > g["cp"][:2], _KUBELET)),
        BOTH, lambda ctx: (ctx.version,)),
    Row("Service-Kubelet", service_state,
        (Says(lambda s: s == "no init", "no supported init system detected, skipping checking for services", WARNING),
         Says(lambda s: s == "absent", "{arg} service does not exist", WARNING),
         Says(lambda s: s == "disabled", "{arg} service is not enabled, please run 'systemctl enable {arg}.service'",
              WARNING)),
        BOTH, lambda ctx: ("kubelet",)),
    Row("Port-{arg}", port_in_use, _PORT, BOTH, lambda ctx: (10250,)),
    # init, with a local etcd
    Row("Port-{arg}", port_in_use, _PORT, frozenset({INIT}), lambda ctx: (2379, 2380) if ctx.etcd_dir is not None else ()),
    Row("DirAvailable-{slug}", dir_state,
        (Says(lambda g: g["state"] == "not empty", "{arg} is not empty"),
         Says(lambda g: g["state"] == "error", "unable to check if {arg} is empty: {got[error]}")),
        frozenset({INIT}), lambda ctx: (ctx.etcd_dir,) if ctx.etcd_dir is not None else ()),
    Row("FileAvailable-{slug}", lambda p: os.path.lexists(hp(p)), _FILE_AVAILABLE, frozenset({JOIN}),
        _files("/etc/kubernetes/pki/ca.crt")),
    Row("ImagePull", pull_state,
        (Says(lambda out: out is not None, "failed to pull image {arg[1]}: output: {got}, error: exit status 1"),),
        frozenset({PULL}), lambda ctx: ((ctx.cri, img) for img in ctx.images)),
)  # fmt: skip


def select(stage: str, ctx: Ctx | None = None) -> list[Check]:
    """The checks of one stage, in kubeadm's order."""
    ctx = ctx or Ctx()
    return [row.check(arg) for row in TABLE if stage in row.stages for arg in row.args(ctx)]


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
    run_checks(select(ROOT), ignore)
