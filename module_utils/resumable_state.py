"""The resumable state of a long operation on the master (an upgrade, a restore): one JSON file,
one key per operation, each operation reading and changing only its own key.

    {"schema": 1, "kube_upgrade": {...}, "chart_upgrade": {...}}

Written under an exclusive flock on PATH.lock beside it (two roles share the upgrade's file),
through node_files.write_atomically (mkstemp, fsync, os.replace, fsync of the directory), 0600.
The CLI reads the same files (appliance_cli/core/opstate.py, which holds its SCHEMA and
LEGACY_FIELDS to these).
Stdlib only, Python >= 3.8 on the node."""

from __future__ import annotations

import fcntl
import json
import os
from typing import Any

from ansible.module_utils.node_files import read_text as _read_text
from ansible.module_utils.node_files import write_atomically

SCHEMA = 1
SCHEMA_FIELD = "schema"

# The layout before the schema field (the toolkit up to issue 31): one flat object per file, which
# the operations sharing it each rewrote whole. Read as schema 0: its fields split by operation, so
# a site interrupted mid-upgrade by the old toolkit resumes with this one. The upgrade's charts
# belonged to the file's target, so chart_upgrade takes it too.
LEGACY_FIELDS = {
    "kube_upgrade": ("target", "done", "draining", "snapshot"),
    "chart_upgrade": ("target", "charts", "charts_upgrading"),
    "etcd_restore": ("backup", "name", "data_dir", "old_data_dir", "snapshot", "phase", "nodes", "finished"),
    "rebuild_master": (),  # newer than that layout: in the restore's file, it never had one
}
# The operations that shared one legacy file ("snapshot" is in two files, with two meanings).
LEGACY_FILES = (("kube_upgrade", "chart_upgrade"), ("etcd_restore", "rebuild_master"))


class StateError(Exception):
    """The file cannot be used: not JSON, not this layout, or of a newer schema."""


def parse(text: str, path: str, key: str) -> dict[str, Any]:
    """The whole document in the current layout ({"schema": SCHEMA} for an empty or absent file);
    KEY's names the legacy file it may be."""
    if not text.strip():
        return {SCHEMA_FIELD: SCHEMA}
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise StateError(f"{path}: not JSON ({e})") from None
    except RecursionError:  # json's decoder recurses once per nested array or object
        raise StateError(f"{path}: not JSON (nested too deep)") from None
    if not isinstance(doc, dict):
        raise StateError(f"{path}: not a JSON object")
    if SCHEMA_FIELD not in doc:
        return migrate_legacy(doc, key)
    schema = doc[SCHEMA_FIELD]
    if not isinstance(schema, int) or isinstance(schema, bool) or schema < 1:
        raise StateError(f"{path}: schema {schema!r} is not a version")
    if schema > SCHEMA:
        raise StateError(
            f"{path}: schema {schema} is newer than this toolkit's ({SCHEMA}); use the newer toolkit"
        )
    for op, value in doc.items():
        if op != SCHEMA_FIELD and not isinstance(value, dict):
            raise StateError(f"{path}: {op!r} is not a JSON object")
    return doc


def migrate_legacy(doc: dict[str, Any], key: str) -> dict[str, Any]:
    """A schema 0 (flat) document of KEY's file in the current layout: each operation of that file
    gets its fields (an operation of no legacy file finds nothing)."""
    ops = next((group for group in LEGACY_FILES if key in group), ())
    out: dict[str, Any] = {SCHEMA_FIELD: SCHEMA}
    for op in ops:
        part = {f: doc[f] for f in LEGACY_FIELDS[op] if f in doc}
        if any(f != "target" for f in part):  # a target alone is no state of that operation
            out[op] = part
    return out


def read_text(path: str) -> str:
    """The file's text ("" when there is none); bytes that are not UTF-8 make it not JSON."""
    return _read_text(path) or ""


def read(path: str, key: str) -> dict[str, Any]:
    """KEY's state in PATH ({} when there is none). Reads only (rename is atomic: no lock needed)."""
    return dict(parse(read_text(path), path, key).get(key) or {})


def dump(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def merge(
    path: str,
    key: str,
    change: dict[str, Any],
    check_mode: bool = False,
    replace: bool = False,
    add: dict[str, list[Any]] | None = None,
) -> tuple[dict[str, Any], dict[str, Any], bool]:
    """CHANGE's fields set in KEY's state (with REPLACE, CHANGE is KEY's whole state: an operation
    starting afresh), and ADD's items appended to its list fields, each once, every other key as the
    file has it, read under the lock: (before, after) of KEY, and whether the file changed: KEY's
    state did, or the file was not as this writes it (the legacy layout, rewritten). ADD appends to
    the list as the file holds it, not as the caller last read it. Nothing is written in check
    mode, not even the directory."""
    if not check_mode:
        os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
        lock_fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        if not check_mode:
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
        text = read_text(path)
        doc = parse(text, path, key)
        before = dict(doc.get(key) or {})
        after = dict(change) if replace else {**before, **change}
        for field, items in (add or {}).items():
            listed = after.get(field, [])
            if not isinstance(listed, list):
                raise StateError(f"{path}: {key}.{field} is not a list")
            after[field] = listed + [i for n, i in enumerate(items) if i not in listed and i not in items[:n]]
        doc[key] = after
        changed = after != before or (bool(text.strip()) and dump(doc) != text)
        if changed and not check_mode:
            write_atomically(path, dump(doc).encode("utf-8"), 0o600)
        return before, after, changed
    finally:
        if not check_mode:
            os.close(lock_fd)  # releases the lock
