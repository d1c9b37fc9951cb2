"""master1 as the site's NFS filer: the lab's stand-in for the customer's NFS server.

The host kernel has no NFS (LAB-NOTES), so master1 runs userspace nfs-ganesha (VFS FSAL, NFSv3 and
v4) exporting the lab site config's `nfs.path` read-write to the lab's nodes, root not squashed
(a site's filer for Kubernetes gives the provisioner's root write access the same way). It is no
part of the appliance install: the packages come from the lab's host-side apt repository (not the
bundle), through an apt source, lists and cache of their own that are removed afterwards, so
`appliance install` later finds master1's apt exactly as the lab left it (no source, no lists).
"""

from __future__ import annotations

import shlex
import subprocess
import time

from appliance_cli.errors import LabError

PACKAGES = ("nfs-ganesha", "nfs-ganesha-vfs")
CONFIG = "/etc/ganesha/ganesha.conf"
SETUP_TIMEOUT = 120.0
# Where apt keeps this one install's lists and downloads (removed afterwards).
APT_STATE = "/var/lib/appliance-lab-filer"


def ganesha_config(path: str, read_only: bool = False) -> str:
    """The whole ganesha.conf: one export of `path`, NFSv3 + v4, no root squash; graceless so a
    restart (tests switch the export read-only and back) serves at once."""
    access = "RO" if read_only else "RW"
    if '"' in path or "\\" in path:
        raise LabError(f"nfs.path {path!r}: the lab's filer cannot export a path with a quote or backslash")
    # quoted: a site's path may hold a space or a ';' (ganesha's parser ends a bare word there)
    return f"""# Written by the rehearsal lab (appliance_cli/lab/filer.py): master1 plays the site's NFS filer.
NFS_CORE_PARAM {{
    Protocols = 3, 4;
    mount_path_pseudo = true;
}}
NFSV4 {{
    Graceless = true;
}}
EXPORT {{
    Export_Id = 1;
    Path = "{path}";
    Pseudo = "{path}";
    Protocols = 3, 4;
    Transports = TCP, UDP;
    Access_Type = {access};
    Squash = No_Root_Squash;
    SecType = sys;
    FSAL {{
        Name = VFS;
    }}
}}
LOG {{
    Default_Log_Level = WARN;
}}
"""


def apply_config_script(path: str, read_only: bool = False) -> str:
    """Shell (run as root on master1) that writes the export and restarts ganesha, then waits
    until it answers on 2049."""
    return (
        f"mkdir -p {shlex.quote(path)}\n"
        f"cat > {CONFIG} <<'GANESHA_EOF'\n{ganesha_config(path, read_only)}GANESHA_EOF\n"
        "systemctl enable --quiet rpcbind nfs-ganesha\n"
        "systemctl restart nfs-ganesha\n"
        "for _ in $(seq 100); do\n"
        "  if ss -ltnH 'sport = :2049' | grep -q .; then exit 0; fi\n"
        "  sleep 0.1\n"
        "done\n"
        "echo 'nfs-ganesha does not answer on port 2049 (see /var/log/ganesha/ganesha.log)' >&2\n"
        "exit 1\n"
    )


def setup_script(apt_repo_url: str, path: str) -> str:
    """Install ganesha from the lab's apt repo (skipped when installed: a reused rootfs), then
    export `path`."""
    apt_opts = (
        f"-o Dir::Etc::sourcelist={APT_STATE}/lab.list -o Dir::Etc::sourceparts=- "
        f"-o Dir::State::Lists={APT_STATE}/lists -o Dir::Cache={APT_STATE}/cache"
    )
    return (
        "set -e\n"
        f"if [ \"$(dpkg-query -W -f '${{Status}}\\n' {' '.join(PACKAGES)} 2>/dev/null | grep -c 'ok installed')\""
        f" != {len(PACKAGES)} ]; then\n"
        f"  mkdir -p {APT_STATE}/lists/partial {APT_STATE}/cache/archives/partial\n"
        f"  echo 'deb [trusted=yes] {apt_repo_url} ./' > {APT_STATE}/lab.list\n"
        f"  apt-get -qq {apt_opts} update\n"
        f"  DEBIAN_FRONTEND=noninteractive apt-get -qq -y --no-install-recommends {apt_opts} install"
        f" {' '.join(PACKAGES)} >/dev/null\n"
        f"  rm -rf {APT_STATE}\n"
        "fi\n"
        "set +e\n"
        "(\n" + apply_config_script(path) + ")\n"
    )


def run_on_master(argv: list[str], script: str, what: str, timeout: float = SETUP_TIMEOUT) -> None:
    """`script` through `sudo sh -s` on master1 (`argv`: its ssh command); one-line LabError."""
    try:
        r = subprocess.run(
            [*argv, "sudo", "sh", "-s"], input=script, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        raise LabError(f"master1: {what} did not finish within {timeout:.0f}s") from None
    if r.returncode != 0:
        lines = [ln for ln in (r.stderr + r.stdout).splitlines() if ln.strip()]
        raise LabError(
            f"master1: {what} failed: {lines[-1] if lines else f'exit {r.returncode}'}",
            hint="see /var/log/ganesha/ganesha.log on master1 (appliance lab ssh master1)",
        )


def setup(ssh_argv: list[str], apt_repo_url: str, path: str) -> float:
    """Install and start the filer on master1; returns the seconds it took."""
    t0 = time.monotonic()
    run_on_master(ssh_argv, setup_script(apt_repo_url, path), "NFS filer (nfs-ganesha) setup")
    return time.monotonic() - t0
