"""`appliance preflight`: what must hold on every node before (and after) an install, measured
by one probe per node. Each check is one small function in CHECKS (per node) or SITE_CHECKS
(across nodes); what the install itself provides is a warning, what it cannot fix is a failure,
and what a container node cannot show is a skip with the reason, never a pass."""

from __future__ import annotations

import base64
import binascii
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache

from appliance_cli import yamlfile
from appliance_cli.content import roles_dir, values_dir
from appliance_cli.core.checks import nvsmi, probe
from appliance_cli.core.checks.model import CheckResult, NodeFacts, Report, Status
from appliance_cli.core.checks.tls import tls_results
from appliance_cli.core.paths import PATHS
from appliance_cli.core.siteconfig import HardwareClass, Node, SiteConfig
from appliance_cli.errors import ApplianceError

SYSTEM_ROLES = {"master", "runai-system"}
KUBEADM_MIN_CPUS, SYSTEM_MIN_CPUS = 2, 4
KUBEADM_MIN_MEM_MB, SYSTEM_MIN_MEM_GB = 1700, 8
MIN_DISK_GB = 120  # the reference guide's minimum per node
NFS_MIN_FREE_GB = 110  # Run:ai's persistent volumes in total (the guide)
SUPPORTED_OS = {("ubuntu", "20.04"): "the appliance's OS", ("debian", "12"): "the rehearsal lab's OS"}
MASTER_PORTS = (6443, 10259, 10257, 2379, 2380, 10250)
WORKER_PORTS = (10250,)
# kubeadm's required tools, and the package os_prereqs installs each from (None: the base system's)
KUBEADM_TOOLS = {
    "conntrack": "conntrack",
    "ip": "iproute2",
    "iptables": "iptables",
    "mount": None,
    "nsenter": None,
    "ebtables": "ebtables",
    "ethtool": "ethtool",
    "socat": "socat",
    "tc": "iproute2",
    "touch": None,
}
SKEW_WARN_S, SKEW_FAIL_S = 1.0, 60.0
# Where the registry role puts the CA every node trusts and the pull password (the master only):
# its defaults registry_ca_trust_path and registry_auth_password_file take them from roles/appliance_paths.
REGISTRY_CA_TRUST = PATHS.registry_ca
REGISTRY_PASSWORD_FILE = PATHS.registry_password
# Where the probe looks for what decides the cgroup driver and for an earlier cluster's leftovers.
CONTAINERD_CONFIG, DOCKER_DAEMON = PATHS.containerd_config, PATHS.docker_daemon
KUBELET_CONFIG, CNI_CONF_DIR = PATHS.kubelet_config, PATHS.cni_conf_dir
# kubeadm's own default for a local etcd's data (DefaultEtcdDataDir, cmd/kubeadm/app/apis/kubeadm/
# <version>/defaults.go); control_plane leaves it so. kubeadm init's preflight refuses it non-empty.
KUBEADM_ETCD_DATA_DIR = "/var/lib/etcd"
# Where the GPU Operator mounts its driver container's root on the host (gpu-operator's
# DefaultNvidiaDriverRoot, api/nvidia/v1/clusterpolicy_types.go); probe.sh runs nvidia-smi in it.
GPU_DRIVER_ROOT = "/run/nvidia/driver"
CONTAINER = "container node: "


@dataclass(frozen=True)
class Ctx:
    cfg: SiteConfig
    node: Node
    facts: NodeFacts
    before_install: bool = False  # run by `appliance install`: what it repairs does not block it

    @property
    def hw(self) -> HardwareClass:
        return self.cfg.hardware_classes[self.node.hardware_class]

    @property
    def is_master(self) -> bool:
        return "master" in self.node.roles

    @property
    def installed(self) -> bool:
        return self.facts.get("kubelet_conf") == "present"

    def result(
        self, check: str, layer: str, status: Status, value: str = "", expected: str = "", hint: str = ""
    ) -> CheckResult:
        return CheckResult(check, layer, self.node.name, status, value, expected, hint)


NodeCheck = Callable[[Ctx], CheckResult | None]


def _min_check(
    ctx: Ctx, check: str, have: float, unit: str, rules: list[tuple[float, str, Status]]
) -> CheckResult:
    """The first rule (minimum, why, status) that `have` falls below decides; else pass."""
    for minimum, why, status in rules:
        if have < minimum:
            return ctx.result(check, "hardware", status, f"{have:g} {unit}", f">= {minimum:g} {unit} ({why})",
                              "use a node that meets it, or correct the node's hardware class")  # fmt: skip
    top = max(r[0] for r in rules)
    return ctx.result(check, "hardware", Status.PASS, f"{have:g} {unit}", f">= {top:g} {unit}")


def cpu(ctx: Ctx) -> CheckResult:
    if ctx.facts.in_container:
        return ctx.result("cpu", "hardware", Status.SKIP, hint=CONTAINER + "it sees the host's CPUs")
    rules: list[tuple[float, str, Status]] = [(KUBEADM_MIN_CPUS, "kubeadm", Status.FAIL)]
    if SYSTEM_ROLES & set(ctx.node.roles):
        rules.append((SYSTEM_MIN_CPUS, "system node", Status.FAIL))
    rules.append((ctx.hw.cpu_cores, f"hardware class {ctx.node.hardware_class}", Status.WARN))
    return _min_check(ctx, "cpu", float(ctx.facts.get("nproc", "0") or 0), "CPUs", rules)


