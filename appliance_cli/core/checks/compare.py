"""Head to head: two reports (two runs of one appliance, or two appliances) compared measurement
by measurement; a change for the worse beyond the noise threshold is a regression."""

from __future__ import annotations

from dataclasses import dataclass

from appliance_cli.core.checks.model import NOISE_FLOOR, Report

# Run to run, CPU and memory throughput on a busy shared machine move by up to ~20 %; a link, a
# disk or a GPU that degrades loses far more.
DEFAULT_THRESHOLD = 0.25


@dataclass(frozen=True)
class Delta:
    layer: str
    check: str
    node: str
    before: float
    after: float
    unit: str
    change: float  # the relative change, positive = better (whichever way "better" points)
    regression: bool


def compare(before: Report, after: Report, threshold: float = DEFAULT_THRESHOLD) -> list[Delta]:
    """Every measurement present in both reports (same layer, check and node)."""
    old = {(r.layer, r.check, r.node): r for r in before.results if r.number is not None}
    out = []
    for r in after.results:
        prev = old.get((r.layer, r.check, r.node))
        if r.number is None or prev is None or prev.number is None or not prev.number:
            continue
        rel = (r.number - prev.number) / prev.number
        change = -rel if r.better == "lower" else rel
        noise = abs(r.number - prev.number) <= NOISE_FLOOR.get(r.check, 0.0)
        regression = change < -threshold and not noise
        out.append(Delta(r.layer, r.check, r.node, prev.number, r.number, r.unit, change, regression))
    return out
