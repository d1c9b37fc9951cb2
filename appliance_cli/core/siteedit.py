"""Targeted edits of appliance.yml that keep the rest of the operator's text (comments, order,
quoting) as it was: the file is the operator's, and the toolkit has no round-trip YAML library.

Two edits: mark one node entry `removed: true` (`appliance node remove`), and set
`kubernetes.version` (`appliance upgrade apply`, once the cluster runs it). The edited text is
parsed again and must differ from the original in exactly that field, else nothing is written
(ConfigError saying to edit the file by hand).
"""

from __future__ import annotations

import copy
import re
import stat
from pathlib import Path
from typing import Any

import yaml

from appliance_cli.core import siteyaml
from appliance_cli.core.siteconfig import SiteConfig, parse_site
from appliance_cli.errors import ConfigError
from appliance_cli.fsutil import atomic_write

_NODES_KEY = re.compile(r"^nodes:\s*(#.*)?$")
_TOP_LEVEL = re.compile(r"^[^\s#-]")
_ITEM = re.compile(r"^(?P<dash>\s*-\s+)(?P<rest>.*)$")
_REMOVED_LINE = re.compile(r"^\s*removed:\s*\S+\s*(#.*)?$")
_KUBERNETES_KEY = re.compile(r"^kubernetes:\s*(#.*)?$")
_VERSION_LINE = re.compile(r"^(?P<key>\s+version:\s*)(?P<value>[^\s#]+)(?P<rest>.*)$", re.S)


def mark_removed(text: str, name: str) -> str:
    """`text` with node `name`'s entry marked `removed: true` (block or one-line flow style)."""
    lines = text.splitlines(keepends=True)
    start, end = _nodes_block(lines)
    item = _find_item(lines, start, end, name)
    if item is None:
        raise ConfigError([f"nodes: no entry named '{name}' to mark removed"])
    first, last = item
    edited = _edit_item(lines, first, last)
    if edited is None:
        raise ConfigError(
            [f"nodes: the entry of '{name}' is written in a way this edit does not handle"],
            hint=f"add `removed: true` to {name}'s entry by hand",
        )
    out = "".join(edited)
    _check_only_removed_changed(text, out, name)
    return out


def site_without(path: Path, name: str) -> SiteConfig:
    """The site as it will be once `name` is marked removed, validated (ConfigError otherwise: e.g.
    the quotas need that node's GPUs), nothing written: asked before the node is touched."""
    return parse_site(
        siteyaml.loads(mark_removed(siteyaml.read_text(path), name), path), source=path.resolve()
    )


def mark_removed_in_file(path: Path, name: str) -> None:
    _rewrite(path, mark_removed(siteyaml.read_text(path), name))


