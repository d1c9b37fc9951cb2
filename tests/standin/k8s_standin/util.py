"""Versions, small helpers (durations, tables, files, processes) and the test-only STANDIN_ROOT."""

from __future__ import annotations

import base64
import datetime as dt
import importlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from typing import Any

DEFAULT_VERSION = "v1.23.17"


def _packed_version() -> str:
    """The Kubernetes version of the bundle entry this file was packed from (the builder's
    generated `_build.py`, appliance_cli/bundle/zipapp.py), else DEFAULT_VERSION (the source tree)."""
    try:
        build = importlib.import_module(f"{__package__}._build")
    except ImportError:
        return DEFAULT_VERSION
    v = getattr(build, "KUBERNETES_VERSION", "")
    return v if isinstance(v, str) and re.fullmatch(r"v1\.\d+\.\d+", v) else DEFAULT_VERSION


VERSION = _packed_version()
GIT_COMMIT = "953be8927218ec8067e1af2641e540238ffd7576"
BUILD_DATE = "2023-02-22T13:33:14Z"
GO_VERSION = "go1.19.6"
CRICTL_VERSION = "v1.23.0"
# kubeadm's constants per minor release (`kubeadm config images list` of its last patch, and
# MinimumControlPlaneVersion): what it pulls besides the control-plane images at the target's tag,
# and the lowest version it deploys or upgrades to. 1.23.16/17 and 1.24.17 (pause 3.7 from 1.24).
RELEASES: dict[tuple[int, int], dict[str, Any]] = {
    (1, 23): {"pause": "3.6", "etcd": "3.5.6-0", "coredns": "v1.8.6", "min_control_plane": (1, 22, 0)},
    (1, 24): {"pause": "3.7", "etcd": "3.5.6-0", "coredns": "v1.8.6", "min_control_plane": (1, 23, 0)},
}


def minor_of(version: str) -> tuple[int, int]:
    m = re.match(r"^v?(\d+)\.(\d+)\.", version)
    return (int(m.group(1)), int(m.group(2))) if m else (1, 23)


MINOR = minor_of(VERSION)
_RELEASE = RELEASES.get(MINOR, RELEASES[(1, 23)])  # a minor not modelled gets 1.23's (README)
PAUSE_VERSION: str = _RELEASE["pause"]
ETCD_VERSION: str = _RELEASE["etcd"]
COREDNS_VERSION: str = _RELEASE["coredns"]
# kubeadm v1.23.17 carries the registry.k8s.io backport.
DEFAULT_IMAGE_REPOSITORY = "registry.k8s.io"
MIN_CONTROL_PLANE: tuple[int, int, int] = _RELEASE["min_control_plane"]
# 1.24: no dockershim (kubelet), the unversioned kubelet ConfigMap (kubeadm's
# UnversionedKubeletConfigMap, beta and on), the control-plane label/taint migration (KEP-2067 stage 2).
DOCKERSHIM_REMOVED = MINOR >= (1, 24)
DEFAULT_CRI_SOCKET = "unix:///run/containerd/containerd.sock"
KNOWN_CRI_SOCKETS = {
    "/var/run/docker.sock": "/var/run/dockershim.sock",
    "/run/containerd/containerd.sock": "unix:///run/containerd/containerd.sock",
    "/var/run/crio/crio.sock": "unix:///var/run/crio/crio.sock",
}
APISERVER_UNIT = "kube-apiserver-standin.service"
# Taints the node lifecycle controller owns (derived from conditions on every read).
CONTROLLER_TAINTS = {
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
    "node.kubernetes.io/unschedulable",
}
NODE_MONITOR_GRACE = 40.0  # kube-controller-manager --node-monitor-grace-period default
DISCOVERY_RETRY = 5.0
TOOLS_MANDATORY = ("conntrack", "ip", "iptables", "mount", "nsenter")
TOOLS_OPTIONAL = ("ebtables", "ethtool", "socat", "tc", "touch")
STACK_HINT = "To see the stack trace of this error execute with --v=5 or higher"