def memory(ctx: Ctx) -> CheckResult:
    if ctx.facts.in_container:
        return ctx.result("memory", "hardware", Status.SKIP, hint=CONTAINER + "it sees the host's memory")
    gb = int(ctx.facts.get("mem_kb", "0") or 0) / 2**20
    rules: list[tuple[float, str, Status]] = [(KUBEADM_MIN_MEM_MB / 1024, "kubeadm", Status.FAIL)]
    if SYSTEM_ROLES & set(ctx.node.roles):
        rules.append((SYSTEM_MIN_MEM_GB * 0.95, "system node", Status.FAIL))  # MemTotal < installed RAM
    rules.append((ctx.hw.ram_gb * 0.9, f"hardware class {ctx.node.hardware_class}", Status.WARN))
    return _min_check(ctx, "memory", round(gb, 1), "GiB", rules)


def disk(ctx: Ctx) -> CheckResult:
    if ctx.facts.in_container:
        return ctx.result("disk", "hardware", Status.SKIP, hint=CONTAINER + "it shares the host's disk")
    gb = int(ctx.facts.get("disk_free_bytes", "0") or 0) / 1e9
    return _min_check(
        ctx, "disk", round(gb, 1), "GB free in /var/lib", [(MIN_DISK_GB, "reference guide", Status.FAIL)]
    )


def nic_speed(ctx: Ctx) -> CheckResult:
    want = ctx.hw.nic_speed_gbps * 1000
    if ctx.facts.in_container:  # a veth reports a fixed 10000 Mb/s whatever the path can carry
        return ctx.result(
            "nic_speed",
            "network",
            Status.SKIP,
            expected=f">= {want} Mb/s",
            hint=CONTAINER + "a veth has no link speed",
        )
    speeds = {
        n: int(v) for n, v in ctx.facts.prefixed("speed").items() if v.lstrip("-").isdigit() and int(v) > 0
    }
    up = {n: s for n, s in speeds.items() if ctx.facts.get(f"operstate.{n}") == "up"}
    want = ctx.hw.nic_speed_gbps * 1000
    if not up:
        why = (
            CONTAINER + "its veth reports no link speed"
            if ctx.facts.in_container
            else "no NIC reports a link speed"
        )
        return ctx.result("nic_speed", "network", Status.SKIP, expected=f">= {want} Mb/s", hint=why)
    name, best = max(up.items(), key=lambda kv: kv[1])
    status = Status.PASS if best >= want else Status.FAIL
    return ctx.result("nic_speed", "network", status, f"{best} Mb/s ({name})", f">= {want} Mb/s (hardware class)",
                      "" if status is Status.PASS else "check the cabling, the switch port and the NIC's firmware")  # fmt: skip


def gpus(ctx: Ctx) -> CheckResult | None:
    """The PCI devices against the class's total; with the driver's names (nvidia-smi), the count
    of each model against the class's, so an A6000 in an A100 slot is named."""
    want, expected = ctx.hw.gpu_total, ctx.hw.gpu_summary()
    if not want:
        return None
    found = ctx.facts.lists.get("gpu_pci", [])
    if ctx.facts.in_container and not found:
        return ctx.result(
            "gpus", "gpu", Status.SKIP, expected=expected, hint=CONTAINER + "no GPU is passed in"
        )
    names = [line.split(",")[0].strip() for line in ctx.facts.lists.get("gpu_smi", [])]
    per_model = {g.model: sum(g.model.lower() in n.lower() for n in names) for g in ctx.hw.gpus}
    unknown = sorted({n for n in names if not any(g.model.lower() in n.lower() for g in ctx.hw.gpus)})
    if names:
        seen = [f"{per_model[g.model]} x {g.model}" for g in ctx.hw.gpus] + [
            f"{sum(n == u for n in names)} x {u}" for u in unknown
        ]
        value = f"{len(found)} NVIDIA PCI device(s): " + " + ".join(
            s for s in seen if not s.startswith("0 x ")
        )
    else:
        value = f"{len(found)} NVIDIA PCI device(s)"
    ok = len(found) == want and (
        not names or (not unknown and all(per_model[g.model] == g.count for g in ctx.hw.gpus))
    )
    return ctx.result("gpus", "gpu", Status.PASS if ok else Status.FAIL, value, expected,
                      "" if ok else "reseat or replace the GPUs, or correct the hardware class")  # fmt: skip


def nouveau(ctx: Ctx) -> CheckResult | None:
    if not ctx.hw.gpu_total:
        return None
    if ctx.facts.in_container:
        return ctx.result("nouveau", "gpu", Status.SKIP, hint=CONTAINER + "kernel modules are the host's")
    if ctx.facts.get("nouveau_loaded") == "yes":
        return ctx.result("nouveau", "gpu", Status.FAIL, "loaded", "not loaded",
                          "blacklist nouveau (/etc/modprobe.d), update-initramfs -u, reboot")  # fmt: skip
    if not ctx.facts.get("nouveau_blacklisted"):
        return ctx.result("nouveau", "gpu", Status.WARN, "not blacklisted", "blacklisted",
                          "add 'blacklist nouveau' to /etc/modprobe.d so it never loads before the NVIDIA driver")  # fmt: skip
    return ctx.result("nouveau", "gpu", Status.PASS, "not loaded, blacklisted", "not loaded")


def _host_gpus(ctx: Ctx) -> list[nvsmi.GpuState] | str | None:
    """The GPUs as the host's nvidia-smi reads them (the probe's `nvidia-smi -q -x`); None: no
    host driver; a str: why it could not be read."""
    raw = ctx.facts.values.get("gpu_xml_b64")
    if raw is None:
        return "nvidia-smi answers, -q -x printed nothing" if ctx.facts.lists.get("gpu_smi") else None
    try:
        return nvsmi.parse_xml(base64.b64decode(raw, validate=True).decode("utf-8", "replace"))
    except (binascii.Error, ValueError) as exc:
        return str(exc) if isinstance(exc, nvsmi.NvsmiError) else f"nvidia-smi -q -x: unreadable ({exc})"


