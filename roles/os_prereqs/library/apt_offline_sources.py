#!/usr/bin/python3
"""Point apt at the site's offline repository, and (exclusive) at nothing else.

One module instead of a find, a mkdir, two moves and a template: every task costs a round
trip to each node on every run. The same call reads the record of the last complete index
update (is the index current?) and refuses a dry run on a node apt has never been pointed at
(two more task starts on every node before). Stdlib only, Python >= 3.8 (Ubuntu 20.04 nodes)."""

from __future__ import annotations

import os
import shutil
from typing import Any

from ansible.module_utils.node_files import converge_file, read_text

DOCUMENTATION = r"""
module: apt_offline_sources
short_description: Make the offline repository apt's only source
description:
  - Writes the offline repository's source file (C(content)) when it differs.
  - With C(exclusive), moves every other C(*.list)/C(*.sources) file of C(sources_dir) and
    C(sources_list) into C(aside_dir) (restorable by moving them back), so apt never reaches out.
  - Reports changed when it wrote or moved anything; notify the apt cache refresh on it.
options:
  content: {description: The source file's text (rendered on the controller)., type: str, required: true}
  path: {description: The source file., type: path, default: /etc/apt/sources.list.d/appliance-offline.list}
  exclusive: {description: Move every other source aside., type: bool, default: true}
  sources_dir: {description: apt's drop-in directory., type: path, default: /etc/apt/sources.list.d}
  sources_list: {description: apt's main source file., type: path, default: /etc/apt/sources.list}
  aside_dir: {description: Where other sources are moved., type: path, default: /etc/apt/sources.list.appliance-disabled}
  keyring: {description: "ASCII-armored key the source's signed-by= names; written before the source.", type: str, default: ""}
  keyring_path: {description: Where the key is written (a .asc file; apt >= 1.4 reads it)., type: path, default: /etc/apt/keyrings/appliance-offline.asc}
  index_record: {description: "The record of the last complete C(apt update) (its text: C(index_key)); empty: not read.", type: path, default: ""}
  index_key: {description: What C(index_record) holds when the index is current (sources and bundle)., type: str, default: ""}
  node: {description: "This node's name: in check mode, a node whose source file does not exist yet fails naming it (apt cannot compare packages of a repository it never read).", type: str, default: ""}
"""

RETURN = r"""
moved: {description: Source files moved aside (their old paths)., type: list, elements: str}
index_current: {description: "C(index_record) holds C(index_key) (false when it is missing or unreadable).", type: bool}
"""


def other_sources(sources_dir: str, sources_list: str, keep: str) -> list[str]:
    """apt source files other than `keep`, in a stable order."""
    found = []
    if os.path.isdir(sources_dir):
        for name in sorted(os.listdir(sources_dir)):
            p = os.path.join(sources_dir, name)
            if name.endswith((".list", ".sources")) and os.path.isfile(p) and p != keep:
                found.append(p)
    if os.path.isfile(sources_list):
        found.append(sources_list)
    return found


def converge(params: dict[str, Any], check_mode: bool) -> dict[str, Any]:
    moved = []
    if params["exclusive"]:
        moved = other_sources(params["sources_dir"], params["sources_list"], params["path"])
        if moved and not check_mode:
            os.makedirs(params["aside_dir"], mode=0o755, exist_ok=True)
            for p in moved:
                shutil.move(p, os.path.join(params["aside_dir"], os.path.basename(p)))
    # the key first: a source naming a key not yet there would fail the next `apt update`
    key_diff = None
    if params["keyring"]:
        key_diff = converge_file(params["keyring_path"], params["keyring"], 0o644, check_mode)
    diff = converge_file(params["path"], params["content"], 0o644, check_mode)
    changed = bool(moved) or diff is not None or key_diff is not None
    return {
        "changed": changed,
        "moved": moved,
        "diff": diff or key_diff or {},
        "index_current": index_current(params),
    }


def index_current(params: dict[str, Any]) -> bool:
    """The record of a complete index update holds this index's key (removed before an update
    starts and written after it ends, so a killed update never counts)."""
    if not params["index_record"]:
        return False
    try:
        text = read_text(params["index_record"])
    except OSError:
        return False
    return text is not None and text.strip() == params["index_key"].strip()


def never_installed(params: dict[str, Any], check_mode: bool) -> str | None:
    """A dry run cannot ask apt about packages of a repository it has never read (apt would answer
    "No package matching ..."): on a node without the offline source yet, the reason to stop this
    node only (the other nodes' dry run goes on)."""
    node = params["node"]
    if not (check_mode and node) or os.path.exists(params["path"]):
        return None
    return (
        f"--check: {node} was never installed (its apt does not know the offline repository yet), so its "
        f"packages cannot be compared. Run `appliance install --limit {node}` first; --check then reports drift"
    )


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "content": {"type": "str", "required": True},
            "path": {"type": "path", "default": "/etc/apt/sources.list.d/appliance-offline.list"},
            "exclusive": {"type": "bool", "default": True},
            "sources_dir": {"type": "path", "default": "/etc/apt/sources.list.d"},
            "sources_list": {"type": "path", "default": "/etc/apt/sources.list"},
            "aside_dir": {"type": "path", "default": "/etc/apt/sources.list.appliance-disabled"},
            "keyring": {"type": "str", "default": ""},
            "keyring_path": {"type": "path", "default": "/etc/apt/keyrings/appliance-offline.asc"},
            "index_record": {"type": "path", "default": ""},
            "index_key": {"type": "str", "default": ""},
            "node": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    refused = never_installed(module.params, module.check_mode)
    if refused:
        module.fail_json(msg=refused)
    try:
        module.exit_json(**converge(module.params, module.check_mode))
    except OSError as exc:
        module.fail_json(msg=f"apt sources: {exc}")


if __name__ == "__main__":
    main()
