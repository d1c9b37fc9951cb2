"""Per-node supervisor: `python -m appliance_cli.lab.supervisor SPEC.json` (started under setsid).

* moves itself into the node's own cgroups (see cgroups.py) before starting systemd-nspawn;
* boots the node with `systemd-nspawn --boot` in the node's network namespace;
* once the node's systemd runs, remounts its cgroup v1 controllers read-write (runc needs them)
  and touches the ready file;
* restarts the node when it reboots itself (nspawn exits 133), so `ansible.builtin.reboot` works;
* on SIGTERM forwards it to nspawn (= clean poweroff of the node) and exits when nspawn does.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType

from appliance_cli.lab import cgroups

REBOOT_EXIT = 133
MARKER = "appliance_cli.lab.supervisor"


@dataclass
class NodeSpec:
    name: str
    index: int
    machine: str
    rootfs: str
    netns: str
    cgroup_dirs: list[str]
    nspawn_pidfile: str
    ready_file: str
    events_file: str
    extra_syscalls: list[str] = field(default_factory=list)
    binds_ro: list[str] = field(default_factory=list)  # "HOST_PATH:NODE_PATH", e.g. the bundle "stick"

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def read(cls, path: Path) -> NodeSpec:
        return cls(**json.loads(path.read_text()))


def nspawn_argv(spec: NodeSpec) -> list[str]:
    argv = [
        "systemd-nspawn",
        "--quiet",
        "--boot",
        f"--directory={spec.rootfs}",
        f"--machine={spec.machine}",
        f"--hostname={spec.name}",
        f"--network-namespace-path=/run/netns/{spec.netns}",
        "--private-network",
        "--capability=CAP_NET_ADMIN",
        "--system-call-filter=@keyring bpf",  # runc joins a session keyring and loads bpf programs
        "--register=no",
        "--keep-unit",  # no systemd/machined on the host
        "--console=read-only",
        "--resolv-conf=off",
        "--timezone=off",
        "--link-journal=no",
    ]
    if spec.extra_syscalls:
        argv.append(f"--system-call-filter={' '.join(spec.extra_syscalls)}")
    argv += [f"--bind-ro={b}" for b in spec.binds_ro]
    return argv


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _ro_cgroup_mounts(pid: int) -> tuple[list[str], int]:
    """(read-only v1 controller mounts, number of v1 controller mounts) seen by process pid."""
    ro, total = [], 0
    for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
        pre, _, post = line.partition(" - ")
        fields = pre.split()
        if post.split()[0] != "cgroup" or not fields[4].startswith("/sys/fs/cgroup/"):
            continue
        total += 1
        if "ro" in fields[5].split(","):
            ro.append(fields[4])
    return ro, total


def make_cgroups_writable(nspawn_pid: int, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not Path(f"/proc/{nspawn_pid}").exists():
            return False
        inits = [c for c in _children(nspawn_pid) if _comm(c) == "systemd"]
        if inits:
            try:
                ro, total = _ro_cgroup_mounts(inits[0])
                for mnt in ro:
                    subprocess.run(
                        ["nsenter", "-t", str(inits[0]), "-m", "mount", "-o", "remount,bind,rw", mnt],
                        check=False,
                        stdin=subprocess.DEVNULL,
                    )
                ro, total = _ro_cgroup_mounts(inits[0])
                if total and not ro:
                    return True
            except OSError:
                pass
        time.sleep(0.05)
    return False


def _event(spec: NodeSpec, text: str) -> None:
    with open(spec.events_file, "a") as fh:
        fh.write(f"{time.time():.3f} {text}\n")


def supervise(spec: NodeSpec) -> int:
    cgroups.join([Path(d) for d in spec.cgroup_dirs], os.getpid())
    env = dict(os.environ, SYSTEMD_NSPAWN_API_VFS_WRITABLE="network")  # net.* sysctls writable
    state: dict[str, subprocess.Popen[bytes] | bool | None] = {"child": None, "stopping": False}

    def on_signal(signum: int, frame: FrameType | None) -> None:
        state["stopping"] = True
        child = state["child"]
        if isinstance(child, subprocess.Popen) and child.poll() is None:
            child.send_signal(signal.SIGTERM)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)

    rc = 0
    while not state["stopping"]:
        shutil.rmtree(f"/run/systemd/nspawn/propagate/{spec.machine}", ignore_errors=True)
        Path(spec.ready_file).unlink(missing_ok=True)
        child = subprocess.Popen(nspawn_argv(spec), env=env, stdin=subprocess.DEVNULL)
        state["child"] = child
        Path(spec.nspawn_pidfile).write_text(f"{child.pid}\n")
        _event(spec, f"nspawn-start {child.pid}")
        if make_cgroups_writable(child.pid):
            Path(spec.ready_file).write_text(f"{time.time():.3f}\n")
            _event(spec, "cgroups-rw")
        else:
            _event(spec, "cgroups-rw-failed")
        rc = child.wait()
        _event(spec, f"nspawn-exit {rc}")
        if rc != REBOOT_EXIT:
            break
    Path(spec.nspawn_pidfile).unlink(missing_ok=True)
    Path(spec.ready_file).unlink(missing_ok=True)
    shutil.rmtree(f"/run/systemd/nspawn/propagate/{spec.machine}", ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(supervise(NodeSpec.read(Path(sys.argv[1]))))
