"""The site config (appliance.yml): its schema, loading and cross-field validation.

Every problem is reported as one line: `<file>: <field path>: <what is wrong>`, so a field
engineer can fix the file without reading a traceback. Schema checks come from pydantic;
rules that span several fields (one master, unique names/addresses, CIDR overlaps, roles vs
hardware) are in `_cross_checks`.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError

from appliance_cli.core import k8snames, paths, siteyaml
from appliance_cli.core.agekeys import recipient_problem
from appliance_cli.errors import ConfigError

SITE_FILE = "appliance.yml"
NODE_ROLES = ("master", "runai-system", "gpu-worker", "cpu-worker")
SCHEDULERS = ("runai", "open", "kai", "none")
KAI_MIN_KUBERNETES = (1, 28)  # NVIDIA KAI Scheduler is validated on Kubernetes >= 1.28 only
# Validators use fullmatch: `$` also matches before a trailing newline, which a remote command
# would split on (tests/unit/test_whole_string_validators.py holds every validator to it).
_RFC1123_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")


# -- typed fields (issue 28): every value that reaches a node or a command has a type ----------
# Values reach commands as argv (never through a shell), so a path holding a space or a `;` is
# data, and is taken: udisks mounts a stick at /media/USER/LABEL, labels hold spaces. Hosts,
# ports, versions and durations are strict. A refused value is shown escaped (repr).
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def ip_address(value: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address, or None. An IPv6 scope (`fe80::1%eth0`) is refused: ipaddress takes any text
    after the `%`, newlines and `;` included, and no site address needs one."""
    if "%" in value:
        return None
    try:
        return ipaddress.ip_address(value)
    except ValueError:
        return None


def dns_name_problem(value: str) -> str | None:
    """An RFC 1123 host name, case-insensitive: dot-separated labels of 1-63 letters, digits and
    '-' (not first or last), 253 characters in all; the last label not all digits (that would be
    a mistyped IPv4 address)."""
    labels = value.lower().split(".")
    if (
        len(value) > 253
        or not all(_RFC1123_LABEL.fullmatch(label) for label in labels)
        or labels[-1].isdigit()
    ):
        return "is not an RFC 1123 host name (letters, digits, '-' and '.', e.g. master1 or nfs.example.com)"
    return None


def host_problem(value: str) -> str | None:
    """An IP address or an RFC 1123 host name."""
    if ip_address(value) is not None or dns_name_problem(value) is None:
        return None
    return "is not an IP address or an RFC 1123 host name"


def host_port_problem(value: str) -> str | None:
    """HOST:PORT: a host (IPv6 in brackets, [fd00::1]:5000) and a port 1-65535."""
    m = re.fullmatch(r"(?:\[([0-9A-Fa-f:.]+)\]|([^:\[\]]+)):([1-9][0-9]{0,4})", value)
    if m is None or int(m.group(3)) > 65535:
        return "is not HOST:PORT with a port 1-65535 (e.g. master1:5000)"
    if m.group(1) is not None:
        return (
            None if isinstance(ip_address(m.group(1)), ipaddress.IPv6Address) else "has no IPv6 address in []"
        )
    why = host_problem(m.group(2))
    return f"has a host that {why}" if why else None


def path_problem(value: str) -> str | None:
    """A file path: no control characters (spaces and any other character are data)."""
    if not value:
        return "is empty"
    if _CONTROL.search(value):
        return "holds a control character"
    return None


def absolute_path_problem(value: str) -> str | None:
    """An absolute path on a node, without control characters or `..` components (the tasks
    create, copy into and export these directories: a path that climbs out of itself is a mistake)."""
    if why := path_problem(value):
        return why
    if not value.startswith("/"):
        return "is not an absolute path (it must start with /)"
    if ".." in value.split("/"):
        return "has a '..' component"
    return None


# vMAJOR.MINOR.PATCH, no leading zeros and no suffix (kubeadm --kubernetes-version, image tags)
_KUBERNETES_VERSION = re.compile(r"v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)")
# Semantic Versioning 2.0.0 (semver.org's pattern): the scheduler vendor's versions (Run:ai 2.9.0)
_SEMVER = re.compile(
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?"
)
# Go durations as kubeadm reads them (24h0m0s, 1h, 30m), whole hours, minutes and seconds only
_DURATION = re.compile(r"(?:([0-9]{1,5})h)?(?:([0-9]{1,5})m)?(?:([0-9]{1,5})s)?")
# The join token kubeadm init makes lives at most its own default, 24h0m0s: a longer-lived (or,
# with 0, never-expiring) token is a standing credential to join the cluster, and nothing needs
# one (every join gets a fresh token, node_join_token_ttl). At least a minute: under that the
# token may lapse before kubeadm has finished with it.
TOKEN_TTL_MIN_S, TOKEN_TTL_MAX_S = 60, 24 * 3600
# A POSIX user name (useradd's default NAME_REGEX, plus upper case): never starting with '-',
# since it becomes ssh's USER@HOST argument
_USER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}")


def kubernetes_version_problem(value: str) -> str | None:
    if not _KUBERNETES_VERSION.fullmatch(value):
        return "is not a Kubernetes release vMAJOR.MINOR.PATCH (e.g. v1.23.17)"
    return None


# An NVIDIA driver release as nvidia-smi prints it (550.90.07, 535.104.12, 470.82)
_NVIDIA_DRIVER = re.compile(r"[1-9][0-9]{1,3}\.[0-9]{1,4}(?:\.[0-9]{1,4})?")


def nvidia_driver_problem(value: str) -> str | None:
    return None if _NVIDIA_DRIVER.fullmatch(value) else "is not an NVIDIA driver version (e.g. 550.90.07)"


def semver_problem(value: str) -> str | None:
    return None if _SEMVER.fullmatch(value) else "is not a version MAJOR.MINOR.PATCH (e.g. 2.9.0)"


def duration_seconds(value: str) -> int | None:
    if value == "0":  # Go's zero duration (a kubeadm token that never expires)
        return 0
    m = _DURATION.fullmatch(value)
    if not value or m is None:
        return None
    h, mi, se = (int(g or 0) for g in m.groups())
    return h * 3600 + mi * 60 + se