def gpu_driver(ctx: Ctx) -> CheckResult | None:
    """gpu.driver container wants no driver on the host (the driver container loads its own);
    host wants one that nvidia-smi can read."""
    if not ctx.hw.gpu_total:
        return None
    gpus, want = _host_gpus(ctx), ctx.cfg.gpu.driver
    if isinstance(gpus, str):
        return ctx.result("gpu_driver", "gpu", Status.FAIL, gpus, "nvidia-smi answers",
                          "run nvidia-smi -q -x on the node: the driver or its library is broken")  # fmt: skip
    version = next((g.driver_version for g in gpus or [] if g.driver_version), "?")
    if want == "container":
        if gpus is None:
            return ctx.result(
                "gpu_driver", "gpu", Status.PASS, "no host driver", "none (gpu.driver: container)"
            )
        return ctx.result("gpu_driver", "gpu", Status.FAIL, f"host driver {version} (nvidia-smi on the host)",
                          "none (gpu.driver: container)",
                          "it fights the GPU Operator's driver container: remove it (apt purge the nvidia driver "
                          "packages, reboot) or set gpu.driver: host")  # fmt: skip
    if gpus is None:
        if ctx.facts.in_container:
            return ctx.result("gpu_driver", "gpu", Status.SKIP, hint=CONTAINER + "no GPU is passed in")
        return ctx.result("gpu_driver", "gpu", Status.FAIL, "no nvidia-smi on the host", "a driver (gpu.driver: host)",
                          "install the NVIDIA driver on the host, or set gpu.driver: container")  # fmt: skip
    declared = ctx.hw.driver_version
    expected = f"driver {declared} (hardware class)" if declared else "a driver (gpu.driver: host)"
    if declared and version != declared:
        return ctx.result("gpu_driver", "gpu", Status.FAIL, f"driver {version}, {len(gpus)} GPUs", expected,
                          "install the class's driver on this host, or correct its driver_version")  # fmt: skip
    return ctx.result("gpu_driver", "gpu", Status.PASS, f"driver {version}, {len(gpus)} GPUs", expected)


# An NVIDIA driver version as nvidia-smi prints it (550.90.07, 535.104.05, 470.82)
_DRIVER_VERSION = re.compile(r"[0-9]{2,4}(\.[0-9]{1,3}){1,2}")
# The GPU Operator's values file of each chart version (gpu_operator_values_dir's files)
_OPERATOR_VALUES = "gpu-operator-*.yaml"


@cache
def driver_pins() -> dict[str, str]:
    """{chart version: driver.version} of each GPU Operator values file the toolkit carries: the
    driver the gpu_operator role deploys for that chart (it refuses a chart without one)."""
    pins = {}
    for path in sorted(values_dir().glob(_OPERATOR_VALUES)):
        try:
            version = ((yamlfile.read(path) or {}).get("driver") or {}).get("version")
        except (OSError, yamlfile.YamlError, AttributeError) as e:
            raise ApplianceError(f"{path}: {e}") from e
        if not isinstance(version, str) or not _DRIVER_VERSION.fullmatch(version):
            raise ApplianceError(f"{path}: driver.version: {version!r} is not an NVIDIA driver version")
        pins[path.name.removeprefix("gpu-operator-").removesuffix(".yaml")] = version
    if not pins:
        raise ApplianceError(f"{values_dir()}: no {_OPERATOR_VALUES}: the toolkit is incomplete")
    return pins


def gpu_container_driver(ctx: Ctx) -> CheckResult | None:
    """gpu.driver container: the driver the GPU Operator's driver container runs (nvidia-smi in
    the container's root, which the operator mounts at GPU_DRIVER_ROOT: probe.sh) against the
    one the toolkit's values pin. Before the install there is none yet: the install deploys it."""
    if not ctx.hw.gpu_total or ctx.cfg.gpu.driver != "container" or not ctx.cfg.gpu.operator:
        return None
    pins = driver_pins()
    expected = " or ".join(f"driver {v} (gpu-operator {c}'s values)" for c, v in pins.items())
    have = ctx.facts.values.get("gpu_container_driver")
    if have is None:
        if not ctx.installed:
            return None
        return ctx.result("gpu_container_driver", "gpu", Status.WARN, f"no driver container (nothing at {GPU_DRIVER_ROOT})",
                          expected, f"the GPU Operator's driver pod on {ctx.node.name} is not up: kubectl -n "
                          f"{operator_namespace()} get pods -o wide; its log names why")  # fmt: skip
    if not _DRIVER_VERSION.fullmatch(have):
        return ctx.result("gpu_container_driver", "gpu", Status.FAIL, "the driver container's nvidia-smi answers no version",
                          expected, f"run chroot {GPU_DRIVER_ROOT} nvidia-smi on the node: its driver is not loaded")  # fmt: skip
    if have not in pins.values():
        return ctx.result("gpu_container_driver", "gpu", Status.FAIL, f"driver container {have}", expected,
                          "it is not the driver this toolkit pins: `appliance install` sets the operator's "
                          "driver.version; then drain the node and delete its nvidia-driver pod, which "
                          "comes back with the pinned driver")  # fmt: skip
    return ctx.result("gpu_container_driver", "gpu", Status.PASS, f"driver container {have}", expected)


_GPU_EXPECTED = {
    "pcie": "each GPU's link at the class's PCIe generation, full width",
    "ecc": "ECC on, no uncorrected errors",
    "memory": "no row remapping or page retirement pending or failed",
    "persistence": "persistence mode on",
    "mig": "MIG mode as gpu.mig says, nothing pending",
}


