"""The resumable state files on the master, as the CLI reads them: the upgrade's (keys
kube_upgrade and chart_upgrade) and the restore's (key etcd_restore). The roles write them through
the module resumable_state (module_utils/resumable_state.py: the layout, the lock, the atomic
write); this is the typed reading of the same layout. Pure: the callers fetch the text (run_on).

    {"schema": 1, "kube_upgrade": {...}, "chart_upgrade": {...}}

A file without "schema" is the flat layout the toolkit wrote before it (one object, each role
rewriting all of it): read as schema 0 and split by operation as the module splits it, so a site
interrupted mid-upgrade or mid-restore by the old toolkit is resumed and reported by this one.
A file that is not JSON, not this layout, or of a newer schema is one line naming file and node."""

from __future__ import annotations

import json
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from appliance_cli.errors import StateFileError

# module_utils/resumable_state.py's SCHEMA and LEGACY_FIELDS (tests/unit/test_opstate.py holds
# them equal: the node side is not importable here).
SCHEMA = 1
LEGACY_FIELDS: dict[str, tuple[str, ...]] = {
    "kube_upgrade": ("target", "done", "draining", "snapshot"),
    "chart_upgrade": ("target", "charts", "charts_upgrading"),
    "etcd_restore": ("backup", "name", "data_dir", "old_data_dir", "snapshot", "phase", "nodes", "finished"),
    "rebuild_master": (),  # newer than that layout: in the restore's file, it never had one
}


class _Op(BaseModel):
    # a field a later toolkit of the same schema adds is not this one's business
    model_config = ConfigDict(extra="ignore", frozen=True)


class KubeUpgrade(_Op):
    target: str = ""  # the Kubernetes version of the pass that wrote it
    done: list[str] = []  # nodes at the target
    draining: str = ""  # the worker out of service while it is upgraded
    snapshot: str = ""  # the etcd snapshot taken before the control plane changed


class ChartUpgrade(_Op):
    target: str = ""  # the upgrade's Kubernetes version: its charts are that upgrade's
    charts: dict[str, str] = {}  # namespace/release -> "chart from -> to"
    charts_upgrading: str = ""


class EtcdRestore(_Op):
    backup: str = ""
    name: str = ""
    data_dir: str = ""
    old_data_dir: str = ""
    snapshot: dict[str, Any] = {}  # etcdutl snapshot status (revision, totalKey, ...)
    phase: Literal["", "stopping", "restored", "done"] = ""
    nodes: list[str] = []
    finished: str = ""


class RebuildMaster(_Op):
    backup: str = ""  # the backup a master rebuilt on a fresh machine was given
    phase: Literal["", "secrets", "done"] = ""  # its secrets back (installed or not yet); restored


class UpgradeState(_Op):
    schema_: int = Field(SCHEMA, alias="schema")
    kube_upgrade: KubeUpgrade = KubeUpgrade()
    chart_upgrade: ChartUpgrade = ChartUpgrade()


class RestoreState(_Op):
    schema_: int = Field(SCHEMA, alias="schema")
    etcd_restore: EtcdRestore = EtcdRestore()
    rebuild_master: RebuildMaster = RebuildMaster()  # `appliance rebuild-master` (no legacy layout)


_M = TypeVar("_M", UpgradeState, RestoreState)
_HINT = "a file the roles did not write: move it aside (the operation then starts afresh) or repair it"


def parse_upgrade(text: str, path: str, node: str) -> UpgradeState:
    """The upgrade's state file (TEXT: what `cat` gave, "" when there is none)."""
    return _parse(UpgradeState, text, path, node)


def parse_restore(text: str, path: str, node: str) -> RestoreState:
    """The restore's state file (TEXT: what `cat` gave, "" when there is none)."""
    return _parse(RestoreState, text, path, node)


def _parse(model: type[_M], text: str, path: str, node: str) -> _M:
    ops = tuple(n for n in model.model_fields if n != "schema_")
    try:
        return model.model_validate(_document(text, path, node, ops))
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(x) if str(x).isprintable() else repr(x) for x in err["loc"])
        raise StateFileError(f"{path} on {node}: {loc}: {err['msg']}", hint=_HINT) from None


def _document(text: str, path: str, node: str, ops: tuple[str, ...]) -> dict[str, Any]:
    """The document in the current layout, checked for the schema; ops: the file's operations."""
    where = f"{path} on {node}"
    if not text.strip():
        return {}  # no file: no operation has started
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        raise StateFileError(f"{where}: not JSON", hint=_HINT) from None
    if not isinstance(doc, dict):
        raise StateFileError(f"{where}: not a JSON object", hint=_HINT)
    if "schema" not in doc:
        return _legacy(doc, ops)
    schema = doc["schema"]
    if type(schema) is not int or schema < 1:
        raise StateFileError(f"{where}: schema {str(schema)[:20]!r} is not a version", hint=_HINT)
    if schema > SCHEMA:
        raise StateFileError(
            f"{where}: schema {schema} is newer than this toolkit's ({SCHEMA})",
            hint="a newer toolkit wrote it: run `appliance` from that toolkit",
        )
    return doc


def _legacy(doc: dict[str, Any], ops: tuple[str, ...]) -> dict[str, Any]:
    """Schema 0: each operation of the file takes its fields (a target alone is no state)."""
    out: dict[str, Any] = {"schema": 0}
    for op in ops:
        part = {f: doc[f] for f in LEGACY_FIELDS[op] if f in doc}
        if set(part) - {"target"}:
            out[op] = part
    return out
