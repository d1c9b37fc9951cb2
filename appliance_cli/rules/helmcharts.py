"""Helm's rules the CLI and the roles both read: a chart's `kubeVersion` constraint checked against
the cluster's version, as helm checks it before installing anything (helm v3.14.4's
pkg/chartutil/compatible.go: Masterminds/semver v3.2.1, constraints.go: `>= 1.16.0-0`,
`>=1.20.0 <1.25.0`, `~1.23`, `^1.20`, `1.23.x`, `<= 1.23` (a range: 1.23.17 meets it),
`1.20 - 1.24`, `a || b`; a prerelease version satisfies only constraints that name one), and
`helm list`'s `chart` column (name-version) read back.
Used by the helm and chart_upgrade roles' filter plugins and by `appliance upgrade plan`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# A version as Masterminds/semver's NewVersion reads it (helm v3.14.4 pins v3.2.1, version.go), and
# one bound of a constraint (constraints.go): an operator, then 1 to 3 parts, x/X/* or a missing
# part making the bound a range.
_VER = re.compile(
    r"v?(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?(?:\+[0-9A-Za-z.-]+)?"
)
_BOUND = re.compile(
    r"(=|!=|>=|=>|<=|=<|>|<|~>|~|\^)?v?(\d+|[xX*])(?:\.(\d+|[xX*]))?(?:\.(\d+|[xX*]))?"
    r"(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?(?:\+[0-9A-Za-z.-]+)?"
)
_OPERATOR = re.compile(r"=|!=|>=|=>|<=|=<|>|<|~>|~|\^")
Version = tuple[tuple[int, int, int], str]


class ConstraintError(ValueError):
    pass


@dataclass(frozen=True)
class _Bound:
    op: str  # one of = != > < >= <= ~ ^
    version: Version  # what is not given reads 0
    given: int  # how many of major, minor, patch it names: fewer than 3 make it a range


def _parse(v: str) -> Version:
    m = _VER.fullmatch(v.strip())
    if not m:
        raise ConstraintError(f'invalid semantic version "{v}"')
    return (int(m.group(1)), int(m.group(2) or 0), int(m.group(3) or 0)), m.group(4) or ""


def _prerelease_order(a: str, b: str) -> int:
    """semver's precedence of two prereleases ('' is the release, above them): dot-separated
    identifiers in turn, numbers as numbers and below words, a shorter list below a longer."""
    if a == b:
        return 0
    if not (a and b):
        return -1 if b == "" else 1
    left, right = a.split("."), b.split(".")
    for x, y in zip(left, right, strict=False):
        if x != y:
            if x.isdigit() and y.isdigit():
                return (int(x) > int(y)) - (int(x) < int(y))
            if x.isdigit() or y.isdigit():
                return -1 if x.isdigit() else 1
            return -1 if x < y else 1
    return -1 if len(left) < len(right) else 1


def _cmp(a: Version, b: Version) -> int:
    if a[0] != b[0]:
        return -1 if a[0] < b[0] else 1
    return _prerelease_order(a[1], b[1])


def _bound(text: str) -> _Bound:
    m = _BOUND.fullmatch(text)
    if not m:
        raise ConstraintError(f"improper constraint: {text}")
    op = {"": "=", "=>": ">=", "=<": "<=", "~>": "~"}.get(m.group(1) or "", m.group(1))
    parts = [m.group(2), m.group(3), m.group(4)]
    given = next((i for i, p in enumerate(parts) if p is None or not p.isdigit()), 3)
    nums = [int(p) if i < given and p is not None else 0 for i, p in enumerate(parts)]
    return _Bound(op, ((nums[0], nums[1], nums[2]), m.group(5) or ""), given)


def _bounds(group: str) -> list[_Bound]:
    """One AND group of a constraint (`>=1.20.0 <1.25.0`, `>= 1.16.0-0, <1.25`, `1.20 - 1.24`)."""
    tokens = [t for t in re.split(r"[\s,]+", group.strip()) if t]
    pieces: list[str] = []
    for t in tokens:
        if pieces and _OPERATOR.fullmatch(pieces[-1]):
            pieces[-1] += t  # `>= 1.16.0-0`: the operator and its version apart
        else:
            pieces.append(t)
    while "-" in pieces:  # `A - B` is `>= A, <= B`
        i = pieces.index("-")
        if i == 0 or i == len(pieces) - 1:
            raise ConstraintError(f"improper constraint: {group.strip()}")
        pieces[i - 1 : i + 2] = [">=" + pieces[i - 1], "<=" + pieces[i + 1]]
    if not pieces:
        raise ConstraintError(f"improper constraint: {group.strip()}")
    return [_bound(p) for p in pieces]


def _same_major_minor(v: Version, b: _Bound) -> bool:
    return v[0][0] == b.version[0][0] and (b.given == 1 or v[0][1] == b.version[0][1])


def _satisfies(v: Version, b: _Bound) -> bool:
    """Whether V meets one bound, as constraints.go's function for its operator: a range bound
    (fewer than 3 parts) compares only what it names; a prerelease V meets only a bound that
    names a prerelease (an exact != excepted)."""
    c, (vmaj, vmin, _), (bmaj, bmin, _) = _cmp(v, b.version), v[0], b.version[0]
    if b.op == "!=" and b.given == 3:
        return c != 0
    if v[1] and not b.version[1]:
        return False
    ranged = b.given < 3
    if b.op == "!=":
        if b.given in (0, 1):
            return c != 0 if b.given == 0 else vmaj != bmaj
        return vmaj != bmaj or vmin != bmin or _prerelease_order(v[1], b.version[1]) != 0
    if b.op == "~" or (b.op == "=" and ranged):
        return c >= 0 and ((b.version[0] == (0, 0, 0) and b.given in (0, 3)) or _same_major_minor(v, b))
    if b.op == "=":
        return c == 0
    if b.op == ">":
        if not ranged or (b.given == 0 and vmaj == bmaj):
            return c > 0
        return vmaj > bmaj or (vmaj == bmaj and b.given == 2 and vmin > bmin)
    if b.op == "<":
        return c < 0
    if b.op == ">=":
        return c >= 0
    if b.op == "<=":
        return c <= 0 if not ranged else vmaj < bmaj or (vmaj == bmaj and (b.given == 1 or vmin <= bmin))
    # "^": the same major (minor when the major is 0, patch when both are), from the bound up
    if c < 0:
        return False
    if bmaj > 0 or b.given == 1:
        return vmaj == bmaj
    if vmaj > 0:
        return False
    if bmin > 0 or b.given == 2:
        return vmin == bmin
    return vmin == 0 and v[0][2] == b.version[0][2]


def kube_version_problem(chart: dict[str, Any] | None, version: str) -> str:
    """'' when the chart accepts the cluster's Kubernetes version, else helm's words for it."""
    constraint = str((chart or {}).get("kubeVersion") or "").strip()
    if not constraint:
        return ""
    name = f"{(chart or {}).get('name', '?')} {(chart or {}).get('version', '')}".strip()
    try:
        v = _parse(version)
        groups = [_bounds(alternative) for alternative in constraint.split("||")]
        if any(all(_satisfies(v, b) for b in group) for group in groups):
            return ""
    except ConstraintError as exc:
        return f"chart {name}: kubeVersion '{constraint}': {exc}"
    return f"chart {name} requires kubeVersion: {constraint} which is incompatible with Kubernetes {version}"


_CHART = re.compile(r"(.*)-(v?\d[^-]*(?:-[0-9A-Za-z.]+)?)")


def split_chart(chart: str) -> tuple[str, str]:
    """helm list's `chart` (name-version) -> (name, version); (chart, '') when there is no version."""
    m = _CHART.fullmatch(chart or "")
    return (m.group(1), m.group(2)) if m else (chart or "", "")
