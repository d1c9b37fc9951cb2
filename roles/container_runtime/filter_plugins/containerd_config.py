"""Filters that let the container_runtime role re-template containerd's config.toml
without losing what other tools added to it (the NVIDIA GPU Operator toolkit adds a
`nvidia` runtime table and sets `default_runtime_name = "nvidia"`).

Runs on the controller (ansible-core 2.19 needs Python >= 3.11, so tomllib exists).
"""

from __future__ import annotations

import datetime
import json
import math
import re
import tomllib
from typing import Any

from ansible.errors import AnsibleFilterError

CRI = "io.containerd.grpc.v1.cri"
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def containerd_carry_over(
    text: str | None,
    managed_runtimes: list[str] | None = None,
    carry_keys: list[str] | None = None,
) -> dict[str, Any]:
    """What of an existing config.toml must survive a re-render.

    Returns {"runtimes": {name: table}, "default_runtime_name": str | None,
    "cri": {key: value}}: runtime tables not owned by the role, the default runtime
    when it names one of them, and the listed CRI plugin keys. An unparsable file is
    an error: silently dropping an operator's runtime would break GPU pods.
    """
    empty: dict[str, Any] = {"runtimes": {}, "default_runtime_name": None, "cri": {}}
    if not text or not str(text).strip():
        return empty
    try:
        doc = tomllib.loads(str(text))
    except tomllib.TOMLDecodeError as exc:
        raise AnsibleFilterError(f"current containerd config.toml is not valid TOML: {exc}") from exc
    managed = set(managed_runtimes or [])
    cri = doc.get("plugins", {}).get(CRI, {})
    if not isinstance(cri, dict):
        return empty
    containerd = cri.get("containerd", {}) if isinstance(cri.get("containerd"), dict) else {}
    runtimes = containerd.get("runtimes", {}) if isinstance(containerd.get("runtimes"), dict) else {}
    foreign = {name: table for name, table in runtimes.items() if name not in managed}
    default = containerd.get("default_runtime_name")
    return {
        "runtimes": foreign,
        "default_runtime_name": default if default in foreign else None,
        "cri": {k: cri[k] for k in (carry_keys or []) if k in cri},
    }


def _key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else json.dumps(key, ensure_ascii=True)


def containerd_toml_value(value: Any) -> str:
    """One TOML value (inline form for tables)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        # A JSON string with ASCII escapes is a valid TOML basic string.
        return json.dumps(value, ensure_ascii=True)
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(containerd_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        inner = ", ".join(f"{_key(str(k))} = {containerd_toml_value(v)}" for k, v in value.items())
        return "{ " + inner + " }" if inner else "{}"
    raise AnsibleFilterError(f"cannot write {type(value).__name__} as TOML")


def containerd_toml_table(table: dict[str, Any], path: list[str], indent: int = 0) -> str:
    """A table and its sub-tables under the header `path` (list of raw keys)."""
    if not isinstance(table, dict):
        raise AnsibleFilterError("containerd_toml_table expects a mapping")
    pad = " " * indent
    header = ".".join(_key(str(p)) for p in path)
    lines = [f"{pad}[{header}]"]
    subtables = []
    for key, value in table.items():
        if isinstance(value, dict):
            subtables.append((key, value))
        else:
            lines.append(f"{pad}  {_key(str(key))} = {containerd_toml_value(value)}")
    out = "\n".join(lines)
    for key, value in subtables:
        out += "\n\n" + containerd_toml_table(value, [*path, str(key)], indent + 2)
    return out


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "containerd_carry_over": containerd_carry_over,
            "containerd_toml_value": containerd_toml_value,
            "containerd_toml_table": containerd_toml_table,
        }
