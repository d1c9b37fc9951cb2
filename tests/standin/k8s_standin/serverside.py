"""What the API server stand-in does for a real kubectl client (Debian's kubectl 1.20): server-side
printing (meta.k8s.io/v1 Table), strategic merge and JSON patches, the pods/eviction subresource
with PodDisruptionBudgets, and the (empty) OpenAPI document kubectl's --validate fetches."""

from __future__ import annotations

import contextlib
import copy
import json
import select
import ssl
import time
from collections.abc import Callable
from typing import Any

from .client import ApiError
from .util import human_duration, now, parse_rfc3339

# ------------------------------------------------------------------------- server-side printing

TABLE_CONTENT = "as=Table"  # kubectl get: Accept: application/json;as=Table;v=v1;g=meta.k8s.io, ...
NOT_PRINTED = {"Status", "APIResourceList", "APIGroupList", "APIVersions", "Table"}


def wants_table(accept: str, doc: Any) -> bool:
    if TABLE_CONTENT not in accept or not isinstance(doc, dict) or doc.get("kind") in NOT_PRINTED:
        return False
    return "items" in doc or "metadata" in doc


def _age(o: dict) -> str:
    ts = (o.get("metadata") or {}).get("creationTimestamp")
    return human_duration(now() - parse_rfc3339(ts)) if ts else "<unknown>"


def _pod_cells(o: dict) -> tuple[list[str], list[str]]:
    """printPod's cells (kubernetes pkg/printers/internalversion/printers.go, read at 008dafe0 in
    the code index, an older release; these loops are 1.23's as remembered): STATUS is the phase
    (or status.reason), then the first init container not ended with 0 (Init:REASON,
    Init:ExitCode:N, Init:Signal:N, Init:WAITING-REASON, else Init:I/N), else the last app container
    with a waiting or terminated reason; READY counts app containers ready and running."""
    spec, st = o.get("spec") or {}, o.get("status") or {}
    reason, restarts, ready, initializing = st.get("reason") or st.get("phase") or "Pending", 0, 0, False
    for i, c in enumerate(st.get("initContainerStatuses") or []):
        restarts += int(c.get("restartCount") or 0)
        term, wait = (c.get("state") or {}).get("terminated"), (c.get("state") or {}).get("waiting")
        if term is not None and not term.get("exitCode"):
            continue
        initializing = True
        if term is not None:
            reason = (f"Init:{term['reason']}" if term.get("reason") else f"Init:Signal:{term['signal']}"
                      if term.get("signal") else f"Init:ExitCode:{term.get('exitCode')}")  # fmt: skip
        elif wait and wait.get("reason") and wait["reason"] != "PodInitializing":
            reason = f"Init:{wait['reason']}"
        else:
            reason = f"Init:{i}/{len(spec.get('initContainers') or [])}"
        break
    if not initializing:
        restarts = 0
        for c in reversed(st.get("containerStatuses") or []):
            restarts += int(c.get("restartCount") or 0)
            state = c.get("state") or {}
            term, wait = state.get("terminated"), state.get("waiting")
            if wait and wait.get("reason"):
                reason = wait["reason"]
            elif term is not None:
                reason = term.get("reason") or (f"Signal:{term['signal']}" if term.get("signal")
                                                else f"ExitCode:{term.get('exitCode')}")  # fmt: skip
            elif c.get("ready") and "running" in state:
                ready += 1
    if (o.get("metadata") or {}).get("deletionTimestamp"):
        reason = "Terminating"
    return [o["metadata"]["name"], f"{ready}/{len(spec.get('containers') or [])}", reason, str(restarts),
            _age(o)], [st.get("podIP") or "<none>", spec.get("nodeName") or "<none>", "<none>", "<none>"]  # fmt: skip


