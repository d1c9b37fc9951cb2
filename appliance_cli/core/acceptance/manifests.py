"""The Kubernetes objects an acceptance job becomes, per scheduler stack. Pure.

Every job is a batch/v1 Job of one pod: a preempted pod is deleted by its scheduler and the Job
controller makes a new one, which waits in its project's queue, as `runai submit`'s jobs do.
* runai: schedulerName runai-scheduler, namespace runai-<project> (Run:ai makes it for each
  project), label `project: <project>`; a fraction is the `gpu-fraction` annotation and no
  `nvidia.com/gpu` limit; interactive jobs carry the label `priorityClassName: build`, training
  jobs `train` (Run:ai's classes for workloads it did not submit itself (verify on the release)).
* open (HAMi + Volcano): schedulerName volcano, annotation scheduling.volcano.sh/queue-name: the
  Volcano queue named like the project, in the project's namespace (project_namespace); whole
  GPUs as `nvidia.com/gpu`, a fraction as one `nvidia.com/gpu` with
  `nvidia.com/gpumem-percentage` (HAMi); interactive jobs are `volcano.sh/preemptable: "false"`.

The CPU-only smoke job asks for no GPU, only a little CPU and memory, through the same scheduler,
namespace and queue as the others.

Image: the CUDA base image the bundle carries for the GPU Operator's validator, from the private
registry (the CPU-only job runs its shell too). TR-4858 ran Jupyter, Run:ai's quickstart and
NetApp's ResNet-50 images (lines 283, 326-329); the bundle has none of them, and what the
scheduler allots does not depend on what the container runs: its jobs list their GPU and sleep
until deleted.
"""

from __future__ import annotations

from typing import Any

from appliance_cli.core.acceptance.compare import (
    FRACTION_ANNOTATION,
    GPU,
    GPUMEM_PERCENTAGE,
    JOB_LABEL,
    PROJECT_LABEL,
    RUN_LABEL,
)
from appliance_cli.core.acceptance.model import Image, Job, SmokeJob
from appliance_cli.core.acceptance.smoke import CPU_SMOKE, NVIDIA_SMI
from appliance_cli.core.siteconfig import PROJECT_NAMESPACE_PREFIX
from appliance_cli.core.siteconfig import project_namespace as site_project_namespace
from appliance_cli.errors import UsageError
from appliance_cli.rules.images import in_registry

CUDA_IMAGE = "nvcr.io/nvidia/cuda:12.6.1-base-ubi8"  # bundles/profiles/appliance-k8s1.23.yml
SCHEDULER_NAME = {"runai": "runai-scheduler", "open": "volcano"}
VOLCANO_QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"
MANAGED_BY = "appliance-acceptance"
OBJECT_PREFIX = "acceptance-"  # the seed's job names could be a site's own: ours are prefixed
HOLD = "nvidia-smi -L; exec sleep 86400"  # a TR-4858 job: show its GPU, hold it until deleted
HOLDER_BACKOFF = 100  # a preempted pod counts as a failure of its Job; it must come back
CPU_REQUESTS = {"cpu": "100m", "memory": "64Mi"}  # the CPU-only smoke job: a small, real request
COMMANDS = {Image.NVIDIA_SMI: NVIDIA_SMI, Image.SLEEP: HOLD, Image.CPU: CPU_SMOKE}


def project_namespace(stack: str, project: str) -> str:
    """The project's namespace, as every part of the toolkit names it (siteconfig)."""
    if stack not in PROJECT_NAMESPACE_PREFIX:
        raise UsageError(f"scheduler.stack '{stack}' runs no acceptance jobs (runai or open)")
    return site_project_namespace(stack, project)


def private_image(reference: str, registry: str) -> str:
    """nvcr.io/nvidia/cuda:TAG -> REGISTRY/nvidia/cuda:TAG: the registry host dropped (a first part
    with '.' or ':' or localhost), as the bundle's registry seeding and the gpu_operator role do."""
    return in_registry(reference, registry)


def object_name(job: str) -> str:
    return f"{OBJECT_PREFIX}{job}"


def _gpu_resources(stack: str, gpus: float) -> tuple[dict[str, Any], dict[str, str]]:
    """(container limits, pod annotations) asking the stack's scheduler for `gpus`."""
    if gpus == 0:
        return {}, {}
    if gpus >= 1:
        if gpus != int(gpus):
            raise UsageError(f"{gpus:g} GPUs: more than one GPU must be a whole number")
        return {GPU: int(gpus)}, {}
    if stack == "runai":
        return {}, {FRACTION_ANNOTATION: f"{gpus:g}"}
    return {GPU: 1, GPUMEM_PERCENTAGE: round(gpus * 100)}, {}


def job_manifest(
    stack: str,
    registry: str,
    run_id: str,
    project: str,
    job: Job | SmokeJob,
) -> dict[str, Any]:
    interactive = isinstance(job, Job) and job.interactive
    command = COMMANDS[job.image]
    limits, annotations = _gpu_resources(stack, job.gpus)
    labels = {
        "app.kubernetes.io/managed-by": MANAGED_BY,
        RUN_LABEL: run_id,
        JOB_LABEL: job.name,
        PROJECT_LABEL: project,
    }
    pod_labels = dict(labels)
    if stack == "runai":
        pod_labels["project"] = project
        pod_labels["priorityClassName"] = "build" if interactive else "train"
    else:
        annotations[VOLCANO_QUEUE_ANNOTATION] = project
        if interactive:
            annotations["volcano.sh/preemptable"] = "false"
    container: dict[str, Any] = {
        "name": "cpu" if job.image is Image.CPU else "gpu",
        "image": private_image(CUDA_IMAGE, registry),
        "command": ["sh", "-c", command],
    }
    if limits:
        container["resources"] = {"limits": limits}
    elif job.image is Image.CPU:
        container["resources"] = {"requests": dict(CPU_REQUESTS)}
    pod_meta: dict[str, Any] = {"labels": pod_labels}
    if annotations:
        pod_meta["annotations"] = annotations
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": object_name(job.name),
            "namespace": project_namespace(stack, project),
            "labels": labels,
        },
        "spec": {
            "backoffLimit": HOLDER_BACKOFF if job.image is Image.SLEEP else 0,
            "template": {
                "metadata": pod_meta,
                "spec": {
                    "schedulerName": SCHEDULER_NAME[stack],
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 5,
                    "containers": [container],
                },
            },
        },
    }