def _gpu_check(ctx: Ctx, kind: str) -> CheckResult | None:
    """One kind of nvsmi finding over the node's GPUs (nothing to read: gpu_driver says why)."""
    gpus = _host_gpus(ctx)
    if not ctx.hw.gpu_total or not isinstance(gpus, list) or not gpus:
        return None
    wanted = ctx.cfg.gpu.mig.partitions(ctx.node.hardware_class)
    found = [(g, f) for g in gpus for f in nvsmi.findings(g, ctx.hw.pcie_gen, wanted) if f.check == kind]
    check, expected = f"gpu_{kind}", _GPU_EXPECTED[kind]
    if not found:
        return ctx.result(check, "gpu", Status.PASS, f"{len(gpus)} GPUs", expected)
    status = nvsmi.worst(f for _, f in found)
    worst = next(f for _, f in found if f.status is status)
    value = "; ".join(f"{g.bus_id}: {f.what}" for g, f in found)
    return ctx.result(check, "gpu", status, value, expected, worst.hint)


def gpu_pcie(ctx: Ctx) -> CheckResult | None:
    return _gpu_check(ctx, "pcie")


def gpu_ecc(ctx: Ctx) -> CheckResult | None:
    return _gpu_check(ctx, "ecc")


def gpu_memory(ctx: Ctx) -> CheckResult | None:
    return _gpu_check(ctx, "memory")


def gpu_persistence(ctx: Ctx) -> CheckResult | None:
    return _gpu_check(ctx, "persistence")


def gpu_mig(ctx: Ctx) -> CheckResult | None:
    return _gpu_check(ctx, "mig")


# Node Feature Discovery's daemons as probe.sh names them (`nfd=DAEMON WHERE`)
_NFD_WHERE = re.compile(r"(nfd-[a-z-]+) (host|pod|namespace [a-z0-9]([-a-z0-9]*[a-z0-9])?)")
_K8S_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


@cache
def operator_namespace() -> str:
    """The namespace the GPU Operator's release (and so its own NFD) runs in: the gpu_operator
    role's default, its one definition."""
    path = roles_dir() / "gpu_operator" / "defaults" / "main.yml"
    try:
        value = (yamlfile.read(path) or {}).get("gpu_operator_namespace")
    except (OSError, yamlfile.YamlError, AttributeError) as e:
        raise ApplianceError(f"{path}: {e}") from e
    if not isinstance(value, str) or not _K8S_NAME.fullmatch(value):
        raise ApplianceError(f"{path}: gpu_operator_namespace: {value!r} is not a namespace name")
    return value


def nfd(ctx: Ctx) -> CheckResult | None:
    """A Node Feature Discovery that runs already, outside the GPU Operator's release: with
    gpu.nfd (the chart's `nfd.enabled`, true by default in gpu-operator v24.6.2's values.yaml)
    the operator deploys a second one over it, and two would label and garbage-collect the same
    nodes. With gpu.nfd false on an installed GPU node, nothing else may label it."""
    if not ctx.cfg.gpu.operator:
        return None
    ours = f"namespace {operator_namespace()}"
    seen = [m.groups()[:2] for x in ctx.facts.lists.get("nfd", []) if (m := _NFD_WHERE.fullmatch(x))]
    foreign = sorted(
        {f"{daemon} ({'outside Kubernetes' if where == 'host' else 'a pod' if where == 'pod' else where})"
         for daemon, where in seen if where != ours}
    )  # fmt: skip
    if ctx.cfg.gpu.nfd:
        expected = "none but the GPU Operator's (gpu.nfd: true deploys it)"
        if not foreign:
            return ctx.result("nfd", "gpu", Status.PASS, "none of another", expected)
        return ctx.result("nfd", "gpu", Status.FAIL, "runs: " + ", ".join(foreign), expected,
                          "this node has a Node Feature Discovery already: set gpu.nfd: false in appliance.yml "
                          "(the GPU Operator's nfd.enabled) so that the operator uses it, or remove it")  # fmt: skip
    expected = "the site's own (gpu.nfd: false)"
    if foreign or not ctx.installed or "gpu-worker" not in ctx.node.roles:
        return ctx.result("nfd", "gpu", Status.PASS, ", ".join(foreign) or "none yet", expected)
    return ctx.result("nfd", "gpu", Status.WARN, "none runs", expected,
                      "nothing labels this GPU node for the GPU Operator's components: deploy the site's "
                      "Node Feature Discovery, or set gpu.nfd: true")  # fmt: skip


def secure_boot(ctx: Ctx) -> CheckResult | None:
    if not ctx.hw.gpu_total:
        return None
    state = ctx.facts.get("secure_boot", "unknown")
    if ctx.facts.in_container:
        return ctx.result("secure_boot", "gpu", Status.SKIP, hint=CONTAINER + "firmware state is the host's")
    if state == "enabled":
        return ctx.result("secure_boot", "gpu", Status.WARN, state, "disabled",
                          "the GPU Operator's driver container builds unsigned modules: disable Secure Boot or sign them")  # fmt: skip
    return ctx.result("secure_boot", "gpu", Status.PASS, state, "disabled")


def os_release(ctx: Ctx) -> CheckResult:
    key = (ctx.facts.get("os_id"), ctx.facts.get("os_version_id"))
    value = ctx.facts.get("os_pretty") or " ".join(key)
    if key in SUPPORTED_OS:
        return ctx.result("os_release", "os", Status.PASS, value, SUPPORTED_OS[key])
    return ctx.result("os_release", "os", Status.WARN, value, "Ubuntu 20.04",
                      "the bundle's packages are built for Ubuntu 20.04; another release may not install")  # fmt: skip


def swap(ctx: Ctx) -> CheckResult:
    n = int(ctx.facts.get("swap_entries", "0") or 0)
    if n == 0:
        return ctx.result("swap", "os", Status.PASS, "off", "off")
    return ctx.result(
        "swap",
        "os",
        Status.WARN,
        f"{n} swap device(s) on",
        "off (kubeadm)",
        "the install turns swap off and comments it out of /etc/fstab",
    )


