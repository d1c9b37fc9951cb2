"""Helm's rules the CLI and the roles both read: a chart's `kubeVersion` constraint checked against
the cluster's version, as helm checks it before installing anything (Masterminds semver:
`>= 1.16.0-0`, `>=1.20.0 <1.25.0`, `~1.23`, `^1.20`, `a || b`; a prerelease version satisfies only
constraints that name one), and `helm list`'s `chart` column (name-version) read back.
Used by the helm and chart_upgrade roles' filter plugins and by `appliance upgrade plan`."""

from __future__ import annotations

import re
from typing import Any

_VER = re.compile(r"v?(\d+)(?:\.(\d+|[xX*]))?(?:\.(\d+|[xX*]))?(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?")
Version = tuple[tuple[int, int, int], str]


class ConstraintError(ValueError):
    pass


def _parse(v: str) -> Version:
    m = _VER.fullmatch(v.strip())
    if not m:
        raise ConstraintError(f'invalid semantic version "{v}"')
    nums = [int(g) if g and g.isdigit() else 0 for g in (m.group(1), m.group(2), m.group(3))]
    return (nums[0], nums[1], nums[2]), m.group(4) or ""


def _given(v: str) -> int:
    """How many of major.minor.patch a version names (x, X and * name nothing)."""
    parts = re.split(r"[-+]", v.strip().lstrip("v"), maxsplit=1)[0].split(".")
    n = 0
    for p in parts[:3]:
        if not p.isdigit():
            break
        n += 1
    return n


def _cmp(a: Version, b: Version) -> int:
    if a[0] != b[0]:
        return -1 if a[0] < b[0] else 1
    if a[1] == b[1]:
        return 0
    if not a[1] or not b[1]:
        return 1 if not a[1] else -1  # a release sorts after its prereleases
    return -1 if a[1] < b[1] else 1


def _one(constraint: str, version: Version) -> bool:
    m = re.fullmatch(r"\s*(>=|<=|!=|>|<|=|~|\^)?\s*(\S+)\s*", constraint)
    if not m:
        raise ConstraintError(f"improper constraint: {constraint}")
    op, want = m.group(1) or "=", _parse(m.group(2))
    given = _given(m.group(2))
    if op in ("=", "!=") and given < 3:  # 1.23, 1.23.x, 1.x: a wildcard on what is not given
        same = version[0][:given] == want[0][:given] and not version[1]
        return same if op == "=" else not same
    if version[1] and not want[1]:
        return False
    c = _cmp(version, want)
    if op == "~":
        return c >= 0 and version[0][:2] == want[0][:2]
    if op == "^":
        return c >= 0 and version[0][0] == want[0][0]
    return {">=": c >= 0, "<=": c <= 0, ">": c > 0, "<": c < 0, "=": c == 0, "!=": c != 0}[op]


def kube_version_problem(chart: dict[str, Any] | None, version: str) -> str:
    """'' when the chart accepts the cluster's Kubernetes version, else helm's words for it."""
    constraint = str((chart or {}).get("kubeVersion") or "").strip()
    if not constraint:
        return ""
    name = f"{(chart or {}).get('name', '?')} {(chart or {}).get('version', '')}".strip()
    try:
        v = _parse(version)
        for alternative in constraint.split("||"):
            parts = [p for p in re.split(r"\s*,\s*|\s+(?=[<>=!~^])", alternative.strip()) if p]
            if parts and all(_one(p, v) for p in parts):
                return ""
    except ConstraintError as exc:
        return f"chart {name}: kubeVersion '{constraint}': {exc}"
    return f"chart {name} requires kubeVersion: {constraint} which is incompatible with Kubernetes {version}"


_CHART = re.compile(r"(.*)-(v?\d[^-]*(?:-[0-9A-Za-z.]+)?)")


def split_chart(chart: str) -> tuple[str, str]:
    """helm list's `chart` (name-version) -> (name, version); (chart, '') when there is no version."""
    m = _CHART.fullmatch(chart or "")
    return (m.group(1), m.group(2)) if m else (chart or "", "")
