"""The DaemonSet controller and scheduler, as far as the lab needs them: one Pod per DaemonSet per
eligible node (nodeSelector, required node affinity, taints vs tolerations), bound to the node,
replaced when the pod template changes, removed when the node stops qualifying.

The Job controller, for Jobs of one pod at a time (parallelism and completions 1, what acceptance
submits): a pod from the template, named and labelled as kubernetes pkg/controller/job makes them
(`<job>-<5 random>`, labels controller-uid and job-name, a controlling ownerReference); the Job's
status counts its pods' ends; a failed pod is replaced until status.failed passes backoffLimit,
then the Job is Failed (BackoffLimitExceeded); once its pod Succeeded it is Complete. The pods of a
deleted Job go, as the garbage collector takes them.

Volcano's scheduler, whose image cannot be had here (bundles/profiles/lab.yml builds a busybox
stand-in): it binds a pod whose schedulerName is `volcano` once Volcano's Queue kind is served
(the volcano release's CRDs), the queue its `scheduling.volcano.sh/queue-name` annotation names
(else `default`) exists and is not Closed, and a node fits (Ready, not cordoned, nodeSelector,
affinity, taints, and its extended-resource limits within the node's allocatable). No PodGroup is
made and no event written: a pod it cannot place stays Pending, saying nothing.

Runs inside the stand-in API server after every write that can change the answer (a DaemonSet,
a Job, a pod, a Queue, a node's labels or taints). Deployments (CoreDNS) get no pods, and a pod
for the default scheduler is not bound: the lab has no kube-scheduler."""

from __future__ import annotations

import copy
import hashlib
import json
import secrets
from typing import Any

from .util import rfc3339

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


# ---- Jobs -------------------------------------------------------------------------------------------
JOB_API = ("batch", "jobs")
# The Failed condition's reason and message, as syncJob sets them (pkg/controller/job/job_controller.go,
# read in openshift/kubernetes at af4e04f9, a fork: no kubernetes tag of it is readable here), and
# generateName's alphabet (apimachinery pkg/util/rand/rand.go: no vowels, no 0, 1, 3), as seen in
# an excerpt that names no tag.
BACKOFF_REASON, BACKOFF_MESSAGE = "BackoffLimitExceeded", "Job has reached the specified backoff limit"
_ALNUM = "bcdfghjklmnpqrstvwxz2456789"


def _owned_by(pod: dict, kind: str, uid: str) -> bool:
    return any(
        o.get("kind") == kind and o.get("uid") == uid for o in pod["metadata"].get("ownerReferences") or []
    )