def sysctls(ctx: Ctx) -> CheckResult:
    vals = {"net.ipv4.ip_forward": ctx.facts.get("ip_forward"),
            "net.bridge.bridge-nf-call-iptables": ctx.facts.get("bridge_nf_call_iptables")}  # fmt: skip
    off = {k: v for k, v in vals.items() if v != "1"}
    if not off:
        return ctx.result("sysctls", "os", Status.PASS, "all 1", "1 (kubeadm)")
    value = ", ".join(f"{k}={v or '?'}" for k, v in off.items())
    return ctx.result(
        "sysctls", "os", Status.WARN, value, "1 (kubeadm)", "the install loads br_netfilter and sets them"
    )


def tools(ctx: Ctx) -> CheckResult:
    missing = [t for t in KUBEADM_TOOLS if not ctx.facts.get(f"tool.{t}")]
    base = [t for t in missing if KUBEADM_TOOLS[t] is None]
    if base:
        return ctx.result("tools", "os", Status.FAIL, f"missing: {', '.join(missing)}", "kubeadm's tools on PATH",
                          f"{', '.join(base)} belong to the base system (util-linux, coreutils): repair the OS install")  # fmt: skip
    if missing:
        pkgs = sorted({KUBEADM_TOOLS[t] or "" for t in missing})
        return ctx.result("tools", "os", Status.WARN, f"missing: {', '.join(missing)}", "kubeadm's tools on PATH",
                          f"the install adds them from the bundle ({', '.join(pkgs)})")  # fmt: skip
    return ctx.result("tools", "os", Status.PASS, "all present", "kubeadm's tools on PATH")


def cgroups(ctx: Ctx) -> CheckResult:
    fs = ctx.facts.get("cgroup_fs")
    version = {"cgroup2fs": "v2", "tmpfs": "v1"}.get(fs, f"unknown ({fs or '?'})")
    status = Status.PASS if version in ("v1", "v2") else Status.WARN
    return ctx.result(
        "cgroups", "os", status, version, "v1 or v2 (kubelet 1.23; systemd driver in containerd and kubelet)"
    )


def hostname(ctx: Ctx) -> CheckResult:
    host = ctx.facts.get("hostname")
    if host == ctx.node.name:
        return ctx.result("hostname", "network", Status.PASS, host, ctx.node.name)
    return ctx.result("hostname", "network", Status.WARN, host, ctx.node.name,
                      "the cluster registers the site's name; set the hostname to match (hostnamectl) to avoid confusion")  # fmt: skip


TIMEOUT = "!timeout"  # probe.sh: the resolver did not answer in time


def name_resolution(ctx: Ctx) -> CheckResult:
    """Every node name resolves on this node to the site's address (or not at all: the install
    writes /etc/hosts); a name resolving elsewhere would send kubelet and registry traffic astray,
    and a resolver that does not answer stalls every lookup /etc/hosts cannot serve."""
    wrong, unresolved, stalled = [], [], []
    for other in ctx.cfg.nodes:
        got = ctx.facts.get(f"resolve.{other.name}")
        if got == TIMEOUT:
            stalled.append(other.name)
        elif not got:
            unresolved.append(other.name)
        elif got != other.address and not got.startswith("127."):
            wrong.append(f"{other.name} -> {got} (site: {other.address})")
    expected = "every node name resolves to its site address"
    if wrong:
        return ctx.result("name_resolution", "network", Status.FAIL, "; ".join(wrong), expected,
                          "fix the DNS records or /etc/hosts entries named")  # fmt: skip
    if stalled and ctx.cfg.network.dns_servers:
        return ctx.result("name_resolution", "network", Status.FAIL, f"the resolver did not answer for {', '.join(stalled)}",
                          expected, f"check the DNS servers in /etc/resolv.conf (site: {', '.join(ctx.cfg.network.dns_servers)})")  # fmt: skip
    if stalled or unresolved:
        value = "; ".join(x for x in (f"unresolved: {', '.join(unresolved)}" if unresolved else "",
                                      f"resolver did not answer: {', '.join(stalled)}" if stalled else "") if x)  # fmt: skip
        return ctx.result("name_resolution", "network", Status.WARN, value, expected,
                          "the install adds every node to /etc/hosts (the site lists no DNS servers)")  # fmt: skip
    return ctx.result("name_resolution", "network", Status.PASS, f"{len(ctx.cfg.nodes)} names", expected)


def scheduler_domain(ctx: Ctx) -> CheckResult | None:
    domain = ctx.cfg.site.domain
    if not domain or ctx.cfg.scheduler.stack != "runai" or not ctx.is_master:
        return None
    got = ctx.facts.get(f"resolve.{domain}")
    if got and got != TIMEOUT:
        return ctx.result("scheduler_domain", "network", Status.PASS, f"{domain} -> {got}", "resolves")
    value = f"the resolver did not answer for {domain}" if got == TIMEOUT else f"{domain} does not resolve"
    return ctx.result("scheduler_domain", "network", Status.FAIL, value, "resolves",
                      "the Run:ai UI needs a DNS A record for site.domain before Run:ai is installed")  # fmt: skip


def ports(ctx: Ctx) -> CheckResult:
    wanted = MASTER_PORTS if ctx.is_master else WORKER_PORTS
    busy = [p for p in wanted if str(p) in ctx.facts.lists.get("port", [])]
    expected = f"free: {', '.join(map(str, wanted))}"
    if ctx.installed:
        return ctx.result(
            "ports", "kubernetes", Status.PASS, f"in use by the installed cluster: {len(busy)}", expected
        )
    if busy:
        return ctx.result("ports", "kubernetes", Status.FAIL, "in use: " + ", ".join(map(str, busy)), expected,
                          f"stop what listens there (ss -ltnp 'sport = :{busy[0]}' names it)")  # fmt: skip
    return ctx.result("ports", "kubernetes", Status.PASS, "all free", expected)