def token_ttl_problem(value: str) -> str | None:
    seconds = duration_seconds(value)
    if seconds is None:
        return "is not a duration of hours, minutes and seconds (e.g. 24h0m0s, 1h, 30m)"
    if not TOKEN_TTL_MIN_S <= seconds <= TOKEN_TTL_MAX_S:
        return "must be from 1m to 24h0m0s (kubeadm's default; 0 would never expire)"
    return None


def user_name_problem(value: str) -> str | None:
    return None if _USER_NAME.fullmatch(value) else "is not a user name (letters, digits, '_', '.', '-')"


def url_problem(value: str) -> str | None:
    """An http(s) URL: a host (and port), then a path without spaces or control characters (it
    becomes one word of an apt source line or a flag)."""
    m = re.fullmatch(r"https?://([^/?#\s]+)([/?#][^\s\x00-\x1f\x7f]*)?", value)
    if m is None:
        return "is not an http(s):// URL without spaces"
    where = m.group(1)
    if host_problem(where) is None or host_port_problem(where) is None:
        return None
    return "does not name a host (HOST or HOST:PORT)"


def text_problem(value: str) -> str | None:
    """Free text that reaches a flag, a file name or another program: no control characters."""
    return "holds a control character" if _CONTROL.search(value) else None


def email_problem(value: str) -> str | None:
    local, at, domain = value.rpartition("@")
    if (
        not at
        or not re.fullmatch(r"[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]{1,64}", local)
        or dns_name_problem(domain)
    ):
        return "is not an e-mail address (e.g. admin@runai.example.com)"
    return None


def _typed(problem: Callable[[str], str | None]) -> AfterValidator:
    def check(value: str) -> str:
        why = problem(value)
        if why:
            raise PydanticCustomError("site_value", "{problem}", {"problem": f"{value!r} {why}"})
        return value

    return AfterValidator(check)


