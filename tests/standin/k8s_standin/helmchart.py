"""What helm v3 reads in a chart archive, and how it computes a release's values.

Read from the real archive: Chart.yaml (name, version, appVersion, kubeVersion, dependencies
with their `condition`), values.yaml, values.schema.json, crds/ of the chart and of each enabled
subchart (charts/<name>/). Values: the chart's, then each -f file, then --set, merged as helm
coalesces them (maps key by key, anything else replaced; a null deletes); a subchart's values
are its own values.yaml under the parent's `<name>:` key. kubeVersion: Masterminds semver
constraints as helm checks them against the cluster's version.
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
_VER = re.compile(r"^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$")


def _parse(v: str) -> tuple[tuple[int, int, int], str]:
    m = _VER.match(v.strip())
    if not m:
        raise Fail(f'Error: invalid semantic version "{v}"')
    return (int(m.group(1)), int(m.group(2) or 0), int(m.group(3) or 0)), m.group(4) or ""


def _cmp(a: tuple[tuple[int, int, int], str], b: tuple[tuple[int, int, int], str]) -> int:
    if a[0] != b[0]:
        return -1 if a[0] < b[0] else 1
    if a[1] == b[1]:
        return 0
    if not a[1] or not b[1]:
        return 1 if not a[1] else -1  # a release sorts after its prereleases
    return -1 if a[1] < b[1] else 1


def _one(constraint: str, version: tuple[tuple[int, int, int], str]) -> bool:
    m = re.fullmatch(r"\s*(>=|<=|!=|>|<|=|~|\^)?\s*(\S+)\s*", constraint)
    if not m:
        raise Fail(f"Error: improper constraint: {constraint}")
    op, want = m.group(1) or "=", _parse(m.group(2))
    if version[1] and not want[1]:
        return False  # Masterminds: a prerelease only satisfies constraints that name one
    c = _cmp(version, want)
    if op == "~":
        return c >= 0 and version[0][:2] == want[0][:2]
    if op == "^":
        return c >= 0 and version[0][0] == want[0][0]
    return {">=": c >= 0, "<=": c <= 0, ">": c > 0, "<": c < 0, "=": c == 0, "!=": c != 0}[op]


def kube_version_ok(constraint: str, version: str) -> bool:
    """`>= 1.16.0-0`, `>=1.20.0 <1.25.0`, `~1.23`, `a || b`: as helm's chart kubeVersion check."""
    v = _parse(version)
    for alternative in constraint.split("||"):
        parts = [p for p in re.split(r"\s*,\s*|\s+(?=[<>=!~^])", alternative.strip()) if p]
        if parts and all(_one(p, v) for p in parts):
            return True
    return False