def manifests(ctx: Ctx) -> CheckResult | None:
    if ctx.installed:
        return None
    n = int(ctx.facts.get("manifests", "0") or 0)
    if n:
        return ctx.result("manifests_empty", "kubernetes", Status.FAIL, f"{n} file(s) in /etc/kubernetes/manifests",
                          "empty before kubeadm", "a previous cluster was not reset: `kubeadm reset` on this node")  # fmt: skip
    return ctx.result("manifests_empty", "kubernetes", Status.PASS, "empty", "empty before kubeadm")


def leftovers(ctx: Ctx) -> CheckResult | None:
    """What an earlier cluster leaves that this install would trip over: another pod network's
    CNI configuration (kubeadm reset keeps CNI_CONF_DIR: "The reset process does not clean CNI
    configuration"; the first file there wins over flannel's), and on the master etcd's data
    (kubeadm init refuses a non-empty data directory)."""
    if ctx.installed:
        return None
    found = [
        f"{CNI_CONF_DIR}/{c.split()[0]}" for c in ctx.facts.lists.get("cni_conf", []) if c.endswith(" other")
    ]
    if ctx.is_master and int(ctx.facts.get(f"entries.{KUBEADM_ETCD_DATA_DIR}", "0") or 0):
        found.append(f"{KUBEADM_ETCD_DATA_DIR} (not empty)")
    expected = "no other pod network's CNI configuration, no etcd data"
    if not found:
        return ctx.result("leftovers", "kubernetes", Status.PASS, "none", expected)
    return ctx.result("leftovers", "kubernetes", Status.FAIL, ", ".join(found), expected,
                      "an earlier cluster's: `kubeadm reset -f`, then remove them by hand (reset keeps CNI "
                      "configuration), after saving what must be kept")  # fmt: skip


def cgroup_driver(ctx: Ctx) -> CheckResult:
    """The cgroup driver the kubelet and the runtime are set to: both systemd (kubeadm's default
    since 1.22, and what container_runtime writes). Before the install a runtime configuration is
    rewritten by it; on an installed node a mismatch keeps pods from starting."""
    runtime = ctx.cfg.kubernetes.container_runtime
    kubelet, rt = (
        ctx.facts.get("cgroup_driver.kubelet", "absent"),
        ctx.facts.get(f"cgroup_driver.{runtime}", "absent"),
    )
    value, expected = f"kubelet {kubelet}, {runtime} {rt}", "kubelet systemd, runtime systemd"
    if kubelet == rt == "systemd":
        return ctx.result("cgroup_driver", "runtime", Status.PASS, value, expected)
    if not ctx.installed:
        if rt in ("absent", "systemd") and kubelet == "absent":
            return ctx.result(
                "cgroup_driver", "runtime", Status.PASS, value, expected + " (the install sets both)"
            )
        return ctx.result("cgroup_driver", "runtime", Status.WARN, value, expected,
                          f"the install rewrites {runtime}'s configuration with the systemd driver")  # fmt: skip
    return ctx.result("cgroup_driver", "runtime", Status.FAIL, value, expected,
                      f"the kubelet and {runtime} must agree on systemd: `appliance install --limit {ctx.node.name}` "
                      f"writes {runtime}'s configuration again; a kubelet set otherwise was changed by hand")  # fmt: skip


def runtime(ctx: Ctx) -> CheckResult:
    if ctx.facts.get("cri_socket") == "present":
        return ctx.result("cri_socket", "runtime", Status.PASS, "/run/containerd/containerd.sock", "present")
    status = Status.FAIL if ctx.installed else Status.WARN
    hint = (
        "containerd is not running on an installed node: systemctl status containerd"
        if ctx.installed
        else "the install provides containerd from the bundle"
    )
    return ctx.result("cri_socket", "runtime", status, "absent", "present", hint)


def bundle_on_master(ctx: Ctx) -> CheckResult | None:
    if not ctx.is_master:
        return None
    b = ctx.cfg.bundle
    places = [p for p in (b.master_source or b.source, b.path) if p]
    found = [p for p in places if ctx.facts.get(f"path.{p}") == "present"]
    if found:
        return ctx.result("bundle", "storage", Status.PASS, found[0], " or ".join(places))
    if b.apt_repo_url:
        return ctx.result(
            "bundle",
            "storage",
            Status.SKIP,
            hint=f"bundle.apt_repo_url ({b.apt_repo_url}) stands in for the bundle (lab rehearsal)",
        )
    return ctx.result("bundle", "storage", Status.FAIL, "absent", " or ".join(places),
                      f"mount the USB stick at {places[0]} on {ctx.node.name}")  # fmt: skip


def _registry(ctx: Ctx) -> CheckResult:
    """After the install: the registry answers over TLS with the CA this node trusts (anonymous
    401), and on the master the pull credentials are accepted (200)."""
    addr = ctx.cfg.registry.address
    anon, auth = ctx.facts.get("registry_anon"), ctx.facts.get("registry_auth")
    if anon in ("not-installed", ""):
        return ctx.result(
            "registry", "registry", Status.SKIP, hint="not installed yet: the install sets up the registry"
        )
    if anon == "no-curl":
        return ctx.result(
            "registry", "registry", Status.SKIP, hint="curl is missing (os_prereqs installs it)"
        )
    if anon == "000":
        return ctx.result("registry", "registry", Status.FAIL, f"https://{addr}/v2/ does not answer", "401 without credentials",
                          f"is the registry running on {ctx.cfg.master.name}? (systemctl status docker-registry)")  # fmt: skip
    if anon != "401":
        return ctx.result("registry", "registry", Status.FAIL, f"HTTP {anon} without credentials", "401 (auth required)",
                          "the registry must refuse anonymous pulls: rerun `appliance install --tags registry`")  # fmt: skip
    if auth and auth != "200":
        return ctx.result("registry", "registry", Status.FAIL, f"pull credentials refused (HTTP {auth})", "200 with the pull password",
                          "the htpasswd entry and the password file disagree: `appliance install --tags registry` repairs them")  # fmt: skip
    value = "answers, TLS trusted" + (", pull credentials accepted" if auth else "")
    return ctx.result("registry", "registry", Status.PASS, value, f"https://{addr}/v2/ with the site's CA")