Host = Annotated[str, _typed(host_problem)]
DnsName = Annotated[str, _typed(dns_name_problem)]
HostPort = Annotated[str, _typed(host_port_problem)]
IpAddress = Annotated[str, _typed(lambda v: None if ip_address(v) else "is not an IP address")]
AbsolutePath = Annotated[str, _typed(absolute_path_problem)]
SitePath = Annotated[str, _typed(path_problem)]  # on the controller, relative to the site directory
KubernetesVersion = Annotated[str, _typed(kubernetes_version_problem)]
SemVer = Annotated[str, _typed(semver_problem)]
NvidiaDriverVersion = Annotated[str, _typed(nvidia_driver_problem)]
TokenTtl = Annotated[str, _typed(token_ttl_problem)]
UserName = Annotated[str, _typed(user_name_problem)]
Url = Annotated[str, _typed(url_problem)]
Text = Annotated[str, _typed(text_problem)]
# site.name is free text, but it names files (the support bundle's): no '/'
SiteName = Annotated[str, _typed(lambda v: text_problem(v) or ("holds a '/'" if "/" in v else None))]
Email = Annotated[str, _typed(email_problem)]
AgeRecipient = Annotated[str, _typed(recipient_problem)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class GpuSpec(_Model):
    model: str = Field(min_length=1, description="as nvidia-smi names it, e.g. NVIDIA A100-PCIE-40GB")
    count: int = Field(ge=1)


class HardwareClass(_Model):
    """What a node of this class is expected to have; preinstall diagnostics compare against it.

    GPUs: `gpus: [{model, count}, ...]`, one entry per model (a worker may hold an A6000 *and* an
    A100); `gpu_model` + `gpu_count` is the one-model shorthand, read into `gpus`."""

    description: str = ""
    cpu_model: str
    cpu_sockets: int = Field(ge=1)
    cpu_cores: int = Field(ge=1, description="total physical cores")
    ram_gb: int = Field(ge=1)
    gpus: list[GpuSpec] = []
    gpu_model: str | None = None
    gpu_count: int = Field(default=0, ge=0)
    nic_model: str = ""
    nic_speed_gbps: int = Field(ge=1)
    driver_version: NvidiaDriverVersion | None = Field(
        default=None,
        description="with gpu.driver: host, the NVIDIA driver its hosts run (e.g. 550.90.07); preflight "
        "names a host with another",
    )
    pcie_gen: int | None = Field(
        default=None,
        ge=1,
        le=6,
        description="the PCIe generation its GPUs' slots give (the guide's GZ2: Gen 4.0); preflight and "
        "diagnose name a GPU whose link can do less",
    )

    @model_validator(mode="after")
    def _one_gpu_spelling(self) -> HardwareClass:
        if self.gpus and (self.gpu_model or self.gpu_count):
            raise ValueError("give gpus: [{model, count}] or gpu_model + gpu_count, not both")
        if self.gpu_count and not self.gpu_model:
            raise ValueError("gpu_count without gpu_model: name the model (or use gpus: [{model, count}])")
        if self.gpu_count:
            self.gpus = [GpuSpec(model=self.gpu_model or "", count=self.gpu_count)]
        self.gpu_model, self.gpu_count = None, 0  # one spelling from here on: gpus
        return self

    @property
    def gpu_total(self) -> int:
        return sum(g.count for g in self.gpus)

    def gpu_summary(self) -> str:
        return " + ".join(f"{g.count} x {g.model}" for g in self.gpus)


class Node(_Model):
    name: str
    address: str
    hardware_class: str
    roles: list[str] = Field(min_length=1)
    removed: bool = Field(
        default=False,
        description="taken out of the cluster by `appliance node remove`: kept in the file, left out of "
        "the inventory and of every command that reaches the nodes",
    )


class Tls(_Model):
    """The scheduler UI's certificate for `site.domain` (Run:ai's backend needs one signed by the
    organisation's CA). PEM files; paths relative to the site directory."""

    certificate: SitePath = Field(
        description="the certificate for site.domain (PEM; may carry intermediates)"
    )
    key: SitePath = Field(description="its private key (PEM, unencrypted)")
    ca: SitePath = Field(description="the organisation's CA certificate(s) it must chain to (PEM)")


class SiteInfo(_Model):
    name: SiteName
    domain: str | None = Field(
        default=None, description="DNS domain of the scheduler UI, e.g. runai.example.com"
    )
    tls: Tls | None = None


class Kubernetes(_Model):
    version: KubernetesVersion = Field(
        default="v1.23.17", description="a release the bundle profiles carry (bundles/profiles)"
    )
    pod_cidr: str = "10.244.0.0/16"
    service_cidr: str = "10.96.0.0/12"
    dns_domain: DnsName = "cluster.local"
    container_runtime: Literal["containerd", "docker"] = "containerd"
    token_ttl: TokenTtl = Field(default="24h0m0s", description="kubeadm init's join token: 1m to 24h0m0s")


class Network(_Model):
    node_cidr: str
    dns_servers: list[IpAddress] = []
    ntp_servers: list[Host] = []


class Registry(_Model):
    address: HostPort = Field(description="HOST:PORT of the private registry, served from the master")


DEFAULT_BUNDLE_SOURCE = "/media/appliance-usb/bundle"


class Bundle(_Model):
    path: AbsolutePath = Field(description="where the offline bundle lives on the master")
    source: AbsolutePath = Field(
        default=DEFAULT_BUNDLE_SOURCE,
        description="the bundle as the controller sees it (the mounted USB stick); verified before install",
    )
    master_source: AbsolutePath | None = Field(
        default=None,
        description="the stick as the master sees it, when the controller is not the master (default: source)",
    )
    public_key: SitePath | None = Field(
        default=None,
        description="Ed25519 public key (PEM) the bundle must be signed with; relative to the site",
    )
    apt_repo_url: Url | None = Field(
        default=None, description="override of the apt repository URL the nodes use (lab only)"
    )
    require_signature: bool = True


class Nfs(_Model):
    server: Host
    path: AbsolutePath


class Department(_Model):
    name: str
    gpus: float | None = Field(default=None, ge=0, description="GPU quota of the department (Run:ai)")


class Project(_Model):
    """A team's project: a Run:ai project (namespace runai-<name>) or a Volcano queue (open stack),
    with its guaranteed GPUs (quota). Over quota, idle GPUs are lent and reclaimed (TR-4858 4.9)."""

    name: str
    gpus: float = Field(ge=0, description="guaranteed GPUs (deserved share / quota)")
    department: str = "default"
    over_quota: bool = Field(default=True, description="may borrow idle GPUs beyond its quota")


class Oidc(_Model):
    """Researcher authentication: the kube-apiserver's --oidc-* flags. With Run:ai they default to
    its built-in identity provider at https://<site.domain>/auth/realms/runai."""

    issuer_url: Url | None = None
    client_id: Text | None = None
    username_claim: Text = "email"
    # Both prefixes are the one home of their defaults (the role takes the settings as given).
    # A prefix keeps the identity provider's names apart from the cluster's own: without one, a
    # group the provider calls system:masters is cluster-admin (issue 28).
    username_prefix: Text = Field(default="oidc:", description="'-' for none")
    groups_claim: Text | None = None
    groups_prefix: Text | None = Field(default="oidc:", description="required with groups_claim")
    ca_file: SitePath | None = Field(
        default=None, description="CA (PEM) of the issuer's certificate; default: site.tls.ca when given"
    )


class Jumpbox(_Model):
    """The machine researchers log in to: the scheduler CLI and its completion go there."""

    name: str = "jumpbox"
    address: str
    user: UserName | None = Field(default=None, description="ssh user (default: ssh.user)")


class Scheduler(_Model):
    stack: Literal["runai", "open", "kai", "none"] = "none"
    version: SemVer | None = Field(default=None, description="the vendor's version, e.g. Run:ai 2.9.0")
    admin_email: Email | None = Field(
        default=None,
        description="the Run:ai admin account (default admin@<site.domain>); its password is generated",
    )
    external_ip: str | None = Field(
        default=None,
        description="the free internal IP the scheduler UI answers on (site.domain's DNS A record; Run:ai's ingress)",
    )
    departments: list[Department] = []
    projects: list[Project] = []
    oidc: Oidc | None = None
    jumpbox: Jumpbox | None = None


class RegistryUser(_Model):
    name: str
    password_file: SitePath = Field(
        description="file holding the user's password (relative to the site; 0600)"
    )


class ResearcherRegistry(_Model):
    """A second registry on the master that researchers (and MLflow) push to; the system registry
    stays pull-only. Its push credentials are never given to the nodes (SEED-COVERAGE K3)."""

    address: HostPort = Field(description="HOST:PORT on the master, another port than registry.address")
    users: list[RegistryUser] = Field(min_length=1)


class Mig(_Model):
    """MIG on the A100s. `none` keeps every GPU whole (Run:ai's fractions share them; its Dynamic
    MIG is not enabled: roles/gpu_operator/README.md). `single`/`mixed` has mig-manager apply a
    fixed profile per hardware class: the partitions are then fixed until the site config
    changes (SEED-COVERAGE K5)."""

    strategy: Literal["none", "single", "mixed"] = "none"
    profiles: dict[str, str] = Field(
        default={}, description="hardware class -> mig-parted profile, e.g. {GZ2: all-1g.10gb}"
    )

    def partitions(self, hardware_class: str) -> bool:
        """Whether the site wants the GPUs of this class partitioned."""
        return self.strategy != "none" and hardware_class in self.profiles


class Gpu(_Model):
    operator: bool = Field(default=True, description="install the NVIDIA GPU Operator (when a node has GPUs)")
    driver: Literal["container", "host"] = Field(
        default="container",
        description="container: the operator builds the driver on each GPU node against linux-headers "
        "from the bundle's apt repository; host: the driver is preinstalled on the hosts",
    )
    mig: Mig = Mig()
    nfd: bool = Field(
        default=True,
        description="the GPU Operator deploys Node Feature Discovery (its nfd.enabled); false where the "
        "site runs one already (preflight names a node that does)",
    )


class Backup(_Model):
    recipient: AgeRecipient | None = Field(
        default=None,
        description="the age public key (age1...) `appliance backup` encrypts the etcd snapshot and the "
        "secrets to; its identity file stays off the appliance (`appliance restore --identity`)",
    )


class Ssh(_Model):
    user: UserName = "root"
    private_key: SitePath | None = None
    known_hosts: SitePath = "known_hosts"
    proxy_command: Text | None = Field(default=None, description="e.g. to reach nodes through a jump host")
    port: int = Field(default=22, ge=1, le=65535)
    mitogen: bool = Field(
        default=True,
        description="run modules through Mitogen (one persistent Python per node, 2-3x faster runs); "
        "false falls back to Ansible's plain ssh connection",
    )


class SiteConfig(_Model):
    site: SiteInfo
    ssh: Ssh = Ssh()
    network: Network
    kubernetes: Kubernetes = Kubernetes()
    registry: Registry
    researcher_registry: ResearcherRegistry | None = None
    bundle: Bundle
    nfs: Nfs | None = None
    scheduler: Scheduler = Scheduler()
    gpu: Gpu = Gpu()
    backup: Backup = Backup()
    hardware_classes: dict[str, HardwareClass] = Field(min_length=1)
    nodes: list[Node] = Field(min_length=1)
    # Advanced: role variables for this site (e.g. `cni_flannel_iface: ens1f0`), passed to every
    # node as group vars. Names must be role-prefixed variables documented in the roles' READMEs.
    role_vars: dict[str, Any] = {}

    # Where the file was read from: relative paths (ssh key, known_hosts) resolve against it.
    source: Path | None = Field(default=None, exclude=True)
    # Entries marked `removed: true`, moved out of `nodes` once the file is read (parse_site):
    # everything that reaches the nodes iterates `nodes` and so never sees them.
    _removed: list[Node] = PrivateAttr(default_factory=list)

    @property
    def removed_nodes(self) -> list[Node]:
        return list(self._removed)

    def leave_out_removed(self) -> None:
        self._removed = [*self._removed, *(n for n in self.nodes if n.removed)]
        self.nodes = [n for n in self.nodes if not n.removed]

    @property
    def site_dir(self) -> Path:
        return self.source.parent if self.source else Path.cwd()

    def resolve(self, path: str) -> Path:
        p = Path(path).expanduser()
        return p if p.is_absolute() else (self.site_dir / p)

    @property
    def masters(self) -> list[Node]:
        return [n for n in self.nodes if "master" in n.roles]

    @property
    def master(self) -> Node:
        return self.masters[0]

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)