# TEST-ONLY: unit tests point this at a fake tree (proc/sys, proc/swaps, etc/kubernetes ...).
ROOT = os.environ.get("STANDIN_ROOT", "")


def hp(path: str) -> str:
    """Host path, relocated under STANDIN_ROOT for unit tests only."""
    return ROOT + path if ROOT else path


class Fail(Exception):
    """A user-visible failure: message already in the real tool's wording."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


# --------------------------------------------------------------------------- small utils


def now() -> float:
    return time.time()


def rfc3339(ts: float | None = None) -> str:
    t = dt.datetime.fromtimestamp(now() if ts is None else ts, tz=dt.UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(s: str) -> float:
    return dt.datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC).timestamp()


_DUR = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_DUR_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(s: str) -> float:
    """Go time.ParseDuration (seconds)."""
    if s in ("0", ""):
        return 0.0
    pos, total = 0, 0.0
    for m in _DUR.finditer(s):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _DUR_UNITS[m.group(2)]
        pos = m.end()
    if pos != len(s) or pos == 0:
        raise ValueError(f'time: invalid duration "{s}"')
    return total


def format_duration(seconds: float) -> str:
    """Go time.Duration.String for whole seconds."""
    s = round(seconds)
    if s == 0:
        return "0s"
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    if h:
        return f"{h}h{m}m{sec}s"
    if m:
        return f"{m}m{sec}s"
    return f"{sec}s"


def human_duration(seconds: float) -> str:
    """k8s.io/apimachinery duration.HumanDuration (the AGE column)."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m" if s % 60 == 0 else f"{minutes}m{s % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h" if minutes % 60 == 0 else f"{hours}h{minutes % 60}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d" if hours % 24 == 0 else f"{hours // 24}d{hours % 24}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        dy = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if dy == 0 else f"{hours // 24 // 365}y{dy}d"
    return f"{hours // 24 // 365}y"


def tabwrite(rows: list[list[str]]) -> str:
    """text/tabwriter(minwidth 0, padding 3) as kubectl uses it; the last column is not padded."""
    if not rows:
        return ""
    ncol = max(len(r) for r in rows)
    widths = [max(len(r[i]) for r in rows if i < len(r)) for i in range(ncol)]
    out = []
    for r in rows:
        cells = [c.ljust(widths[i] + 3) if i < len(r) - 1 else c for i, c in enumerate(r)]
        out.append("".join(cells))
    return "\n".join(out) + "\n"


def read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def write_file(path: str, data: str | bytes, mode: int = 0o644) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def b64(data: str | bytes) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def go_json(obj: Any) -> str:
    """encoding/json Marshal: compact, map keys sorted."""
    return json.dumps(obj, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def log_klog(level: str, where: str, msg: str) -> None:
    t = dt.datetime.now()
    sys.stderr.write(f"{level}{t:%m%d %H:%M:%S.%f} {os.getpid():>7} {where}] {msg}\n")


def run(cmd: list[str], timeout: float = 30, inp: bytes | None = None) -> tuple[int, str]:
    """Run a command; (rc, combined output).  Missing binary -> 127 like a shell."""
    try:
        p = subprocess.run(
            cmd, input=inp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout, check=False
        )
    except FileNotFoundError:
        return 127, f'exec: "{cmd[0]}": executable file not found in $PATH'
    except subprocess.TimeoutExpired:
        return 124, f"{cmd[0]}: timed out after {timeout:g}s"
    return p.returncode, p.stdout.decode(errors="replace")


def systemctl(*args: str) -> tuple[int, str]:
    return run(["systemctl", *args], timeout=60)


def hostname() -> str:
    return socket.gethostname().lower()


def self_path() -> str:
    return (
        os.path.abspath(sys.argv[0])
        if os.path.isabs(sys.argv[0])
        else (shutil.which("kubeadm") or "/usr/bin/kubeadm")
    )


def group_of(api_version: str) -> tuple[str, str]:
    return tuple(api_version.split("/", 1)) if "/" in api_version else ("", api_version)  # type: ignore[return-value]
