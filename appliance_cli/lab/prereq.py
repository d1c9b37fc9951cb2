"""What the host needs before a lab can come up: root and a handful of commands."""

from __future__ import annotations

import os
import shutil

from appliance_cli.errors import PrerequisiteError

# command -> Debian package providing it
REQUIRED_COMMANDS = {
    "systemd-nspawn": "systemd-container",
    "mmdebstrap": "mmdebstrap",
    "zstd": "zstd",
    "tar": "tar",
    "ip": "iproute2",
    "nc": "netcat-openbsd",
    "nsenter": "util-linux",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    "dpkg-scanpackages": "dpkg-dev",
}


def missing_commands(path: str | None = None) -> dict[str, str]:
    return {cmd: pkg for cmd, pkg in REQUIRED_COMMANDS.items() if shutil.which(cmd, path=path) is None}


def check_prerequisites(path: str | None = None, euid: int | None = None) -> None:
    """Raise PrerequisiteError naming everything missing, with the apt-get line that fixes it."""
    euid = os.geteuid() if euid is None else euid
    if euid != 0:
        raise PrerequisiteError(
            "the rehearsal lab needs root (network namespaces, cgroups, systemd-nspawn)",
            hint="run it as root, e.g. `sudo appliance lab up`",
        )
    missing = missing_commands(path)
    if missing:
        packages = " ".join(sorted(set(missing.values())))
        raise PrerequisiteError(
            f"missing host commands: {', '.join(missing)}",
            hint=f"apt-get install --no-install-recommends {packages}  (or run scripts/bootstrap.sh)",
        )
