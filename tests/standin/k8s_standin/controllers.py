"""The DaemonSet controller and scheduler, as far as the lab needs them: one Pod per DaemonSet per
eligible node (nodeSelector, required node affinity, taints vs tolerations), bound to the node,
replaced when the pod template changes, removed when the node stops qualifying.

Runs inside the stand-in API server after every write that can change the answer (a DaemonSet,
a node's labels or taints). Deployments (CoreDNS) get no pods: nothing schedules them here."""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

TEMPLATE_HASH = "standin.appliance/template-hash"
NO_SCHEDULE = ("NoSchedule", "NoExecute")


def pod_name(ds_name: str, node: str) -> str:
    """A DaemonSet pod's name: the DaemonSet's and five hex digits of the node's (stable per node)."""
    return f"{ds_name}-{hashlib.sha256((node + ds_name).encode()).hexdigest()[:5]}"


def _expr_matches(expr: dict, labels: dict) -> bool:
    key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
    if op == "In":
        return labels.get(key) in values
    if op == "NotIn":
        return labels.get(key) not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    return False


def _affinity_matches(spec: dict, labels: dict) -> bool:
    req = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
           .get("requiredDuringSchedulingIgnoredDuringExecution") or {})  # fmt: skip
    terms = req.get("nodeSelectorTerms") or []
    if not terms:
        return True
    return any(all(_expr_matches(e, labels) for e in t.get("matchExpressions") or []) for t in terms)


def _tolerates(tolerations: list[dict], taint: dict) -> bool:
    for t in tolerations:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        if t.get("operator") == "Exists" and not t.get("key"):
            return True
        if t.get("key") != taint.get("key"):
            continue
        if t.get("operator") == "Exists" or t.get("value", "") == taint.get("value", ""):
            return True
    return False


def eligible(spec: dict, node: dict) -> bool:
    labels = (node.get("metadata") or {}).get("labels") or {}
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    if not _affinity_matches(spec, labels):
        return False
    # the DaemonSet controller adds these tolerations to every pod it makes
    tolerations = [*(spec.get("tolerations") or []),
                   {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
                   {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
                   {"key": "node.kubernetes.io/network-unavailable", "operator": "Exists", "effect": "NoSchedule"}]  # fmt: skip
    taints = [t for t in (node.get("spec") or {}).get("taints") or [] if t.get("effect") in NO_SCHEDULE]
    return all(_tolerates(tolerations, t) for t in taints)


def _template_hash(template: dict) -> str:
    return hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]


def desired_pod(ds: dict, node_name: str) -> dict:
    meta, tpl = ds["metadata"], ds["spec"].get("template") or {}
    spec = copy.deepcopy(tpl.get("spec") or {})
    spec["nodeName"] = node_name
    labels = dict((tpl.get("metadata") or {}).get("labels") or {})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(meta["name"], node_name),
            "namespace": meta.get("namespace", "default"),
            "labels": labels,
            "annotations": {TEMPLATE_HASH: _template_hash(tpl)},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "DaemonSet",
                    "name": meta["name"],
                    "uid": meta.get("uid", ""),
                    "controller": True,
                }
            ],
        },
        "spec": spec,
        "status": {"phase": "Pending"},
    }


def reconcile_daemonsets(store: Any, key_of: Any) -> None:
    """Make the store's Pods match its DaemonSets and Nodes. `key_of(group, plural, ns, name)`."""
    nodes = store.items("", "nodes")
    wanted: dict[str, dict] = {}
    for ds in store.items("apps", "daemonsets"):
        spec = (ds["spec"].get("template") or {}).get("spec") or {}
        for node in nodes:
            if eligible(spec, node):
                pod = desired_pod(ds, node["metadata"]["name"])
                wanted[key_of("", "pods", pod["metadata"]["namespace"], pod["metadata"]["name"])] = pod
    for pod in store.items("", "pods"):
        owners = pod["metadata"].get("ownerReferences") or []
        k = key_of("", "pods", pod["metadata"]["namespace"], pod["metadata"]["name"])
        if any(o.get("kind") == "DaemonSet" for o in owners) and k not in wanted:
            store.delete(k)
    for k, pod in wanted.items():
        cur = store.objects.get(k)
        same = cur is not None and (cur["metadata"].get("annotations") or {}).get(TEMPLATE_HASH) == \
            pod["metadata"]["annotations"][TEMPLATE_HASH]  # fmt: skip
        if not same:  # a new node or a changed template: a new pod (the old one's state is gone)
            if cur is not None:
                store.delete(k)
            store.put(k, pod)
