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
    "age-keygen": "age",  # the lab's backup key pair
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


# Every node shares the host's kernel, and so its per-user inotify limits: systemd, journald and
# containerd's CRI plugin (fsnotify) each hold instances. An installed node holds about 12; at the
# default 128 a 16-node lab (or several labs) fails in containerd with "too many open files".
INOTIFY_PER_NODE = {"fs.inotify.max_user_instances": 32, "fs.inotify.max_user_watches": 16384}
# The floor leaves room for other labs up at the same time (about 40 installed nodes in all).
INOTIFY_FLOOR = {"fs.inotify.max_user_instances": 512, "fs.inotify.max_user_watches": 524288}


def ensure_host_limits(nodes: int, proc_sys: str = "/proc/sys") -> dict[str, int]:
    """Raise the host's inotify limits to what `nodes` more nodes need (never lower them); returns
    what was raised. Refuses in one line naming the sysctl where it cannot be raised."""
    raised = {}
    for name, per_node in INOTIFY_PER_NODE.items():
        path = os.path.join(proc_sys, *name.split("."))
        with open(path) as fh:
            current = int(fh.read().split()[0])
        want = max(INOTIFY_FLOOR[name], per_node * nodes)
        if want <= current:
            continue
        try:
            with open(path, "w") as fh:
                fh.write(f"{want}\n")
        except OSError as exc:
            raise PrerequisiteError(
                f"{name} is {current}, too low for {nodes} lab nodes on one kernel, and cannot be raised ({exc.strerror})",
                hint=f"sysctl -w {name}={want} on the host, or bring up fewer nodes",
            ) from None
        raised[name] = want
    return raised
