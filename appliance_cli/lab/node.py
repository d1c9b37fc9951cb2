"""Creating a node's root filesystem from the cached base image and giving it its identity."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

from appliance_cli.debian import rootfs
from appliance_cli.errors import LabError
from appliance_cli.lab.layout import LabLayout
from appliance_cli.proc import run

# The host kernel has CONFIG_MODULES=n; these are built in. Declaring them in modules.builtin
# lets `modprobe X` exit 0 as on a real host (ip_vs etc. still fail, correctly).
BUILTIN_MODULES = [
    "kernel/fs/overlayfs/overlay.ko",
    "kernel/net/bridge/br_netfilter.ko",
    "kernel/net/bridge/bridge.ko",
    "kernel/drivers/net/vxlan/vxlan.ko",
    "kernel/drivers/net/veth.ko",
    "kernel/net/netfilter/nf_conntrack.ko",
    "kernel/net/netfilter/nf_nat.ko",
    "kernel/net/netfilter/nf_tables.ko",
    "kernel/net/ipv4/netfilter/ip_tables.ko",
    "kernel/net/ipv4/netfilter/iptable_filter.ko",
    "kernel/net/ipv4/netfilter/iptable_nat.ko",
    "kernel/net/ipv6/netfilter/ip6_tables.ko",
    "kernel/net/netfilter/xt_conntrack.ko",
    "kernel/net/netfilter/ipset/ip_set.ko",
]
# chronyd must not step the clock all nodes share with the host (and has no CAP_SYS_TIME here).
CHRONY_DROPIN = "[Unit]\nConditionCapability=\n[Service]\nExecStart=\nExecStart=!/usr/sbin/chronyd -F 1 -x\n"
# The kernel has no SUNRPC (LAB-NOTES): nfs-common's rpc_pipefs mount (the kernel NFS client's pipes
# for rpc.gssd and rpc.idmapd) can never mount, and its failure left every node "degraded". The
# lab's NFS is userspace (libnfs clients, nfs-ganesha on master1), which never uses it: masked.
MASKED_UNITS = ("run-rpc_pipefs.mount",)
HOST_KEY_TYPES = ("ed25519", "ecdsa", "rsa")


@dataclass(frozen=True)
class LabNode:
    index: int
    name: str
    address: str

    @property
    def is_master(self) -> bool:
        return self.index == 1


def marker(layout: LabLayout, node: str) -> Path:
    """Present once a node's rootfs is complete; a half-created rootfs is recreated."""
    return layout.nodes_dir / f".{node}.created"


def create_rootfs(layout: LabLayout, node: LabNode, base: Path) -> None:
    root = layout.node_root(node.name)
    if root.exists():
        shutil.rmtree(root)
    marker(layout, node.name).unlink(missing_ok=True)
    root.mkdir(parents=True)
    log = layout.logs_dir / f"{node.name}.create.log"
    log.write_text("")
    # Host keys (RSA is CPU-bound) are generated while tar waits on the disk.
    keydir = layout.nodes_dir / f".{node.name}.keys"
    shutil.rmtree(keydir, ignore_errors=True)
    (keydir / "etc/ssh").mkdir(parents=True)
    keygen = subprocess.Popen(
        ["ssh-keygen", "-A", "-f", str(keydir)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        rootfs.unpack(base, root, log=log)
    finally:
        _, err = keygen.communicate()
    if keygen.returncode != 0:
        raise LabError(
            f"{node.name}: generating SSH host keys failed: {err.decode().strip()}", hint=f"see {log}"
        )
    for key in (keydir / "etc/ssh").glob("ssh_host_*"):
        shutil.move(str(key), root / "etc/ssh" / key.name)
    shutil.rmtree(keydir)
    (root / "etc/hostname").write_text(f"{node.name}\n")
    (root / "etc/machine-id").write_text(uuid.uuid4().hex + "\n")
    _install_shims(root, node, log)
    marker(layout, node.name).write_text("")


def _install_shims(root: Path, node: LabNode, log: Path) -> None:
    kver = os.uname().release
    moddir = root / "lib/modules" / kver
    moddir.mkdir(parents=True, exist_ok=True)
    (moddir / "modules.builtin").write_text("\n".join(BUILTIN_MODULES) + "\n")
    run(
        ["chroot", str(root), "depmod", "-a", kver],
        what=f"{node.name}: depmod (modprobe shim)",
        log=log,
        error=LabError,
    )
    dropin = root / "etc/systemd/system/chrony.service.d"
    dropin.mkdir(parents=True, exist_ok=True)
    (dropin / "lab-no-clock.conf").write_text(CHRONY_DROPIN)
    for unit in MASKED_UNITS:
        mask = root / "etc/systemd/system" / unit
        mask.unlink(missing_ok=True)
        mask.symlink_to("/dev/null")


def refresh_identity(layout: LabLayout, node: LabNode, nodes: list[LabNode], pubkey: str) -> None:
    """What may change between two `up`s of the same rootfs: the node list and the lab key."""
    root = layout.node_root(node.name)
    hosts = [
        "127.0.0.1 localhost",
        "::1 localhost ip6-localhost ip6-loopback",
        f"{layout.bridge_address} labhost",
    ]
    hosts += [f"{n.address} {n.name}" for n in nodes]
    lab_lines = "\n".join([*hosts, "# the lines above are the rehearsal lab's"]) + "\n"
    etc_hosts = root / "etc/hosts"
    # Unchanged lab lines keep the file as it is: what an install added below them (os_prereqs'
    # block of site nodes) stays, so a node booted again from its installed rootfs has no drift.
    if not (etc_hosts.is_file() and etc_hosts.read_text().startswith(lab_lines)):
        etc_hosts.write_text(lab_lines)
    for home, owner in ((root / "root", (0, 0)), (root / "home/debian", None)):
        if owner is None:
            st = home.stat()
            owner = (st.st_uid, st.st_gid)
        ssh_dir = home / ".ssh"
        ssh_dir.mkdir(mode=0o700, exist_ok=True)
        keys = ssh_dir / "authorized_keys"
        keys.write_text(pubkey.strip() + "\n")
        keys.chmod(0o600)
        for p in (ssh_dir, keys):
            os.chown(p, *owner)


def host_keys(layout: LabLayout, node: str) -> list[str]:
    """The node's public host keys ('TYPE BASE64'), read from its rootfs — no network trust needed."""
    out = []
    for kt in HOST_KEY_TYPES:
        pub = layout.node_root(node) / f"etc/ssh/ssh_host_{kt}_key.pub"
        if pub.is_file():
            out.append(" ".join(pub.read_text().split()[:2]))
    if not out:
        raise LabError(
            f"{node}: no SSH host keys in {layout.node_root(node)}",
            hint="recreate the node: `appliance lab down --purge` then `appliance lab up`",
        )
    return out


def ensure_keypair(site_dir: Path) -> str:
    """The lab's SSH key pair (site/id_ed25519); returns the public key."""
    key = site_dir / "id_ed25519"
    if not key.is_file() or not key.with_suffix(".pub").is_file():
        site_dir.mkdir(parents=True, exist_ok=True)
        key.unlink(missing_ok=True)
        key.with_suffix(".pub").unlink(missing_ok=True)
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "appliance-lab", "-f", str(key)],
            check=True,
            stdin=subprocess.DEVNULL,
        )
    return key.with_suffix(".pub").read_text()
