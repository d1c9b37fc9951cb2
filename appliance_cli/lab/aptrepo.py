"""The lab's interim offline apt repository (the offline bundle's repo replaces it later).

Built once into the shared cache with debian.aptclosure, then served read-only by a Python
http.server bound to the bridge address inside the lab's own network namespace.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from appliance_cli.debian.aptclosure import download_closure, index_flat_repo
from appliance_cli.debian.rootfs import host_sources_file
from appliance_cli.errors import LabError
from appliance_cli.lab import proc
from appliance_cli.lab.layout import LabLayout
from appliance_cli.lab.netns import tcp_banner
from appliance_cli.locks import file_lock

LAB_APT_PACKAGES = [
    "containerd",
    "runc",
    "docker-registry",
    "chrony",
    "nfs-common",
    "skopeo",
    "iptables",
    "conntrack",
    "socat",
    "ebtables",
    "ethtool",
    "curl",
    "busybox-static",
    "jq",
    "python3-yaml",
    "apache2-utils",
    "containernetworking-plugins",
    "openssl",
    "nfs-ganesha",
    "nfs-ganesha-vfs",
    "rpcbind",
    "libnfs-utils",
]
HTTP_PORT = 8080
HTTP_MARKER = "http.server"


def repo_dir(cache_dir: Path) -> Path:
    return cache_dir / "lab-apt-repo"


def ensure_repo(cache_dir: Path, base: Path, rebuild: bool = False) -> Path:
    """Download the closure of LAB_APT_PACKAGES (incremental) and index it as a flat repo."""
    repo = repo_dir(cache_dir)
    with file_lock(cache_dir / ".lab-apt-repo.lock"):
        if rebuild:
            (repo / "pool" / ".closure.json").unlink(missing_ok=True)
        download_closure(
            base,
            host_sources_file().read_text(),
            LAB_APT_PACKAGES,
            repo / "pool",
            cache_dir / "work" / "lab-apt",
        )
        stamp = repo / "pool" / ".closure.json"
        packages_gz = repo / "Packages.gz"
        if not packages_gz.is_file() or packages_gz.stat().st_mtime < stamp.stat().st_mtime:
            index_flat_repo(repo)
    return repo


def start_server(layout: LabLayout, repo: Path) -> int:
    """Serve repo on bridge_address:8080 inside the lab netns; returns the server PID."""
    pid = proc.read_pid(layout.http_pidfile)
    if proc.owned(pid, HTTP_MARKER):
        return pid or 0
    log = layout.logs_dir / "apt-http.log"
    with log.open("a") as out:
        p = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                layout.netns,
                sys.executable,
                "-m",
                "http.server",
                str(HTTP_PORT),
                "--bind",
                layout.bridge_address,
                "--directory",
                str(repo),
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    layout.http_pidfile.write_text(f"{p.pid}\n")  # `ip netns exec` execs, so this is the server
    return p.pid


def wait_server(layout: LabLayout, pid: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if tcp_banner(layout.netns, layout.bridge_address, HTTP_PORT, send=b"HEAD / HTTP/1.0\r\n\r\n"):
            return
        if not proc.alive(pid):
            break
        time.sleep(0.1)
    raise LabError(
        f"offline apt repo server did not answer on {layout.apt_repo_url}",
        hint=f"see {layout.logs_dir / 'apt-http.log'}",
    )


def stop_server(layout: LabLayout) -> None:
    pid = proc.read_pid(layout.http_pidfile)
    if pid and proc.owned(pid, HTTP_MARKER):
        proc.terminate(pid, timeout=3)
    layout.http_pidfile.unlink(missing_ok=True)
