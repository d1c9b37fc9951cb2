"""The cached Debian 12 base image every lab node (and the apt closure resolver) starts from.

Built once with mmdebstrap into `<cache>/bookworm-node-base.tar.zst`; unpacking a copy takes ~2 s.
The image is air-gapped by construction (no apt sources) and carries no per-node identity
(no SSH host keys, empty machine-id): nodes get theirs when they are created.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from appliance_cli.digest import sha256_file
from appliance_cli.errors import LabError
from appliance_cli.fsutil import atomic_path, atomic_write
from appliance_cli.locks import file_lock
from appliance_cli.proc import run

SUITE = "bookworm"
BASE_NAME = "bookworm-node-base.tar.zst"
BASE_PACKAGES = [
    "openssh-server",
    "systemd",
    "systemd-sysv",
    "dbus",
    "libpam-systemd",
    "python3",
    "python3-apt",
    "sudo",
    "iproute2",
    "iputils-ping",
    "procps",
    "kmod",
    "ca-certificates",
    "less",
    "netbase",
    "ifupdown",
]
# No man pages, translations or docs (copyright kept): a third fewer files to unpack per node,
# and the setting stays in the image (/etc/dpkg/dpkg.cfg.d) for what the installer adds later.
DPKG_OPTS = (
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/locale/*",
    "path-include=/usr/share/locale/locale.alias",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
)
# Bump when the customization changes, so cached images get rebuilt.
RECIPE_VERSION = "2"


def host_sources_file() -> Path:
    """Use the host's mirror setup (this machine only reaches its configured Debian mirror)."""
    for p in (Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list")):
        if p.is_file() and p.read_text().strip():
            return p
    raise LabError(
        "no apt sources on the host (/etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list)",
        hint="the lab builds its base image from the host's Debian mirror; configure one first",
    )


def _recipe_key() -> str:
    return f"{RECIPE_VERSION} {SUITE} {' '.join(BASE_PACKAGES)} {' '.join(DPKG_OPTS)}"


def ensure_base_rootfs(cache_dir: Path, rebuild: bool = False) -> Path:
    """Return the cached base tarball, building it with mmdebstrap when missing or stale."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    out = cache_dir / BASE_NAME
    recipe = cache_dir / (BASE_NAME + ".recipe")
    with file_lock(cache_dir / ".base-rootfs.lock"):
        if out.is_file() and not rebuild and recipe.is_file() and recipe.read_text() == _recipe_key():
            return out
        log = cache_dir / "logs" / "mmdebstrap.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("")
        hook = f'{shlex.quote(sys.executable)} -m appliance_cli.debian.customize "$1"'
        with atomic_path(out) as tmp:  # the name keeps .tar.zst: mmdebstrap's format
            run(
                [
                    "mmdebstrap",
                    "--quiet",
                    "--variant=minbase",
                    "--components=main",
                    f"--include={','.join(BASE_PACKAGES)}",
                    *(f"--dpkgopt={o}" for o in DPKG_OPTS),
                    f"--customize-hook={hook}",
                    SUITE,
                    str(tmp),
                    str(host_sources_file()),
                ],
                what="building the base rootfs with mmdebstrap",
                error=LabError,
                log=log,
                hint="check the host's Debian mirror is reachable (apt-get update)",
            )
        atomic_write(digest_sidecar(out), file_digest(out))
        atomic_write(recipe, _recipe_key())
        return out


def file_digest(path: Path) -> str:
    return sha256_file(path)[0]


def digest_sidecar(base: Path) -> Path:
    """Where the base tarball's sha256 is kept (written by its build; the lab snapshots' key reads it)."""
    return base.with_name(base.name + ".sha256")


def base_digest(base: Path) -> str:
    """sha256 of the base tarball, from the sidecar written at build time when it is current."""
    side = digest_sidecar(base)
    if side.is_file() and side.stat().st_mtime >= base.stat().st_mtime:
        return side.read_text().strip()
    digest = file_digest(base)
    atomic_write(side, digest)
    return digest


def unpack(base: Path, dest: Path, log: Path | None = None) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    run(
        [
            "tar",
            "--zstd",
            "--numeric-owner",
            "--xattrs",
            "--xattrs-include=*",
            "--acls",
            "-C",
            str(dest),
            "-xf",
            str(base),
        ],
        what=f"unpacking {base.name} into {dest}",
        log=log,
        error=LabError,
    )
