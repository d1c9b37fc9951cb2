"""Domain events a run produces. The runner adapter turns ansible-runner job events into these;
renderers (rich progress, plain lines) and the core services only ever see these."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

HostStatus = Literal["ok", "changed", "failed", "unreachable", "skipped"]

# A task result carrying this key reports, per host, what the node cannot do that is not an
# error on this kind of node (e.g. read-only global sysctls in a container): each message
# becomes a HostWarning, so limits are shown to the user instead of silently skipped. A
# module returns it (os_prereqs' kernel_prereqs); any task can with
# `ansible.builtin.debug: {var: appliance_warnings}`. The key, not the task's name, is the contract.
WARNINGS_KEY = "appliance_warnings"
# A failed task's result may say what failed in the product's terms: "bundle" (the bundle on the
# stick differs from its signed manifest) or "bundle-copy" (a blob of the master's copy changed
# after it was verified) makes the run a BundleError (exit 4), not a RunFailed.
FAILURE_KIND_KEY = "appliance_failure"


@dataclass(frozen=True)
class PlayStarted:
    name: str


@dataclass(frozen=True)
class TaskStarted:
    name: str
    role: str | None = None


@dataclass(frozen=True)
class HostResult:
    host: str
    task: str
    status: HostStatus
    message: str = ""
    ignored: bool = False
    address: str = ""  # unreachable: the address that could not be reached (a delegated task's target)
    kind: str = ""  # a failure's FAILURE_KIND_KEY, when the module set one


@dataclass(frozen=True)
class HostWarning:
    host: str
    message: str


@dataclass
class HostStats:
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0


Event = PlayStarted | TaskStarted | HostResult | HostWarning


@dataclass(frozen=True)
class RunOptions:
    """What the user asked of this run (the CLI's flags): the same for every playbook."""

    check: bool = False
    diff: bool = False
    limit: str | None = None
    tags: str | None = None
    skip_tags: str | None = None
    verbosity: int = 0


@dataclass
class RunRequest:
    playbook: Path
    inventory: Path
    private_data_dir: Path
    extravars: dict[str, Any] = field(default_factory=dict)
    options: RunOptions = field(default_factory=RunOptions)
    envvars: dict[str, str] = field(default_factory=dict)
    mitogen: bool = False  # run through Mitogen's strategy (site config ssh.mitogen)
    # address -> inventory name: an unreachable delegated task is reported against the node it
    # could not reach, not the node that ran it
    node_names: dict[str, str] = field(default_factory=dict)


@dataclass
class RunResult:
    status: str  # successful | failed | canceled | timeout
    rc: int
    stats: dict[str, HostStats]
    artifact_dir: Path
    failures: list[HostResult] = field(default_factory=list)
    warnings: list[HostWarning] = field(default_factory=list)
    elapsed: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "successful" and self.rc == 0

    @property
    def changed_total(self) -> int:
        return sum(s.changed for s in self.stats.values())
