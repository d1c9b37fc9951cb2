"""The real cluster for the acceptance runner: kubectl on the master over SSH, as every other
command reads the cluster (core/cluster.py). What kubectl returns is parsed by pure functions."""

from __future__ import annotations

import json
from typing import Any

from appliance_cli.core.acceptance.compare import GPU, RUN_LABEL
from appliance_cli.core.acceptance.manifests import project_namespace
from appliance_cli.core.cluster import kubectl
from appliance_cli.core.siteconfig import SiteConfig
from appliance_cli.errors import ApplianceError

GPU_WORKER_LABEL = "node-role.kubernetes.io/runai-gpu-worker"  # roles/node_roles/defaults/main.yml (K1)
# What each stack must show before its jobs are submitted (kubectl get -o name spelling): Run:ai's
# projects CRD; Volcano's queues CRD, and for GPU jobs HAMi's device plugin (the chart's release
# `hami`), which the CPU-only smoke job does not need.
STACK_OBJECTS = {
    "runai": ["customresourcedefinition.apiextensions.k8s.io/projects.run.ai"],
    "open": ["customresourcedefinition.apiextensions.k8s.io/queues.scheduling.volcano.sh"],
}
GPU_STACK_OBJECTS = {"runai": [], "open": ["daemonset.apps/hami-device-plugin"]}


def _json(text: str, what: str) -> dict[str, Any]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        raise ApplianceError(f"kubectl returned no JSON for {what}") from None
    return doc if isinstance(doc, dict) else {}


def gpu_allocatable_of(doc: dict[str, Any]) -> dict[str, float]:
    """node -> allocatable nvidia.com/gpu, from `kubectl get nodes -o json`."""
    out = {}
    for item in doc.get("items", []):
        alloc = (item.get("status", {}) or {}).get("allocatable", {}) or {}
        try:
            out[item.get("metadata", {}).get("name", "?")] = float(alloc.get(GPU, 0))
        except ValueError:
            out[item.get("metadata", {}).get("name", "?")] = 0.0
    return out


def stack_missing_of(stack: str, projects: list[str], names: set[str], gpus: bool = True) -> list[str]:
    """What `kubectl get ... -o name` did not list: the stack's own objects (and, when GPUS, those
    that share out GPUs), each project's namespace and (open) its Volcano queue."""
    wanted = [*STACK_OBJECTS.get(stack, []), *(GPU_STACK_OBJECTS.get(stack, []) if gpus else [])]
    missing = [n.split("/", 1)[1] for n in wanted if n not in names]
    for p in projects:
        ns = project_namespace(stack, p)
        if f"namespace/{ns}" not in names:
            missing.append(f"namespace {ns} (project {p})")
        if stack == "open" and f"queue.scheduling.volcano.sh/{p}" not in names:
            missing.append(f"Volcano queue {p}")
    return missing


class KubectlCluster:
    def __init__(self, cfg: SiteConfig):
        self.cfg = cfg

    def _k(self, args: list[str], timeout: int = 60, stdin: str | None = None) -> str:
        return kubectl(self.cfg, args, timeout=timeout, stdin=stdin)

    def gpu_allocatable(self) -> dict[str, float]:
        return gpu_allocatable_of(
            _json(self._k(["get", "nodes", "-l", GPU_WORKER_LABEL, "-o", "json"]), "nodes")
        )

    def stack_missing(self, stack: str, projects: list[str], gpus: bool = True) -> list[str]:
        names = set(self._k(["get", "crd,namespaces,daemonsets", "-A", "-o", "name"]).split())
        if stack == "open" and any("queues.scheduling.volcano.sh" in n for n in names):
            names |= set(self._k(["get", "queues.scheduling.volcano.sh", "-o", "name"]).split())
        return stack_missing_of(stack, projects, names, gpus)

    def apply(self, manifest: dict[str, Any]) -> None:
        # on kubectl's standard input (behind sudo when ssh.user is not root): never in a shell's text
        self._k(["apply", "-f", "-"], stdin=json.dumps(manifest) + "\n")

    def delete_jobs(self, namespace: str, names: list[str]) -> None:
        self._k(["delete", "jobs", "-n", namespace, *names, "--ignore-not-found", "--wait=false"])

    def pods(self, run_id: str | None) -> list[dict[str, Any]]:
        selector = ["-l", f"{RUN_LABEL}={run_id}"] if run_id else []
        items = _json(self._k(["get", "pods", "-A", *selector, "-o", "json"], timeout=120), "pods").get(
            "items", []
        )
        return [i for i in items if isinstance(i, dict)]

    def logs(self, namespace: str, job: str) -> str:
        try:
            return self._k(["logs", "-n", namespace, f"job/{job}", "--tail=200"])
        except ApplianceError as exc:
            return f"(no log: {exc.message})"

    def cleanup(self, namespaces: list[str], run_id: str) -> None:
        for ns in namespaces:
            self._k(
                [
                    "delete",
                    "jobs",
                    "-n",
                    ns,
                    "-l",
                    f"{RUN_LABEL}={run_id}",
                    "--ignore-not-found",
                    "--wait=false",
                ]
            )
