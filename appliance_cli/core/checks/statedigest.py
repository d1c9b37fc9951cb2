"""Run on a node by `appliance install` (core/converged.py), as `python3 - SPEC` with this file on
standard input: digests of the state the roles leave on the node, one per part, so that the
controller can tell whether anything changed since the last full install. Standard library only
(it runs on the node's python3); reads, never writes.

SPEC (JSON, argv data): {"trees": [[ROOT, "content" | "stat"], ...], "cluster": null | {"kubeconfig":
PATH}}. Prints one JSON object: {"parts": {PART: SHA256 | {KEY: VALUE}}, "unhealthy": [LINE, ...]}.
A part that is a mapping (images, objects, helm) holds one entry per thing: the controller wants
each recorded entry unchanged and lets new ones be (a researcher's job brings its own image,
namespace and objects), where a digest must be the same as a whole.
* `tree:ROOT`: every entry under ROOT (symlinks not followed): its path, type, mode, owner, and
  for a file its sha256 ("content") or its size and mtime ("stat", for the bundle copy, the
  registry's storage and the binaries: large, and written only by the roles); "absent" if none.
* `packages`: dpkg's whole database (package, version, status).
* `units`: every service unit file's state, and the active state of each enabled one.
* `sysctl`: the live value of each key set in /etc/sysctl.conf and /etc/sysctl.d/*.conf.
* `swaps`, `nfs-mounts`; `images`: each image reference the CRI holds, with its digest.
* With "cluster" (the master): `nodes` (labels, taints, unschedulable, Ready), `objects` (each
  object of the kinds below, digested: uid, generation, labels, annotations, and its data/spec when
  it has no generation), `helm` (each release's revision, status and chart). `unhealthy` lists a node not
  Ready and a DaemonSet not ready on every node it wants.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

KINDS = (
    "namespaces,configmaps,secrets,serviceaccounts,roles,rolebindings,clusterroles,"
    "clusterrolebindings,resourcequotas,limitranges,storageclasses,priorityclasses,"
    "customresourcedefinitions,daemonsets,deployments,services"
)
EXTRA_KINDS = ("queues.scheduling.volcano.sh",)  # served once their CRD is: absent is a state too
COMMAND_TIMEOUT_S = 30  # kubectl's own request timeout is 20 s: an API server that hangs is named
VOLATILE_ANNOTATIONS = ("control-plane.alpha.kubernetes.io/leader",)


def sha(data: str | bytes) -> str:
    return hashlib.sha256(data if isinstance(data, bytes) else data.encode()).hexdigest()


def file_sha(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def entry(path: str, root: str, how: str) -> str:
    st = os.lstat(path)
    head = f"{os.path.relpath(path, root)} {st.st_mode:o} {st.st_uid} {st.st_gid}"
    if stat.S_ISLNK(st.st_mode):
        return head + " -> " + os.readlink(path)
    if stat.S_ISREG(st.st_mode):
        return head + " " + (file_sha(path) if how == "content" else f"{st.st_size} {st.st_mtime_ns}")
    return head


def tree(root: str, how: str) -> str:
    """ROOT (a directory, a file or a link) and, for a directory, everything under it."""
    if not os.path.lexists(root):
        return sha("absent")
    lines = [entry(root, root, how)]
    for top, dirs, names in os.walk(root):  # symlinks are listed, never followed
        dirs.sort()
        for name in sorted(dirs + names):
            try:
                lines.append(entry(os.path.join(top, name), root, how))
            except FileNotFoundError:
                continue  # gone while read: the digest differs anyway next time
    return sha("\n".join(lines))


def read(path: str) -> str:
    with open(path) as f:
        return f.read()


def run(argv: list[str]) -> str:
    if not shutil.which(argv[0]):
        return ""
    try:
        r = subprocess.run(argv, capture_output=True, timeout=COMMAND_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise SystemExit(f"{argv[0]} gave no answer within {COMMAND_TIMEOUT_S}s") from None
    if r.returncode:
        raise SystemExit(f"{argv[0]} failed (rc={r.returncode}): {r.stderr.decode()[-300:].strip()}")
    return r.stdout.decode()


def units() -> str:
    files = run(["systemctl", "list-unit-files", "--type=service", "--no-legend", "--no-pager"])
    enabled = sorted(
        ln.split()[0]
        for ln in files.splitlines()
        if ln.split()[1:2] == ["enabled"] and "@." not in ln.split()[0]
    )
    active = run(["systemctl", "show", "--property=Id,ActiveState", "--", *enabled]) if enabled else ""
    return sha(files + "\n--\n" + active)


def sysctl() -> str:
    here = sorted(os.listdir("/etc/sysctl.d")) if os.path.isdir("/etc/sysctl.d") else []
    names = ["/etc/sysctl.conf", *(os.path.join("/etc/sysctl.d", f) for f in here)]
    out = []
    for name in names:
        try:
            text = read(name)
        except OSError:
            continue
        for line in text.splitlines():
            key = line.split("=", 1)[0].strip().lstrip("-")
            if "=" not in line or not key or key[0] in "#;":
                continue
            try:
                value = read("/proc/sys/" + key.replace(".", "/")).split()
            except OSError:
                value = ["(unreadable)"]
            out.append(f"{key}={' '.join(value)}")
    return sha("\n".join(sorted(set(out))))


def node_parts(spec: dict[str, Any]) -> dict[str, Any]:
    parts: dict[str, Any] = {"tree:" + root: tree(root, how) for root, how in spec["trees"]}
    parts["packages"] = sha(run(["dpkg-query", "-W", "-f", "${Package} ${Version} ${db:Status-Abbrev}\\n"]))
    parts["units"] = units()
    parts["sysctl"] = sysctl()
    parts["swaps"] = sha(read("/proc/swaps").split("\n", 1)[-1])
    mounts = [ln.split()[:3] for ln in read("/proc/mounts").splitlines()]
    parts["nfs-mounts"] = sha(json.dumps(sorted(m for m in mounts if m[2].startswith("nfs"))))
    images: dict[str, str] = {}
    if os.path.exists("/run/containerd/containerd.sock"):
        for line in run(["ctr", "-n", "k8s.io", "images", "ls"]).splitlines()[1:]:
            ref, _, digest = ([*line.split(), "", "", ""])[:3]
            images[ref] = digest
    if os.path.exists("/var/run/docker.sock"):
        listed = run(
            [
                "docker",
                "image",
                "ls",
                "--digests",
                "--no-trunc",
                "--format",
                "{{.Repository}}:{{.Tag}} {{.ID}}",
            ]
        )
        for line in listed.splitlines():
            ref, _, image_id = line.partition(" ")
            images[ref] = image_id
    parts["images"] = images
    return parts


def kubectl(kubeconfig: str, what: str) -> dict[str, Any]:
    listed: dict[str, Any] = json.loads(
        run(["kubectl", "--kubeconfig", kubeconfig, "--request-timeout=20s", "get", what, "-A", "-o", "json"])
        or "{}"
    )
    return listed


def object_entry(obj: dict[str, Any]) -> tuple[str, str]:
    """("KIND NAMESPACE/NAME", digest): uid, labels, annotations, and the generation or, for a kind
    without one (ConfigMap, Secret, RBAC), what it holds, digested here: nothing leaves in clear."""
    meta = obj.get("metadata") or {}
    notes = {k: v for k, v in (meta.get("annotations") or {}).items() if k not in VOLATILE_ANNOTATIONS}
    body = {"uid": meta.get("uid"), "labels": meta.get("labels"), "annotations": notes}
    if "generation" in meta:
        body["generation"] = meta["generation"]
    else:
        body["content"] = {
            k: v for k, v in obj.items() if k not in ("metadata", "status", "kind", "apiVersion")
        }
    return f"{obj.get('kind')} {meta.get('namespace', '')}/{meta.get('name')}", sha(
        json.dumps(body, sort_keys=True)
    )


def cluster_parts(spec: dict[str, Any], unhealthy: list[str]) -> dict[str, Any]:
    kc = spec["kubeconfig"]
    nodes = []
    for n in kubectl(kc, "nodes").get("items", []):
        ready = [
            c.get("status")
            for c in (n.get("status") or {}).get("conditions") or []
            if c.get("type") == "Ready"
        ]
        name = n["metadata"]["name"]
        if ready != ["True"]:
            unhealthy.append(f"node {name} is not Ready")
        nodes.append(
            [
                name,
                n["metadata"].get("labels"),
                (n.get("spec") or {}).get("taints"),
                (n.get("spec") or {}).get("unschedulable", False),
                ready,
            ]
        )
    objects = kubectl(kc, KINDS).get("items", [])
    for kind in EXTRA_KINDS:
        try:
            objects += kubectl(kc, kind).get("items", [])
        except SystemExit as exc:
            if "the server doesn't have a resource type" not in str(exc):
                raise
    for ds in (o for o in objects if o.get("kind") == "DaemonSet"):
        st = ds.get("status") or {}
        if st.get("numberReady", 0) < st.get("desiredNumberScheduled", 0):
            where = f"{ds['metadata'].get('namespace')}/{ds['metadata']['name']}"
            unhealthy.append(
                f"DaemonSet {where}: {st.get('numberReady', 0)} of {st['desiredNumberScheduled']} pods ready"
            )
    releases = json.loads(run(["helm", "--kubeconfig", kc, "list", "-A", "-a", "-o", "json"]) or "[]")
    return {
        "nodes": sha(json.dumps(sorted(nodes, key=lambda n: n[0]), sort_keys=True)),
        "objects": dict(object_entry(o) for o in objects),
        "helm": {
            f"{r.get('namespace')}/{r.get('name')}": f"{r.get('revision')} {r.get('status')} {r.get('chart')}"
            for r in releases
        },
    }


def main() -> None:
    spec = json.loads(sys.argv[1])
    unhealthy: list[str] = []
    with ThreadPoolExecutor(max_workers=2) as pool:  # the API server's answers while the node is read
        cluster = pool.submit(cluster_parts, spec["cluster"], unhealthy) if spec.get("cluster") else None
        parts = node_parts(spec)
        parts.update(cluster.result() if cluster else {})
    print(json.dumps({"parts": parts, "unhealthy": unhealthy}, sort_keys=True))


if __name__ == "__main__":
    main()
