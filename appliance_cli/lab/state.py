"""The lab's state file (run/state.json): everything `up` created, so `down` undoes exactly that."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from appliance_cli.fsutil import atomic_write


@dataclass
class NodeState:
    name: str
    index: int
    address: str
    cgroups: list[str] = field(default_factory=list)
    spec: str = ""


@dataclass
class LabState:
    name: str
    count: int
    nodes: list[NodeState] = field(default_factory=list)
    netns: list[str] = field(default_factory=list)
    bundle: str | None = None  # host directory bound read-only on master1 as its USB stick

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls, path: Path) -> LabState | None:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        nodes = [NodeState(**n) for n in data.pop("nodes", [])]
        return cls(nodes=nodes, **data)