def job_pod(job: dict) -> dict:
    """A pod of JOB, as the Job controller makes one (its name: generateName `<job>-` plus five)."""
    meta, tpl = job["metadata"], job["spec"].get("template") or {}
    labels = {**((tpl.get("metadata") or {}).get("labels") or {}), "controller-uid": meta["uid"],
              "job-name": meta["name"]}  # fmt: skip
    pod_meta: dict[str, Any] = {
        "name": f"{meta['name']}-{''.join(secrets.choice(_ALNUM) for _ in range(5))}",
        "namespace": meta.get("namespace", "default"),
        "labels": labels,
        "ownerReferences": [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": meta["name"],
                "uid": meta["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    if (tpl.get("metadata") or {}).get("annotations"):
        pod_meta["annotations"] = dict(tpl["metadata"]["annotations"])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta,
            "spec": copy.deepcopy(tpl.get("spec") or {}), "status": {"phase": "Pending"}}  # fmt: skip


def reconcile_jobs(store: Any, key_of: Any) -> bool:
    """Each Job's status from its pods, a new pod where one is due, and the pods of deleted Jobs
    gone. True when it made a pod."""
    made = False
    jobs = store.items(*JOB_API)
    uids = {j["metadata"]["uid"] for j in jobs}
    pods = store.items("", "pods")
    for pod in pods:
        owner = next(
            (o for o in pod["metadata"].get("ownerReferences") or [] if o.get("kind") == "Job"), None
        )
        if owner is not None and owner.get("uid") not in uids:
            store.delete(key_of("", "pods", pod["metadata"]["namespace"], pod["metadata"]["name"]))
    for job in jobs:
        meta, status = job["metadata"], dict(job.get("status") or {})
        if any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
               for c in status.get("conditions") or []):  # fmt: skip
            continue  # a finished Job is left as it ended (syncJob: IsJobFinished)
        mine = [p for p in pods if _owned_by(p, "Job", meta["uid"])]
        phases = [(p.get("status") or {}).get("phase", "Pending") for p in mine]
        succeeded, failed = phases.count("Succeeded"), phases.count("Failed")
        active = len(phases) - succeeded - failed
        new = {k: v for k, v in status.items() if k not in ("active", "succeeded", "failed")}
        new.setdefault("startTime", rfc3339())
        new.update({k: v for k, v in (("active", active), ("succeeded", succeeded), ("failed", failed)) if v})
        if succeeded:
            new["completionTime"] = rfc3339()
            new["conditions"] = [{"type": "Complete", "status": "True", "lastProbeTime": rfc3339(),
                                  "lastTransitionTime": rfc3339()}]  # fmt: skip
        elif failed > int(job["spec"].get("backoffLimit", 6)):
            new["conditions"] = [{"type": "Failed", "status": "True", "reason": BACKOFF_REASON,
                                  "message": BACKOFF_MESSAGE, "lastProbeTime": rfc3339(),
                                  "lastTransitionTime": rfc3339()}]  # fmt: skip
            for p, phase in zip(mine, phases, strict=True):  # syncJob deletes the active pods
                if phase not in ("Succeeded", "Failed"):
                    store.delete(key_of("", "pods", p["metadata"]["namespace"], p["metadata"]["name"]))
            new["failed"] = failed + active  # and counts them failed (`failed += active`)
            new.pop("active", None)
        elif not active and not job["spec"].get("suspend"):
            pod = job_pod(job)
            store.put(key_of("", "pods", pod["metadata"]["namespace"], pod["metadata"]["name"]), pod)
            new["active"], made = 1, True
        if new != (job.get("status") or {}):
            store.put(key_of(*JOB_API, meta.get("namespace", "default"), meta["name"]), dict(job, status=new))
    return made


# ---- Volcano's scheduler ------------------------------------------------------------------------------
VOLCANO = "volcano"
QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"
QUEUE_API = ("scheduling.volcano.sh", "queues")


def _fits(pod: dict, node: dict) -> bool:
    """A node the pod may go to: Ready, not cordoned, its selectors and taints, and each extended
    resource (a name with a '/', nvidia.com/gpu) within what the node offers."""
    conds = (node.get("status") or {}).get("conditions") or []
    if not any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds):
        return False
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    spec, labels = pod["spec"], (node.get("metadata") or {}).get("labels") or {}
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()) or not _affinity_matches(
        spec, labels
    ):
        return False
    taints = [t for t in (node.get("spec") or {}).get("taints") or [] if t.get("effect") in NO_SCHEDULE]
    if not all(_tolerates(spec.get("tolerations") or [], t) for t in taints):
        return False
    offered = (node.get("status") or {}).get("allocatable") or {}
    for c in spec.get("containers") or []:
        for name, want in ((c.get("resources") or {}).get("limits") or {}).items():
            if "/" in name and float(want) > float(offered.get(name, 0) or 0):
                return False
    return True


def schedule_volcano(store: Any, key_of: Any, lifecycle: Any) -> None:
    """Bind each pending pod of schedulerName volcano that Volcano would place (see the docstring)."""
    if not any(c["metadata"]["name"] == f"{QUEUE_API[1]}.{QUEUE_API[0]}"
               for c in store.items("apiextensions.k8s.io", "customresourcedefinitions")):  # fmt: skip
        return
    queues = {q["metadata"]["name"]: q for q in store.items(*QUEUE_API)}
    nodes = [lifecycle(n) for n in store.items("", "nodes")]
    pods = store.items("", "pods")
    load = {n["metadata"]["name"]: sum((p["spec"].get("nodeName") == n["metadata"]["name"]) for p in pods)
            for n in nodes}  # fmt: skip
    for pod in pods:
        spec, meta = pod["spec"], pod["metadata"]
        if spec.get("schedulerName") != VOLCANO or spec.get("nodeName") or meta.get("deletionTimestamp"):
            continue
        queue = queues.get((meta.get("annotations") or {}).get(QUEUE_ANNOTATION, "default"))
        if queue is None or (queue.get("status") or {}).get("state") in ("Closed", "Closing"):
            continue
        fit = sorted((load[n["metadata"]["name"]], n["metadata"]["name"]) for n in nodes if _fits(pod, n))
        if not fit:
            continue
        spec["nodeName"] = fit[0][1]
        load[fit[0][1]] += 1
        pod.setdefault("status", {})["conditions"] = [{"type": "PodScheduled", "status": "True",
                                                        "lastTransitionTime": rfc3339()}]  # fmt: skip
        store.put(key_of("", "pods", meta["namespace"], meta["name"]), pod)
