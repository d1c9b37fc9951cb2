"""Observed GPUs per project, read from the acceptance pods (`kubectl get pods -o json`), against
a step's expected allocation. Pure: no I/O.

A pod holds GPUs once its scheduler has bound it (`spec.nodeName`) until it ends or is deleted;
an unbound pod is queued. Its GPUs are what it asked its scheduler for:
* whole GPUs: the `nvidia.com/gpu` limit of its containers;
* Run:ai fractions: the `gpu-fraction` annotation (Run:ai's scheduler allots that share of one
  GPU; the pod then asks for no `nvidia.com/gpu`);
* HAMi fractions: `nvidia.com/gpu: 1` with `nvidia.com/gpumem-percentage: P`, P % of one GPU.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from appliance_cli.core.acceptance.model import Allocation, Step

GPU = "nvidia.com/gpu"
GPUMEM_PERCENTAGE = "nvidia.com/gpumem-percentage"  # HAMi
FRACTION_ANNOTATION = "gpu-fraction"  # Run:ai
PROJECT_LABEL = "acceptance.appliance/project"
RUN_LABEL = "acceptance.appliance/run"
JOB_LABEL = "acceptance.appliance/job"
# Not a tolerance: fractions such as 0.6 + 0.4 add up to 1 only within float rounding.
EPSILON = 1e-6


@dataclass(frozen=True)
class PodState:
    name: str
    project: str
    job: str
    gpus: float
    bound: bool  # the scheduler placed it (it holds its GPUs)
    phase: str
    node: str


@dataclass(frozen=True)
class Observed:
    allocated: Allocation  # project -> GPUs held by bound pods
    queued: dict[str, int]  # project -> pods waiting for their scheduler
    pods: tuple[PodState, ...]


def _quantity(value: Any) -> float:
    try:
        return float(str(value))
    except ValueError:
        return 0.0


def pod_gpus(pod: dict[str, Any]) -> float:
    """GPUs one pod asks for (whole or fraction), as its scheduler accounts them."""
    meta, spec = pod.get("metadata", {}) or {}, pod.get("spec", {}) or {}
    fraction = (meta.get("annotations") or {}).get(FRACTION_ANNOTATION)
    if fraction is not None:
        return _quantity(fraction)
    total = 0.0
    for c in spec.get("containers", []) or []:
        res = c.get("resources", {}) or {}
        limits = {**(res.get("requests") or {}), **(res.get("limits") or {})}
        whole = _quantity(limits.get(GPU, 0))
        if whole and GPUMEM_PERCENTAGE in limits:
            whole *= _quantity(limits[GPUMEM_PERCENTAGE]) / 100
        total += whole
    return total


def pod_state(pod: dict[str, Any]) -> PodState | None:
    """None for a pod that holds nothing and waits for nothing: finished, or being deleted."""
    meta, spec, status = pod.get("metadata", {}) or {}, pod.get("spec", {}) or {}, pod.get("status", {}) or {}
    phase = status.get("phase", "Unknown")
    if meta.get("deletionTimestamp") or phase in ("Succeeded", "Failed"):
        return None
    labels = meta.get("labels", {}) or {}
    return PodState(
        name=meta.get("name", "?"),
        project=labels.get(PROJECT_LABEL, "?"),
        job=labels.get(JOB_LABEL, "?"),
        gpus=pod_gpus(pod),
        bound=bool(spec.get("nodeName")),
        phase=phase,
        node=spec.get("nodeName", ""),
    )


def observe(pods: Iterable[dict[str, Any]], projects: Iterable[str]) -> Observed:
    allocated: Allocation = {p: 0.0 for p in projects}
    queued = {p: 0 for p in allocated}
    states = tuple(s for pod in pods if (s := pod_state(pod)) is not None)
    for s in states:
        if s.bound:
            allocated[s.project] = allocated.get(s.project, 0.0) + s.gpus
        else:
            queued[s.project] = queued.get(s.project, 0) + 1
    return Observed(allocated=allocated, queued=queued, pods=states)


def fmt(gpus: float) -> str:
    return f"{round(gpus, 3):g}"


@dataclass(frozen=True)
class Mismatch:
    project: str
    observed: float
    expected: float


@dataclass(frozen=True)
class Verdict:
    passed: bool
    expected: Allocation  # the alternative matched, or the closest one
    mismatches: tuple[Mismatch, ...]
    message: str


def _mismatches(observed: Allocation, expected: Allocation) -> tuple[Mismatch, ...]:
    projects = sorted(set(expected) | {p for p, g in observed.items() if g > EPSILON})
    return tuple(
        Mismatch(p, observed.get(p, 0.0), expected.get(p, 0.0))
        for p in projects
        if abs(observed.get(p, 0.0) - expected.get(p, 0.0)) > EPSILON
    )


def compare(scenario: str, step: Step, observed: Allocation) -> Verdict:
    """Pass when the observed GPUs per project equal one of the step's expected allocations
    (exactly: the seed gives no tolerance); else name the step and each project that differs."""
    ranked = sorted(
        ((_mismatches(observed, alt), i) for i, alt in enumerate(step.expected)),
        key=lambda m: (len(m[0]), sum(abs(x.observed - x.expected) for x in m[0]), m[1]),
    )
    best, index = ranked[0]
    where = f"{scenario} step {step.name} (seed lines {step.seed_lines})"
    if not best:
        return Verdict(True, step.expected[index], (), f"{where}: as expected")
    diffs = "; ".join(f"{m.project} has {fmt(m.observed)} GPUs, expected {fmt(m.expected)}" for m in best)
    alts = ""
    if len(step.expected) > 1:
        alts = (
            " (accepted: "
            + " or ".join(", ".join(f"{p} {fmt(g)}" for p, g in sorted(alt.items())) for alt in step.expected)
            + ")"
        )
    return Verdict(False, step.expected[index], best, f"{where}: {diffs}{alts}")
