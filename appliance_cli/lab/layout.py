"""Where one rehearsal lab keeps its state, and how its nodes, namespaces and cgroups are named.

Everything a lab creates on the host carries the lab's name, so two labs with different
APPLIANCE_LAB_NAME values can run side by side. The 10.77.0.0/24 addresses repeat between labs:
each lab has its own network namespaces, so they never meet.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

DEFAULT_ROOT = Path("/var/lib/appliance")
_NAME_RE = re.compile(r"[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?")
SUBNET_PREFIX = "10.77.0"
MAX_NODES = 32


def node_name(index: int) -> str:
    """Node 1 is the master, the rest are workers: master1, worker1, worker2, ..."""
    if index < 1:
        raise ValueError(f"node index starts at 1, got {index}")
    return "master1" if index == 1 else f"worker{index - 1}"


@dataclass(frozen=True)
class LabLayout:
    name: str
    dir: Path
    cache_dir: Path

    @classmethod
    def default(cls) -> LabLayout:
        name = os.environ.get("APPLIANCE_LAB_NAME") or "lab"
        if not _NAME_RE.fullmatch(name):
            from appliance_cli.errors import UsageError

            raise UsageError(
                f"APPLIANCE_LAB_NAME {name!r} is not a valid lab name",
                hint="use lower-case letters, digits and '-', at most 32 characters",
            )
        lab_dir = Path(os.environ.get("APPLIANCE_LAB_DIR") or DEFAULT_ROOT / "labs" / name)
        cache = Path(os.environ.get("APPLIANCE_CACHE_DIR") or DEFAULT_ROOT / "cache")
        return cls(name=name, dir=lab_dir, cache_dir=cache)

    # --- state directories -------------------------------------------------------------
    @property
    def site_dir(self) -> Path:
        return self.dir / "site"

    @property
    def nodes_dir(self) -> Path:
        return self.dir / "nodes"

    @property
    def logs_dir(self) -> Path:
        return self.dir / "logs"

    @property
    def run_dir(self) -> Path:
        """PID files and the state file: what `down` needs to undo `up`."""
        return self.dir / "run"

    @property
    def state_file(self) -> Path:
        return self.run_dir / "state.json"

    def node_root(self, node: str) -> Path:
        return self.nodes_dir / node

    def supervisor_pidfile(self, node: str) -> Path:
        return self.run_dir / f"{node}.pid"

    def nspawn_pidfile(self, node: str) -> Path:
        return self.run_dir / f"{node}.nspawn.pid"

    def ready_file(self, node: str) -> Path:
        """Written by the supervisor once the node's cgroup mounts are writable."""
        return self.run_dir / f"{node}.ready"

    @property
    def http_pidfile(self) -> Path:
        return self.run_dir / "apt-http.pid"

    def console_log(self, node: str) -> Path:
        return self.logs_dir / f"{node}.console.log"

    # --- names on the host ---------------------------------------------------------------
    @property
    def netns(self) -> str:
        """The namespace holding the lab bridge (and the offline apt repo server)."""
        return f"{self.name}-net"

    def node_netns(self, index: int) -> str:
        return f"{self.name}-node{index}"

    def machine_name(self, node: str) -> str:
        return f"{self.name}-{node}"

    def cgroup_name(self, node: str) -> str:
        return f"{self.name}-{node}"

    # --- addresses (inside the lab's namespaces only) -----------------------------------
    @property
    def bridge_address(self) -> str:
        return f"{SUBNET_PREFIX}.1"

    @property
    def prefix_len(self) -> int:
        return 24

    def node_address(self, index: int) -> str:
        if not 1 <= index <= MAX_NODES:
            raise ValueError(f"node index {index} outside 1..{MAX_NODES}")
        return f"{SUBNET_PREFIX}.{10 + index}"

    @property
    def apt_repo_url(self) -> str:
        return f"http://{self.bridge_address}:8080/"