def _loc(parts: tuple[Any, ...]) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(top level)"


def _pydantic_problems(exc: ValidationError) -> list[str]:
    problems = []
    for e in exc.errors():
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown field (check spelling)"
        elif e["type"] == "missing":
            msg = "required field is missing"
        problems.append(f"{_loc(e['loc'])}: {msg}")
    return problems


def _network(value: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        return ipaddress.ip_network(value, strict=True)
    except ValueError:
        return None


def _role_defaults() -> dict[str, Any]:
    """Every role's defaults/main.yml, merged: variable -> its default."""
    from appliance_cli.content import roles_dir

    out: dict[str, Any] = {}
    for f in sorted(roles_dir().glob("*/defaults/main.yml")):
        out.update(yaml.safe_load(f.read_text()) or {})
    return out


def known_role_vars() -> set[str]:
    """Every variable a role documents in its defaults/main.yml (the only ones role_vars may set)."""
    return set(_role_defaults())


def contract_role_vars(defaults: dict[str, Any] | None = None) -> dict[str, str]:
    """Role variables that would move a path of the paths contract (roles/appliance_paths), each
    -> the contract variable it is or takes its value from: the CLI reads the contract's path, so
    a site that moved the role's copy would have the CLI read the old place."""
    contract = paths.names()
    out = {name: name for name in contract}
    for name, value in (_role_defaults() if defaults is None else defaults).items():
        used = sorted(set(_CONTRACT_NAME.findall(value)) & contract) if isinstance(value, str) else []
        if used and name not in out:
            out[name] = used[0]
    return out


_CONTRACT_NAME = re.compile(rf"\b{paths.PREFIX}[a-z0-9_]+\b")


Net = ipaddress.IPv4Network | ipaddress.IPv6Network


# Role variables that keep a control on: a site cannot switch them off through role_vars (the one
# list; a unit test holds every name to a role default). Changing one means editing the role.
PROTECTED_ROLE_VARS = {
    "bundle_repo_expect_manifest_sha256": "the master's pin to the manifest the controller verified",
    "bundle_repo_http_address": "the address the bundle's HTTP service binds",
    "bundle_repo_http_sandbox": "the bundle HTTP service's systemd sandbox",
    "os_prereqs_apt_exclusive": "apt reading the offline repository only",
    "os_prereqs_apt_keyring": "the key apt checks the offline repository's signature with",
    "registry_listen_address": "the address the registry binds",
    "registry_verify_enabled": "the pull of a seeded image over TLS that proves the registry",
    "container_runtime_containerd_validate": "containerd's check of the config it is given",
}


def _role_var_problems(cfg: SiteConfig) -> list[str]:
    known = known_role_vars() if cfg.role_vars else set()
    moves = contract_role_vars() if cfg.role_vars else {}
    problems = []
    for name in sorted(cfg.role_vars):
        if name in moves:
            where = getattr(paths.PATHS, moves[name].removeprefix(paths.PREFIX))
            problems.append(
                f"role_vars.{name}: not settable by a site: it would move {where}, which the appliance "
                f"CLI reads too (the one definition: roles/appliance_paths/defaults/main.yml)"
            )
        elif name in PROTECTED_ROLE_VARS:
            problems.append(
                f"role_vars.{name}: not settable by a site: it keeps a control on ({PROTECTED_ROLE_VARS[name]})"
            )
        elif name not in known:
            problems.append(f"role_vars.{name}: not a variable of any role (see roles/*/defaults/main.yml)")
    return problems


_TEMPLATE_MARKERS = ("{{", "{%", "{#")


def _template_problems(data: Any, where: str = "") -> list[str]:
    """Site values reach Ansible as data: a value that holds a Jinja marker would be rendered by
    Ansible (`site.name: "{{ lookup('pipe', ...) }}"` ran on the controller), so it is refused.
    role_vars are templated on purpose (they override role defaults, which are templates)."""
    if isinstance(data, str):
        found = [m for m in _TEMPLATE_MARKERS if m in data]
        return [f"{where}: holds {found[0]!r}: site values are data, never templates"] if found else []
    if isinstance(data, dict):
        return [
            p
            for k, v in data.items()
            if not (where == "" and k == "role_vars")
            for p in _template_problems(k, f"{where}.{k}" if where else str(k))
            + _template_problems(v, f"{where}.{k}" if where else str(k))
        ]
    if isinstance(data, list):
        return [p for i, v in enumerate(data) for p in _template_problems(v, f"{where}[{i}]")]
    return []


def _network_problems(cfg: SiteConfig) -> tuple[list[str], Net | None]:
    """Networks parse, and the pod/service ranges collide neither with the nodes' own network nor
    with each other. Returns the problems and the node network (for the address checks)."""
    problems: list[str] = []
    nets: dict[str, Net | None] = {}
    for field, value in (
        ("network.node_cidr", cfg.network.node_cidr),
        ("kubernetes.pod_cidr", cfg.kubernetes.pod_cidr),
        ("kubernetes.service_cidr", cfg.kubernetes.service_cidr),
    ):
        net = _network(value)
        if net is None:
            problems.append(f"{field}: '{value}' is not a valid CIDR (e.g. 10.244.0.0/16)")
        nets[field] = net
    node_net, pod_net, svc_net = nets.values()
    for field, net in (("kubernetes.pod_cidr", pod_net), ("kubernetes.service_cidr", svc_net)):
        if net is not None and node_net is not None and net.overlaps(node_net):
            problems.append(f"{field}: {net} overlaps the node network {node_net} (network.node_cidr)")
    if pod_net is not None and svc_net is not None and pod_net.overlaps(svc_net):
        problems.append(f"kubernetes.service_cidr: {svc_net} overlaps the pod network {pod_net}")
    return problems + _kubeadm_range_problems(pod_net, svc_net, len(cfg.nodes)), node_net


# kubeadm 1.23: the apiserver keeps the service range as a bitmap (at most 2^20 addresses), and
# kube-controller-manager gives each node a /24 (IPv4; /64 IPv6) of the pod range, at most 2^16.
_MAX_SERVICE_BITS = 20
_NODE_MASK = {4: 24, 6: 64}
_MAX_NODE_MASK_DIFF = 16


def _kubeadm_range_problems(pod_net: Net | None, svc_net: Net | None, nodes: int) -> list[str]:
    """What `kubeadm init` would refuse (or a site would hit on its second node) in the ranges."""
    problems = []
    if svc_net is not None:
        if svc_net.max_prefixlen - svc_net.prefixlen > _MAX_SERVICE_BITS:
            problems.append(
                f"kubernetes.service_cidr: {svc_net} is too large for Kubernetes: the mask must be >= "
                f"{svc_net.max_prefixlen - _MAX_SERVICE_BITS} (e.g. 10.96.0.0/12)"
            )
        elif svc_net.num_addresses < 10:
            problems.append(
                f"kubernetes.service_cidr: {svc_net} has {svc_net.num_addresses} addresses, at least 10"
            )
    if pod_net is not None:
        node_mask = _NODE_MASK[pod_net.version]
        if pod_net.prefixlen > node_mask:
            problems.append(
                f"kubernetes.pod_cidr: {pod_net} is smaller than one node's pod range (/{node_mask})"
            )
        elif node_mask - pod_net.prefixlen > _MAX_NODE_MASK_DIFF:
            problems.append(
                f"kubernetes.pod_cidr: {pod_net} is too large: the mask must be >= /{node_mask - _MAX_NODE_MASK_DIFF}"
            )
        elif 2 ** (node_mask - pod_net.prefixlen) < nodes:
            problems.append(
                f"kubernetes.pod_cidr: {pod_net} holds {2 ** (node_mask - pod_net.prefixlen)} node range(s) of "
                f"/{node_mask}, the site has {nodes} nodes (each node gets one)"
            )
    return problems


def _master_problems(entries: list[Node]) -> list[str]:
    removed = [i for i, n in enumerate(entries) if "master" in n.roles and n.removed]
    if removed:
        return [
            f"nodes[{removed[0]}].removed: {entries[removed[0]].name} is the master: it cannot be removed"
        ]
    masters = [i for i, n in enumerate(entries) if "master" in n.roles]
    if not masters:
        return ["nodes: no node has the 'master' role (exactly one is required)"]
    if len(masters) > 1:
        names = ", ".join(entries[i].name for i in masters)
        return [
            f"nodes[{masters[1]}].roles: several masters ({names}); HA control planes are not supported yet"
        ]
    return []


def _identity_problems(entries: list[Node], node_net: Net | None) -> list[str]:
    """Names are RFC 1123 hostnames, names and addresses unique, addresses inside the node network
    (removed entries included: a name comes back only as the entry it was)."""
    problems: list[str] = []
    seen_names: dict[str, int] = {}
    seen_addrs: dict[str, int] = {}
    for i, node in enumerate(entries):
        where = f"nodes[{i}]"
        if not _RFC1123_LABEL.fullmatch(node.name):
            problems.append(
                f"{where}.name: {node.name!r} is not a valid RFC 1123 hostname "
                "(lower-case letters, digits and '-', at most 63, not starting or ending with '-')"
            )
        if node.name in seen_names:
            problems.append(
                f"{where}.name: duplicate hostname '{node.name}' (also nodes[{seen_names[node.name]}])"
            )
        seen_names.setdefault(node.name, i)
        addr = ip_address(node.address)
        if addr is None:
            problems.append(f"{where}.address: {node.address!r} is not an IP address")
        if node.address in seen_addrs:
            problems.append(
                f"{where}.address: duplicate address {node.address} (also nodes[{seen_addrs[node.address]}])"
            )
        seen_addrs.setdefault(node.address, i)
        if addr is not None and node_net is not None and addr not in node_net:
            problems.append(f"{where}.address: {addr} is outside network.node_cidr {node_net}")
    return problems


def _role_problems(cfg: SiteConfig, entries: list[Node]) -> list[str]:
    """Known roles, known hardware classes, and GPUs exactly where the gpu-worker role is."""
    problems: list[str] = []
    for i, node in enumerate(entries):
        where = f"nodes[{i}]"
        for j, role in enumerate(node.roles):
            if role not in NODE_ROLES:
                problems.append(f"{where}.roles[{j}]: unknown role '{role}' (known: {', '.join(NODE_ROLES)})")
        hw = cfg.hardware_classes.get(node.hardware_class)
        if hw is None:
            known = ", ".join(sorted(cfg.hardware_classes))
            problems.append(
                f"{where}.hardware_class: unknown hardware class '{node.hardware_class}' (known: {known})"
            )
        elif hw.gpu_total > 0 and "gpu-worker" not in node.roles:
            problems.append(
                f"{where}.roles: hardware class {node.hardware_class} has {hw.gpu_total} GPU(s) "
                "but the node has no 'gpu-worker' role"
            )
        elif hw.gpu_total == 0 and "gpu-worker" in node.roles:
            problems.append(
                f"{where}.roles: 'gpu-worker' on hardware class {node.hardware_class}, which has no GPUs"
            )
    return problems


def _release(version: str) -> tuple[int, ...]:
    """v1.23.17 -> (1, 23, 17): a KubernetesVersion, or a release a profile carries."""
    return tuple(int(x) for x in version[1:].split("."))


def _kubernetes_version_problems(cfg: SiteConfig) -> list[str]:
    """kubernetes.version against the releases the bundle profiles carry (bundles/profiles, the
    one list; `bundle.profile.carried_kubernetes_releases`). A release they carry is taken. So is
    an older patch of a minor they carry, and a later minor: a bundle built from another profile
    (the one `upgrade apply` moved the site to, which writes its release here; the upgrade
    rehearsal's older patch). Install and upgrade check that the bundle in hand carries it
    (bundlegate). Refused: a later patch than any profile's of its minor (v1.23.99: no such bundle
    exists) and a minor older than every profile's (nothing here installs it)."""
    from appliance_cli.bundle.profile import carried_kubernetes_releases

    carried = carried_kubernetes_releases()
    version = cfg.kubernetes.version
    if not carried or version in carried:
        return []
    have = ", ".join(carried)
    major, minor, patch = _release(version)
    same_minor = [r for r in map(_release, carried) if r[:2] == (major, minor)]
    if same_minor and patch > max(r[2] for r in same_minor):
        return [
            f"kubernetes.version: {version!r} is later than the {major}.{minor} release the bundle "
            f"profiles carry ({have}): give the release of the site's bundle"
        ]
    if (major, minor) < min(r[:2] for r in map(_release, carried)):
        return [
            f"kubernetes.version: {version!r} is older than every release the bundle profiles carry ({have})"
        ]
    return []


def _scheduler_problems(cfg: SiteConfig) -> list[str]:
    problems: list[str] = []
    if cfg.scheduler.stack == "runai":
        if cfg.nfs is None:
            problems.append(
                "nfs: required when scheduler.stack is 'runai' (the Run:ai control plane needs an NFS share)"
            )
        if not cfg.site.domain:
            problems.append(
                "site.domain: required when scheduler.stack is 'runai' (DNS name of the Run:ai UI)"
            )
        if not any("runai-system" in n.roles for n in cfg.nodes):
            problems.append("nodes: scheduler.stack is 'runai' but no node has the 'runai-system' role")
        if not cfg.scheduler.external_ip:
            problems.append(
                "scheduler.external_ip: required when scheduler.stack is 'runai' "
                "(a free IP on the node network that site.domain resolves to)"
            )
    if cfg.scheduler.external_ip:
        ip = ip_address(cfg.scheduler.external_ip)
        if ip is None:
            problems.append(f"scheduler.external_ip: {cfg.scheduler.external_ip!r} is not an IP address")
        else:
            taken = {n.address: n.name for n in cfg.nodes}
            if cfg.scheduler.external_ip in taken:
                problems.append(
                    f"scheduler.external_ip: {ip} is node {taken[cfg.scheduler.external_ip]}'s address; "
                    "give a free one"
                )
    if cfg.site.tls is not None and not cfg.site.domain:
        problems.append("site.tls: needs site.domain (the name the certificate is for)")
    if cfg.scheduler.stack == "kai":
        m = re.match(r"^v?(\d+)\.(\d+)", cfg.kubernetes.version)
        if m and (int(m.group(1)), int(m.group(2))) < KAI_MIN_KUBERNETES:
            problems.append(
                f"scheduler.stack: 'kai' needs Kubernetes >= 1.28 (this site runs {cfg.kubernetes.version}): "
                "use 'runai' or 'open' (HAMi + Volcano) on 1.23, and kai after upgrading"
            )
    return problems


def site_gpus(cfg: SiteConfig) -> int:
    """GPUs of the site's gpu-worker nodes, as their hardware classes say."""
    return sum(
        cfg.hardware_classes[n.hardware_class].gpu_total
        for n in cfg.nodes
        if "gpu-worker" in n.roles and n.hardware_class in cfg.hardware_classes
    )


def _fmt_gpus(value: float) -> str:
    return f"{value:g}"


def _project_problems(cfg: SiteConfig) -> list[str]:
    """Projects and departments: names usable as namespaces (runai-<name>) and queue names, known
    departments, and quotas that the site's GPUs can honour."""
    sch, problems = cfg.scheduler, []
    if sch.stack == "none" and (sch.projects or sch.departments):
        problems.append("scheduler.projects: given with scheduler.stack 'none' (choose runai or open)")
    departments = {d.name for d in sch.departments} or {"default"}
    seen: set[str] = set()
    for i, d in enumerate(sch.departments):
        if not _RFC1123_LABEL.fullmatch(d.name):
            problems.append(
                f"scheduler.departments[{i}].name: {d.name!r} is not a valid name (RFC 1123 label)"
            )
    for i, prj in enumerate(sch.projects):
        where = f"scheduler.projects[{i}]"
        # Run:ai makes namespace runai-<name>: 63 characters in all
        if not _RFC1123_LABEL.fullmatch(prj.name) or len(prj.name) > 57:
            problems.append(
                f"{where}.name: {prj.name!r} is not a valid project name "
                "(lower-case letters, digits and '-', at most 57: it becomes namespace runai-<name>)"
            )
        if prj.name in seen:
            problems.append(f"{where}.name: duplicate project '{prj.name}'")
        seen.add(prj.name)
        if prj.department not in departments:
            problems.append(
                f"{where}.department: unknown department '{prj.department}' (known: {', '.join(sorted(departments))})"
            )
    total, gpus = sum(p.gpus for p in sch.projects), site_gpus(cfg)
    if sch.projects and total > gpus:
        problems.append(
            f"scheduler.projects: the quotas sum to {_fmt_gpus(total)} GPUs but the site has {gpus} "
            "(the gpu-worker nodes' hardware classes): lower the quotas or add GPU workers"
        )
    dep_total = sum(d.gpus or 0 for d in sch.departments)
    if dep_total > gpus:
        problems.append(
            f"scheduler.departments: the quotas sum to {_fmt_gpus(dep_total)} GPUs but the site has {gpus}"
        )
    for d in sch.departments:
        in_dep = sum(p.gpus for p in sch.projects if p.department == d.name)
        if d.gpus is not None and in_dep > d.gpus:
            problems.append(
                f"scheduler.departments: '{d.name}' has a quota of {_fmt_gpus(d.gpus)} GPUs, its projects "
                f"{_fmt_gpus(in_dep)}"
            )
    oidc = sch.oidc
    if oidc is not None:
        if sch.stack != "runai" and not (oidc.issuer_url and oidc.client_id):
            problems.append("scheduler.oidc: issuer_url and client_id are both required (except with runai)")
        if oidc.issuer_url and not oidc.issuer_url.startswith("https://"):
            problems.append(f"scheduler.oidc.issuer_url: '{oidc.issuer_url}' must be an https:// URL")
        if oidc.groups_claim and not oidc.groups_prefix:
            problems.append(
                "scheduler.oidc.groups_prefix: required with groups_claim (e.g. 'oidc:'): without one, a "
                "group the identity provider names system:masters is cluster-admin"
            )
        for field in ("username_prefix", "groups_prefix"):
            value = getattr(oidc, field) or ""
            if value.startswith("system:"):
                problems.append(
                    f"scheduler.oidc.{field}: {value!r} would make the identity provider's names the "
                    "cluster's own system: ones (e.g. 'oidc:')"
                )
    if sch.jumpbox is not None:
        if ip_address(sch.jumpbox.address) is None:
            problems.append(f"scheduler.jumpbox.address: {sch.jumpbox.address!r} is not an IP address")
        if not _RFC1123_LABEL.fullmatch(sch.jumpbox.name) or sch.jumpbox.name in {n.name for n in cfg.nodes}:
            problems.append(
                f"scheduler.jumpbox.name: {sch.jumpbox.name!r} must be a hostname that names no node"
            )
    return problems


def _researcher_registry_problems(cfg: SiteConfig) -> list[str]:
    rr = cfg.researcher_registry
    if rr is None:
        return []
    problems = []
    host, _, port = rr.address.rpartition(":")  # a HostPort: [IPv6]:PORT or HOST:PORT
    host = host.removeprefix("[").removesuffix("]")
    if cfg.masters and host not in (cfg.master.name, cfg.master.address):
        problems.append(
            f"researcher_registry.address: '{host}' is not the master ({cfg.master.name} / {cfg.master.address})"
        )
    if port == cfg.registry.address.rpartition(":")[2]:
        problems.append(
            f"researcher_registry.address: port {port} is the system registry's ({cfg.registry.address})"
        )
    seen: set[str] = set()
    for i, u in enumerate(rr.users):
        if not re.fullmatch(r"[a-z0-9][a-z0-9._-]{0,63}", u.name):
            problems.append(f"researcher_registry.users[{i}].name: '{u.name}' is not a valid user name")
        if u.name in seen:
            problems.append(f"researcher_registry.users[{i}].name: duplicate user '{u.name}'")
        seen.add(u.name)
    return problems


# THE namespace of a project's workloads, for every part of the toolkit (the open stack's role
# creates these, Run:ai creates runai-<project> itself): a prefix keeps a project called
# `default` or `kube-system` away from the system's namespaces.
PROJECT_NAMESPACE_PREFIX = {"runai": "runai-", "open": "project-"}


def project_namespace(stack: str, project: str) -> str:
    prefix = PROJECT_NAMESPACE_PREFIX.get(stack)
    if prefix is None:
        raise ConfigError([f"scheduler.stack: '{stack}' has no project namespaces (runai or open)"])
    return prefix + project


RUNAI_OIDC_REALM = "/auth/realms/runai"  # Run:ai's built-in identity provider (Keycloak realm)


def oidc_settings(cfg: SiteConfig) -> dict[str, str]:
    """The API server's OIDC settings for researchers: the site's `scheduler.oidc`, with Run:ai's
    defaults filled in on a runai site; {} when researchers have no OIDC (no flags at all)."""
    oidc = cfg.scheduler.oidc
    if oidc is None and cfg.scheduler.stack != "runai":
        return {}
    oidc = oidc or Oidc()
    runai = cfg.scheduler.stack == "runai"
    ca_file = oidc.ca_file or (cfg.site.tls.ca if cfg.site.tls else None)
    out = {
        "issuer_url": oidc.issuer_url or (f"https://{cfg.site.domain}{RUNAI_OIDC_REALM}" if runai else ""),
        "client_id": oidc.client_id or ("runai" if runai else ""),
        "username_claim": oidc.username_claim,
        "username_prefix": oidc.username_prefix,
        "groups_claim": oidc.groups_claim or "",
        # the prefix means nothing without the claim: no flag then (the API server as before)
        "groups_prefix": (oidc.groups_prefix or "") if oidc.groups_claim else "",
        "ca_file": str(cfg.resolve(ca_file)) if ca_file else "",
    }
    return out


def site_warnings(cfg: SiteConfig) -> list[str]:
    """What a site may run with but should know about (printed by validate and install)."""
    warnings = []
    if not cfg.bundle.require_signature:
        warnings.append(
            "bundle.require_signature: false: THE BUNDLE'S SIGNATURE IS NOT CHECKED; whoever can write "
            "the stick decides what runs as root on every node"
        )
    total, gpus = sum(p.gpus for p in cfg.scheduler.projects), site_gpus(cfg)
    if cfg.scheduler.projects and total < gpus:
        # TR-4858: "As a rule, the sum of the project allocation should be equal to the number of
        # GPUs in the cluster." The rest is guaranteed to no one: only lent over quota.
        warnings.append(
            f"scheduler.projects: the quotas sum to {_fmt_gpus(total)} GPUs and the site has {gpus}: "
            f"{_fmt_gpus(gpus - total)} are guaranteed to no project, only lent over quota "
            "(TR-4858 sets the sum equal to the site's GPUs)"
        )
    system = [n.name for n in cfg.nodes if "runai-system" in n.roles]
    if cfg.scheduler.stack == "runai" and len(system) < 2:
        warnings.append(
            f"nodes: {len(system)} runai-system node ({', '.join(system) or 'none'}); production wants two or more "
            "(Run:ai's system services are not redundant with one)"
        )
    return warnings


def _runtime_problems(cfg: SiteConfig) -> list[str]:
    """The docker path writes daemon.json whole: it would drop the `nvidia` runtime (and the
    default-runtime) the GPU Operator's toolkit adds, which GPU pods need (SEED-COVERAGE K4).
    Until that path carries them over as the containerd one does, GPU workers need containerd.
    Nor does it make the researcher registry's read-only endpoint a pull mirror (containerd's
    hosts.toml does): docker would pull from the push endpoint, which refuses the nodes' account."""
    if cfg.kubernetes.container_runtime != "docker":
        return []
    problems = []
    gpu = [n.name for n in cfg.nodes if "gpu-worker" in n.roles]
    if gpu:
        problems.append(
            f"kubernetes.container_runtime: docker with GPU workers ({', '.join(gpu)}): the docker path "
            "rewrites daemon.json and would drop the nvidia runtime the GPU Operator installs; use containerd"
        )
    if cfg.researcher_registry is not None:
        problems.append(
            f"kubernetes.container_runtime: docker with researcher_registry ({cfg.researcher_registry.address}): "
            "the docker path sets no pull mirror for it, so the nodes could not pull researchers' images; "
            "use containerd"
        )
    return problems


def _gpu_problems(cfg: SiteConfig) -> list[str]:
    """MIG profiles only with a MIG strategy, and only for classes that hold GPUs."""
    mig, problems = cfg.gpu.mig, []
    if mig.strategy == "none" and mig.profiles:
        problems.append(
            "gpu.mig.profiles: given with gpu.mig.strategy 'none' (set single or mixed, or drop the profiles)"
        )
    if mig.strategy != "none" and not mig.profiles:
        problems.append(
            f"gpu.mig.profiles: gpu.mig.strategy '{mig.strategy}' needs a profile per hardware class"
        )
    for cls, profile in mig.profiles.items():
        hw = cfg.hardware_classes.get(cls)
        if hw is None:
            problems.append(f"gpu.mig.profiles.{cls}: unknown hardware class")
        elif hw.gpu_total == 0:
            problems.append(f"gpu.mig.profiles.{cls}: hardware class {cls} has no GPUs")
        if not re.fullmatch(r"[a-z0-9][a-z0-9.-]*", profile):
            problems.append(
                f"gpu.mig.profiles.{cls}: '{profile}' is not a mig-parted profile name (e.g. all-1g.10gb)"
            )
    return problems


def _name_problems(cfg: SiteConfig) -> list[str]:
    """Values that become Kubernetes names: hardware classes are node label values
    (run.ai/type=<class>), the domain and any extra SANs go into certificates."""
    problems = []
    for name in cfg.hardware_classes:
        why = k8snames.label_value_problem(name)
        if why:
            problems.append(f"hardware_classes.{name}: not usable as a node label value: {why}")
    if cfg.site.domain and (why := k8snames.subdomain_problem(cfg.site.domain)):
        problems.append(f"site.domain: {cfg.site.domain!r} is {why}")
    key = cfg.role_vars.get("node_roles_node_group_label")
    if isinstance(key, str) and key and (why := k8snames.label_key_problem(key)):
        problems.append(f"role_vars.node_roles_node_group_label: {key!r} is not a label key: {why}")
    sans = cfg.role_vars.get("control_plane_cert_sans")
    for j, san in enumerate(sans if isinstance(sans, list) else []):
        if "{{" not in str(san) and (why := k8snames.cert_san_problem(str(san))):
            problems.append(f"role_vars.control_plane_cert_sans[{j}]: {str(san)!r} is {why}")
    return problems


def _cross_checks(cfg: SiteConfig, entries: list[Node]) -> list[str]:
    """Rules that span several fields, in the order a reader meets the fields. `entries`: every
    node entry of the file (index = its place there); `cfg.nodes` the ones not removed, which is
    what the site's capacity rules (GPUs for the quotas, a runai-system node) count."""
    network, node_net = _network_problems(cfg)
    return [
        *_role_var_problems(cfg),
        *network,
        *_kubernetes_version_problems(cfg),
        *_master_problems(entries),
        *_identity_problems(entries, node_net),
        *_role_problems(cfg, entries),
        *_runtime_problems(cfg),
        *_gpu_problems(cfg),
        *_name_problems(cfg),
        *_scheduler_problems(cfg),
        *_project_problems(cfg),
        *_researcher_registry_problems(cfg),
    ]


def _one_line(problem: str) -> str:
    # a refused value may hold a newline: the problem stays one line all the same
    return problem.replace("\r", "\\r").replace("\n", "\\n")


def parse_site(data: Any, source: Path | None = None) -> SiteConfig:
    """Validate already-loaded YAML data. Raises ConfigError with one line per problem."""
    label = str(source) if source else SITE_FILE
    if not isinstance(data, dict):
        raise ConfigError([f"{label}: expected a mapping at the top level"])
    templated = _template_problems(data)
    if templated:
        raise ConfigError([_one_line(f"{label}: {p}") for p in templated], hint=_HINT)
    try:
        cfg = SiteConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError([_one_line(f"{label}: {p}") for p in _pydantic_problems(exc)], hint=_HINT) from None
    cfg.source = source
    entries = list(cfg.nodes)
    cfg.leave_out_removed()
    problems = _cross_checks(cfg, entries)
    if problems:
        raise ConfigError([_one_line(f"{label}: {p}") for p in problems], hint=_HINT)
    return cfg


_HINT = "fix the fields named above; `appliance init` writes a documented skeleton"


def site_file(path: str | Path) -> Path:
    """Accept either a site directory or the appliance.yml itself."""
    p = Path(path).expanduser()
    return p / SITE_FILE if p.is_dir() else p


def load_site(path: str | Path) -> SiteConfig:
    f = site_file(path)
    if not f.is_file():
        raise ConfigError(
            [f"{f}: site config not found"], hint="run `appliance init DIR` or pass --site DIR/appliance.yml"
        )
    return parse_site(siteyaml.load(f), source=f.resolve())