def registry(ctx: Ctx) -> CheckResult:
    r = _registry(ctx)
    if r.status is Status.FAIL and ctx.before_install:  # the registry role starts and repairs it
        return ctx.result(
            r.check,
            r.layer,
            Status.WARN,
            r.value,
            r.expected,
            "the install's registry role repairs it: " + r.hint,
        )
    return r


NFS_ERROR = re.compile(r"\b(NFS\d?ERR|MNT\d?ERR)_[A-Z_]+(\(-?\d+\))?")
NFS_PROBLEMS = {"unreachable": "not reachable", "read-only": "read-only", "not-writable": "not writable"}


def nfs_export(ctx: Ctx) -> CheckResult | None:
    """The site's NFS export reachable and writable from this node, as root, with the userspace
    client (no kernel mount: the probe changes nothing on the node). libnfs-utils comes with the
    install (storage_nfs), so before it the check is skipped, saying so."""
    nfs = ctx.cfg.nfs
    if nfs is None:
        return None
    export, state = f"{nfs.server}:{nfs.path}", ctx.facts.get("nfs")
    expected = f"{export} reachable and writable as root"
    if state == "ok":
        warn = ctx.facts.get("nfs_cleanup") == "failed"
        return ctx.result("nfs_export", "storage", Status.WARN if warn else Status.PASS,
                          "reachable, writable" + (f" (probe file .appliance-preflight-{ctx.node.name} left behind)" if warn else ""),
                          expected, "remove it on the filer" if warn else "")  # fmt: skip
    if state in NFS_PROBLEMS:
        detail = ctx.facts.get("nfs_detail")
        code = NFS_ERROR.search(detail)  # the server's answer, without the per-node probe file name
        detail = code.group(0) if code else detail
        hint = (
            f"check the filer exports {nfs.path} to {ctx.node.name} ({ctx.node.address}) and that NFS "
            "(TCP 111, 2049, mountd) is open from this node"
            if state == "unreachable"
            else f"export {nfs.path} read-write to the node network with root not squashed (no_root_squash)"
        )
        return ctx.result("nfs_export", "storage", Status.FAIL,
                          f"{export} {NFS_PROBLEMS[state]}" + (f" ({detail})" if detail else ""), expected, hint)  # fmt: skip
    why = (
        "libnfs-utils (nfs-ls, nfs-cp) is not installed yet: the install's storage_nfs role adds it "
        "and checks the export from every node"
        if state == "no-client"
        else f"the probe could not check it ({state or 'no answer'})"
    )
    return ctx.result("nfs_export", "storage", Status.SKIP, expected=expected, hint=why)


def nfs_space(ctx: Ctx) -> CheckResult | None:
    """On the master only (one node is enough): the export's free space (`nfs-ls -s`) against
    the 110 GB of persistent volumes Run:ai's backend claims (the guide). Not `df`: no node can
    mount it in the lab, and the check must not mount anything."""
    nfs = ctx.cfg.nfs
    if nfs is None or not ctx.is_master:
        return None
    expected = f">= {NFS_MIN_FREE_GB} GB free (Run:ai's persistent volumes)"
    free = ctx.facts.get("nfs_free_bytes")
    if not free.isdigit():
        return ctx.result("nfs_space", "storage", Status.SKIP, expected=expected,
                          hint="the export's free space is known once nfs_export answers (libnfs-utils, installed by the install)")  # fmt: skip
    gb = int(free) / 1e9
    if gb >= NFS_MIN_FREE_GB:
        return ctx.result("nfs_space", "storage", Status.PASS, f"{gb:.0f} GB free", expected)
    status = Status.FAIL if ctx.cfg.scheduler.stack == "runai" else Status.WARN
    return ctx.result("nfs_space", "storage", status, f"{gb:.1f} GB free on {nfs.server}:{nfs.path}", expected,
                      "grow the export, or free space on the filer, before installing the scheduler")  # fmt: skip


CHECKS: tuple[NodeCheck, ...] = (
    cpu, memory, disk, nic_speed, gpus, gpu_driver, gpu_container_driver, gpu_pcie, gpu_ecc, gpu_memory, gpu_persistence, gpu_mig,
    nfd, nouveau, secure_boot, os_release, swap, sysctls, tools,
    cgroups, hostname, name_resolution, scheduler_domain, ports, manifests, leftovers, runtime, cgroup_driver,
    bundle_on_master, registry,
    nfs_export, nfs_space,
)  # fmt: skip


def _duplicates(
    facts: dict[str, NodeFacts], values: Callable[[NodeFacts], Iterable[str]]
) -> dict[str, list[str]]:
    seen: dict[str, list[str]] = {}
    for name, f in facts.items():
        for v in set(values(f)):
            if v:
                seen.setdefault(v, []).append(name)
    return {v: sorted(nodes) for v, nodes in seen.items() if len(nodes) > 1}


def _unique(
    check: str,
    layer: str,
    facts: dict[str, NodeFacts],
    values: Callable[[NodeFacts], Iterable[str]],
    what: str,
) -> CheckResult:
    dups = _duplicates(facts, values)
    if dups:
        value = "; ".join(f"{v} on {', '.join(n)}" for v, n in sorted(dups.items()))
        return CheckResult(check, layer, "site", Status.FAIL, value, f"unique {what} per node",
                           f"nodes sharing a {what} confuse the cluster: fix the cloned install (regenerate it)")  # fmt: skip
    return CheckResult(check, layer, "site", Status.PASS, f"{len(facts)} nodes", f"unique {what} per node")