def set_kubernetes_version(text: str, version: str) -> str:
    """`text` with `kubernetes.version: VERSION` (the line replaced, or added under `kubernetes:`,
    or a `kubernetes:` block appended); comments and everything else kept."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, ln in enumerate(lines) if _KUBERNETES_KEY.match(ln)), None)
    if start is None and any(ln.startswith("kubernetes:") for ln in lines):
        raise ConfigError(
            ["kubernetes.version: the `kubernetes:` section is written in a way this edit does not handle"],
            hint=f"set `kubernetes.version: {version}` under `kubernetes:` by hand",
        )
    if start is None:
        out = (
            text + ("" if not text or text.endswith("\n") else "\n") + f"kubernetes:\n  version: {version}\n"
        )
    else:
        end = next((i for i in range(start + 1, len(lines)) if _TOP_LEVEL.match(lines[i])), len(lines))
        at = next((i for i in range(start + 1, end) if _VERSION_LINE.match(lines[i])), None)
        if at is None:
            lines.insert(start + 1, f"  version: {version}\n")
        else:
            m = _VERSION_LINE.match(lines[at])
            assert m
            lines[at] = f"{m['key']}{version}{m['rest']}"
        out = "".join(lines)
    before, after = siteyaml.loads(text, "appliance.yml") or {}, siteyaml.loads(out, "appliance.yml") or {}
    want = copy.deepcopy(before)
    want.setdefault("kubernetes", {})
    want["kubernetes"] = {**(want["kubernetes"] or {}), "version": version}
    if after != want:
        raise ConfigError(
            ["kubernetes.version: the site config is written in a way this edit does not handle"],
            hint=f"set `kubernetes.version: {version}` under `kubernetes:` by hand",
        )
    return out


def set_kubernetes_version_in_file(path: Path, version: str) -> None:
    _rewrite(path, set_kubernetes_version(siteyaml.read_text(path), version))


def _rewrite(path: Path, text: str) -> None:
    """Replace the file `path` names, atomically: a symlinked appliance.yml (kept in a config repo,
    say) stays a link and its target gets the new text; the file keeps its mode and owner."""
    target = path
    try:
        target = path.resolve(strict=True)
        st = target.stat()
        atomic_write(target, text, mode=stat.S_IMODE(st.st_mode), owner=(st.st_uid, st.st_gid))
    except OSError as exc:
        raise ConfigError(
            [f"{path}: cannot write: {exc.strerror or exc}"],
            hint=f"make {target.parent} writable, or make the edit by hand",
        ) from None


def _nodes_block(lines: list[str]) -> tuple[int, int]:
    """[start, end): the lines after the top-level `nodes:` key up to the next top-level key."""
    start = next((i + 1 for i, ln in enumerate(lines) if _NODES_KEY.match(ln.rstrip("\n"))), None)
    if start is None:
        raise ConfigError(["nodes: no top-level `nodes:` block (block style) in the file"])
    end = next((i for i in range(start, len(lines)) if _TOP_LEVEL.match(lines[i])), len(lines))
    return start, end


def _find_item(lines: list[str], start: int, end: int, name: str) -> tuple[int, int] | None:
    """The lines [first, last] of the list item whose `name` is `name`."""
    dash_col = None
    items: list[int] = []
    for i in range(start, end):
        m = _ITEM.match(lines[i])
        if m and (dash_col is None or len(m.group("dash")) - len(m.group("dash").lstrip()) == dash_col):
            dash_col = len(m.group("dash")) - len(m.group("dash").lstrip())
            items.append(i)
    bounds = [*items, end]
    for k, first in enumerate(items):
        last = bounds[k + 1] - 1
        while last > first and (not lines[last].strip() or lines[last].lstrip().startswith("#")):
            last -= 1  # blank lines and comments before the next entry belong to that one
        entry = yaml.safe_load("".join(lines[first : last + 1]))
        if isinstance(entry, list) and entry and isinstance(entry[0], dict) and entry[0].get("name") == name:
            return first, last
    return None


def _edit_item(lines: list[str], first: int, last: int) -> list[str] | None:
    out = list(lines)
    for i in range(first, last + 1):  # an existing `removed:` line is set, not doubled
        if _REMOVED_LINE.match(_ITEM.sub(r"\g<rest>", lines[i]) if i == first else lines[i]):
            if i == first:
                return None
            indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
            out[i] = f"{indent}removed: true\n"
            return out
    m = _ITEM.match(lines[first])
    assert m is not None
    rest = m.group("rest")
    if rest.startswith("{"):  # one-line flow mapping: `- {name: w2, ...}`
        head, _, tail = lines[first].rstrip("\n").rpartition("}")
        if first != last or not (not tail.strip() or tail.strip().startswith("#")):
            return None
        out[first] = f"{head}, removed: true}}{tail}\n"
        return out
    key_col = len(m.group("dash"))
    last_line = out[last] if out[last].endswith("\n") else out[last] + "\n"
    out[last] = last_line
    out.insert(last + 1, " " * key_col + "removed: true\n")
    return out


def _check_only_removed_changed(before: str, after: str, name: str) -> None:
    old, new = siteyaml.loads(before, "appliance.yml"), siteyaml.loads(after, "appliance.yml")
    expected: Any = copy.deepcopy(old)
    for node in expected.get("nodes") or []:
        if isinstance(node, dict) and node.get("name") == name:
            node["removed"] = True
    if new != expected:
        raise ConfigError(
            [f"nodes: marking '{name}' removed would change more than its entry; nothing written"],
            hint=f"add `removed: true` to {name}'s entry by hand",
        )
