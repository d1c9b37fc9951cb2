"""What helm v3 reads in a chart archive, and how it computes a release's values.

Read from the real archive: Chart.yaml (name, version, appVersion, kubeVersion, dependencies
with their `condition`), values.yaml, values.schema.json, crds/ of the chart and of each enabled
subchart (charts/<name>/). Values: the chart's, then each -f file, then --set, merged as helm
coalesces them (maps key by key, anything else replaced; a null deletes); a subchart's values
are its own values.yaml under the parent's `<name>:` key. kubeVersion: Masterminds/semver v3.2.1
constraints as helm v3.14.4 checks them against the cluster's version (see kube_version_ok).
"""

from __future__ import annotations

import copy
import json
import re
import tarfile
from dataclasses import dataclass, field
from typing import Any

import yaml

from .util import Fail


@dataclass
class Chart:
    meta: dict
    values: dict
    schema: dict | None
    crds: list[tuple[str, bytes]] = field(default_factory=list)  # (path in the archive, YAML)
    subcharts: dict[str, Chart] = field(default_factory=dict)
    raw_values: bytes = b""  # values.yaml as written (what `helm show values` prints)

    @property
    def name(self) -> str:
        return str(self.meta.get("name", ""))


def load_chart(path: str) -> Chart:
    """A packaged chart (.tgz), as `helm install NAME CHART.tgz` reads it."""
    try:
        with tarfile.open(path) as t:
            files = {m.name: t.extractfile(m).read() for m in t.getmembers() if m.isfile()}  # type: ignore[union-attr]
    except FileNotFoundError:
        raise Fail(f'Error: path "{path}" not found') from None
    except tarfile.TarError as e:
        raise Fail(f"Error: file '{path}' does not appear to be a gzipped archive; got '{e}'") from None
    tops = {n.split("/", 1)[0] for n in files}
    if len(tops) != 1:
        raise Fail("Error: chart archive holds more than one top directory")
    return _chart_from(files, tops.pop())


def _chart_from(files: dict[str, bytes], root: str) -> Chart:
    def read(rel: str) -> bytes | None:
        return files.get(f"{root}/{rel}")

    raw = read("Chart.yaml")
    if raw is None:
        raise Fail("Error: Chart.yaml file is missing")
    meta = yaml.safe_load(raw) or {}
    if meta.get("apiVersion") not in ("v1", "v2") or not meta.get("name") or not meta.get("version"):
        raise Fail("Error: validation: chart.metadata.name, version and apiVersion are required")
    values = yaml.safe_load(read("values.yaml") or b"") or {}
    schema_raw = read("values.schema.json")
    schema = json.loads(schema_raw) if schema_raw else None
    crds = sorted((n[len(root) + 1 :], b) for n, b in files.items() if n.startswith(f"{root}/crds/"))
    subs: dict[str, Chart] = {}
    below = f"{root}/charts/"  # each subchart's directory, at any depth of nesting
    for name in sorted(
        {n[len(below) :].split("/", 1)[0] for n in files if n.startswith(below) and "/" in n[len(below) :]}
    ):
        sub = _chart_from(files, f"{below}{name}")
        subs[sub.name] = sub
    return Chart(meta, values, schema, crds, subs, read("values.yaml") or b"")


