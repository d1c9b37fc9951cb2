"""The lab network: one namespace holding bridge br0 (10.77.0.1/24) and one namespace per node,
wired with a veth pair. The bridge namespace has no uplink, so nothing in the lab can reach
anything outside it; the nodes' default route points at the bridge only (kubeadm/kubelet pick the
node IP from the default route, as on a real appliance).

Probes from the host enter the lab namespace in a throwaway thread (setns is per thread), so the
CLI never opens a socket in the host's own network namespace.
"""

from __future__ import annotations

import ctypes
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from appliance_cli.errors import LabError
from appliance_cli.lab.layout import LabLayout
from appliance_cli.proc import run

NETNS_DIR = Path("/run/netns")
CLONE_NEWNET = 0x40000000
BRIDGE = "br0"
T = TypeVar("T")


def exists(name: str) -> bool:
    return (NETNS_DIR / name).exists()


def _ip(*args: str, log: Path) -> None:
    run(["ip", *args], what=f"ip {' '.join(args)}", log=log, hint="lab network setup", error=LabError)


def delete(name: str, log: Path) -> None:
    if exists(name):
        _ip("netns", "delete", name, log=log)


def lab_namespaces(layout: LabLayout, count: int) -> list[str]:
    return [layout.netns] + [layout.node_netns(i) for i in range(1, count + 1)]


def up(layout: LabLayout, count: int) -> list[str]:
    """Create the bridge namespace and `count` node namespaces; returns the names created."""
    log = layout.logs_dir / "network.log"
    created = []
    for ns in lab_namespaces(layout, count):
        delete(ns, log)  # a leftover from a crashed run is ours (it carries the lab name)
    br = layout.netns
    _ip("netns", "add", br, log=log)
    created.append(br)
    _ip("-n", br, "link", "set", "lo", "up", log=log)
    _ip("-n", br, "link", "add", BRIDGE, "type", "bridge", log=log)
    _ip("-n", br, "addr", "add", f"{layout.bridge_address}/{layout.prefix_len}", "dev", BRIDGE, log=log)
    _ip("-n", br, "link", "set", BRIDGE, "up", log=log)
    for i in range(1, count + 1):
        ns = layout.node_netns(i)
        veth = f"v-node{i}"
        _ip("netns", "add", ns, log=log)
        created.append(ns)
        _ip("-n", ns, "link", "set", "lo", "up", log=log)
        _ip("-n", br, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns, log=log)
        _ip("-n", br, "link", "set", veth, "master", BRIDGE, "up", log=log)
        _ip("-n", ns, "addr", "add", f"{layout.node_address(i)}/{layout.prefix_len}", "dev", "eth0", log=log)
        _ip("-n", ns, "link", "set", "eth0", "up", log=log)
        _ip("-n", ns, "route", "add", "default", "via", layout.bridge_address, log=log)
    return created


def in_netns(name: str, fn: Callable[[], T]) -> T:
    """Run fn in a fresh thread that has joined network namespace `name`."""
    result: list[T] = []
    error: list[BaseException] = []

    def target() -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = os.open(NETNS_DIR / name, os.O_RDONLY)
            try:
                if libc.setns(fd, CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns({name}): {os.strerror(err)}")
            finally:
                os.close(fd)
            result.append(fn())
        except BaseException as exc:  # handed to the caller's thread
            error.append(exc)

    t = threading.Thread(target=target, name=f"netns-{name}", daemon=True)
    t.start()
    t.join()
    if error:
        raise error[0]
    return result[0]


def tcp_banner(netns: str, host: str, port: int, send: bytes | None = None, timeout: float = 1.0) -> bytes:
    """Connect to host:port inside netns and return the first bytes it sends (b'' if none/refused)."""

    def probe() -> bytes:
        try:
            with socket.create_connection((host, port), timeout=timeout) as s:
                if send:
                    s.sendall(send)
                return s.recv(64)
        except OSError:
            return b""

    if not exists(netns):
        return b""
    try:
        return in_netns(netns, probe)
    except OSError:  # e.g. not root: cannot enter the namespace, so nothing is reachable
        return b""


def ssh_ready(netns: str, host: str, timeout: float = 1.0) -> bool:
    return tcp_banner(netns, host, 22, timeout=timeout).startswith(b"SSH-")