def table_rows(kind: str, objs: list[dict], wide: bool) -> tuple[list[str], list[list[str]]]:
    """The header and cells of 1.23's printer for `kind` (all columns with `wide`; pods: `_pod_cells`):
    nodes, namespaces, ConfigMaps, Secrets, ServiceAccounts, Services, Deployments, DaemonSets, else NAME AGE."""
    rows = []
    if kind == "Node":
        header = ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
        if wide:
            header += ["INTERNAL-IP", "EXTERNAL-IP", "OS-IMAGE", "KERNEL-VERSION", "CONTAINER-RUNTIME"]
        for o in objs:
            st = o.get("status") or {}
            ready = next((c["status"] for c in st.get("conditions") or [] if c.get("type") == "Ready"), None)
            status = "Unknown" if ready is None else "Ready" if ready == "True" else "NotReady"
            if (o.get("spec") or {}).get("unschedulable"):
                status += ",SchedulingDisabled"
            labels = o["metadata"].get("labels") or {}
            roles = sorted({k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/")}
                           | ({labels["kubernetes.io/role"]} if labels.get("kubernetes.io/role") else set()))  # fmt: skip
            row = [o["metadata"]["name"], status, ",".join(roles) or "<none>", _age(o),
                   (st.get("nodeInfo") or {}).get("kubeletVersion", "")]  # fmt: skip
            if wide:
                addr = {a["type"]: a["address"] for a in st.get("addresses") or []}
                ni = st.get("nodeInfo") or {}
                row += [addr.get("InternalIP", "<none>"), addr.get("ExternalIP", "<none>"), ni.get("osImage", ""),
                        ni.get("kernelVersion", ""), ni.get("containerRuntimeVersion", "")]  # fmt: skip
            rows.append(row)
        return header, rows
    specs: dict[str, tuple[list[str], Callable[[dict], list[str]]]] = {
        "Namespace": (["STATUS"], lambda o: [(o.get("status") or {}).get("phase", "Active")]),
        "ConfigMap": (["DATA"], lambda o: [str(len(o.get("data") or {}) + len(o.get("binaryData") or {}))]),
        "Secret": (["TYPE", "DATA"], lambda o: [o.get("type", "Opaque"), str(len(o.get("data") or {}))]),
        "ServiceAccount": (["SECRETS"], lambda o: [str(len(o.get("secrets") or []))]),
        "Service": (["TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)"], lambda o: [
            (o.get("spec") or {}).get("type", "ClusterIP"), (o.get("spec") or {}).get("clusterIP", "<none>"), "<none>",
            ",".join(f"{p.get('port')}/{p.get('protocol', 'TCP')}" for p in (o.get("spec") or {}).get("ports") or []) or "<none>"]),
        "Deployment": (["READY", "UP-TO-DATE", "AVAILABLE"], lambda o: [
            f"{(o.get('status') or {}).get('readyReplicas', 0)}/{(o.get('spec') or {}).get('replicas', 1)}",
            str((o.get("status") or {}).get("updatedReplicas", 0)), str((o.get("status") or {}).get("availableReplicas", 0))]),
        "DaemonSet": (["DESIRED", "CURRENT", "READY", "UP-TO-DATE", "AVAILABLE", "NODE SELECTOR"], lambda o: [
            *(str((o.get("status") or {}).get(k, 0)) for k in ("desiredNumberScheduled", "currentNumberScheduled",
                                                               "numberReady", "updatedNumberScheduled", "numberAvailable")),
            ",".join(f"{k}={v}" for k, v in ((((o.get("spec") or {}).get("template") or {}).get("spec") or {}).get("nodeSelector") or {}).items()) or "<none>"]),
    }  # fmt: skip
    extra_h, fn = specs.get(kind, ([], lambda o: []))
    header = ["NAME", *extra_h, "AGE"]
    for o in objs:
        rows.append([o["metadata"]["name"], *fn(o), _age(o)])
    return header, rows


def table(doc: dict, include: str) -> dict:
    """The meta.k8s.io/v1 Table the real server prints a list (or one object) as; the columns are
    `table_rows`' (pods: `_pod_cells`), the wide ones at priority 1."""

    objs = doc.get("items", [doc])
    kind = doc.get("kind", "")[: -len("List")] if "items" in doc else doc.get("kind", "")
    if kind == "Pod":
        header = ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
        wide = ["IP", "NODE", "NOMINATED NODE", "READINESS GATES"]
        rows = [[*a, *b] for a, b in map(_pod_cells, objs)]
    else:
        header, rows = table_rows(kind, objs, False)
        whole, rows = table_rows(kind, objs, True)
        wide = whole[len(header) :]
    cols = [
        {"name": h.title(), "type": "string", "format": "name"
         if h == "NAME" else "", "description": h.lower(), "priority": 0 if i < len(header) else 1}
        for i, h in enumerate(header + wide)
    ]  # fmt: skip
    out_rows = []
    for o, cells in zip(objs, rows, strict=True):
        obj = o if include == "Object" else {
            "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o.get("metadata") or {}}  # fmt: skip
        out_rows.append({"cells": cells, "object": obj})
    meta = (
        {"resourceVersion": (doc.get("metadata") or {}).get("resourceVersion", "")} if "items" in doc else {}
    )
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta, "columnDefinitions": cols,
            "rows": out_rows}  # fmt: skip


# ------------------------------------------------------------------------- patches

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

# patchMergeKey of the list fields of the built-in types the appliance patches (k8s.io/api tags);
# a list not named here is atomic (replaced whole), as `taints`, `tolerations`, `args` are
MERGE_KEYS = {
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name", "env": "name",
    "volumes": "name", "volumeMounts": "mountPath", "volumeDevices": "devicePath",
    "imagePullSecrets": "name", "hostAliases": "ip", "conditions": "type", "ownerReferences": "uid",
    "ports": "containerPort", "addresses": "type", "topologySpreadConstraints": "topologyKey",
}  # fmt: skip
PRIMITIVE_MERGE = {"finalizers"}  # patchStrategy merge on a list of strings


def strategic_merge(target: Any, patch: Any, kind: str = "") -> Any:
    """A strategic merge patch (what kubectl sends for built-in kinds: cordon, taint, label, apply)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    retain = patch.get("$retainKeys")
    for k, v in patch.items():
        if k.startswith("$deleteFromPrimitiveList/"):
            f = k.split("/", 1)[1]
            out[f] = [x for x in out.get(f) or [] if x not in v]
        elif k.startswith("$") or k == "$retainKeys":
            continue
        elif v is None:
            out.pop(k, None)
        elif isinstance(v, list):
            out[k] = _merge_list(k, out.get(k), v, patch.get(f"$setElementOrder/{k}"), kind)
        else:
            out[k] = strategic_merge(out.get(k), v, kind)
    if isinstance(retain, list):
        out = {k: v for k, v in out.items() if k in retain}
    return out


def _merge_list(field: str, cur: Any, items: list, order: list | None, kind: str) -> list:
    # "ports" of a Service merge on "port", of a container on "containerPort"
    key = "port" if field == "ports" and kind == "Service" else MERGE_KEYS.get(field)
    cur = cur if isinstance(cur, list) else []
    if field in PRIMITIVE_MERGE:
        return cur + [x for x in items if x not in cur]
    if not key or not all(isinstance(i, dict) for i in items):
        return copy.deepcopy(items)
    out = copy.deepcopy(cur)
    for item in items:
        idx = next(
            (i for i, c in enumerate(out) if isinstance(c, dict) and c.get(key) == item.get(key)), None
        )
        if item.get("$patch") == "delete":
            out = [c for c in out if not (isinstance(c, dict) and c.get(key) == item.get(key))]
        elif idx is None:
            out.append(strategic_merge({}, item, kind))
        else:
            out[idx] = strategic_merge(out[idx], item, kind)
    if order:  # $setElementOrder: the order (and, with it, which elements) the client sent
        rank = {o.get(key): i for i, o in enumerate(order) if isinstance(o, dict)}
        out.sort(key=lambda c: rank.get(c.get(key), len(rank)) if isinstance(c, dict) else len(rank))
    return out


def json_patch(target: Any, ops: Any) -> Any:
    """RFC 6902 (add, remove, replace, test): `kubectl patch --type json`."""
    if not isinstance(ops, list):
        raise ApiError(
            400, "BadRequest", "json: cannot unmarshal object into Go value of type jsonpatch.Patch"
        )
    doc = copy.deepcopy(target)
    for op in ops:
        path = [p.replace("~1", "/").replace("~0", "~") for p in str(op.get("path", "")).split("/")[1:]]
        parent = doc
        for p in path[:-1]:
            parent = parent[int(p)] if isinstance(parent, list) else parent.get(p)
            if parent is None:
                raise ApiError(422, "Invalid", f"the server rejected our request due to an error in our request: "
                               f"doc is missing path: {op.get('path')}")  # fmt: skip
        last, kind = path[-1] if path else "", op.get("op")
        if kind == "test" and (parent[int(last)] if isinstance(parent, list) else parent.get(last)) != op.get(
            "value"
        ):
            raise ApiError(422, "Invalid", f"testing value {op.get('path')} failed")
        if isinstance(parent, list):
            i = len(parent) if last == "-" else int(last)
            if kind == "remove":
                parent.pop(i)
            elif kind in ("add", "replace"):
                parent[i : i + (kind == "replace")] = [op.get("value")]
        elif kind == "remove":
            parent.pop(last, None)
        elif kind in ("add", "replace"):
            parent[last] = op.get("value")
    return doc


# ------------------------------------------------------------------------- eviction


def _healthy(pod: dict) -> bool:
    conds = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def _budget(value: Any, total: int) -> int:
    if isinstance(value, str) and value.endswith("%"):
        return -(-int(value[:-1]) * total // 100)  # rounded up, as the disruption controller does
    return int(value)


def check_eviction(pod: dict, pods: list[dict], pdbs: list[dict]) -> None:
    """The eviction subresource: refuse (429) when a PodDisruptionBudget covering the pod has no
    disruption left. The stand-in has no disruption controller: the budget is worked out here from
    the pods (all pods the selector matches are expected; Ready ones are healthy)."""
    from .apiserver import match_selector

    labels = (pod.get("metadata") or {}).get("labels") or {}
    for pdb in pdbs:
        sel = ((pdb.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        selector = ",".join(f"{k}={v}" for k, v in sel.items())
        if not sel or not match_selector(selector, labels):
            continue
        covered = [p for p in pods if match_selector(selector, (p.get("metadata") or {}).get("labels") or {})]
        healthy, spec = sum(1 for p in covered if _healthy(p)), pdb.get("spec") or {}
        if "maxUnavailable" in spec:
            desired = len(covered) - _budget(spec["maxUnavailable"], len(covered))
        else:
            desired = _budget(spec.get("minAvailable", 0), len(covered))
        # a Ready pod takes one allowed disruption; one that is not Ready, none (if the budget holds)
        if healthy - desired < (1 if _healthy(pod) else 0):
            name = pdb["metadata"]["name"]
            raise ApiError(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.",
                           {"causes": [{"reason": "DisruptionBudget", "message": f"The disruption budget {name} needs "
                                        f"{desired} healthy pods and has {healthy} currently"}]})  # fmt: skip


# ------------------------------------------------------------------------- OpenAPI


def _pb_string(field: int, text: str) -> bytes:
    data = text.encode()
    assert len(data) < 128  # one-byte varint lengths are all this needs
    return bytes([field << 3 | 2, len(data)]) + data


def openapi_v2(version: str) -> bytes:
    """/openapi/v2 as the protobuf kubectl asks for: swagger "2.0", info, and no definitions. The
    stand-in publishes no schemas, so kubectl's --validate finds no model for a kind and (as it does
    for any kind the server has no schema for) skips the client-side check; the server validates."""
    info = _pb_string(1, "Kubernetes") + _pb_string(2, version)
    return _pb_string(1, "2.0") + bytes([2 << 3 | 2, len(info)]) + info


# ------------------------------------------------------------------------- watch


def watch(h: Any, handle: Any, path: str, q: dict[str, str], peer: dict | None) -> None:
    """?watch=true (kubectl wait): the list, polled, sent as watch events (ADDED/MODIFIED/DELETED)
    until the client goes or timeoutSeconds pass; from resourceVersion R, objects changed after R."""
    drop = ("watch", "resourceVersion", "timeoutSeconds", "allowWatchBookmarks")
    listq = {k: v for k, v in q.items() if k not in drop}
    authz = h.headers.get("Authorization")
    try:
        first = handle("GET", path, listq, b"", peer, authz)[1]
    except ApiError as e:
        payload = json.dumps(e.status()).encode()
        h.send_response(e.code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(payload)))
        h.end_headers()
        h.wfile.write(payload)
        return
    since = int(q.get("resourceVersion") or 0)
    seen = {o["metadata"]["uid"]: o for o in first["items"] if int(o["metadata"]["resourceVersion"]) <= since}
    h.send_response(200)
    h.send_header("Content-Type", "application/json")
    h.send_header("Transfer-Encoding", "chunked")
    h.end_headers()
    deadline = time.monotonic() + min(float(q.get("timeoutSeconds") or 1800), 1800)
    with contextlib.suppress(OSError, ApiError, ssl.SSLError):
        # a watch client sends nothing: its socket turning readable means it closed
        while time.monotonic() < deadline and not select.select([h.connection], [], [], 0)[0]:
            items = {
                o["metadata"]["uid"]: o for o in handle("GET", path, listq, b"", peer, authz)[1]["items"]
            }
            events = [
                ("ADDED" if u not in seen else "MODIFIED", o) for u, o in items.items() if seen.get(u) != o
            ]
            events += [("DELETED", o) for u, o in seen.items() if u not in items]
            for kind, o in events:
                _chunk(h, json.dumps({"type": kind, "object": o}).encode() + b"\n")
            seen = items
            time.sleep(0.3)
        _chunk(h, b"")
    h.close_connection = True


def _chunk(h: Any, data: bytes) -> None:
    h.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
    h.wfile.flush()
