"""Per-node cgroups in every cgroup v1 hierarchy (plus the hybrid 'unified' one).

Without systemd on the host, every nspawn would land in the same cgroup and the nodes' systemds
would collide; each node's supervisor therefore moves itself into `<lab>-<node>` everywhere first.
Each cgroup is created below the cgroup the CLI itself runs in (on this host, e.g., memory is
delegated under /process_api/...), and every path created is recorded for teardown.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def _mounts() -> dict[str, tuple[Path, str]]:
    """hierarchy key ('memory', 'name=systemd', '' for cgroup2) -> (mount point, mount root)."""
    out: dict[str, tuple[Path, str]] = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        pre, _, post = line.partition(" - ")
        fields, pfields = pre.split(), post.split()
        fstype, mnt, root = pfields[0], Path(fields[4]), fields[3]
        if fstype == "cgroup2":
            out.setdefault("", (mnt, root))
        elif fstype == "cgroup":
            opts = [o for o in pfields[2].split(",") if o not in ("rw", "ro")]
            out.setdefault(",".join(sorted(opts)), (mnt, root))
    return out


def node_cgroup_dirs(name: str) -> list[Path]:
    """Where the cgroups for `name` go, one per mounted hierarchy, below our own cgroup."""
    mounts = _mounts()
    dirs = []
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        key = ",".join(sorted(c for c in controllers.split(",") if c)) if controllers else ""
        if key not in mounts:
            continue
        mnt, root = mounts[key]
        rel = os.path.relpath(path, root) if root != "/" else path.lstrip("/")
        base = mnt / rel if rel not in ("", ".") else mnt
        dirs.append(base / name)
    return dirs


def create(dirs: list[Path]) -> None:
    for d in dirs:
        d.mkdir(exist_ok=True)
        if (d / "cpuset.cpus").exists():  # v1 cpuset refuses tasks until cpus/mems are set
            for f in ("cpuset.cpus", "cpuset.mems"):
                if not (d / f).read_text().strip():
                    (d / f).write_text((d.parent / f).read_text())


def join(dirs: list[Path], pid: int) -> None:
    for d in dirs:
        (d / "cgroup.procs").write_text(f"{pid}\n")


def pids(dirs: list[Path]) -> set[int]:
    """Every PID in the subtrees (what a node still runs)."""
    found: set[int] = set()
    for d in dirs:
        if not d.is_dir():
            continue
        for procs in d.rglob("cgroup.procs"):
            try:
                found.update(int(p) for p in procs.read_text().split())
            except OSError:
                continue
    return found


def remove(dirs: list[Path], timeout: float = 5.0) -> list[Path]:
    """rmdir the subtrees bottom-up; returns what could not be removed."""
    deadline = time.monotonic() + timeout
    left: list[Path] = []
    while True:
        left = []
        for d in dirs:
            if not d.is_dir():
                continue
            subdirs = sorted(
                (p for p in d.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
            )
            for sub in [*subdirs, d]:
                try:
                    sub.rmdir()
                except OSError:
                    left.append(sub)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)  # a freshly killed process leaves its cgroup a moment later
