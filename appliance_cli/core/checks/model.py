"""What a check returns. No I/O and no printing: the CLI renders these, reports serialize them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

LAYERS = (
    "hardware",
    "os",
    "network",
    "storage",
    "runtime",
    "registry",
    "kubernetes",
    "gpu",
    "scheduler",
)


# Differences smaller than this are noise whatever their ratio (0.05 ms against 0.1 ms of round
# trip is no bottleneck and no regression); by check name, in the measurement's unit.
# A probe pod's start (s) is blurred by the kubelet's relist and sync periods (1-2 s) and diagnose's
# polling, so 5 s.
NOISE_FLOOR = {"latency_to_master": 0.5, "pod_latency": 0.5, "pod_pair_latency": 0.5, "probe_pod_start": 5.0}


class Status(StrEnum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"


@dataclass(frozen=True)
class CheckResult:
    """One check on one node (`node` is "site" for checks across nodes)."""

    check: str
    layer: str
    node: str
    status: Status
    value: str = ""  # what was measured, with its unit
    expected: str = ""  # from the site config, the node's hardware class, or the tool's rule
    hint: str = ""  # how to fix it (fail/warn), or why it could not be measured (skip)
    number: float | None = None  # the measurement itself, for ranking and comparing runs
    unit: str = ""
    better: str = ""  # "higher" or "lower": which way a change of `number` is an improvement

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"status": str(self.status)}


@dataclass
class NodeFacts:
    """What the probe gathered on one node in its single round trip: `values` holds the
    key=value lines (repeated keys in `lists`), `error` why the node could not be probed."""

    node: str
    values: dict[str, str] = field(default_factory=dict)
    lists: dict[str, list[str]] = field(default_factory=dict)
    error: str = ""
    rtt_s: float = 0.0  # the round trip, for the time-skew check
    received_at: float = 0.0  # controller's clock when the answer arrived

    def get(self, key: str, default: str = "") -> str:
        return self.values.get(key, default)

    def prefixed(self, prefix: str) -> dict[str, str]:
        """{"eth0": "...", ...} for keys "PREFIX.eth0", ..."""
        return {k[len(prefix) + 1 :]: v for k, v in self.values.items() if k.startswith(prefix + ".")}

    @property
    def in_container(self) -> bool:
        return (
            self.get("virt", "none") not in ("none", "", "unknown") and self.get("virt_type") == "container"
        )


@dataclass
class Report:
    """Every result of a run, in the order they were produced."""

    kind: str  # preflight | diagnose
    site: str
    results: list[CheckResult] = field(default_factory=list)
    seconds: float = 0.0
    bottleneck: CheckResult | None = None  # diagnose: the measurement furthest below its peers
    remeasured: int = 0  # diagnose: values below their threshold, measured again on their node alone
    cleared: int = 0  # of those, how many the second measurement cleared

    def counts(self) -> dict[str, int]:
        out = {str(s): 0 for s in Status}
        for r in self.results:
            out[str(r.status)] += 1
        return out

    @property
    def failed(self) -> list[CheckResult]:
        return [r for r in self.results if r.status is Status.FAIL]

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "site": self.site,
            "seconds": round(self.seconds, 3),
            "counts": self.counts(),
            "results": [r.to_dict() for r in self.results],
            "bottleneck": self.bottleneck.to_dict() if self.bottleneck else None,
            "remeasured": self.remeasured,
            "cleared": self.cleared,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Report:
        def result(d: dict[str, Any]) -> CheckResult:
            return CheckResult(**(d | {"status": Status(d["status"])}))

        rep = cls(kind=data["kind"], site=data["site"], seconds=float(data.get("seconds", 0)),
                  remeasured=int(data.get("remeasured", 0)), cleared=int(data.get("cleared", 0)))  # fmt: skip
        rep.results = [result(d) for d in data.get("results", [])]
        rep.bottleneck = result(data["bottleneck"]) if data.get("bottleneck") else None
        return rep
