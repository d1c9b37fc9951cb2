"""SSH host keys of the site's nodes (and its jumpbox, which the install reaches too): which are
recorded, and recording new ones."""

from __future__ import annotations

import base64
import hashlib
import subprocess
from dataclasses import dataclass
from pathlib import Path

from appliance_cli.core.remote import ssh_argv
from appliance_cli.core.siteconfig import Jumpbox, Node, SiteConfig
from appliance_cli.errors import ApplianceError, ConfigError
from appliance_cli.fsutil import read_regular


@dataclass(frozen=True)
class ScannedKey:
    node: str
    address: str
    keytype: str
    key: str

    @property
    def fingerprint(self) -> str:
        digest = hashlib.sha256(base64.b64decode(self.key)).digest()
        return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")

    def line(self) -> str:
        return f"{self.node},{self.address} {self.keytype} {self.key}"


def _known_hosts_text(path: Path) -> str:
    """The site's known_hosts ("" when there is none yet); a FIFO, directory or device there is
    a ConfigError naming ssh.known_hosts (ssh would wait on a FIFO as our read did)."""
    try:
        data = read_regular(path)
    except FileNotFoundError:
        return ""
    except OSError as exc:
        raise ConfigError(
            [f"ssh.known_hosts: {path}: cannot read it ({exc.strerror or exc})"],
            hint="point ssh.known_hosts at a regular file (or nothing: `appliance hosts trust` writes it)",
        ) from None
    return data.decode(errors="replace")  # a corrupt byte names no host of ours


def recorded_hosts(path: Path) -> set[str]:
    names: set[str] = set()
    for line in _known_hosts_text(path).splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        for name in line.split()[0].split(","):
            names.add(name.strip("[]").split("]:")[0])
    return names


def ssh_hosts(cfg: SiteConfig) -> list[Node | Jumpbox]:
    """Every machine the install connects to: the nodes, then the jumpbox (scheduler.jumpbox)."""
    jump = [cfg.scheduler.jumpbox] if cfg.scheduler.jumpbox else []
    return [*cfg.nodes, *jump]


def missing_nodes(cfg: SiteConfig) -> list[Node | Jumpbox]:
    known = recorded_hosts(cfg.resolve(cfg.ssh.known_hosts))
    return [n for n in ssh_hosts(cfg) if n.address not in known and n.name not in known]


def require_host_keys(cfg: SiteConfig, nodes: list[Node] | None = None) -> None:
    """Nothing connects to a node whose host key was never recorded (ConfigError naming them)."""
    wanted = {n.name for n in nodes} if nodes is not None else None
    missing = [n for n in missing_nodes(cfg) if wanted is None or n.name in wanted]
    if missing:
        names = ", ".join(n.name for n in missing)
        raise ConfigError(
            [f"{cfg.resolve(cfg.ssh.known_hosts)}: no SSH host key recorded for {names}"],
            hint=f"run `appliance hosts trust --site {cfg.site_dir}` and compare the fingerprints",
        )


def scan(cfg: SiteConfig, node: Node | Jumpbox, timeout: int = 5) -> list[ScannedKey]:
    """ssh-keyscan cannot use a ProxyCommand, so the key is read through ssh itself with
    StrictHostKeyChecking=accept-new into a scratch file that is discarded after reading."""
    scratch = cfg.site_dir / f".scan-{node.name}"
    scratch.unlink(missing_ok=True)
    # The node's answer lands in a scratch file; it is shown as a fingerprint before anything is trusted.
    scratch_keys = ["-o", f"UserKnownHostsFile={scratch}", "-o", "StrictHostKeyChecking=accept-new"]
    cmd = ssh_argv(
        cfg, node, ["true"], host_key_options=[*scratch_keys, "-o", "HostKeyAlgorithms=ssh-ed25519"]
    )
    try:
        subprocess.run(cmd, capture_output=True, timeout=timeout + 10)
        lines = scratch.read_text(errors="replace").splitlines() if scratch.exists() else []
    finally:
        scratch.unlink(missing_ok=True)
    keys = []
    for line in lines:
        parts = line.split()
        if len(parts) >= 3:
            keys.append(ScannedKey(node.name, node.address, parts[1], parts[2]))
    if not keys:
        raise ApplianceError(
            f"node {node.name} ({node.address}): could not read its SSH host key",
            hint=f"check that the node is up and sshd listens on port {cfg.ssh.port}",
        )
    return keys


def record(cfg: SiteConfig, keys: list[ScannedKey]) -> Path:
    path = cfg.resolve(cfg.ssh.known_hosts)
    path.parent.mkdir(parents=True, exist_ok=True)
    existing = _known_hosts_text(path)
    with path.open("a") as fh:
        if existing and not existing.endswith("\n"):
            fh.write("\n")
        for k in keys:
            fh.write(k.line() + "\n")
    return path