def site_checks(facts: dict[str, NodeFacts]) -> list[CheckResult]:
    ok = {n: f for n, f in facts.items() if not f.error}
    out = [
        _unique("unique_hostname", "network", ok, lambda f: [f.get("hostname")], "hostname"),
        _unique("unique_mac", "network", ok, lambda f: [m for m in f.prefixed("mac").values() if m != "00:00:00:00:00:00"], "MAC address"),
        _unique("unique_machine_id", "os", ok, lambda f: [f.get("machine_id")], "machine-id"),
    ]  # fmt: skip
    if all(f.get("product_uuid") for f in ok.values()):
        out.append(
            _unique("unique_product_uuid", "hardware", ok, lambda f: [f.get("product_uuid")], "product_uuid")
        )
    else:
        out.append(CheckResult("unique_product_uuid", "hardware", "site", Status.SKIP,
                               hint="product_uuid unreadable on some nodes (container nodes have none)"))  # fmt: skip
    out.append(time_skew(ok))
    return out


def time_skew(facts: dict[str, NodeFacts]) -> CheckResult:
    """Each node's clock against the controller's at the middle of its round trip; the spread
    between nodes is what breaks certificates and etcd."""
    offsets = {}
    for name, f in facts.items():
        try:
            offsets[name] = float(f.get("time")) - (f.received_at - f.rtt_s / 2)
        except ValueError:
            continue
    if len(offsets) < 2:
        return CheckResult("time_skew", "os", "site", Status.SKIP, hint="fewer than two nodes answered")
    lo, hi = min(offsets, key=offsets.__getitem__), max(offsets, key=offsets.__getitem__)
    spread = offsets[hi] - offsets[lo]
    value = f"{spread:.2f} s ({hi} ahead of {lo})"
    expected = f"< {SKEW_WARN_S:g} s between nodes"
    if spread >= SKEW_FAIL_S:
        return CheckResult(
            "time_skew",
            "os",
            "site",
            Status.FAIL,
            value,
            expected,
            "set the clocks (the install configures chrony on every node)",
        )
    if spread >= SKEW_WARN_S:
        return CheckResult(
            "time_skew",
            "os",
            "site",
            Status.WARN,
            value,
            expected,
            "the install's chrony aligns them; check NTP if it persists",
        )
    return CheckResult("time_skew", "os", "site", Status.PASS, value, expected)


def probe_args(cfg: SiteConfig, node: Node) -> list[str]:
    runai_domain = [cfg.site.domain] if cfg.site.domain and cfg.scheduler.stack == "runai" else []
    names = [n.name for n in cfg.nodes] + runai_domain
    args = [f"resolve={n}" for n in names]
    args.append(f"kubelet_conf={PATHS.kubelet_conf}")
    args += [f"cni_dir={CNI_CONF_DIR}", f"cgroup=kubelet:{KUBELET_CONFIG}"]
    runtime = cfg.kubernetes.container_runtime
    args.append(
        f"cgroup=containerd:{CONTAINERD_CONFIG}"
        if runtime == "containerd"
        else f"cgroup=docker:{DOCKER_DAEMON}"
    )
    if "master" in node.roles:
        args.append(f"entries={KUBEADM_ETCD_DATA_DIR}")
    if cfg.gpu.driver == "container" and cfg.hardware_classes[node.hardware_class].gpu_total:
        args.append(f"driver_root={GPU_DRIVER_ROOT}")
    args.append(f"registry={cfg.registry.address},{REGISTRY_CA_TRUST},{REGISTRY_PASSWORD_FILE}")
    if cfg.nfs is not None:
        args.append(f"nfs={cfg.nfs.server},.appliance-preflight-{node.name},{cfg.nfs.path}")
    if "master" in node.roles:
        b = cfg.bundle
        args += [f"path={p}" for p in (b.master_source or b.source, b.path) if p]
    return args


def run_preflight(
    cfg: SiteConfig,
    transport: probe.Transport | None = None,
    on_result: Callable[[CheckResult], None] = lambda r: None,
    limit: set[str] | None = None,
    before_install: bool = False,
) -> Report:
    """Probe the site's nodes (or those in `limit`) at once and run every check; `on_result` sees
    each result as soon as its node has answered. `before_install`: what the install repairs
    (a stopped registry) warns instead of failing."""
    start = time.monotonic()
    nodes = [n for n in cfg.nodes if limit is None or n.name in limit]
    report = Report(kind="preflight", site=cfg.site.name)
    by_name = {n.name: n for n in nodes}

    def node_done(facts: NodeFacts) -> None:
        for r in node_results(cfg, by_name[facts.node], facts, before_install):
            report.results.append(r)
            on_result(r)

    facts = probe.collect(
        nodes, lambda n: probe_args(cfg, n), transport or probe.ssh_transport(cfg), node_done
    )
    for r in site_checks(facts) + tls_results(cfg):  # the scheduler's certificate: controller-side
        report.results.append(r)
        on_result(r)
    report.seconds = time.monotonic() - start
    return report


def node_results(
    cfg: SiteConfig, node: Node, facts: NodeFacts, before_install: bool = False
) -> list[CheckResult]:
    if facts.error:
        return [CheckResult("reachable", "network", node.name, Status.FAIL, facts.error, "the probe answers",
                            "check the node is up, its address and SSH (user, key, known_hosts)")]  # fmt: skip
    ctx = Ctx(cfg, node, facts, before_install)
    return [r for check in CHECKS if (r := check(ctx)) is not None]