# -- values ---------------------------------------------------------------------------------------
def coalesce(base: Any, over: Any) -> Any:
    """helm's merge of user values over chart values: maps merge, a null removes the key."""
    if not isinstance(base, dict) or not isinstance(over, dict):
        return copy.deepcopy(over)
    out = copy.deepcopy(base)
    for k, v in over.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = coalesce(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _typed(text: str) -> Any:
    """--set's value typing (strvals): true/false/null and integers; the rest stays a string."""
    if text in ("true", "false"):
        return text == "true"
    if text == "null":
        return None
    if re.fullmatch(r"-?[0-9]+", text) and not (len(text) > 1 and text.lstrip("-").startswith("0")):
        return int(text)
    return text


def parse_set(expr: str) -> dict:
    """`a.b=c,d[0]=e` (helm --set, without escapes) as a values tree."""
    out: dict = {}
    for pair in [p for p in expr.split(",") if p]:
        key, eq, val = pair.partition("=")
        if not eq:
            raise Fail(f'Error: failed parsing --set data: key "{key}" has no value')
        node: Any = out
        parts = key.split(".")
        for i, part in enumerate(parts):
            m = re.fullmatch(r"([^\[\]]+)\[(\d+)\]", part)
            last = i == len(parts) - 1
            if m:
                lst = node.setdefault(m.group(1), [])
                idx = int(m.group(2))
                while len(lst) <= idx:
                    lst.append({} if not last else None)
                if last:
                    lst[idx] = _typed(val)
                else:
                    node = lst[idx]
            elif last:
                node[part] = _typed(val)
            else:
                node = node.setdefault(part, {})
    return out


def release_values(chart: Chart, user: dict) -> dict:
    """The values the templates would see: the chart's (with each subchart's own under its
    name) coalesced with the user's."""
    base = copy.deepcopy(chart.values)
    for name, sub in chart.subcharts.items():
        base[name] = coalesce(sub.values, base.get(name) or {})
    return coalesce(base, user)


def enabled_subcharts(chart: Chart, values: dict) -> list[Chart]:
    out = []
    for dep in chart.meta.get("dependencies") or []:
        sub = chart.subcharts.get(dep.get("name", ""))
        cond = dep.get("condition")
        on = True
        if cond:
            node: Any = values
            for part in str(cond).split(",")[0].split("."):
                node = node.get(part) if isinstance(node, dict) else None
            on = node is not False
        if sub is not None and on:
            out.append(sub)
    return out


def validate_schema(chart: Chart, values: dict) -> None:
    """values.schema.json, as helm enforces it (all errors, in helm's shape)."""
    if chart.schema is None:
        return
    try:
        import jsonschema
    except ImportError:
        raise Fail(f"Error: {chart.name} has a values.schema.json and this stand-in lacks jsonschema "
                   "(python3-jsonschema) to enforce it") from None  # fmt: skip
    errors = sorted(jsonschema.Draft7Validator(chart.schema).iter_errors(values), key=lambda e: list(e.path))
    if errors:
        lines = "\n".join(f"- {'.'.join(map(str, e.path)) or '(root)'}: {e.message}" for e in errors)
        raise Fail(f"Error: values don't meet the specifications of the schema(s) in the following chart(s):\n"
                   f"{chart.name}:\n{lines}")  # fmt: skip


# -- kubeVersion ----------------------------------------------------------------------------------
# helm v3.14.4 (the bundle's) checks a chart's kubeVersion with pkg/chartutil/compatible.go's
# IsCompatibleRange: Masterminds/semver/v3 (v3.2.1, helm's go.mod) NewVersion of the cluster's
# version and NewConstraint of the chart's; either unparsable is "incompatible", never an error.
# Written here from constraints.go and version.go at v3.2.1: a constraint names 1 to 3 parts, a
# missing one or x/X/* makes it "dirty" (`>= 1.23` is a range, `<= 1.23` takes 1.23.17), and a
# prerelease version satisfies only constraints that name a prerelease.
_PART = r"(?:[0-9]+|[xX*])"
_CVER = rf"v?({_PART})(?:\.({_PART}))?(?:\.({_PART}))?(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?(?:\+[0-9A-Za-z.-]+)?"
_OPS = r"=|!=|>|<|>=|=>|<=|=<|~|~>|\^"
_CONSTRAINT = re.compile(rf"\s*({_OPS})?\s*{_CVER}\s*")
_FIND = re.compile(
    rf"({_OPS})?\s*v?{_PART}(?:\.{_PART})?(?:\.{_PART})?(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?"
)
_VER = re.compile(
    r"v?([0-9]+)(?:\.([0-9]+))?(?:\.([0-9]+))?(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?(?:\+[0-9A-Za-z.-]+)?"
)
_RANGE = re.compile(rf"\s*(v?{_PART}(?:\.{_PART}){{0,2}})\s+-\s+(v?{_PART}(?:\.{_PART}){{0,2}})\s*")

Ver = tuple[tuple[int, int, int], str]


@dataclass(frozen=True)
class _Constraint:
    op: str
    con: Ver
    dirty: bool
    minor_dirty: bool
    patch_dirty: bool


def _version(v: str) -> Ver | None:
    m = _VER.fullmatch(v.strip())
    if not m:
        return None
    return (int(m.group(1)), int(m.group(2) or 0), int(m.group(3) or 0)), m.group(4) or ""


def _pre_cmp(a: str, b: str) -> int:
    """semver 2.0 precedence of two prereleases (version.go comparePrerelease): '' is highest."""
    if a == b:
        return 0
    if not a or not b:
        return 1 if not a else -1
    pa, pb = a.split("."), b.split(".")
    for x, y in zip(pa, pb, strict=False):
        if x == y:
            continue
        if x.isdigit() and y.isdigit():
            return -1 if int(x) < int(y) else 1
        if x.isdigit() != y.isdigit():
            return -1 if x.isdigit() else 1  # numeric identifiers sort first
        return -1 if x < y else 1
    return -1 if len(pa) < len(pb) else 1


def _cmp(a: Ver, b: Ver) -> int:
    if a[0] != b[0]:
        return -1 if a[0] < b[0] else 1
    return _pre_cmp(a[1], b[1])


def _constraint(text: str) -> _Constraint | None:
    m = _CONSTRAINT.fullmatch(text)
    if not m:
        return None
    op, major, minor, patch, pre = m.group(1) or "", m.group(2), m.group(3), m.group(4), m.group(5) or ""
    x = ("x", "X", "*")
    if major in x:
        return _Constraint(op, ((0, 0, 0), pre), True, False, False)
    if minor is None or minor in x:
        return _Constraint(op, ((int(major), 0, 0), pre), True, True, False)
    if patch is None or patch in x:
        return _Constraint(op, ((int(major), int(minor), 0), pre), True, False, True)
    return _Constraint(op, ((int(major), int(minor), int(patch)), pre), False, False, False)


def _tilde(v: Ver, c: _Constraint) -> bool:
    if _cmp(v, c.con) < 0:
        return False
    if c.con[0] == (0, 0, 0) and not c.minor_dirty and not c.patch_dirty:
        return True
    return v[0][0] == c.con[0][0] and (c.minor_dirty or v[0][1] == c.con[0][1])


def _caret(v: Ver, c: _Constraint) -> bool:
    (vmaj, vmin, vpat), (cmaj, cmin, cpat) = v[0], c.con[0]
    if _cmp(v, c.con) < 0:
        return False
    if cmaj > 0 or c.minor_dirty:
        return vmaj == cmaj
    if vmaj > 0:
        return False
    if cmin > 0 or c.patch_dirty:
        return vmin == cmin
    return vmin == 0 and vpat == cpat


def _check(v: Ver, c: _Constraint) -> bool:
    """constraints.go's constraint functions, each behind its own prerelease guard (a prerelease
    version satisfies only constraints that name a prerelease; an exact `!=` has none)."""
    (vmaj, vmin, _), (cmaj, cmin, _) = v[0], c.con[0]
    op = {"=>": ">=", "=<": "<=", "~>": "~"}.get(c.op, c.op)
    if op == "!=" and not c.dirty:
        return _cmp(v, c.con) != 0
    if v[1] and not c.con[1]:
        return False
    if op == "!=":
        if vmaj != cmaj:
            return True
        if c.minor_dirty:
            return False
        if vmin != cmin:
            return True
        return _pre_cmp(v[1], c.con[1]) != 0 if c.patch_dirty else _cmp(v, c.con) != 0
    if op in ("", "="):
        return _tilde(v, c) if c.dirty else _cmp(v, c.con) == 0
    if op == ">":
        if not c.dirty or (vmaj == cmaj and not c.minor_dirty and not c.patch_dirty):
            return _cmp(v, c.con) > 0
        if vmaj != cmaj:
            return vmaj > cmaj
        return vmin > cmin if c.patch_dirty else False
    if op == "<":
        return _cmp(v, c.con) < 0
    if op == ">=":
        return _cmp(v, c.con) >= 0
    if op == "<=":
        if not c.dirty:
            return _cmp(v, c.con) <= 0
        return vmaj < cmaj or (vmaj == cmaj and (vmin <= cmin or c.minor_dirty))
    if op == "~":
        return _tilde(v, c)
    return _caret(v, c)  # "^"


def kube_version_ok(constraint: str, version: str) -> bool:
    """`>= 1.16.0-0`, `>=1.20.0 <1.25.0`, `~1.23`, `1.23.x`, `1.20 - 1.24`, `a || b` against the
    cluster's version, as IsCompatibleRange answers: False for what does not parse."""
    v = _version(version)
    if v is None:
        return False
    for match in _RANGE.finditer(constraint):  # `A - B` is `>= A, <= B`
        constraint = constraint.replace(match.group(0), f">= {match.group(1)}, <= {match.group(2)} ", 1)
    alternatives = []
    for alternative in constraint.split("||"):
        found = [m.group(0) for m in _FIND.finditer(alternative)]
        rest = _FIND.sub("", alternative).replace(",", " ").strip()
        parsed = [_constraint(f) for f in found]
        if not found or rest or None in parsed:
            return False  # NewConstraint: "improper constraint", which helm takes as incompatible
        alternatives.append(parsed)
    return any(all(_check(v, c) for c in cs if c is not None) for cs in alternatives)
