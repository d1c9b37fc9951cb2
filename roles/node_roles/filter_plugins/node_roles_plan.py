"""What the node_roles role must change: wanted labels and taints against what the cluster
holds (`kubectl get nodes -o json`), only what differs, so a re-run on a labelled cluster
runs no kubectl at all. Pure functions, tested in plain pytest (tests/unit/test_node_roles_plan.py).

Runs on the controller."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

_TRUE = ("true", "yes", "on", "1", "y", "t")


def _bool(value: Any) -> bool:
    """Ansible's `bool` filter: true for True, 1 and the usual yes-words."""
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in _TRUE


def _listed(current: Any) -> list[dict[str, Any]]:
    """The nodes of the registered kubectl result; none when it was skipped (check mode)."""
    if not isinstance(current, Mapping) or current.get("stdout") is None:
        return []
    return list(json.loads(current["stdout"]).get("items") or [])


def _wanted_labels(node: str, hv: Mapping[str, Any], opts: Mapping[str, Any]) -> dict[str, str]:
    """The managed labels this node must carry, in the order the old plan built them."""
    want: dict[str, Any] = {}
    for role in hv.get("appliance_node_roles") or []:
        if role in opts["role_labels"]:
            want[opts["role_labels"][role]] = "true"
    group_label, hw_class = opts["node_group_label"], hv.get("appliance_hardware_class") or ""
    if group_label and hw_class:
        want[group_label] = hw_class
    if node in opts["gpu_operands_disabled"] or _bool(hv.get("node_roles_disable_gpu_operands", False)):
        want[opts["gpu_operands_label"]] = "false"
    profile = (opts["mig_profiles"] or {}).get(hw_class)
    if opts["mig_config_label"] and profile:
        want[opts["mig_config_label"]] = profile
    want.update(opts["extra_labels"].get(node) or {})
    return want


def _label_plan(have: Mapping[str, Any], want: dict[str, Any], managed: list[str]) -> list[str]:
    args = [f"{key}={value}" for key, value in want.items() if have.get(key) != str(value)]
    # a managed label no longer wanted goes; labels the role does not manage stay
    args += [f"{key}-" for key in managed if key in have and key not in want]
    return args


def _taint_plan(
    node: str, taints: list[dict[str, Any]], opts: Mapping[str, Any], master: bool = False
) -> list[str]:
    args = []
    wanted = [*opts["taints"], *({**t, "node": node} for t in opts["master_taints"] if master)]
    for t in wanted:
        if t.get("node") != node:
            continue
        value = str(t.get("value") or "")
        same = [x for x in taints if x.get("key") == t["key"] and x.get("effect") == t["effect"]]
        # a valueless taint matches only a taint without value, and the reverse
        found = (
            [x for x in same if x.get("value") == value] if value else [x for x in same if "value" not in x]
        )
        if not found:
            args.append(t["key"] + (f"={value}" if value else "") + ":" + t["effect"])
    for t in opts["taints_absent"]:
        if t.get("node") == node and any(x.get("key") == t["key"] for x in taints):
            args.append(t["key"] + "-")
    return args


def node_roles_plan(
    current: Any,
    nodes: list[str],
    hostvars: Mapping[str, Any],
    role_labels: Mapping[str, str],
    node_group_label: str,
    gpu_operands_label: str,
    gpu_operands_disabled: list[str],
    extra_labels: Mapping[str, Mapping[str, Any]],
    taints: list[dict[str, Any]],
    taints_absent: list[dict[str, Any]],
    mig_config_label: str = "",
    mig_profiles: Mapping[str, str] | None = None,
    retired_labels: list[str] | None = None,
    master_taints: list[dict[str, Any]] | None = None,
) -> list[dict[str, str]]:
    """[{node, verb (label|taint), arg}] for what differs on the listed nodes among `nodes`.
    `retired_labels` go wherever found; `master_taints` are kept on nodes with the master role."""
    opts = {
        "role_labels": role_labels,
        "node_group_label": node_group_label,
        "gpu_operands_label": gpu_operands_label,
        "gpu_operands_disabled": gpu_operands_disabled,
        "extra_labels": extra_labels or {},
        "taints": taints or [],
        "taints_absent": taints_absent or [],
        "mig_config_label": mig_config_label,
        "mig_profiles": mig_profiles or {},
        "master_taints": master_taints or [],
    }
    managed = [*role_labels.values(), gpu_operands_label, *([node_group_label] if node_group_label else [])]
    managed += [mig_config_label] if mig_config_label else []
    managed += [key for key in retired_labels or [] if key not in managed]
    plan: list[dict[str, str]] = []
    for obj in _listed(current):
        node = obj["metadata"]["name"]
        if node not in nodes:
            continue
        hv = hostvars.get(node, {})
        have = obj["metadata"].get("labels") or {}
        want = _wanted_labels(node, hv, opts)
        plan += [{"node": node, "verb": "label", "arg": a} for a in _label_plan(have, want, managed)]
        node_taints = obj.get("spec", {}).get("taints") or []
        master = "master" in (hv.get("appliance_node_roles") or [])
        plan += [
            {"node": node, "verb": "taint", "arg": a} for a in _taint_plan(node, node_taints, opts, master)
        ]
    return plan


def node_roles_calls(plan: list[dict[str, str]]) -> list[dict[str, Any]]:
    """The plan as one kubectl call per verb and node: [{verb, node, args}], labels first."""
    nodes = list(dict.fromkeys(p["node"] for p in plan))
    calls = []
    for verb in ("label", "taint"):
        for node in nodes:
            args = [p["arg"] for p in plan if p["verb"] == verb and p["node"] == node]
            if args:
                calls.append({"verb": verb, "node": node, "args": args})
    return calls


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"node_roles_plan": node_roles_plan, "node_roles_calls": node_roles_calls}
